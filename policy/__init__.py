"""policy package."""
