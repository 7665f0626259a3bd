"""The recent days of trend cells in memory, kept in step with the table by the decisions since.

A week's history read a greenhouse's 2,016 cells and decoded their JSON on every request (20-60 ms,
several times that on a busy host), though the page asks for nearly the same week every minute. The
cache holds each greenhouse's last :data:`CACHE_DAYS` of cells as dense arrays (a cell without
decisions is a zero row), so a read is a slice.

It stays right whoever rolls the cells up (this process, another replica): it notes the roll-up
progress (the highest decision id taken into the cells) it reflects, and a read that finds the
progress moved on re-reads only the cells that the decisions in between fall in, a late row (a
spool written back after an outage) included; those are the cells the roll-up recomputed. The
progress is read before the cells, so a round committed in between is taken in again next time
(re-reading a cell changes nothing).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.api import trend_rollup as roll
from app.models import Decision, TrendProgress

CACHE_DAYS = 8.0
"""Days of cells kept per greenhouse: the page's week and a day of headroom (~0.5 MB per greenhouse)."""
MAX_DELTA = 20_000
"""More new decisions than this since the last read: drop every window and load afresh."""
GROW_CELLS = 288
"""A window grows by at least a day of rows at a time."""

Cells = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
CellReader = Callable[[Session, str, int, int], Cells]


@dataclass
class _Window:
    first: int
    decisions: np.ndarray
    """(n,) decisions per cell, cells ``first`` .. ``first + n - 1``."""
    sums: np.ndarray
    counts: np.ndarray

    def reserve(self, last: int) -> None:
        """Room for cells up to ``last`` (new rows are cells without decisions)."""
        need = last - self.first + 1 - len(self.decisions)
        if need > 0:
            extra = max(need, GROW_CELLS)
            width = self.sums.shape[1]
            self.decisions = np.concatenate([self.decisions, np.zeros(extra, dtype=np.int64)])
            self.sums = np.concatenate([self.sums, np.zeros((extra, width))])
            self.counts = np.concatenate([self.counts, np.zeros((extra, width))])

    def trim(self, first: int) -> None:
        """Forget the cells before ``first`` once they are a day's worth (the window moves with time)."""
        drop = first - self.first
        if drop >= GROW_CELLS:
            self.first = first
            # Copies: a view would keep the whole old block alive.
            self.decisions, self.sums, self.counts = (self.decisions[drop:].copy(), self.sums[drop:].copy(),
                                                      self.counts[drop:].copy())

    def put(self, first: int, last: int, cells: Cells) -> bool:
        """Cells ``first..last`` as read from the table; False: another channel count (reload)."""
        idx, decisions, sums, counts = cells
        if len(idx) and sums.shape[1] != self.sums.shape[1]:
            return False
        self.reserve(last)
        lo, hi = first - self.first, last - self.first + 1
        self.decisions[lo:hi] = 0
        self.sums[lo:hi] = 0.0
        self.counts[lo:hi] = 0.0
        if len(idx):
            rows = idx - self.first
            self.decisions[rows], self.sums[rows], self.counts[rows] = decisions, sums, counts
        return True


class CellCache:
    """Recent trend cells per greenhouse; :meth:`read` answers as :func:`roll.read_cells` does."""

    def __init__(self, days: float = CACHE_DAYS, read: CellReader = roll.read_cells) -> None:
        self.span = int(days * 86400 // roll.CELL_S)
        self._read = read
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}
        self._seen: int | None = None

    def read(self, session: Session, gh: str, width: int, first: int, end: int) -> Cells | None:
        """Cells ``first`` to ``end`` (exclusive) of ``gh`` with ``width`` channels; None: not all of them
        are kept here (older than the window), and the caller reads the table."""
        with self._lock:
            self._sync(session)
            w = self._windows.get(gh)
            if w is None or w.sums.shape[1] != width:  # none yet, or another zone count
                w = self._load(session, gh, width, end)
            w.trim(end - self.span)
            if first < w.first:
                return None
            w.reserve(end - 1)
            lo, hi = first - w.first, end - w.first
            rows = np.flatnonzero(w.decisions[lo:hi]) + lo
            return rows + w.first, w.decisions[rows], w.sums[rows], w.counts[rows]

    def clear(self) -> None:
        with self._lock:
            self._windows.clear()
            self._seen = None

    def _load(self, session: Session, gh: str, width: int, end: int) -> _Window:
        first = end - self.span
        w = _Window(first, np.zeros(0, dtype=np.int64), np.zeros((0, width)), np.zeros((0, width)))
        # Every cell from the window's start on, future ones too (a simulator ahead of the clock):
        # a later zero row is then a cell without decisions, never one not read yet.
        cells = self._read(session, gh, first, 2**31 - 1)  # the column is a 32-bit integer
        last = int(cells[0][-1]) if len(cells[0]) else end - 1
        if not w.put(first, max(last, end - 1), cells):  # cells of another zone count: an empty window
            w = _Window(first, np.zeros(0, dtype=np.int64), np.zeros((0, width)), np.zeros((0, width)))
        self._windows[gh] = w
        return w

    def _sync(self, session: Session) -> None:
        """Take in the roll-up rounds since the last read: re-read the cells their decisions fall in."""
        progress = session.get(TrendProgress, roll.PROGRESS_ID)
        done = progress.last_decision_id if progress is not None else 0
        seen, self._seen = self._seen, done
        if seen is None or done == seen:
            return
        if done < seen or done - seen > MAX_DELTA:  # a new table, or a long way behind
            self._windows.clear()
            return
        dirty: dict[str, set[int]] = defaultdict(set)
        for gh, ts in session.execute(select(Decision.greenhouse_id, Decision.ts)
                                      .where(Decision.id > seen, Decision.id <= done)):
            if gh in self._windows:
                dirty[gh].add(roll.cell_index(ts))
        for gh, indices in dirty.items():
            w = self._windows[gh]
            for a, b in roll.runs(indices):
                if b < w.first:
                    continue
                a = max(a, w.first)
                if not w.put(a, b, self._read(session, gh, a, b + 1)):
                    del self._windows[gh]
                    break
