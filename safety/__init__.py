"""safety package."""
