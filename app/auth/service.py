"""Login, token checks and logout, independent of FastAPI (the routes map the errors to HTTP).

A successful login of an ``operator`` or ``admin`` is sealed into the audit trail before the
token is handed out: if it cannot be recorded, the login is refused. Service-level records go
to the chain ``ACCESS_CHAIN``, which no greenhouse id can name (ids start with ``[a-z0-9]``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NoReturn

from sqlalchemy.orm import Session, sessionmaker

from app.audit_sink import ACCESS_CHAIN
from app.auth.lockout import locked_until
from app.auth.passwords import dummy_hash, hash_password, needs_rehash, verify_password
from app.auth.roles import PRIVILEGED_ROLES
from app.auth.throttle import LoginThrottle
from app.auth.tokens import TokenError, TokenSigner
from app.auth.users import bump_token_epoch, get_user, normalize_username
from app.core.config import Settings
from app.metrics import Metrics
from app.models import User
from audit.store import AuditStore

log = logging.getLogger(__name__)

SECRET_FILE = "api-secret-key"


class AuthConfigError(RuntimeError):
    """The API cannot authenticate anyone as configured (no signing secret)."""


class LoginRefused(Exception):
    """Base of the reasons a login is refused; ``reason`` is the metric label."""

    reason = "bad_credentials"


class BadCredentials(LoginRefused):
    def __init__(self) -> None:
        super().__init__("invalid username or password")


class AccountDisabled(LoginRefused):
    reason = "disabled"

    def __init__(self) -> None:
        super().__init__("account disabled")


class RateLimited(LoginRefused):
    reason = "rate_limited"
    message = "too many failed logins: try again in {s} s"

    def __init__(self, retry_after_s: float) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(self.message.format(s=int(retry_after_s) + 1))


class AccountLocked(RateLimited):
    """The account is locked and this address has failed on it (other addresses may still try)."""

    reason = "locked"
    message = ("too many failed logins on this account: try again from here in {s} s, or ask an admin to "
               "lift the lock")


class AuditUnavailable(LoginRefused):
    reason = "audit_unavailable"

    def __init__(self) -> None:
        super().__init__("login of a privileged user cannot be recorded in the audit trail right now")


@dataclass(frozen=True)
class Principal:
    """The authenticated caller of one request, as the database says now (roles are not taken from the
    token)."""

    user_id: int
    username: str
    roles: frozenset[str]
    expires_at: datetime
    language: str = "en"
    """The user's language for the words the API and the pages print (``en`` or ``zh-Hans``)."""

    @property
    def operator_actor(self) -> str:
        """Actor of the mode changes this user makes (the report counts ``operator:*`` as overrides)."""
        return f"operator:{self.username}"


@dataclass(frozen=True)
class LoginResult:
    token: str
    principal: Principal


def service_secret_key(settings: Settings, state_dir: Path) -> str:
    """``GREENTWIN_SECRET_KEY``; the demo generates one and keeps it; otherwise refuse to start."""
    if settings.secret_key is not None and (key := settings.secret_key.get_secret_value().strip()):
        return key
    if settings.environment != "demo":
        raise AuthConfigError("GREENTWIN_SECRET_KEY is not set: the API does not start without a token "
                              "signing secret outside demo mode")
    path = Path(state_dir) / SECRET_FILE
    if path.exists():
        return path.read_text(encoding="ascii").strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(key + "\n")
    log.warning("demo mode: API token secret generated and kept in %s", path)
    return key


