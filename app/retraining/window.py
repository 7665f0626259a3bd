"""Stage 1: the recent window of each greenhouse, from the decision log.

Per zone, the logged moisture (mean of the zone's probes), the irrigation and the crop demand of
each step, as :class:`twin.calibration.SoilLog` for the calibration; per step the service's
moisture estimate, crop age and site-local time of year, where the fine-tuning's episodes start;
the operator overrides of the window as demonstrations for the fine-tuning (``greentwin demos
export``'s format).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

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
    theta_est: np.ndarray | None = None
    """(T, Z) the service's moisture estimate (the Kalman filter's), NaN where not logged."""
    hour_of_year: np.ndarray | None = None
    """(T,) site-local hours since 1 January 00:00 of each step."""
    crop_day: np.ndarray | None = None
    """(T,) the crop twin's age of the crop [days since planting], NaN where not logged."""

    @property
    def steps(self) -> int:
        return int(self.etc_mm.shape[0])

    def soil_log(self, zone: int) -> SoilLog:
        return SoilLog(self.moisture_vwc[:, zone], self.irrigation_mm[:, zone], self.etc_mm, self.dt_s)

    def logged_moisture(self) -> np.ndarray:
        """(T, Z) the estimate where logged, else the probes' mean: the logged state's moisture."""
        if self.theta_est is None:
            return self.moisture_vwc
        return np.where(np.isfinite(self.theta_est), self.theta_est, self.moisture_vwc)

    def save(self, path: Path) -> None:
        extra = {k: v for k, v in (("theta_est", self.theta_est), ("hour_of_year", self.hour_of_year),
                                   ("crop_day", self.crop_day)) if v is not None}
        np.savez(path, moisture_vwc=self.moisture_vwc, irrigation_mm=self.irrigation_mm, etc_mm=self.etc_mm,
                 meta=json.dumps({"greenhouse_id": self.greenhouse_id, "soils": self.soils, "dt_s": self.dt_s,
                                  "skipped": self.skipped}), **extra)

    @classmethod
    def load(cls, path: Path) -> GreenhouseWindow:
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
            extra = {k: z[k] for k in ("theta_est", "hour_of_year", "crop_day") if k in z.files}
            return cls(meta["greenhouse_id"], tuple(meta["soils"]), z["moisture_vwc"], z["irrigation_mm"],
                       z["etc_mm"], float(meta["dt_s"]), int(meta["skipped"]), **extra)


def _probe_mean(zone: list[Any]) -> float:
    values = [float(v) for v in zone if v is not None]
    return sum(values) / len(values) if values else math.nan


def _number(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out if math.isfinite(out) else math.nan


def hour_of_year(when: datetime, site: ZoneInfo) -> float:
    """Site-local hours since 1 January 00:00 (the twin's clock is local)."""
    if when.tzinfo is None:  # SQLite hands back naive UTC
        when = when.replace(tzinfo=UTC)
    local = when.astimezone(site)
    start = local.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    return (local.replace(tzinfo=None) - start.replace(tzinfo=None)).total_seconds() / 3600.0


def read_window(sessions: sessionmaker[Session], since: datetime, until: datetime,
                site_timezone: str = "UTC") -> list[GreenhouseWindow]:
    """Every greenhouse with at least :data:`MIN_STEPS` usable steps in ``[since, until)``."""
    site = ZoneInfo(site_timezone)
    out: list[GreenhouseWindow] = []
    with sessions() as s:
        soils: dict[str, list[str]] = {}
        for z in s.scalars(select(Zone).order_by(Zone.greenhouse_id, Zone.index)):
            soils.setdefault(z.greenhouse_id, []).append(z.soil_type)
        for gh, zone_soils in soils.items():
            rows = s.execute(select(Decision.ts, Decision.telemetry, Decision.estimate)
                             .where(Decision.greenhouse_id == gh, Decision.ts >= since, Decision.ts < until)
                             .order_by(Decision.ts, Decision.seq)).all()
            moist, irr, etc, ts, est_theta, crop_days, skipped = [], [], [], [], [], [], 0
            for when, tel, est in rows:
                est = est or {}
                if "etc_mm" not in est or len(est.get("irrigation_mm") or []) != len(zone_soils):
                    skipped += 1
                    continue
                moist.append([_probe_mean(zone) for zone in (tel.get("soil_vwc") or [])][:len(zone_soils)])
                irr.append([max(0.0, float(v)) for v in est["irrigation_mm"]])
                etc.append(max(0.0, float(est["etc_mm"])))
                ts.append(when)
                theta = est.get("theta") if isinstance(est.get("theta"), list) else []
                est_theta.append([_number(v) for v in theta][:len(zone_soils)]
                                 + [math.nan] * (len(zone_soils) - len(theta)))
                crop_days.append(_number((est.get("crop_twin") or {}).get("crop_day")))
            if len(etc) < MIN_STEPS or any(len(m) != len(zone_soils) for m in moist):
                continue
            gaps = np.diff([t.timestamp() for t in ts])
            dt_s = float(np.median(gaps)) if gaps.size else 600.0
            out.append(GreenhouseWindow(gh, tuple(zone_soils), np.asarray(moist, dtype=np.float64),
                                        np.asarray(irr, dtype=np.float64), np.asarray(etc, dtype=np.float64),
                                        max(dt_s, 1.0), skipped,
                                        theta_est=np.asarray(est_theta, dtype=np.float64),
                                        hour_of_year=np.asarray([hour_of_year(t, site) for t in ts]),
                                        crop_day=np.asarray(crop_days, dtype=np.float64)))
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
