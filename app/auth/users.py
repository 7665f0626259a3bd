"""Keyword-only account functions over a session: create, list, disable, change a password or roles.

They commit their own change and return values (never print), so the command line formats
output and tests call them directly. Given ``seal`` (:mod:`app.access_seal`), a change commits
together with its record in the audit trail's access chain, or not at all. Usernames are
lower-case slugs; roles come from ``app.models.ROLES``. No change leaves the accounts without an
enabled admin (``LastAdmin``), once there is one: the API and ``greentwin user`` both refuse it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.access_seal import commit_sealed
from app.auth.passwords import hash_password
from app.auth.roles import ROLES
from app.models import USERNAME_MAX_LEN, User, UserRole

if TYPE_CHECKING:
    from app.access_seal import SealChange

USERNAME_RE = re.compile(rf"[a-z0-9][a-z0-9_.@-]{{0,{USERNAME_MAX_LEN - 1}}}", re.ASCII)


class UserExists(ValueError):
    """``user add`` for a name that is taken."""


class UnknownUser(LookupError):
    """No account of that name."""


class LastAdmin(ValueError):
    """A change that would leave no enabled admin: nobody could manage accounts through the API any more."""


def normalize_username(username: str) -> str:
    """Lower-cased, trimmed name: ``Alice`` and ``alice`` are one account (and one rate-limit key)."""
    return username.strip().lower()


def validate_username(username: str) -> str:
    """Return the normalised name, or raise ``ValueError`` saying what a name may contain."""
    name = normalize_username(username)
    if USERNAME_RE.fullmatch(name) is None:
        raise ValueError(f"invalid username {username!r}: expected "
                         f"[a-z0-9][a-z0-9_.@-]{{0,{USERNAME_MAX_LEN - 1}}}")
    return name


def validate_roles(roles: Iterable[str]) -> list[str]:
    """Sorted, de-duplicated roles; ``ValueError`` for an empty set or an unknown role."""
    wanted = sorted(set(roles))
    if not wanted:
        raise ValueError(f"a user needs at least one role ({', '.join(ROLES)})")
    unknown = [r for r in wanted if r not in ROLES]
    if unknown:
        raise ValueError(f"unknown role {unknown[0]!r}: expected one of {', '.join(ROLES)}")
    return wanted


def get_user(session: Session, username: str) -> User | None:
    return session.scalars(select(User).where(User.username == normalize_username(username))).one_or_none()


def _keep_an_enabled_admin(session: Session, user: User) -> None:
    """``LastAdmin`` unless another enabled admin remains when ``user`` stops being one. The admins' rows
    are locked (PostgreSQL), so two admins stepping down at once cannot both pass the check."""
    admins = session.scalars(select(User.id).join(UserRole).where(
        UserRole.role == "admin", User.disabled_at.is_(None)).with_for_update()).all()
    if user.id in admins and len(admins) == 1:
        raise LastAdmin(f"refused: {user.username!r} is the last enabled admin; "
                        "give another account the admin role first")


def create_user(*, session: Session, username: str, password: str, roles: Sequence[str],
                seal: SealChange | None = None) -> User:
    """Store a new enabled account (sealed as ``{username, roles}``); ``UserExists`` when the name is
    taken."""
    name = validate_username(username)
    wanted = validate_roles(roles)
    user = User(username=name, password_hash=hash_password(password), token_epoch=0,
                role_rows=[UserRole(role=r) for r in wanted])
    session.add(user)
    try:
        session.flush()
    except IntegrityError as exc:
        session.rollback()
        raise UserExists(f"user {name!r} already exists") from exc
    commit_sealed(session, seal, {"username": name, "roles": wanted})
    return user


def list_users(*, session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.username)))


def disable_user(*, session: Session, username: str, seal: SealChange | None = None) -> User:
    """Refuse every future login and every token already issued; idempotent (each call is sealed as
    ``{username}``, the admin's request being on record either way). ``LastAdmin`` for the last
    enabled admin."""
    user = get_user(session, username)
    if user is None:
        raise UnknownUser(f"no user {normalize_username(username)!r}")
    if user.disabled_at is None:
        _keep_an_enabled_admin(session, user)
        user.disabled_at = datetime.now(UTC)
        user.token_epoch += 1
    commit_sealed(session, seal, {"username": user.username})
    return user


def set_password(*, session: Session, username: str, password: str, seal: SealChange | None = None) -> User:
    """Replace the password and revoke the tokens issued under the old one (sealed as ``{username}``)."""
    user = get_user(session, username)
    if user is None:
        raise UnknownUser(f"no user {normalize_username(username)!r}")
    user.password_hash = hash_password(password)
    user.token_epoch += 1
    commit_sealed(session, seal, {"username": user.username})
    return user


def set_roles(*, session: Session, username: str, roles: Sequence[str],
              seal: SealChange | None = None) -> tuple[User, list[str]]:
    """Replace the account's roles (sealed as ``{username, from_roles, to_roles}``); returns it and the
    roles it had (each request reads roles anew, so the change holds from the next request on).
    ``LastAdmin`` when it takes the admin role from the last enabled admin."""
    wanted = validate_roles(roles)
    user = get_user(session, username)
    if user is None:
        raise UnknownUser(f"no user {normalize_username(username)!r}")
    before = sorted(user.roles)
    if "admin" not in wanted:
        _keep_an_enabled_admin(session, user)
    if before != wanted:
        user.role_rows = [UserRole(role=r) for r in wanted]
    commit_sealed(session, seal, {"username": user.username, "from_roles": before, "to_roles": wanted})
    return user, before


def bump_token_epoch(*, session: Session, user_id: int) -> None:
    """Revoke every token of the user issued so far (logout)."""
    session.execute(update(User).where(User.id == user_id).values(token_epoch=User.token_epoch + 1))
    session.commit()
