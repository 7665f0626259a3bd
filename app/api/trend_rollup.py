"""The dashboard's trends rolled up into five-minute cells as decisions are stored.

Averaging a week of one-minute decisions straight from the decision table means decoding ~10,000
JSON documents per request (0.4-0.8 s on SQLite and PostgreSQL); the page needs a few hundred
points. So the service keeps, per greenhouse and five-minute cell, the sum and the count of each
trend channel (``app.models.TrendCell``): a week is 2,016 small rows, and any bucket that is a
whole number of cells is the exact mean of the decisions in it (sum of sums / sum of counts).

The cells follow the decision table by id (``TrendProgress``): each round takes the decisions
stored since the last, and recomputes from the decision table every cell they fall in, so a late
row (a spool written back after an outage) lands in its cell and a round repeated after a crash
changes nothing. The database does the JSON work in both dialects; Python only moves sums.

Each cell also sums the all-in price of its hour that each decision recorded (``estimate.price_eur_mwh``,
the price the decision saw: a day-ahead feed's when one is configured). Read back, it is one more
channel after the scalars (:data:`PRICE`), so a bucket's mean price comes out as the others do; a
cell that recorded none (rolled up before the price was kept) has a count of 0.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import Integer, Text, cast, delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from app.models import Decision, Greenhouse, TrendCell, TrendProgress

log = logging.getLogger(__name__)

CELL_S = 300
ORIGIN = datetime(2000, 1, 1, tzinfo=UTC)
SCALARS = ("flow_l_min", "pump_pct", "light_pct", "air_temp_c", "air_rh_pct", "par_umol_m2_s", "co2_ppm")
PRICE = len(SCALARS)
NO_TELEMETRY_ACTORS = ("watchdog", "reconnect")
"""Decisions made on no telemetry (control.finish): nothing for a trend to show."""
"""Index of the recorded price among the channels after the zones, as :func:`read_cells` returns them."""
ROUND_ROWS = 5000
PROGRESS_ID = 1


def utc(ts: datetime) -> datetime:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def seconds_since(session: Session, column: Any, start: datetime) -> Any:
    """SQL for seconds from ``start`` to ``column`` (a UTC timestamp column in both databases)."""
    if session.get_bind().dialect.name == "postgresql":
        return func.extract("epoch", column) - start.timestamp()
    naive = start.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")
    return (func.julianday(column) - func.julianday(naive)) * 86400.0


def bucket_of(session: Session, start: datetime, bucket_s: float) -> Any:
    """SQL for the index of a decision's bucket of ``bucket_s`` seconds counted from ``start``."""
    # 1 ms in hand: julianday's doubles put a row stamped exactly on a boundary a hair before it.
    # PostgreSQL's cast to integer rounds (SQLite's truncates, and may lack floor()): floor it first.
    ratio = (seconds_since(session, Decision.ts, start) + 0.001) / bucket_s
    return cast(func.floor(ratio) if session.get_bind().dialect.name == "postgresql" else ratio, Integer)


def channels(zones: int) -> list[Any]:
    """The trend channels as SQL: moisture estimate per zone, then the scalar readings."""
    return [*(Decision.estimate[("theta", z)].as_float() for z in range(zones)),
            *(Decision.telemetry[name].as_float() for name in SCALARS)]


def price_channel() -> Any:
    """The all-in price [EUR/MWh] of its hour a decision recorded, as SQL (null: none recorded)."""
    return Decision.estimate["price_eur_mwh"].as_float()


def width(zones: int) -> int:
    """Channels of a cell as read back: moisture per zone, the scalars, the recorded price."""
    return zones + len(SCALARS) + 1


def trend_filter(gh: str, start: datetime, end: datetime) -> tuple[Any, ...]:
    """The decisions a trend shows: this greenhouse, [start, end), the ones made on no telemetry (the
    watchdog's holds, the repeats after a reconnect) left out."""
    return (Decision.greenhouse_id == gh, Decision.ts >= start.astimezone(UTC),
            Decision.ts < end.astimezone(UTC), Decision.actor.notin_(NO_TELEMETRY_ACTORS))


