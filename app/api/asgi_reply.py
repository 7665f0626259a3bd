"""A JSON error answer sent straight from ASGI middleware (before any route runs)."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Send


async def send_json_error(send: Send, status: int, detail: str, headers: list[Any] | None = None) -> None:
    """``{"detail": ...}`` with ``status``, shaped like FastAPI's own errors."""
    body = json.dumps({"detail": detail}).encode()
    all_headers: list[Any] = [(b"content-type", b"application/json"),
                              (b"content-length", str(len(body)).encode()), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})
