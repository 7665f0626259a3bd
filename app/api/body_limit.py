"""A cap on request bodies: a client must not make the service buffer megabytes it never needed.

Checked twice: a declared ``Content-Length`` over the cap is answered 413 before the body is read,
and a body sent without one (chunked) is counted as it arrives and cut off at the cap.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.asgi_reply import send_json_error


class BodyLimitMiddleware:
    """Pure ASGI middleware: 413 for any request body larger than ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(send)
            return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # FastAPI re-raises an HTTPException from the body read as it is (not as a 400).
                    raise HTTPException(413, self._detail)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except HTTPException as exc:
            if exc.status_code != 413 or started:
                raise
            await self._refuse(send)

    @property
    def _detail(self) -> str:
        return f"request body larger than {self.max_bytes} bytes"

    async def _refuse(self, send: Send) -> None:
        await send_json_error(send, 413, self._detail, [(b"connection", b"close")])
