"""Runtime service core: settings and database plumbing."""
