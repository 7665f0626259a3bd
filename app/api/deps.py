"""FastAPI dependencies: the runtime, a database session and the authenticated caller, typed with Annotated.

A token comes as ``Authorization: Bearer <token>`` (scripts) or as the session cookie set at login
(the browser dashboard). No valid token gives 401 with ``WWW-Authenticate: Bearer``; a valid one
without the role an endpoint needs gives 403.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import APIKeyCookie, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy.orm import Session
from starlette.requests import HTTPConnection

from app.auth.service import AuthService, Principal
from app.auth.tokens import TokenError
from app.runtime import Runtime

SESSION_COOKIE = "greentwin_session"


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None for any other header or a blank
    token (FastAPI's parsing: the credentials are stripped, 0xA0 included). The CSRF check reads the
    header with this same function, so a request it lets pass as a bearer client is one the
    authentication reads the bearer token of, never the cookie."""
    scheme, credentials = get_authorization_scheme_param(authorization)
    return credentials if scheme.lower() == "bearer" and credentials else None


class _BearerToken(HTTPBearer):
    """``HTTPBearer`` (for the OpenAPI document) that hands over :func:`bearer_token`."""

    async def __call__(self, request: HTTPConnection) -> str | None:  # type: ignore[override]
        return bearer_token(request.headers.get("authorization"))


_bearer = _BearerToken(auto_error=False, scheme_name="HTTPBearer",
                       description="token from POST /api/auth/login")
_cookie = APIKeyCookie(name=SESSION_COOKIE, auto_error=False,
                       description="session cookie set by POST /api/auth/login")


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime | None = getattr(request.app.state, "runtime", None)
    if runtime is None:
        raise HTTPException(status_code=503, detail="service is starting")
    return runtime


def get_session(runtime: Annotated[Runtime, Depends(get_runtime)]) -> Iterator[Session]:
    with runtime.sessions() as session:
        yield session


def get_auth(request: Request) -> AuthService:
    auth: AuthService | None = getattr(request.app.state, "auth", None)
    if auth is None:
        raise HTTPException(status_code=503, detail="service is starting")
    return auth


def unauthorized(detail: str) -> HTTPException:
    return HTTPException(status_code=401, detail=detail, headers={"WWW-Authenticate": "Bearer"})


def get_current_user(
    auth: Annotated[AuthService, Depends(get_auth)],
    bearer: Annotated[str | None, Depends(_bearer)],
    cookie: Annotated[str | None, Depends(_cookie)],
) -> Principal:
    """The caller, from the bearer token or else the session cookie."""
    token = bearer if bearer is not None else cookie
    if not token:
        raise unauthorized("not authenticated: log in at POST /api/auth/login and send the token "
                           "as 'Authorization: Bearer <token>'")
    try:
        return auth.authenticate(token)
    except TokenError as exc:
        raise unauthorized(str(exc)) from None


CurrentUser = Annotated[Principal, Depends(get_current_user)]


def require_role(*roles: str) -> Callable[[Principal], Principal]:
    """A dependency that lets through callers holding any of ``roles``."""
    wanted = frozenset(roles)

    def check(user: CurrentUser) -> Principal:
        if not user.roles & wanted:
            held = ", ".join(sorted(user.roles)) or "none"
            raise HTTPException(status_code=403, detail=f"forbidden: needs role {' or '.join(roles)} "
                                                        f"(user {user.username!r} has {held})")
        return user

    return check


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
SessionDep = Annotated[Session, Depends(get_session)]
AuthDep = Annotated[AuthService, Depends(get_auth)]
OperatorUser = Annotated[Principal, Depends(require_role("operator"))]
AdminUser = Annotated[Principal, Depends(require_role("admin"))]
ReportReader = Annotated[Principal, Depends(require_role("agronomist", "admin"))]
