"""Security headers on every response and CSRF protection for cookie sessions.

The session cookie is HttpOnly and SameSite=Strict; on top of that every state-changing request
that authenticates with the cookie must carry ``X-CSRF-Token`` equal to :func:`csrf_token` of
that cookie (the pages render it into a ``<meta>`` tag), and its ``Origin``, when the browser
sends one, must be this site. The token is derived from the session token, so a page on another
site can neither read nor compute it, and the server keeps no state for it. Requests with a
bearer token (scripts) are not cookie sessions: a browser never attaches that header cross-site,
so they pass unchanged; the header is read by the authentication's own parser
(:func:`app.api.deps.bearer_token`), so a header it finds no token in is checked as a cookie session.

A pure ASGI middleware (not ``BaseHTTPMiddleware``): the live stream's response never ends and
must not be buffered.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit

from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.asgi_reply import send_json_error
from app.api.deps import SESSION_COOKIE, bearer_token
from app.web.api_docs import DOCS_CSP, DOCS_PATHS

CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSRF_EXEMPT = frozenset({"/api/auth/login"})
"""Login carries the password itself; its Origin is still checked."""

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")
# Swagger UI and ReDoc get a policy of their own (their bundles style elements at run time, and the
# page's bootstrap script is inline, admitted by its hash); it too keeps them to this origin.

_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=(), payment=()"),
]


def csrf_token(session_token: str) -> str:
    """The CSRF token that goes with one session cookie (hex; one-way, so it reveals nothing of it)."""
    return hmac.new(b"greentwin-csrf-v1", session_token.encode("utf-8"), hashlib.sha256).hexdigest()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None


def session_cookie(scope: Scope) -> str | None:
    """The session cookie of a request, read by the same parser as the authentication reads it: a
    stricter one would miss a cookie that still authenticates, and let its request skip the check."""
    raw = _header(scope, b"cookie")
    return cookie_parser(raw).get(SESSION_COOKIE) or None if raw else None


def _same_origin(scope: Scope) -> bool:
    """True when the browser sent no Origin (same-origin GET-like navigations) or this site's own."""
    origin = _header(scope, b"origin")
    if origin is None:
        return True
    host = _header(scope, b"host")
    parts = urlsplit(origin)
    return host is not None and parts.netloc == host and parts.scheme in ("http", "https")


def csrf_refusal(scope: Scope) -> str | None:
    """Why this request is refused as a possible cross-site request forgery (None: let it through)."""
    if scope["method"] in SAFE_METHODS:
        return None
    if bearer_token(_header(scope, b"authorization")) is not None:
        return None  # a bearer client: browsers never attach this header on their own
    # (any other Authorization header, a blank bearer token included, is ignored by the API, which
    # then reads the cookie: checked)
    if not _same_origin(scope):
        return "cross-origin request refused (Origin does not match this site)"
    if scope["path"] in CSRF_EXEMPT:
        return None
    cookie = session_cookie(scope)
    if cookie is None:
        return None  # no cookie session: the endpoint's own authentication answers (401)
    sent = _header(scope, CSRF_HEADER.encode())
    if not sent or not hmac.compare_digest(sent, csrf_token(cookie)):
        return f"CSRF token missing or wrong: a cookie session must send the page's token as {CSRF_HEADER}"
    return None


class SecurityMiddleware:
    """Adds the security headers to every HTTP response and refuses forged cookie-session writes (403)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        csp = DOCS_CSP if path.startswith(DOCS_PATHS) else CSP
        tls = scope.get("scheme") == "https"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += _HEADERS
                headers.append((b"content-security-policy", csp.encode()))
                if tls:
                    headers.append((b"strict-transport-security", b"max-age=31536000"))
                message["headers"] = headers
            await send(message)

        refusal = csrf_refusal(scope)
        if refusal is not None:
            await send_json_error(send_with_headers, 403, refusal)
            return
        await self.app(scope, receive, send_with_headers)
