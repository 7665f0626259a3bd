"""How the service is served: the options every ``uvicorn`` start of the app shares.

``greentwin serve`` and ``greentwin demo`` both take them from here, so a server default that
would undo a decision made in the app (uvicorn believes ``X-Forwarded-For`` from 127.0.0.1 unless
told otherwise) is switched off in one place.
"""

from __future__ import annotations

from typing import Any


def uvicorn_options(*, log_level: str) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` / ``uvicorn.Config`` besides the app, host and port."""
    # Forwarded headers are read by app.api.client_address, from configured proxies only.
    return {"log_level": log_level, "proxy_headers": False}
