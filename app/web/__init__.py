"""The operators' dashboard: server-rendered pages, their static assets and the security middleware."""
