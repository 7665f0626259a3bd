"""Alarms: the grouped list (any logged-in user) and acknowledge (operators, sealed with their name)."""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import APIRouter, Depends, HTTPException, Path, Query

from app.api.alarm_book import UnknownAlarm
from app.api.deps import OperatorUser, get_current_user
from app.api.routes.live import DashboardDep
from app.api.schemas import AlarmAck, AlarmPublic

router = APIRouter(prefix="/api/alarms", tags=["alarms"], dependencies=[Depends(get_current_user)])


@router.get("")
def list_alarms(dash: DashboardDep,
                gh: Annotated[str | None, Query(description="only this greenhouse")] = None) -> list[AlarmPublic]:
    """Recent alarms grouped by greenhouse and kind, unacknowledged first."""
    return dash.alarms.list(gh)


@router.post("/{alarm_id}/ack")
async def acknowledge(alarm_id: Annotated[str, Path(pattern=r"^[0-9a-f]{16}$")], dash: DashboardDep,
                      user: OperatorUser) -> AlarmAck:
    """Acknowledge every occurrence so far as the logged-in operator; a later one raises it again. Until
    then, acknowledging again answers the standing acknowledgement (nothing new is sealed)."""
    try:
        return await anyio.to_thread.run_sync(dash.alarms.acknowledge, alarm_id, user.operator_actor)
    except UnknownAlarm as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from exc
