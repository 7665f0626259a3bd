"""How the service is served: the options every ``uvicorn`` start of the app shares, and its log.

``greentwin serve`` and ``greentwin demo`` both take them from here, so a server default that
would undo a decision made in the app is switched off in one place: uvicorn believes
``X-Forwarded-For`` from 127.0.0.1 unless told otherwise, and logs through handlers of its own
that would bypass the log's flood guard.
"""

from __future__ import annotations

import logging
from typing import Any

from app.core.config import Settings
from app.logsetup import configure_logging


def uvicorn_options(*, log_level: str) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` / ``uvicorn.Config`` besides the app, host and port."""
    # Forwarded headers are read by app.api.client_address, from configured proxies only; without a
    # log config of its own, uvicorn's access and error lines reach the root handler and its guards.
    return {"log_level": log_level, "proxy_headers": False, "log_config": None}


def configure_service_logging(settings: Settings, level: int = logging.INFO) -> None:
    """The service's log: one bounded line per record, floods collapsed per the settings."""
    configure_logging(level=level, repeat_interval_s=settings.log_repeat_interval_s,
                      repeat_burst=settings.log_repeat_burst)
