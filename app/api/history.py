"""Trends from the stored decisions, averaged server-side into time buckets.

A week of one-minute decisions is ~10,000 rows per greenhouse; a chart a few hundred pixels wide
needs a few hundred points, so the service averages each bucket (NaN-aware) and sends only those.
When the buckets are whole five-minute cells on the cells' grid (the page's 24 h and 7 day views),
the means come from the rolled-up cells (``app.api.trend_rollup``); otherwise the database averages
the decisions themselves, reading only the columns a trend needs. The price each bucket's decisions
recorded comes along (null where none did); :meth:`app.api.dashboard.Dashboard.history` fills those
from the tariff.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from app.api import trend_rollup as roll
from app.api.cell_cache import CellReader
from app.api.schemas import HistoryResponse
from app.models import Decision
from audit.labels import zone_label

SCALARS = roll.SCALARS
MAX_POINTS = 2000


def _bucket_rows(session: Session, gh: str, zones: int, start: datetime, end: datetime,
                 bucket_s: float) -> Sequence[Any]:
    """(bucket, rows, mean theta per zone..., mean scalars..., mean recorded price) per non-empty bucket,
    averaged by the database (AVG leaves out nulls: a missing reading is not a zero). Decoding whole
    telemetry and estimate documents in Python instead cost ~1.6 s for a week of minutes (10,080 rows)."""
    bucket = roll.bucket_of(session, start.astimezone(UTC), bucket_s)  # SQLite compares the stored UTC text
    return session.execute(
        select(bucket.label("bucket"), func.count(),
               *(func.avg(c) for c in [*roll.channels(zones), roll.price_channel()]))
        .where(*roll.trend_filter(gh, start, end)).group_by(bucket).order_by(bucket)).all()


def _listed(a: np.ndarray) -> list[float | None]:
    out = np.round(a, 5).astype(object)
    out[~np.isfinite(a)] = None
    return out.tolist()  # type: ignore[no-any-return]


def on_cell_grid(start: datetime, bucket_s: float) -> bool:
    """True when every bucket is a whole number of trend cells starting on a cell boundary."""
    offset = (start.astimezone(UTC) - roll.ORIGIN).total_seconds()
    return bucket_s % roll.CELL_S == 0 and offset % roll.CELL_S == 0


def _from_cells(session: Session, gh: str, zones: int, start: datetime, bucket_s: float,
                points: int, end: datetime, read: CellReader) -> tuple[list[int], list[int], np.ndarray]:
    """(bucket indices, decisions per bucket, means) summed from the cells: exact on the cell grid."""
    n = roll.width(zones)
    first = roll.cell_index(start)
    cells, decisions, sums, counts = read(session, gh, first,
                                          roll.cell_index(end - timedelta(microseconds=1)) + 1)
    if not len(cells) or sums.shape[1] != n:  # none, or cells of an earlier zone count of this greenhouse
        return [], [], np.zeros((0, n))
    b = np.minimum((cells - first) * roll.CELL_S // int(bucket_s), points - 1)
    per_bucket, total, seen = np.zeros(points, dtype=np.int64), np.zeros((points, n)), np.zeros((points, n))
    np.add.at(per_bucket, b, decisions)
    np.add.at(total, b, sums)
    np.add.at(seen, b, counts)
    filled = np.flatnonzero(per_bucket)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = total[filled] / seen[filled]
    return filled.tolist(), per_bucket[filled].tolist(), means


def history(session: Session, gh: str, zones: int, bands: list[tuple[float, float]], start: datetime,
            end: datetime, points: int, *, cells: bool = False,
            read: CellReader = roll.read_cells) -> HistoryResponse:
    """Bucket means of moisture per zone and the greenhouse's scalar readings over [start, end).

    ``cells``: the trend cells are up to date, so buckets on their grid may be read from them (with
    ``read``: the table, or the dashboard's :class:`app.api.cell_cache.CellCache` in front of it)."""
    if end <= start:
        raise ValueError("'to' must be after 'from'")
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    points = max(1, min(points, MAX_POINTS))
    bucket_s = (end - start).total_seconds() / points
    if cells and on_cell_grid(start, bucket_s):
        index, counts, means = _from_cells(session, gh, zones, start, bucket_s, points, end, read)
    else:
        rows = _bucket_rows(session, gh, zones, start, end, bucket_s)
        index = [min(max(int(r[0]), 0), points - 1) for r in rows]
        counts = [int(r[1]) for r in rows]
        means = np.array([r[2:] for r in rows], dtype=np.float64).reshape(len(rows), roll.width(zones))
    centres = [start + timedelta(seconds=(i + 0.5) * bucket_s) for i in index]
    return HistoryResponse(greenhouse_id=gh, start=start, end=end, bucket_s=bucket_s,
                           samples=int(sum(counts)), ts=centres,
                           moisture_vwc=[_listed(means[:, z]) for z in range(zones)],
                           zone_labels=[zone_label(z) for z in range(zones)],
                           band_low_vwc=[b[0] for b in bands], band_high_vwc=[b[1] for b in bands],
                           **{name: _listed(means[:, zones + j]) for j, name in enumerate(SCALARS)},
                           price_eur_mwh=_listed(means[:, zones + roll.PRICE]))


def time_in_band_pct(session: Session, gh: str, bands: list[tuple[float, float]], start: datetime,
                     end: datetime) -> float | None:
    """Share of (decision, zone) samples whose moisture estimate lay inside the zone's band; None: no data."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    inside, total = [], []
    for z, (lo, hi) in enumerate(bands):
        theta = Decision.estimate[("theta", z)].as_float()
        inside.append(func.coalesce(func.sum(case((theta.between(lo, hi), 1), else_=0)), 0))
        total.append(func.count(theta))
    row = session.execute(select(*inside, *total).where(*roll.trend_filter(gh, start, end))).one()
    n_in, n = sum(int(v) for v in row[:len(bands)]), sum(int(v) for v in row[len(bands):])
    return None if n == 0 else 100.0 * n_in / n
