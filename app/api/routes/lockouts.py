"""Login locks for admins: which accounts are locked, and lifting a lock before it runs out.

A lock is set by failed logins from many addresses (:mod:`app.auth.throttle`); lifting it is a
change of who may log in, sealed into the access chain with the admin as the actor
(``admin:<name>``) in the same transaction as the change (:mod:`app.access_seal`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import anyio
from fastapi import APIRouter, Depends, HTTPException, Path
from pydantic import BaseModel

from app.access_seal import AccessSealer, ChangeNotSealed
from app.api.deps import AdminUser, AuthDep, RuntimeDep, SessionDep, get_current_user
from app.auth.lockout import NotLocked, lift_lock, locked_accounts, locked_until
from app.auth.users import UnknownUser

router = APIRouter(tags=["users"], dependencies=[Depends(get_current_user)])

Username = Annotated[str, Path(min_length=1, max_length=64)]


class LockRow(BaseModel):
    username: str
    locked_until: datetime


@router.get("/api/lockouts")
def lockouts(session: SessionDep, admin: AdminUser) -> list[LockRow]:
    """Accounts locked now by failed logins from many addresses, and until when (admin)."""
    now = datetime.now(UTC)
    return [LockRow(username=u.username, locked_until=until) for u in locked_accounts(session=session, now=now)
            if (until := locked_until(u, now)) is not None]


@router.post("/api/users/{username}/unlock")
async def unlock(username: Username, runtime: RuntimeDep, auth: AuthDep, admin: AdminUser) -> LockRow:
    """Lift an account's login lock now (admin); answers the time it would have run out."""
    if runtime.audit is None:
        raise HTTPException(status_code=503, detail="no audit trail configured: account changes must be sealed")
    actor = f"admin:{admin.username}"
    seal = AccessSealer(runtime.audit.store, actor).sealing("user_unlock")

    def work() -> LockRow:
        with runtime.sessions() as session:
            try:
                user, until = lift_lock(session=session, username=username, seal=seal)
            except (UnknownUser, NotLocked, ChangeNotSealed) as exc:
                status = 404 if isinstance(exc, UnknownUser) else 409 if isinstance(exc, NotLocked) else 503
                raise HTTPException(status_code=status, detail=str(exc)) from exc
            auth.lift(user.username, actor)
            return LockRow(username=user.username, locked_until=until)

    return await anyio.to_thread.run_sync(work)
