"""Alarms: the grouped list, the kinds in words and the history (any logged-in user); acknowledge,
shelve and unshelve (operators, sealed with their name and why); thresholds per greenhouse."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import anyio
from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query

from app.alarm_models import AlarmThreshold
from app.alarms.catalogue import KINDS, Severity, describe
from app.alarms.conditions import Thresholds
from app.alarms.watch import ProcessAlarms
from app.api.alarm_book import HistoryState, NotShelved, UnknownAlarm
from app.api.alarm_schemas import (
    AckBody,
    AlarmAck,
    AlarmActionPublic,
    AlarmEpisodePublic,
    AlarmPublic,
    KindPublic,
    ShelveBody,
    UnshelveBody,
)
from app.api.deps import CurrentUser, OperatorUser, get_current_user, require_role
from app.api.instants import parse_instant
from app.api.routes.live import DashboardDep
from app.audit_sink import ACCESS_CHAIN
from app.auth.service import Principal
from audit.wording import DEFAULT_LANGUAGE

router = APIRouter(prefix="/api/alarms", tags=["alarms"], dependencies=[Depends(get_current_user)])
AlarmId = Annotated[str, Path(pattern=r"^[0-9a-f]{16}$")]
Configurer = Annotated[Principal, Depends(require_role("agronomist", "admin"))]
HISTORY_MAX = 1000
NO_COMMENT = AckBody()
"""An acknowledgement without a body (the comment is optional)."""


@router.get("")
def list_alarms(dash: DashboardDep, user: CurrentUser,
                gh: Annotated[str | None, Query(description="only this greenhouse")] = None,
                shelved: Annotated[bool, Query(description="the shelved alarms instead of "
                                                           "the open list")] = False,
                active: Annotated[bool | None, Query(description="only active (true) "
                                                                 "or inactive (false) ones")] = None,
                ) -> list[AlarmPublic]:
    """Alarms grouped by greenhouse and kind, unacknowledged first, each in words (the caller's language)
    with what to do."""
    return [_worded(a, user.language) for a in dash.alarms.list(gh, shelved=shelved, active=active)]


def _worded(alarm: AlarmPublic, lang: str) -> AlarmPublic:
    """The alarm's words in ``lang``: the book keeps one English copy for every reader and notification."""
    if lang == DEFAULT_LANGUAGE:
        return alarm
    words = describe(alarm.kind, lang)
    return alarm.model_copy(update={"title": words.title, "description": words.description,
                                    "action": words.action})


@router.get("/kinds")
def alarm_kinds(user: CurrentUser) -> list[KindPublic]:
    """Every alarm kind the service raises: severity, meaning and suggested action."""
    out = []
    for code, spec in KINDS.items():
        text = describe(code, user.language)
        out.append(KindPublic(code=code, severity=spec.severity, title=text.title,
                              description=text.description, action=text.action, watched=spec.watched))
    return out


@router.get("/history")
async def history(dash: DashboardDep, user: CurrentUser,
                  gh: Annotated[str | None, Query(max_length=63)] = None,
                  kind: Annotated[str | None, Query(min_length=1, max_length=200,
                                                    description="a kind (zone_dry:2) "
                                                                "or a code (zone_dry)")] = None,
                  severity: Severity | None = None,
                  since: Annotated[str | None, Query(description="ISO-8601 with offset")] = None,
                  until: Annotated[str | None, Query(description="ISO-8601 with offset")] = None,
                  state: HistoryState | None = None,
                  limit: Annotated[int, Query(ge=1, le=HISTORY_MAX)] = 200) -> list[AlarmEpisodePublic]:
    """Alarm episodes (raised to cleared), newest first, overlapping [since, until) and matching every
    filter."""
    start = parse_instant("since", since) if since else None
    end = parse_instant("until", until) if until else None
    if start is not None and end is not None and end <= start:
        raise HTTPException(status_code=422, detail="'until' must be after 'since'")
    rows = await anyio.to_thread.run_sync(lambda: dash.alarms.history(
        gh=gh, kind=kind, severity=severity, since=start, until=end, state=state, limit=limit))
    if user.language == DEFAULT_LANGUAGE:
        return rows
    return [r.model_copy(update={"title": describe(r.kind, user.language).title}) for r in rows]


@router.get("/{alarm_id}/actions")
async def alarm_actions(alarm_id: AlarmId, dash: DashboardDep) -> list[AlarmActionPublic]:
    """Who acknowledged, shelved and unshelved this alarm, and why, newest first."""
    return await anyio.to_thread.run_sync(dash.alarms.actions, alarm_id)


@router.post("/{alarm_id}/ack")
async def acknowledge(alarm_id: AlarmId, dash: DashboardDep, user: OperatorUser,
                      body: Annotated[AckBody, Body()] = NO_COMMENT) -> AlarmAck:
    """Acknowledge every occurrence so far as the logged-in operator, with an optional comment; a later one
    raises it again. Until then, acknowledging again answers the standing acknowledgement (nothing new is
    sealed)."""
    comment = body.comment.strip()
    try:
        return await anyio.to_thread.run_sync(dash.alarms.acknowledge, alarm_id, user.operator_actor, comment)
    except UnknownAlarm as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from exc


@router.post("/{alarm_id}/shelve")
async def shelve(alarm_id: AlarmId, body: ShelveBody, dash: DashboardDep, user: OperatorUser) -> AlarmPublic:
    """Shelve an alarm for ``minutes`` with a reason: out of the open list and silent until then."""
    try:
        return await anyio.to_thread.run_sync(dash.alarms.shelve, alarm_id, user.operator_actor,
                                              body.reason.strip(), body.minutes)
    except UnknownAlarm as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from exc


@router.post("/{alarm_id}/unshelve")
async def unshelve(alarm_id: AlarmId, body: UnshelveBody, dash: DashboardDep,
                   user: OperatorUser) -> AlarmPublic:
    """Bring a shelved alarm back now, with a reason."""
    try:
        return await anyio.to_thread.run_sync(dash.alarms.unshelve, alarm_id, user.operator_actor,
                                              body.reason.strip())
    except UnknownAlarm as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from exc
    except NotShelved as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from exc


@router.get("/thresholds/{gh}")
def get_thresholds(gh: str, dash: DashboardDep) -> Thresholds:
    """The greenhouse's alarm limits (its override, else the defaults)."""
    return _watch(dash, gh).thresholds(gh)


@router.put("/thresholds/{gh}")
async def put_thresholds(gh: str, body: Thresholds, dash: DashboardDep, user: Configurer) -> Thresholds:
    """Set the greenhouse's alarm limits (every field; a missing one takes its default). Sealed in the
    audit trail and stored; the service judges by them from its next round."""
    watch = _watch(dash, gh)
    runtime = dash.runtime
    actor = f"{'admin' if 'admin' in user.roles else 'agronomist'}:{user.username}"

    def store() -> None:
        now = datetime.now(UTC)
        if runtime.audit is not None:
            runtime.audit.store.append(ACCESS_CHAIN, "alarm_thresholds", actor,
                                       {"greenhouse": gh, "thresholds": body.model_dump()}, now)
        with runtime.sessions.begin() as s:
            s.merge(AlarmThreshold(greenhouse_id=gh, values=body.model_dump(), updated_by=actor,
                                   updated_at=now))
        watch.overrides[gh] = body

    await anyio.to_thread.run_sync(store)
    return body


def _watch(dash: DashboardDep, gh: str) -> ProcessAlarms:
    if gh not in dash.runtime.controllers:
        raise HTTPException(status_code=404, detail=f"unknown greenhouse {gh!r}")
    return dash.runtime.housekeeping.process_alarms
