"""Signed, expiring bearer tokens (itsdangerous, HMAC-SHA256); the same token is the session cookie.

A token names the user, the user's token epoch (see ``app.models.User.token_epoch``) and its
expiry. The signature proves the service issued it; whether the account is still enabled and the
epoch still current is checked against the database on every request, so disabling a user or
logging out takes effect at once.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from itsdangerous import BadSignature, URLSafeSerializer

TOKEN_SALT = "greentwin.api.token.v1"


class TokenError(ValueError):
    """A token that does not authenticate anyone; the message is safe to send back."""


class TokenExpired(TokenError):
    """Signature good, lifetime over: log in again."""


@dataclass(frozen=True)
class TokenClaims:
    """What a verified token says."""

    user_id: int
    username: str
    epoch: int
    issued_at: int
    expires_at: int

    @property
    def expires(self) -> datetime:
        return datetime.fromtimestamp(self.expires_at, UTC)


class TokenSigner:
    """Issues and checks tokens with one secret; ``clock`` (Unix seconds) is injectable for tests."""

    def __init__(self, secret: str, ttl_s: float, *, clock: Callable[[], float] = time.time) -> None:
        if not secret:
            raise ValueError("token secret must not be empty")
        if ttl_s <= 0:
            raise ValueError("token lifetime must be positive")
        self._serializer = URLSafeSerializer(secret, salt=TOKEN_SALT,
                                             signer_kwargs={"digest_method": hashlib.sha256})
        self.ttl_s = ttl_s
        self._clock = clock

    def issue(self, *, user_id: int, username: str, epoch: int) -> tuple[str, TokenClaims]:
        """A fresh token and its claims."""
        now = int(self._clock())
        claims = TokenClaims(user_id, username, epoch, now, now + int(self.ttl_s))
        payload = {"uid": user_id, "sub": username, "ep": epoch, "iat": claims.issued_at,
                   "exp": claims.expires_at}
        return self._serializer.dumps(payload), claims

    def verify(self, token: str) -> TokenClaims:
        """Claims of a genuine, unexpired token; :class:`TokenError` otherwise."""
        try:
            payload: Any = self._serializer.loads(token)
        except BadSignature:
            raise TokenError("invalid token") from None
        try:
            claims = TokenClaims(int(payload["uid"]), str(payload["sub"]), int(payload["ep"]),
                                 int(payload["iat"]), int(payload["exp"]))
        except (TypeError, KeyError, ValueError):
            raise TokenError("invalid token") from None
        if self._clock() >= claims.expires_at:
            raise TokenExpired("token expired: log in again")
        return claims