def cell_index(ts: datetime) -> int:
    return int((utc(ts) - ORIGIN).total_seconds() // CELL_S)


def cell_start(index: int) -> datetime:
    return ORIGIN + timedelta(seconds=index * CELL_S)


def runs(indices: set[int]) -> list[tuple[int, int]]:
    """Contiguous [first, last] runs of cell indices (a late row far back is its own run)."""
    out: list[tuple[int, int]] = []
    for i in sorted(indices):
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def recompute(session: Session, gh: str, zones: int, first: int, last: int) -> int:
    """Rebuild cells ``first..last`` of a greenhouse from its decisions; returns the cells written."""
    start, end = cell_start(first), cell_start(last + 1)
    cols = channels(zones)
    price = price_channel()
    bucket = bucket_of(session, start, CELL_S)
    rows = session.execute(
        select(bucket, func.count(), *(func.sum(c) for c in cols), *(func.count(c) for c in cols),
               func.sum(price), func.count(price))
        .where(*trend_filter(gh, start, end)).group_by(bucket)).all()
    session.execute(delete(TrendCell).where(TrendCell.greenhouse_id == gh, TrendCell.cell >= first,
                                            TrendCell.cell <= last))
    n = len(cols)
    cells = [TrendCell(greenhouse_id=gh, cell=first + int(r[0]), decisions=int(r[1]),
                       sums=[float(v) if v is not None else 0.0 for v in r[2:2 + n]],
                       counts=[int(v) for v in r[2 + n:2 + 2 * n]], price_sum=float(r[-2] or 0.0),
                       price_count=int(r[-1])) for r in rows]
    session.add_all(cells)
    return len(cells)


def read_cells(session: Session, gh: str, first: int, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                         np.ndarray]:
    """(cells, decisions, sums (C, K), counts (C, K)) of cells ``first`` to ``end`` (exclusive); the
    last of the K channels is the recorded price (:func:`width`).

    The documents come back as text and are decoded in one call: decoding 4,000 small arrays one by
    one cost more than the rest of a week's request."""
    rows = session.execute(
        select(TrendCell.cell, TrendCell.decisions, cast(TrendCell.sums, Text), cast(TrendCell.counts, Text),
               TrendCell.price_sum, TrendCell.price_count)
        .where(TrendCell.greenhouse_id == gh, TrendCell.cell >= first, TrendCell.cell < end)
        .order_by(TrendCell.cell)).all()
    if rows:
        docs = json.loads(f"[[{','.join(r[2] for r in rows)}],[{','.join(r[3] for r in rows)}]]")
        width = len(docs[0][-1])
        keep = [i for i, d in enumerate(docs[0]) if len(d) == width]
        if len(keep) < len(rows):  # the greenhouse's zone count changed in the period: the current shape
            rows, docs = [rows[i] for i in keep], [[docs[0][i] for i in keep], [docs[1][i] for i in keep]]
        price = np.array([(r[4], r[5]) for r in rows], dtype=np.float64)
        return (np.array([r[0] for r in rows], dtype=np.int64),
                np.array([r[1] for r in rows], dtype=np.int64),
                np.column_stack([np.array(docs[0], dtype=np.float64), price[:, 0]]),
                np.column_stack([np.array(docs[1], dtype=np.float64), price[:, 1]]))
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros((0, 0)), np.zeros((0, 0))


class TrendRollup:
    """Keeps the trend cells up with the decision table: in rounds, one at a time per process."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self._lock = threading.Lock()
        self._zones: dict[str, int] = {}
        self.current_at: float | None = None
        """When (monotonic) the last round began that left no decision behind."""

    def catch_up(self, max_rows: int = ROUND_ROWS, *, wait: bool = True) -> bool | None:
        """One round over at most ``max_rows`` new decisions; True when none are left behind.

        ``wait=False``: None at once when a round is running already (a reader then takes the cells
        as they stand, at most that round behind, rather than queue behind its writes)."""
        if not self._lock.acquire(blocking=wait):
            return None
        try:
            started = time.monotonic()
            done = self._round(max_rows)
            if done:
                self.current_at = started
            return done
        finally:
            self._lock.release()

    def current_within(self, seconds: float) -> bool:
        """The cells held every stored decision at some moment in the last ``seconds``."""
        return self.current_at is not None and time.monotonic() - self.current_at <= seconds

    def _round(self, max_rows: int) -> bool:
        with self.sessions() as session:
            progress = session.get(TrendProgress, PROGRESS_ID)
            done = progress.last_decision_id if progress is not None else 0
            new = session.execute(select(Decision.id, Decision.greenhouse_id, Decision.ts)
                                  .where(Decision.id > done).order_by(Decision.id).limit(max_rows)).all()
            if not new:
                return True
            dirty: dict[str, set[int]] = defaultdict(set)
            for _, gh, ts in new:
                dirty[gh].add(cell_index(ts))
            for gh, indices in dirty.items():
                zones = self._zone_count(session, gh)
                for first, last in runs(indices):
                    recompute(session, gh, zones, first, last)
            if progress is None:
                session.add(TrendProgress(id=PROGRESS_ID, last_decision_id=int(new[-1][0])))
            else:
                progress.last_decision_id = int(new[-1][0])
            session.commit()
            return len(new) < max_rows

    def _zone_count(self, session: Session, gh: str) -> int:
        if gh not in self._zones:
            self._zones[gh] = int(session.scalar(select(Greenhouse.zones).where(Greenhouse.id == gh)) or 0)
        return self._zones[gh]


class RollupThread:
    """Runs rounds every ``period_s`` in the background (a database error is logged, the next round
    retries)."""

    def __init__(self, rollup: TrendRollup, period_s: float = 5.0,
                 when_current: Callable[[], None] | None = None) -> None:
        self.rollup = rollup
        self.period_s = period_s
        self.when_current = when_current
        """Called once, the first time the cells hold every stored decision (to warm readers' caches)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trend-rollup", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                while not self.rollup.catch_up() and not self._stop.is_set():
                    pass
                if self.when_current is not None and not self._stop.is_set():
                    warm, self.when_current = self.when_current, None
                    warm()
            except Exception as exc:  # locked SQLite, a restarted PostgreSQL: the next round catches up
                log.warning("trend roll-up round failed (%s: %s)", exc.__class__.__name__, exc)
            self._stop.wait(self.period_s)
