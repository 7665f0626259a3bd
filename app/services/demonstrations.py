"""Operator overrides from the decision log as training demonstrations: what ``greentwin demos export``
writes and what the retraining pipeline feeds its fine-tuning.

A decision taken in manual mode carries the observation the operator acted on (see
``ControlDecision.record``); its safe, clipped action is what the operator demonstrated. The
file is :mod:`policy.bc`'s demonstration format, so ``greentwin train --demos FILE`` takes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
from sqlalchemy import select

from twin.config import DEFAULT_ZONES


@dataclass(frozen=True)
class ExportResult:
    count: int
    skipped: int
    """Override decisions without a stored observation (recorded before it was kept) or of another layout."""


def export_demos(url: str, out: Path, zones: int = DEFAULT_ZONES, greenhouse: str | None = None,
                 since: datetime | None = None, until: datetime | None = None) -> ExportResult:
    """Write the operator overrides in range to ``out``; ValueError if there are none."""
    from app.core.db import migrated_session
    from app.models import Decision
    from policy.bc import make_demo_batch, save_demos
    from twin.spec import ObservationSpec

    spec = ObservationSpec(zones)
    stmt = select(Decision.ts, Decision.actor, Decision.estimate, Decision.clipped).where(
        Decision.mode == "manual", Decision.actor.like("operator:%"))
    if greenhouse is not None:
        stmt = stmt.where(Decision.greenhouse_id == greenhouse)
    if since is not None:
        stmt = stmt.where(Decision.ts >= since)
    if until is not None:
        stmt = stmt.where(Decision.ts < until)
    with migrated_session(url) as session:
        rows = session.execute(stmt.order_by(Decision.ts, Decision.id)).all()
    obs, act, who, when, skipped = [], [], [], [], 0
    for ts, actor, estimate, clipped in rows:
        o = (estimate or {}).get("observation")
        valves = clipped.get("valves", [])
        if o is None or len(o) != spec.dim or len(valves) != zones:
            skipped += 1
            continue
        obs.append(o)
        act.append([*valves, clipped["pump_pct"], clipped["light_pct"]])
        who.append(actor.removeprefix("operator:"))
        when.append(ts.isoformat())
    if not obs:
        raise ValueError(f"no operator overrides with {zones} zones in range ({skipped} skipped)")
    batch = make_demo_batch(np.asarray(obs), np.asarray(act), who, when)
    save_demos(out, batch, spec)
    return ExportResult(batch.size, skipped)
