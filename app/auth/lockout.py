"""Account locks in the database: set by the login path, seen by admins, lifted by an admin.

A lock is ``app_user.locked_until`` (:mod:`app.auth.throttle` says when one is set and what it
refuses). Lifting one before it runs out changes who may log in, so like every account change it
is sealed into the audit trail's access chain in the change's own transaction
(:mod:`app.access_seal`): both happen or neither does.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.access_seal import commit_sealed
from app.auth.users import UnknownUser, get_user, normalize_username
from app.models import User

if TYPE_CHECKING:
    from app.access_seal import SealChange


class NotLocked(LookupError):
    """``unlock`` of an account that holds no lock."""


def aware(ts: datetime) -> datetime:
    """SQLite hands back naive UTC datetimes; PostgreSQL aware ones."""
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def locked_until(user: User, now: datetime) -> datetime | None:
    """When the account's lock runs out, or None when it holds none now."""
    if user.locked_until is None or aware(user.locked_until) <= now:
        return None
    return aware(user.locked_until)


def locked_accounts(*, session: Session, now: datetime) -> list[tuple[User, datetime]]:
    """Accounts locked now, by name, each with when its lock runs out."""
    users = session.scalars(select(User).where(User.locked_until.is_not(None)).order_by(User.username))
    return [(u, until) for u in users if (until := locked_until(u, now)) is not None]


def lift_lock(*, session: Session, username: str, seal: SealChange | None = None) -> tuple[User, datetime]:
    """Lift the account's lock (sealed as ``{username, locked_until}`` when ``seal`` is given, in the
    same transaction); returns the account and when the lock would have run out. ``UnknownUser``,
    ``NotLocked`` and ``ChangeNotSealed`` leave it locked."""
    user = get_user(session, username)
    if user is None:
        raise UnknownUser(f"no user {normalize_username(username)!r}")
    until = locked_until(user, datetime.now(UTC))
    if until is None:
        raise NotLocked(f"user {user.username!r} is not locked")
    user.locked_until = None
    commit_sealed(session, seal, {"username": user.username, "locked_until": until.isoformat()})
    return user, until
