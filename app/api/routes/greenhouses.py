"""Greenhouses: status, decisions (paged), registration, modes and the e-stop.

Every endpoint needs a logged-in user; mode changes, the e-stop and its reset need the
``operator`` role and record that user as the actor (``operator:<username>``), whatever the
request body says; registration needs ``admin`` and commits together with its record in the
access chain (the admin as the actor), or not at all (503).
"""

from __future__ import annotations

import base64
import logging
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import and_, or_, select

from app.access_seal import AccessSealer, ChangeNotSealed
from app.api.decision_text import sentences, zone_names
from app.api.deps import AdminUser, CurrentUser, OperatorUser, RuntimeDep, SessionDep, get_current_user
from app.api.instants import Instant, as_utc, parse_instant
from app.core.db import SchemaOutOfDate
from app.models import Decision, ModeChange
from app.services.greenhouses import DEFAULT_DAILY_WATER_CAP_L, GreenhouseExists, add_greenhouse
from wire.fields import ACTOR_MAX_LEN, DAILY_WATER_CAP_MAX_L, Name, Reason

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/greenhouses", tags=["greenhouses"], dependencies=[Depends(get_current_user)])

Actor = Annotated[str, Field(min_length=1, max_length=ACTOR_MAX_LEN, pattern=r"^[A-Za-z0-9_.:@-]+$")]


