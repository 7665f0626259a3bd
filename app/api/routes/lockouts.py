"""Login locks for admins: which accounts are locked, and lifting a lock before it runs out.

A lock is set by failed logins from many addresses (:mod:`app.auth.throttle`); lifting it is a
change of who may log in, sealed into the access chain with the admin as the actor
(``admin:<name>``) in the same transaction as the change (:mod:`app.access_seal`).
"""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
from fastapi import APIRouter, Depends
from pydantic import BaseModel

from app.api.account_change import Username, admin_actor, answered, sealing
from app.api.deps import AdminUser, AuthDep, RuntimeDep, SessionDep, get_current_user
from app.api.instants import Instant
from app.auth.lockout import lift_lock, locked_accounts

router = APIRouter(tags=["users"], dependencies=[Depends(get_current_user)])


class LockRow(BaseModel):
    username: str
    locked_until: Instant


@router.get("/api/lockouts")
def lockouts(session: SessionDep, admin: AdminUser) -> list[LockRow]:
    """Accounts locked now by failed logins from many addresses, and until when (admin)."""
    now = datetime.now(UTC)
    return [LockRow(username=u.username, locked_until=until)
            for u, until in locked_accounts(session=session, now=now)]


@router.post("/api/users/{username}/unlock")
async def unlock(username: Username, runtime: RuntimeDep, auth: AuthDep, admin: AdminUser) -> LockRow:
    """Lift an account's login lock now (admin); answers the time it would have run out."""
    seal = sealing(runtime, admin, "user_unlock")

    def work() -> LockRow:
        with runtime.sessions() as session:
            user, until = answered(lambda: lift_lock(session=session, username=username, seal=seal))
            auth.lift(user.username, admin_actor(admin))
            return LockRow(username=user.username, locked_until=until)

    return await anyio.to_thread.run_sync(work)
