"""Stage 1: the recent window of each greenhouse, from the decision log.

Per zone, the logged moisture (mean of the zone's probes), the irrigation and the crop demand of
each step, as :class:`twin.calibration.SoilLog` for the calibration; the operator overrides of the
window as demonstrations for the fine-tuning (``greentwin demos export``'s format).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.models import Decision, Zone
from twin.calibration import SoilLog

MIN_STEPS = 12
"""Fewer logged steps than this in a greenhouse: too little to calibrate it."""


@dataclass(frozen=True)
class GreenhouseWindow:
    """One greenhouse's steps in the window (zone by zone)."""

    greenhouse_id: str
    soils: tuple[str, ...]
    moisture_vwc: np.ndarray
    """(T, Z) logged moisture, NaN where no probe read."""
    irrigation_mm: np.ndarray
    """(T, Z)."""
    etc_mm: np.ndarray
    """(T,)."""
    dt_s: float
    skipped: int
    """Decisions without the water balance (logged before it was recorded)."""

    @property
    def steps(self) -> int:
        return int(self.etc_mm.shape[0])

    def soil_log(self, zone: int) -> SoilLog:
        return SoilLog(self.moisture_vwc[:, zone], self.irrigation_mm[:, zone], self.etc_mm, self.dt_s)

    def save(self, path: Path) -> None:
        np.savez(path, moisture_vwc=self.moisture_vwc, irrigation_mm=self.irrigation_mm, etc_mm=self.etc_mm,
                 meta=json.dumps({"greenhouse_id": self.greenhouse_id, "soils": self.soils, "dt_s": self.dt_s,
                                  "skipped": self.skipped}))

    @classmethod
    def load(cls, path: Path) -> GreenhouseWindow:
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
            return cls(meta["greenhouse_id"], tuple(meta["soils"]), z["moisture_vwc"], z["irrigation_mm"],
                       z["etc_mm"], float(meta["dt_s"]), int(meta["skipped"]))


def _probe_mean(zone: list[Any]) -> float:
    values = [float(v) for v in zone if v is not None]
    return sum(values) / len(values) if values else math.nan


def read_window(sessions: sessionmaker[Session], since: datetime, until: datetime) -> list[GreenhouseWindow]:
    """Every greenhouse with at least :data:`MIN_STEPS` usable steps in ``[since, until)``."""
    out: list[GreenhouseWindow] = []
    with sessions() as s:
        soils: dict[str, list[str]] = {}
        for z in s.scalars(select(Zone).order_by(Zone.greenhouse_id, Zone.index)):
            soils.setdefault(z.greenhouse_id, []).append(z.soil_type)
        for gh, zone_soils in soils.items():
            rows = s.execute(select(Decision.ts, Decision.telemetry, Decision.estimate)
                             .where(Decision.greenhouse_id == gh, Decision.ts >= since, Decision.ts < until)
                             .order_by(Decision.ts, Decision.seq)).all()
            moist, irr, etc, ts, skipped = [], [], [], [], 0
            for when, tel, est in rows:
                est = est or {}
                if "etc_mm" not in est or len(est.get("irrigation_mm") or []) != len(zone_soils):
                    skipped += 1
                    continue
                moist.append([_probe_mean(zone) for zone in (tel.get("soil_vwc") or [])][:len(zone_soils)])
                irr.append([max(0.0, float(v)) for v in est["irrigation_mm"]])
                etc.append(max(0.0, float(est["etc_mm"])))
                ts.append(when)
            if len(etc) < MIN_STEPS or any(len(m) != len(zone_soils) for m in moist):
                continue
            gaps = np.diff([t.timestamp() for t in ts])
            dt_s = float(np.median(gaps)) if gaps.size else 600.0
            out.append(GreenhouseWindow(gh, tuple(zone_soils), np.asarray(moist, dtype=np.float64),
                                        np.asarray(irr, dtype=np.float64), np.asarray(etc, dtype=np.float64),
                                        max(dt_s, 1.0), skipped))
    return out


def newest_decision(sessions: sessionmaker[Session]) -> datetime | None:
    """The newest decision's time, just past it (the window's end when the plants' clock runs ahead)."""
    with sessions() as s:
        newest = s.scalar(select(func.max(Decision.ts)))
    if newest is None:
        return None
    if newest.tzinfo is None:  # SQLite hands back naive UTC
        newest = newest.replace(tzinfo=UTC)
    return newest + timedelta(microseconds=1)
