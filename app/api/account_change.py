"""What every admin route that changes an account shares: the seal it commits with, and its refusals.

An account change commits together with its record in the audit trail's access chain, the admin as
the actor (``admin:<name>``), or not at all (:mod:`app.access_seal`). Without a trail it is refused
before anything changes; each refusal the account functions raise answers one status.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import HTTPException, Path

from app.access_seal import AccessSealer, ChangeNotSealed, SealChange
from app.auth.lockout import NotLocked
from app.auth.service import Principal
from app.auth.users import LastAdmin, UnknownUser, UserExists
from app.runtime import Runtime

Username = Annotated[str, Path(min_length=1, max_length=64)]
_T = TypeVar("_T")


def admin_actor(admin: Principal) -> str:
    """The actor an admin's change is sealed under."""
    return f"admin:{admin.username}"


def sealing(runtime: Runtime, admin: Principal, kind: str) -> SealChange:
    """Refuse before changing anything when there is no trail: an account change must be sealed."""
    if runtime.audit is None:
        raise HTTPException(status_code=503,
                            detail="no audit trail configured: account changes must be sealed")
    return AccessSealer(runtime.audit.store, admin_actor(admin)).sealing(kind)


_ANSWERS: tuple[tuple[type[Exception], int], ...] = (
    (UserExists, 409), (LastAdmin, 409), (NotLocked, 409), (UnknownUser, 404), (ChangeNotSealed, 503),
    (ValueError, 422))
"""What an account change's refusals answer, first match wins (``UserExists`` and ``LastAdmin`` are
``ValueError``s)."""


def answered(change: Callable[[], _T]) -> _T:
    """Run an account change; the errors it may raise as answers (nothing changed for any of them)."""
    try:
        return change()
    except tuple(kind for kind, _ in _ANSWERS) as exc:
        status = next(code for kind, code in _ANSWERS if isinstance(exc, kind))
        raise HTTPException(status_code=status, detail=str(exc)) from exc
