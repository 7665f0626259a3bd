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
from sqlalchemy import Integer, case, cast, func, select
from sqlalchemy.orm import Session

from app.api.schemas import HistoryResponse
from app.models import Decision

SCALARS = ("flow_l_min", "pump_pct", "light_pct", "air_temp_c", "air_rh_pct", "par_umol_m2_s", "co2_ppm")
MAX_POINTS = 2000


def _seconds_since(session: Session, start: datetime) -> Any:
    """SQL for seconds from ``start`` to a decision's ts (stored as UTC in both databases)."""
    if session.get_bind().dialect.name == "postgresql":
        return func.extract("epoch", Decision.ts) - start.timestamp()
    naive = start.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")
    return (func.julianday(Decision.ts) - func.julianday(naive)) * 86400.0


def _bucket_rows(session: Session, gh: str, zones: int, start: datetime, end: datetime,
                 bucket_s: float) -> Sequence[Any]:
    """(bucket, rows, mean theta per zone..., mean scalars...) per non-empty bucket, averaged by the
    database (AVG leaves out nulls: a missing reading is not a zero). Decoding whole telemetry and
    estimate documents in Python instead cost ~1.6 s for a week of minutes (10,080 rows)."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)  # SQLite compares the stored UTC text
    # 1 ms in hand: julianday's doubles put a row stamped exactly on a boundary a hair before it.
    # PostgreSQL's cast to integer rounds (SQLite's truncates, and may lack floor()): floor it first.
    ratio = (_seconds_since(session, start) + 0.001) / bucket_s
    bucket = cast(func.floor(ratio) if session.get_bind().dialect.name == "postgresql" else ratio, Integer)
    columns = [*(Decision.estimate[("theta", z)].as_float() for z in range(zones)),
               *(Decision.telemetry[name].as_float() for name in SCALARS)]
    return session.execute(
        select(bucket.label("bucket"), func.count(), *(func.avg(c) for c in columns))
        .where(Decision.greenhouse_id == gh, Decision.ts >= start, Decision.ts < end, Decision.actor != "watchdog")
        .group_by(bucket).order_by(bucket)).all()


def _listed(a: np.ndarray) -> list[float | None]:
    return [None if not math.isfinite(v) else round(v, 5) for v in a.tolist()]


def history(session: Session, gh: str, zones: int, bands: list[tuple[float, float]], start: datetime,
            end: datetime, points: int) -> HistoryResponse:
    """Bucket means of moisture per zone and the greenhouse's scalar readings over [start, end)."""
    if end <= start:
        raise ValueError("'to' must be after 'from'")
    points = max(1, min(points, MAX_POINTS))
    bucket_s = (end - start).total_seconds() / points
    rows = _bucket_rows(session, gh, zones, start, end, bucket_s)
    index = [min(max(int(r[0]), 0), points - 1) for r in rows]
    means = np.array([r[2:] for r in rows], dtype=np.float64).reshape(len(rows), zones + len(SCALARS))
    centres = [start + timedelta(seconds=(i + 0.5) * bucket_s) for i in index]
    return HistoryResponse(greenhouse_id=gh, start=start, end=end, bucket_s=bucket_s,
                           samples=int(sum(r[1] for r in rows)), ts=centres,
                           moisture_vwc=[_listed(means[:, z]) for z in range(zones)],
                           band_low_vwc=[b[0] for b in bands], band_high_vwc=[b[1] for b in bands],
                           **{name: _listed(means[:, zones + j]) for j, name in enumerate(SCALARS)})


def time_in_band_pct(session: Session, gh: str, bands: list[tuple[float, float]], start: datetime,
                     end: datetime) -> float | None:
    """Share of (decision, zone) samples whose moisture estimate lay inside the zone's band; None: no data."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    inside, total = [], []
    for z, (lo, hi) in enumerate(bands):
        theta = Decision.estimate[("theta", z)].as_float()
        inside.append(func.coalesce(func.sum(case((theta.between(lo, hi), 1), else_=0)), 0))
        total.append(func.count(theta))
    row = session.execute(select(*inside, *total).where(
        Decision.greenhouse_id == gh, Decision.ts >= start, Decision.ts < end, Decision.actor != "watchdog")).one()
    n_in, n = sum(int(v) for v in row[:len(bands)]), sum(int(v) for v in row[len(bands):])
    return None if n == 0 else 100.0 * n_in / n