class AuthService:
    """Everything the auth routes need; one per app, shared by request threads."""

    def __init__(self, *, sessions: sessionmaker[Session], signer: TokenSigner, throttle: LoginThrottle,
                 metrics: Metrics, audit: AuditStore | None, lockout_s: float = 900.0) -> None:
        self.sessions = sessions
        self.signer = signer
        self.throttle = throttle
        self.lockout_s = lockout_s
        """How long an account stays locked after its last failure at the per-account limit."""
        self.metrics = metrics
        self.audit = audit

    def login(self, username: str, password: str, client: str) -> LoginResult:
        """Check the password and issue a token; raises a :class:`LoginRefused` subclass."""
        name = normalize_username(username)
        with self.sessions() as session:
            user = get_user(session, name)
            now = datetime.now(UTC)
            locked = user is not None and self._lock_holds(session, user, now)
            admission = self.throttle.admit(name, client, locked=locked)  # counts until it succeeds
            if admission.wait_s > 0:
                exc = (AccountLocked(admission.wait_s) if admission.locked_out
                       else RateLimited(admission.wait_s))
                self._refuse(exc, client, user)
            # Unknown names cost a hash check too, so timing does not tell which accounts exist.
            ok = verify_password(user.password_hash if user is not None else dummy_hash(), password)
            if user is None or not ok:
                if user is not None and self.throttle.failed(name):
                    self._lock(session, user, now, newly=not locked)
                self._refuse(BadCredentials(), client, user)
            if user.disabled_at is not None:
                self._refuse(AccountDisabled(), client, user)
            self.throttle.succeeded(name, client)
            roles = user.roles
            if roles & PRIVILEGED_ROLES:
                self._seal_login(user, roles, client, now)
            user.last_login_at = now
            if needs_rehash(user.password_hash):
                with contextlib.suppress(ValueError):  # a password from before today's policy keeps its hash
                    user.password_hash = hash_password(password)
            session.commit()
            token, claims = self.signer.issue(user_id=user.id, username=user.username, epoch=user.token_epoch)
        self.metrics.logins.inc()
        log.info("login %s (%s) from %s", user.username, ",".join(sorted(roles)), client)
        return LoginResult(token, Principal(user.id, user.username, roles, claims.expires))

    def authenticate(self, token: str) -> Principal:
        """The user a token stands for, if the token is genuine, unexpired and still current."""
        claims = self.signer.verify(token)
        with self.sessions() as session:
            user = session.get(User, claims.user_id)
            if user is None or user.username != claims.username:
                raise TokenError("invalid token")
            if user.disabled_at is not None:
                raise TokenError("account disabled")
            if user.token_epoch != claims.epoch:
                raise TokenError("session ended: log in again")
            return Principal(user.id, user.username, user.roles, claims.expires, user.language)

    def logout(self, principal: Principal) -> None:
        """Revoke every token of the user (all of the user's sessions end)."""
        with self.sessions() as session:
            bump_token_epoch(session=session, user_id=principal.user_id)
        log.info("logout %s", principal.username)

    def lift(self, username: str, actor: str) -> None:
        """After a lock was lifted in the database: forget the account's failures here too."""
        name = normalize_username(username)
        self.throttle.lift(name)
        self.metrics.login_lock_changes.labels("lifted").inc()
        log.warning("login lock on %s lifted by %s", name, actor)

    def _lock_holds(self, session: Session, user: User, now: datetime) -> bool:
        """Whether the account is locked now; a lock found run out is cleared and logged as such."""
        if locked_until(user, now) is not None:
            return True
        if user.locked_until is not None:
            user.locked_until = None
            session.commit()
            self.metrics.login_lock_changes.labels("expired").inc()
            log.warning("login lock on %s ran out", user.username)
        return False

    def _lock(self, session: Session, user: User, now: datetime, *, newly: bool) -> None:
        """Lock the account (or hold its lock on) for ``lockout_s`` from this failure."""
        user.locked_until = now + timedelta(seconds=self.lockout_s)
        session.commit()
        if newly:
            self.metrics.login_lock_changes.labels("locked").inc()
            log.warning("login lock on %s until %s: %d failed logins from %d addresses within %g s",
                        user.username, user.locked_until.isoformat(timespec="seconds"),
                        self.throttle.accounts.count(user.username),
                        self.throttle.addresses_failing(user.username), self.throttle.accounts.window_s)

    def _refuse(self, exc: LoginRefused, client: str, user: User | None) -> NoReturn:
        self.metrics.login_failures.labels(exc.reason).inc()
        # Only names of existing accounts are logged: a password typed into the name field must not be.
        log.warning("login refused (%s) for %s from %s", exc.reason,
                    user.username if user is not None else "an unknown name", client)
        raise exc

    def _seal_login(self, user: User, roles: frozenset[str], client: str, now: datetime) -> None:
        audit = self.audit
        if audit is None:
            self._refuse(AuditUnavailable(), client, user)
        try:
            audit.append(ACCESS_CHAIN, "login", user.username,
                         {"username": user.username, "roles": sorted(roles), "client": client}, now)
        except Exception:
            log.exception("could not seal the login of %s", user.username)
            self._refuse(AuditUnavailable(), client, user)
