"""The dashboard's read side: overview, live state, recent decisions, trends and the live stream.

Live state is built on the event loop (so never in the middle of a decision) from memory; only
history, recent decisions and the cached time in band read the database, in worker threads.
The stream is server-sent events: an event when what a page shows has changed (checked every
second) and at least every ``KEEPALIVE_S``, so the page can tell a quiet greenhouse from a dead
connection; the event is built once per page for all of its open streams (:mod:`app.api.live_feed`).
It re-checks the caller's token every ``REAUTH_S``: a logout ends open streams.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy import select

from app.api import history as hist
from app.api import live_feed, trend_rollup
from app.api.dashboard import Dashboard
from app.api.decision_text import sentences, zone_names
from app.api.deps import (
    SESSION_COOKIE,
    AuthDep,
    CurrentUser,
    RuntimeDep,
    SessionDep,
    bearer_token,
    get_current_user,
)
from app.api.instants import parse_instant
from app.api.schemas import (
    DecisionPublic,
    ExplanationFactor,
    GreenhouseLive,
    GreenhouseSummary,
    HistoryResponse,
    SafetyClip,
)
from app.auth.tokens import TokenError
from app.models import Decision
from audit.decision_words import clip_text

router = APIRouter(prefix="/api", tags=["dashboard"], dependencies=[Depends(get_current_user)])

KEEPALIVE_S = live_feed.KEEPALIVE_S
REAUTH_S = 30.0
MAX_HISTORY = timedelta(days=31)


def get_dashboard(request: Request) -> Dashboard:
    dash: Dashboard | None = getattr(request.app.state, "dashboard", None)
    if dash is None:
        raise HTTPException(status_code=503, detail="service is starting")
    return dash


DashboardDep = Annotated[Dashboard, Depends(get_dashboard)]


def _known(runtime: RuntimeDep, gh: str) -> None:
    if gh not in runtime.controllers:
        raise HTTPException(status_code=404, detail=f"unknown greenhouse {gh!r}")


@router.get("/overview")
async def overview(dash: DashboardDep) -> list[GreenhouseSummary]:
    """Every greenhouse under control: mode, edge box, telemetry age, water against the cap, time in band,
    and today's yield (estimated) and profit."""
    for gh in dash.runtime.controllers:
        await anyio.to_thread.run_sync(lambda g=gh: (dash.in_band(g, wait=True),
                                                     dash.economics(g, wait=True)))
    return dash.overview()


@router.get("/greenhouses/{gh}/live")
async def live(gh: str, runtime: RuntimeDep, dash: DashboardDep) -> GreenhouseLive:
    """One greenhouse's live state: zones, actuators commanded vs confirmed, climate, policy, today's
    economics and the last decision's outlook (forecast and prices)."""
    _known(runtime, gh)
    await anyio.to_thread.run_sync(lambda: (dash.in_band(gh, wait=True), dash.economics(gh, wait=True)))
    return dash.live(gh)


@router.get("/greenhouses/{gh}/history")
def history(gh: str, runtime: RuntimeDep, session: SessionDep, dash: DashboardDep,
            start: Annotated[str | None, Query(alias="from",
                                               description="ISO-8601 with offset; default to - 24 h")] = None,
            end: Annotated[str | None, Query(alias="to",
                                             description="ISO-8601 with offset; default now")] = None,
            hours: Annotated[float, Query(gt=0, le=MAX_HISTORY.days * 24,
                                          description="without 'from': this many hours before 'to'")] = 24.0,
            points: Annotated[int, Query(ge=10, le=hist.MAX_POINTS)] = 288) -> HistoryResponse:
    """Trends over a period (at most 31 days), averaged into at most ``points`` buckets. Without ``to``
    the period ends now, or at the latest telemetry when a simulator runs ahead of the clock."""
    _known(runtime, gh)
    # Without 'to': the end of the current five-minute trend cell, so the page's buckets are whole cells.
    to = (parse_instant("to", end) if end
          else trend_rollup.cell_start(trend_rollup.cell_index(dash.timeline_end(gh)) + 1))
    frm = parse_instant("from", start) if start else to - timedelta(hours=hours)
    if to <= frm:
        raise HTTPException(status_code=422, detail="'to' must be after 'from'")
    if to - frm > MAX_HISTORY:
        raise HTTPException(status_code=422, detail=f"period longer than {MAX_HISTORY.days} days")
    return dash.history(session, gh, frm, to, points)


