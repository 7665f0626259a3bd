"""Greenhouses: status, recent decisions, modes and the e-stop."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select

from app.api.deps import RuntimeDep, SessionDep
from app.models import Decision, ModeChange

router = APIRouter(prefix="/api/greenhouses", tags=["greenhouses"])

Reason = Annotated[str, Field(min_length=3, max_length=500)]
Actor = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:@-]+$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ModeRequest(_Strict):
    mode: Literal["auto", "manual"]
    actor: Actor
    reason: Reason
    manual_action: list[Annotated[float, Field(ge=0, le=100)]] | None = None


class EstopRequest(_Strict):
    actor: Actor
    reason: Reason


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
def list_greenhouses(runtime: RuntimeDep) -> list[dict[str, Any]]:
    return [{"id": gh, "zones": ctl.z, "mode": ctl.mode, "estop_latched": ctl.estop_latched,
             "policy_version": ctl.proposer.policy_version, "last_decision": runtime.last_decision.get(gh)}
            for gh, ctl in sorted(runtime.controllers.items())]


@router.get("/{gh}/decisions")
def decisions(gh: str, runtime: RuntimeDep, session: SessionDep,
              limit: Annotated[int, Query(ge=1, le=500)] = 50) -> list[dict[str, Any]]:
    _known(runtime, gh)
    rows = session.scalars(select(Decision).where(Decision.greenhouse_id == gh).order_by(Decision.seq.desc())
                           .limit(limit))
    return [{"seq": r.seq, "ts": r.ts.isoformat(), "actor": r.actor, "mode": r.mode, "clipped": r.clipped,
             "rules_fired": r.rules_fired, "confidence": r.confidence, "cmd_id": r.cmd_id,
             "ack_status": r.ack_status} for r in rows]


@router.get("/{gh}/mode-changes")
def mode_changes(gh: str, runtime: RuntimeDep, session: SessionDep) -> list[dict[str, Any]]:
    _known(runtime, gh)
    rows = session.scalars(select(ModeChange).where(ModeChange.greenhouse_id == gh).order_by(ModeChange.seq))
    return [{"seq": r.seq, "ts": r.ts.isoformat(), "actor": r.actor, "from_mode": r.from_mode,
             "to_mode": r.to_mode, "reason": r.reason} for r in rows]


def _public(event: Any) -> ModeEventPublic:
    return ModeEventPublic(greenhouse_id=event.greenhouse_id, seq=event.seq, actor=event.actor,
                           from_mode=event.from_mode, to_mode=event.to_mode, reason=event.reason)


@router.post("/{gh}/mode")
def set_mode(gh: str, body: ModeRequest, runtime: RuntimeDep) -> ModeEventPublic:
    _known(runtime, gh)
    try:
        return _public(runtime.set_mode(gh, body.mode, body.actor, body.reason, body.manual_action))
    except ValueError as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from exc


@router.post("/{gh}/estop")
def estop(gh: str, body: EstopRequest, runtime: RuntimeDep) -> ModeEventPublic:
    _known(runtime, gh)
    return _public(runtime.estop(gh, body.actor, body.reason))


@router.post("/{gh}/estop/reset")
def reset_estop(gh: str, body: EstopRequest, runtime: RuntimeDep) -> ModeEventPublic:
    _known(runtime, gh)
    try:
        return _public(runtime.reset_estop(gh, body.actor, body.reason))
    except ValueError as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from exc
