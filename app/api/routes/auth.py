"""Login, logout and "who am I" for API clients and the browser dashboard."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import SESSION_COOKIE, AuthDep, CurrentUser, RuntimeDep
from app.api.instants import Instant
from app.auth.passwords import MAX_PASSWORD_LEN
from app.auth.service import AccountDisabled, AuditUnavailable, LoginRefused, Principal, RateLimited
from wire.fields import DbText

router = APIRouter(prefix="/api/auth", tags=["auth"])


class LoginRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: Annotated[DbText, Field(min_length=1, max_length=200)]  # it reaches the database as text
    password: Annotated[str, Field(min_length=1, max_length=MAX_PASSWORD_LEN)]

    def __repr__(self) -> str:  # keep the password out of any traceback or log line
        return f"LoginRequest(username={self.username!r}, password=***)"


class UserPublic(BaseModel):
    username: str
    roles: list[str]
    expires_at: Instant


class LoginResponse(BaseModel):
    access_token: str
    token_type: str = "bearer"
    expires_at: Instant
    user: UserPublic


def _public(user: Principal) -> UserPublic:
    return UserPublic(username=user.username, roles=sorted(user.roles), expires_at=user.expires_at)


def _status(exc: LoginRefused) -> tuple[int, dict[str, str]]:
    if isinstance(exc, RateLimited):
        return 429, {"Retry-After": str(int(exc.retry_after_s) + 1)}
    if isinstance(exc, AccountDisabled):
        return 403, {}
    if isinstance(exc, AuditUnavailable):
        return 503, {}
    return 401, {"WWW-Authenticate": "Bearer"}


def _secure(request: Request, runtime: RuntimeDep) -> bool:
    """Session cookies are ``Secure`` in production and whenever the request came over TLS."""
    return runtime.settings.environment == "prod" or request.url.scheme == "https"


@router.post("/login")
def login(body: LoginRequest, request: Request, response: Response, auth: AuthDep,
          runtime: RuntimeDep) -> LoginResponse:
    """Exchange username and password for a bearer token; also sets the dashboard's session cookie."""
    client = request.client.host if request.client is not None else "unknown"
    try:
        result = auth.login(body.username, body.password, client)
    except LoginRefused as exc:
        status, headers = _status(exc)
        raise HTTPException(status_code=status, detail=str(exc), headers=headers or None) from None
    user = result.principal
    response.set_cookie(SESSION_COOKIE, result.token, max_age=int(auth.signer.ttl_s), path="/", httponly=True,
                        samesite="strict", secure=_secure(request, runtime))
    return LoginResponse(access_token=result.token, expires_at=user.expires_at, user=_public(user))


@router.post("/logout", status_code=204)
def logout(user: CurrentUser, auth: AuthDep, runtime: RuntimeDep, request: Request) -> Response:
    """End every session of the caller (all tokens issued so far stop working) and clear the cookie."""
    auth.logout(user)
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict",
                           secure=_secure(request, runtime))
    return response


@router.get("/me")
def me(user: CurrentUser) -> UserPublic:
    """The logged-in user, the roles the database grants now, and when the token expires."""
    return _public(user)
