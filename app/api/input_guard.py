"""Control characters never get past the door in a request's path or query.

Path and query parameters reach PostgreSQL as text (a user name, a greenhouse id, a filter), and
PostgreSQL refuses a NUL in text: a ``%00`` in a URL would be a 500 with a traceback instead of
a clear refusal, and a line break in a logged value would forge a log line. So every request
whose decoded path, query name or query value holds a C0 control character or DEL is answered
400 here, before any route runs, by the same rule as the payloads (:func:`wire.fields.check_db_text`).
JSON bodies are checked by their models' field types.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.asgi_reply import send_json_error
from wire.fields import check_db_text


def input_refusal(scope: Scope) -> str | None:
    """Why the request's path or query is refused, or None."""
    parts = [("path", str(scope.get("path", "")))]
    query = bytes(scope.get("query_string") or b"").decode("latin-1")
    for name, value in parse_qsl(query, keep_blank_values=True, errors="replace"):
        parts += [("query parameter name", name), (f"query parameter {name[:40]!r}", value)]
    for where, text in parts:
        try:
            check_db_text(text)
        except ValueError as exc:
            return f"{exc} in the {where}"
    return None


class InputGuardMiddleware:
    """Pure ASGI middleware: 400 for a control character in the path or query."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and (refusal := input_refusal(scope)) is not None:
            if scope["type"] == "http":
                await send_json_error(send, 400, refusal)
                return
            await send({"type": "websocket.close", "code": 1008})
            return
        await self.app(scope, receive, send)
