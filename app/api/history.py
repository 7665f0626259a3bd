"""Trends from the stored decisions, averaged server-side into time buckets.

A week of one-minute decisions is ~10,000 rows per greenhouse; a chart a few hundred pixels wide
needs a few hundred points, so the service averages each bucket (NaN-aware) and sends only those.
Only the columns a trend needs are read (no member actions, no explanations).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.api.schemas import HistoryResponse
from app.models import Decision

SCALARS = ("flow_l_min", "pump_pct", "light_pct", "air_temp_c", "air_rh_pct", "par_umol_m2_s", "co2_ppm")
MAX_POINTS = 2000


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else math.nan


def _rows(session: Session, gh: str, start: datetime, end: datetime) -> Sequence[Any]:
    start, end = start.astimezone(UTC), end.astimezone(UTC)  # SQLite compares the stored UTC text
    return session.execute(
        select(Decision.ts, Decision.telemetry, Decision.estimate)
        .where(Decision.greenhouse_id == gh, Decision.ts >= start, Decision.ts < end, Decision.actor != "watchdog")
        .order_by(Decision.ts)).all()


def _bucket_means(idx: np.ndarray, values: np.ndarray, buckets: int) -> np.ndarray:
    """Mean of the finite values per bucket; NaN where a bucket has none."""
    ok = np.isfinite(values)
    sums = np.bincount(idx[ok], weights=values[ok], minlength=buckets)
    counts = np.bincount(idx[ok], minlength=buckets)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _listed(a: np.ndarray) -> list[float | None]:
    return [None if not math.isfinite(v) else round(v, 5) for v in a.tolist()]


def history(session: Session, gh: str, zones: int, bands: list[tuple[float, float]], start: datetime,
            end: datetime, points: int) -> HistoryResponse:
    """Bucket means of moisture per zone and the greenhouse's scalar readings over [start, end)."""
    if end <= start:
        raise ValueError("'to' must be after 'from'")
    points = max(1, min(points, MAX_POINTS))
    rows = _rows(session, gh, start, end)
    span_s = (end - start).total_seconds()
    bucket_s = span_s / points
    t = np.array([(r.ts if r.ts.tzinfo else r.ts.replace(tzinfo=UTC)).timestamp() for r in rows])
    idx = np.clip(((t - start.timestamp()) // bucket_s).astype(np.int64), 0, points - 1) if len(rows) else \
        np.zeros(0, dtype=np.int64)
    moisture = np.full((len(rows), zones), np.nan)
    scalars = np.full((len(rows), len(SCALARS)), np.nan)
    for k, r in enumerate(rows):
        theta = (r.estimate or {}).get("theta") or []
        moisture[k, :min(zones, len(theta))] = [_num(v) for v in theta[:zones]]
        tel = r.telemetry or {}
        scalars[k] = [_num(tel.get(name)) for name in SCALARS]
    present = np.bincount(idx, minlength=points) > 0
    keep = np.flatnonzero(present)
    centres = [start + timedelta(seconds=(i + 0.5) * bucket_s) for i in keep.tolist()]
    zone_means = [_listed(_bucket_means(idx, moisture[:, z], points)[keep]) for z in range(zones)]
    scalar_means = {name: _listed(_bucket_means(idx, scalars[:, j], points)[keep]) for j, name in enumerate(SCALARS)}
    return HistoryResponse(greenhouse_id=gh, start=start, end=end, bucket_s=bucket_s, samples=len(rows), ts=centres,
                           moisture_vwc=zone_means, band_low_vwc=[b[0] for b in bands],
                           band_high_vwc=[b[1] for b in bands], **scalar_means)


def time_in_band_pct(session: Session, gh: str, bands: list[tuple[float, float]], start: datetime,
                     end: datetime) -> float | None:
    """Share of (decision, zone) samples whose moisture estimate lay inside the zone's band; None: no data."""
    lo = np.array([b[0] for b in bands])
    hi = np.array([b[1] for b in bands])
    inside = total = 0
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    for r in session.execute(select(Decision.estimate).where(
            Decision.greenhouse_id == gh, Decision.ts >= start, Decision.ts < end,
            Decision.actor != "watchdog")).scalars():
        theta = np.array([_num(v) for v in ((r or {}).get("theta") or [])[:len(bands)]])
        if theta.size != len(bands):
            continue
        ok = np.isfinite(theta)
        inside += int(((theta >= lo) & (theta <= hi) & ok).sum())
        total += int(ok.sum())
    return None if total == 0 else 100.0 * inside / total