class _Strict(BaseModel):
    """No coercion: ``true`` is no 1.0 and ``"40"`` no 40 (an operator's action is exactly what was sent)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


# Accepted so older clients keep working, never used: the logged-in user is the actor.
IgnoredActor = Annotated[Actor | None, Field(description="ignored: the logged-in operator is recorded "
                                                         "as the actor",
                                             json_schema_extra={"deprecated": True})]


class ModeRequest(_Strict):
    mode: Literal["auto", "manual"]
    reason: Reason
    manual_action: list[Annotated[float, Field(ge=0, le=100)]] | None = Field(None, description=(
        "with mode 'manual': one value per zone's valve (open from 0.5), then pump % and light %"))
    actor: IgnoredActor = None


class EstopRequest(_Strict):
    reason: Reason
    actor: IgnoredActor = None


class EstopResetRequest(_Strict):
    reason: Reason
    mode: Literal["manual", "auto"] = Field("manual", description=(
        "where the reset leaves the greenhouse: 'manual' holds everything off until an operator acts "
        "(the default), 'auto' hands control back to the policy at once"))
    actor: IgnoredActor = None


class GreenhouseCreate(_Strict):
    id: Annotated[str, Field(min_length=1, max_length=63)]
    zones: Annotated[int, Field(ge=1, le=64)] = 6
    soil: Literal["sand", "loam", "clay"] = "loam"
    name: Name | None = None
    daily_water_cap_l: Annotated[float, Field(
        gt=0, le=DAILY_WATER_CAP_MAX_L,
        description="each zone's irrigation per day, litres (a safety limit: at most "
                    f"{DAILY_WATER_CAP_MAX_L:,.0f})",
    )] = DEFAULT_DAILY_WATER_CAP_L


class GreenhousePublic(BaseModel):
    id: str
    name: str
    zones: int
    soil: str
    controlled: bool


class CommandValues(BaseModel):
    valves: list[int]
    pump_pct: float
    light_pct: float


class LastDecision(BaseModel):
    seq: int
    ts: Instant
    actor: str
    mode: str
    clipped: CommandValues
    confidence: float
    alarms: list[str]
    estimate: dict[str, Any] | None = Field(description="Kalman estimate: theta, std, probe_status, filled")


class GreenhouseStatus(BaseModel):
    id: str
    name: str
    zones: int
    mode: str
    estop_latched: bool
    policy_version: str
    last_decision: LastDecision | None


class DecisionRow(BaseModel):
    seq: int
    ts: Instant
    actor: str
    mode: str
    clipped: CommandValues
    rules_fired: list[dict[str, Any]]
    confidence: float
    cmd_id: str | None
    ack_status: str | None
    explanation_text: list[str] = Field(description="why, as sentences in the caller's language "
                                                    "(GET/PATCH /api/me)")
    command_text: str = Field(description="the command in words: zones by name open or closed, "
                                          "pump and lamps")
    clips_text: list[str] = Field(description="each safety clip as a sentence, in the order applied")
    alarms_text: list[str] = Field(description="each alarm the decision recorded, in words")


class ModeChangeRow(BaseModel):
    seq: int
    ts: Instant
    actor: str
    from_mode: str | None
    to_mode: str
    reason: str


class ModeEventPublic(BaseModel):
    greenhouse_id: str
    seq: int
    actor: str
    from_mode: str
    to_mode: str
    reason: str


def _known(runtime: RuntimeDep, gh: str) -> None:
    if gh not in runtime.controllers:
        raise HTTPException(status_code=404, detail=f"unknown greenhouse {gh!r}")


@router.get("")
def list_greenhouses(runtime: RuntimeDep) -> list[GreenhouseStatus]:
    """Greenhouses under control, with mode, e-stop latch and the last decision."""
    return [GreenhouseStatus.model_validate({"id": gh, "name": ctl.setup.name or gh, "zones": ctl.z,
             "mode": ctl.mode, "estop_latched": ctl.estop_latched,
             "policy_version": ctl.proposer.policy_version, "last_decision": runtime.last_decision.get(gh)})
            for gh, ctl in sorted(runtime.controllers.items())]


DECISIONS_MAX_LIMIT = 500
"""The most decisions one page holds; a longer stretch is read page by page."""
_SEQ_MAX = 2**63 - 1  # the column is a BIGINT: a larger cursor would fail in the database, not here
_BAD_CURSOR = ("'cursor' is not one this endpoint issued: pass on the one from the previous page's "
               "Link header unchanged")


def decision_cursor(ts: datetime, seq: int) -> str:
    """The position after a decision, for the next page: its (time, seq) key, opaque to clients."""
    return base64.urlsafe_b64encode(f"{as_utc(ts).isoformat()}|{seq}".encode()).decode().rstrip("=")


def read_decision_cursor(value: str) -> tuple[datetime, int]:
    """(time in UTC, seq) of a cursor from :func:`decision_cursor`, or a 422 for anything else."""
    try:
        ts_text, seq_text = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode().split("|")
        ts, seq = datetime.fromisoformat(ts_text), int(seq_text)
        if ts.tzinfo is None or not 0 <= seq <= _SEQ_MAX:
            raise ValueError(value)
        return as_utc(ts), seq
    except (ValueError, OverflowError):  # binascii.Error and UnicodeDecodeError are ValueErrors too
        raise HTTPException(status_code=422, detail=_BAD_CURSOR) from None


def _next_link(request: Request, cursor: str) -> str:
    """A ``Link`` header to the next page: this request's query with the cursor replaced. Relative, so it
    stays right behind a reverse proxy that rewrites the host."""
    query = {**dict(request.query_params), "cursor": cursor}
    return f'<{request.url.path}?{urlencode(query)}>; rel="next"'


@router.get("/{gh}/decisions", responses={200: {
    "description": "Up to `limit` decisions, newest first",
    "headers": {"Link": {"schema": {"type": "string"}, "description": (
        'the next page, `<URL>; rel="next"`, while more decisions match; absent on the last page')}}}})
def decisions(gh: str, runtime: RuntimeDep, session: SessionDep, user: CurrentUser, request: Request,
              response: Response,
              limit: Annotated[int, Query(ge=1, le=DECISIONS_MAX_LIMIT, description=(
                  f"decisions per page, at most {DECISIONS_MAX_LIMIT}"))] = 50,
              start: Annotated[str | None, Query(alias="from", description=(
                  "only decisions at or after this instant: ISO-8601 with offset "
                  "(e.g. 2026-06-01T00:00:00Z)"))]
              = None,
              end: Annotated[str | None, Query(alias="to", description=(
                  "only decisions before this instant (exclusive): ISO-8601 with offset"))] = None,
              cursor: Annotated[str | None, Query(description=(
                  "where the page starts: the cursor of the previous page's "
                  "`Link: <...>; rel=\"next\"` header, passed on unchanged"))] = None) -> list[DecisionRow]:
    """Decisions newest first, ordered by time and then ``seq``, a page at a time.

    A ``Link`` header with ``rel="next"`` names the next page while more decisions match; follow it
    until it is absent to read every decision of the period exactly once. Pages are keyed on the
    last decision's (time, seq), not on an offset, so decisions stored meanwhile never shift a page:
    newer ones are not among later pages, and none is repeated or skipped. ``from`` and ``to``
    without an offset are refused (422), as is ``to`` not after ``from``.
    """
    _known(runtime, gh)
    frm = parse_instant("from", start) if start is not None else None
    to = parse_instant("to", end) if end is not None else None
    if frm is not None and to is not None and to <= frm:
        raise HTTPException(status_code=422, detail="'to' must be after 'from'")
    query = select(Decision).where(Decision.greenhouse_id == gh)
    if frm is not None:
        query = query.where(Decision.ts >= frm)
    if to is not None:
        query = query.where(Decision.ts < to)
    if cursor is not None:
        after_ts, after_seq = read_decision_cursor(cursor)
        query = query.where(or_(Decision.ts < after_ts,
                                and_(Decision.ts == after_ts, Decision.seq < after_seq)))
    # One row past the page says whether another page follows, without a count.
    rows = list(session.scalars(query.order_by(Decision.ts.desc(), Decision.seq.desc()).limit(limit + 1)))
    page = rows[:limit]
    if len(rows) > limit:
        response.headers["Link"] = _next_link(request, decision_cursor(page[-1].ts, page[-1].seq))
    names = zone_names(runtime, gh)
    return [DecisionRow.model_validate({"seq": r.seq, "ts": r.ts, "actor": r.actor, "mode": r.mode,
                                        "clipped": r.clipped, "rules_fired": r.rules_fired,
                                        "confidence": r.confidence, "cmd_id": r.cmd_id,
                                        "ack_status": r.ack_status, **sentences(r, user.language, names)})
            for r in page]


@router.get("/{gh}/mode-changes")
def mode_changes(gh: str, runtime: RuntimeDep, session: SessionDep) -> list[ModeChangeRow]:
    _known(runtime, gh)
    rows = session.scalars(select(ModeChange).where(ModeChange.greenhouse_id == gh).order_by(ModeChange.seq))
    return [ModeChangeRow(seq=r.seq, ts=r.ts, actor=r.actor, from_mode=r.from_mode, to_mode=r.to_mode,
                          reason=r.reason) for r in rows]


def _check_manual_action(gh: str, zones: int, action: list[float] | None) -> None:
    """422 unless ``action`` has a value for each actuator of ``gh``: its length is part of the request's
    shape, which only the greenhouse knows (the controller refuses it too, but as a conflict)."""
    given = 0 if action is None else len(action)
    if given != zones + 2:
        raise HTTPException(status_code=422, detail=(
            f"manual mode needs a manual_action of {zones + 2} values for {gh} ({zones} valves, "
            f"pump %, light %), got {given}"))


def _public(event: Any) -> ModeEventPublic:
    return ModeEventPublic(greenhouse_id=event.greenhouse_id, seq=event.seq, actor=event.actor,
                           from_mode=event.from_mode, to_mode=event.to_mode, reason=event.reason)


@router.post("", status_code=201)
def register_greenhouse(body: GreenhouseCreate, runtime: RuntimeDep, user: AdminUser) -> GreenhousePublic:
    """Register a greenhouse and its zones (admin); it is controlled from the next lease round, no restart
    (``controlled``: this replica has its controller; the leases decide which replica commands it)."""
    if runtime.audit is None:  # refused before anything changes: a registration must be sealed
        raise HTTPException(status_code=503, detail="no audit trail configured: registrations must be sealed")
    seal = AccessSealer(runtime.audit.store, f"admin:{user.username}").sealing("greenhouse_register")
    try:
        gh = add_greenhouse(runtime.settings.database_url, body.id, zones=body.zones, soil=body.soil,
                            name=body.name, daily_water_cap_l=body.daily_water_cap_l, seal=seal)
    except GreenhouseExists as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from exc
    except (SchemaOutOfDate, ChangeNotSealed) as exc:
        raise HTTPException(status_code=503, detail=str(exc)) from exc
    except ValueError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from exc
    try:
        runtime.settings_watch.adopt([gh.id])  # decides from the next lease round, no restart
    except Exception:  # registered and sealed all the same: the next settings poll adopts it
        log.exception("greenhouse %s registered; its controller is left to the next settings poll", gh.id)
    return GreenhousePublic(id=gh.id, name=gh.name, zones=gh.zones, soil=body.soil,
                            controlled=gh.id in runtime.controllers)


@router.post("/{gh}/mode")
def set_mode(gh: str, body: ModeRequest, runtime: RuntimeDep, user: OperatorUser) -> ModeEventPublic:
    """Switch between auto and manual (with the manual action to hold) as the logged-in operator."""
    _known(runtime, gh)
    if body.mode == "manual":
        _check_manual_action(gh, runtime.controllers[gh].z, body.manual_action)
    try:
        return _public(runtime.set_mode(gh, body.mode, user.operator_actor, body.reason, body.manual_action))
    except ValueError as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from exc


@router.post("/{gh}/estop")
def estop(gh: str, body: EstopRequest, runtime: RuntimeDep, user: OperatorUser) -> ModeEventPublic:
    """Latch the e-stop as the logged-in operator; the safe command goes out at once.

    Only the replica holding the greenhouse's lease latches; any other answers 409, like a mode
    change, so a retrying load balancer finds the holder. The holder must be the one: it numbers
    the greenhouse's mode changes and seals them into its chain, and only its commands carry the
    fencing token the edge box obeys, so the latch is recorded once and acted on at once. (The
    box's own e-stop button needs no replica at all.)"""
    _known(runtime, gh)
    try:
        return _public(runtime.estop(gh, user.operator_actor, body.reason))
    except ValueError as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from exc


@router.post("/{gh}/estop/reset")
def reset_estop(gh: str, body: EstopResetRequest, runtime: RuntimeDep, user: OperatorUser) -> ModeEventPublic:
    """Release a latched e-stop as the logged-in operator: into manual with everything off unless
    the body asks for ``auto``."""
    _known(runtime, gh)
    try:
        return _public(runtime.reset_estop(gh, user.operator_actor, body.reason, body.mode))
    except ValueError as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from exc
