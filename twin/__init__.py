"""twin package."""