def _float(value: Any, default: float = float("nan")) -> float:
    """A stored number as a float; ``default`` for a missing or non-numeric one (rows of any age)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _decision(r: Decision, lang: str, names: list[str | None]) -> DecisionPublic:
    explanation: dict[str, Any] = r.explanation if isinstance(r.explanation, dict) else {}
    top = [ExplanationFactor(feature=str(f.get("feature", "")), sentence=str(f.get("sentence", "")),
                             share_pct=float(f.get("share_pct", 0.0)))
           for f in (explanation.get("top") or [])[:3] if isinstance(f, dict)]
    clipped: dict[str, Any] = r.clipped if isinstance(r.clipped, dict) else {}
    fired = [f for f in (r.rules_fired or []) if isinstance(f, dict)]
    return DecisionPublic(
        seq=r.seq, ts=r.ts, actor=r.actor, mode=r.mode,
        confidence=r.confidence, valves=[int(v) for v in clipped.get("valves", [])],
        pump_pct=_float(clipped.get("pump_pct"), 0.0), light_pct=_float(clipped.get("light_pct"), 0.0),
        clips=[SafetyClip(rule=str(f.get("rule", "")), actuator=str(f.get("actuator", "")),
                          before=_float(f.get("before")), after=_float(f.get("after")),
                          why=str(f.get("why", "")), text=clip_text(f, lang, names)) for f in fired],
        top_factors=top, alarms=[str(a) for a in explanation.get("alarms", [])], ack_status=r.ack_status,
        **sentences(r, lang, names))


@router.get("/greenhouses/{gh}/recent-decisions")
def recent_decisions(gh: str, runtime: RuntimeDep, session: SessionDep, user: CurrentUser,
                     limit: Annotated[int, Query(ge=1, le=100)] = 10) -> list[DecisionPublic]:
    """The latest decisions with their top-3 explanation factors and any safety clips, and all of it as
    sentences in the caller's language (``explanation_text``, ``command_text``, ``clips_text``)."""
    _known(runtime, gh)
    rows = session.scalars(select(Decision).where(Decision.greenhouse_id == gh)
                           .order_by(Decision.seq.desc()).limit(limit))
    names = zone_names(runtime, gh)
    return [_decision(r, user.language, names) for r in rows]


def _event(name: str, payload: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n"


@router.get("/stream", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "server-sent events: `overview` (a list of GreenhouseSummary) "
                                            "or `live` (GreenhouseLive) when `gh` is given"}})
async def stream(request: Request, runtime: RuntimeDep, dash: DashboardDep, auth: AuthDep,
                 gh: Annotated[str | None, Query(description="a greenhouse: its live state; "
                                                             "none: the overview")]
                 = None) -> StreamingResponse:
    """Live updates by server-sent events (reconnect after ``retry`` ms when the connection drops)."""
    if gh is not None:
        _known(runtime, gh)
    # The token the request was let in with, read as the authentication read it.
    token = bearer_token(request.headers.get("authorization")) or request.cookies.get(SESSION_COOKIE, "")

    async def events() -> AsyncIterator[str]:
        yield "retry: 3000\n\n"
        checked = time.monotonic()
        async with dash.feed.subscribe(gh) as topic:
            sent = 0
            while not await request.is_disconnected():
                now = time.monotonic()
                if now - checked > REAUTH_S:
                    checked = now
                    try:
                        await anyio.to_thread.run_sync(auth.authenticate, token)
                    except TokenError:
                        yield _event("logout", {"detail": "session ended"})
                        return
                if topic.version != sent:
                    sent = topic.version
                    yield topic.text
                await topic.next(sent)

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
