"""What the dashboard's endpoints share: edge status, greenhouse names, cached time in band, alarms.

One per app (``app.state.dashboard``), made in the lifespan next to the runtime.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from datetime import UTC, datetime, timedelta

import numpy as np
from sqlalchemy.orm import Session

from app.alarms.recipients import notifier_from_settings
from app.api import economics as econ
from app.api import history as hist
from app.api import live_state
from app.api import trend_rollup as roll
from app.api.alarm_book import AlarmBook
from app.api.cell_cache import CellCache, Cells
from app.api.edge_status import EdgeStatus, EdgeStatusWatcher
from app.api.live_feed import LiveFeed
from app.api.schemas import EconomicsToday, GreenhouseLive, GreenhouseSummary, HistoryResponse
from app.runtime import Runtime
from audit.labels import zone_label

log = logging.getLogger(__name__)

IN_BAND_TTL_S = 60.0
ECONOMICS_TTL_S = 60.0
EMPTY_TTL_S = 5.0
FRESH_S = 12.0
"""A history read takes the cells as they stand when a round left nothing behind this recently
(the background rounds run every 5 s); otherwise it runs a round first."""
READ_CATCH_UP_ROWS = 2000
"""A history read first takes in at most this many new decisions; more: the roll-up is still
taking in a backlog (a first start on an old database), and the read averages decisions instead."""


class Dashboard:
    def __init__(self, runtime: Runtime, edge: EdgeStatusWatcher | None) -> None:
        self.runtime = runtime
        self.edge_watcher = edge
        self.notifier = notifier_from_settings(runtime.settings, runtime.sessions, runtime.metrics)
        self.alarms = AlarmBook(runtime, runtime.sessions, self.notifier)
        self.trends = roll.TrendRollup(runtime.sessions)
        self.cells = CellCache()
        self._rollup = roll.RollupThread(self.trends, when_current=self.warm_cells)
        self.feed = LiveFeed(self)
        """The live streams' events, built once per page for all of its streams."""
        self._in_band: dict[str, tuple[float, float | None]] = {}
        self._refreshing: set[str] = set()
        self._lock = threading.Lock()
        self._estimates: dict[str, tuple[float, econ.DayEstimate]] = {}
        self._estimating = False

    def start(self) -> None:
        """Keep the trend cells up with the decisions, and the alarms with the runtime, in the background."""
        self._rollup.start()
        self.notifier.start()
        self.alarms.start()

    def warm_cells(self) -> None:
        """Load each greenhouse's last week of cells into memory, so no operator's first page pays for it."""
        for gh, ctl in sorted(self.runtime.controllers.items()):
            end = roll.cell_index(self.timeline_end(gh)) + 1
            with self.runtime.sessions() as s:
                self.cells.read(s, gh, roll.width(ctl.z), end - 7 * 86400 // roll.CELL_S, end)

    def stop(self) -> None:
        self._rollup.stop()
        self.alarms.stop()
        try:
            self.alarms.flush()
        except Exception as exc:
            # the occurrences since the last write are lost, the acknowledgements are not
            log.warning("storing alarms at shutdown failed (%s)", exc.__class__.__name__)
        self.notifier.stop()

    def history(self, session: Session, gh: str, start: datetime, end: datetime,
                points: int) -> HistoryResponse:
        """Trends over [start, end): from the trend cells once they hold every stored decision."""
        # the background rounds keep up: no round here
        current: bool | None = self.trends.current_within(FRESH_S)
        if not current:
            try:
                current = self.trends.catch_up(READ_CATCH_UP_ROWS, wait=False)
                if current is None:  # a round is under way: one behind, unless the cells were never current
                    current = self.trends.current_at is not None
            except Exception:  # e.g. SQLite locked by the writer: the decisions themselves still answer
                current = False
        ctl = self.runtime.controllers[gh]
        out = hist.history(session, gh, ctl.z, self.bands(gh), start, end, points, cells=current,
                           read=self.read_cells)
        recorded = np.array([math.nan if p is None else p for p in out.price_eur_mwh], dtype=np.float64)
        prices, out.price_source = econ.priced(ctl, out.ts, recorded)
        out.price_eur_mwh = prices.tolist()
        out.zone_labels = self.zone_labels(gh)
        return out

    def read_cells(self, session: Session, gh: str, first: int, end: int) -> Cells:
        """Trend cells from memory when the cache keeps them, else from the table."""
        width = roll.width(self.runtime.controllers[gh].z)
        got = self.cells.read(session, gh, width, first, end)
        return got if got is not None else roll.read_cells(session, gh, first, end)

    def edge(self, gh: str) -> EdgeStatus:
        return self.edge_watcher.get(gh) if self.edge_watcher is not None else EdgeStatus("unknown", None)

    def name(self, gh: str) -> str:
        """The greenhouse's display name in force (its id when none was given)."""
        ctl = self.runtime.controllers.get(gh)
        return ctl.setup.name or gh if ctl is not None else gh

    def zone_labels(self, gh: str) -> list[str]:
        """Each zone's display name, else ``Zone N`` counted from 1."""
        return [z.name or zone_label(i) for i, z in enumerate(self.runtime.controllers[gh].zones)]

    def bands(self, gh: str) -> list[tuple[float, float]]:
        return [(z.target_low, z.target_high) for z in self.runtime.controllers[gh].zones]

    def in_band(self, gh: str, *, wait: bool = False) -> float | None:
        """Time in band over the last 24 h, cached for a minute; a stale value is refreshed in the background
        (``wait``: compute now when there is none yet, for a page's first load)."""
        cached = self._in_band.get(gh)
        if cached is not None and time.monotonic() - cached[0] < IN_BAND_TTL_S:
            return cached[1]
        if wait and cached is None:
            self._refresh(gh)
        else:
            with self._lock:
                start = gh not in self._refreshing
                self._refreshing.add(gh)
            if start:
                threading.Thread(target=self._refresh, args=(gh,), daemon=True, name=f"in-band-{gh}").start()
        cached = self._in_band.get(gh)
        return cached[1] if cached is not None else None

    def timeline_end(self, gh: str) -> datetime:
        """Now, or the greenhouse's latest telemetry time when that is later: a simulator at accelerated
        time (the demo) runs ahead of the wall clock, and its trends must still show."""
        now = datetime.now(UTC)
        last = self.runtime.controllers[gh].last_ts
        return max(now, last + timedelta(seconds=1)) if last is not None else now

    def _refresh(self, gh: str) -> None:
        try:
            end = self.timeline_end(gh)
            with self.runtime.sessions() as s:
                value = hist.time_in_band_pct(s, gh, self.bands(gh), end - timedelta(hours=24), end)
            self._in_band[gh] = (time.monotonic(), value)
        finally:
            with self._lock:
                self._refreshing.discard(gh)

    # ---- today's economics ------------------------------------------------------------------
    def economics(self, gh: str, *, wait: bool = False) -> EconomicsToday | None:
        """Today's money: the counted parts live, the crop estimate cached for a minute and refreshed
        for every greenhouse at once in the background (``wait``: compute now when there is none yet)."""
        ctl = self.runtime.controllers[gh]
        if ctl.day is None:  # no telemetry yet: nothing to count, and no reason to run the model for it
            return None
        cached = self._estimates.get(gh)
        # Without a yield yet (no trend cells today) look again soon rather than in a minute.
        ttl = ECONOMICS_TTL_S if cached is not None and cached[1].yield_kg is not None else EMPTY_TTL_S
        if cached is None or time.monotonic() - cached[0] >= ttl:
            if wait and cached is None:
                self._estimate_all()
            else:
                with self._lock:
                    start = not self._estimating
                    self._estimating = True
                if start:
                    threading.Thread(target=self._estimate_all, daemon=True, name="economics").start()
            cached = self._estimates.get(gh)
        return econ.today(ctl, cached[1] if cached is not None else None,
                          self.runtime.settings.water_price_eur_m3, self.timeline_end(gh))

    def _estimate_all(self) -> None:
        """One crop-model run over today's trend cells of every greenhouse (a failed read: the next
        retries)."""
        try:
            ghs, climates, ages, days = [], [], [], []
            with self.runtime.sessions() as s:
                for gh, ctl in sorted(self.runtime.controllers.items()):
                    bounds = econ.day_bounds(ctl)
                    if bounds is None:
                        continue
                    day, start, end = bounds
                    cells = self.read_cells(s, gh, roll.cell_index(start),
                                            roll.cell_index(end - timedelta(microseconds=1)) + 1)
                    ghs.append(gh)
                    climates.append(econ.day_climate(cells[0], cells[2], cells[3], ctl.z))
                    ages.append(econ.crop_age_days(ctl, start))
                    days.append(day)
            fruit = econ.fruit_kg_m2(climates, ages)
            now = time.monotonic()
            for gh, climate, kg, day in zip(ghs, climates, fruit, days, strict=True):
                ctl = self.runtime.controllers[gh]
                at = self.timeline_end(gh)
                price_now = econ.recorded_now(ctl, self.runtime.dispatch.observations.get(gh), at)
                self._estimates[gh] = (now, econ.estimate(ctl, climate, kg, day, at, price_now))
        except Exception as exc:  # e.g. SQLite locked by the writer: the counted parts still show
            log.warning("today's economics: estimate failed (%s: %s)", exc.__class__.__name__, exc)
        finally:
            with self._lock:
                self._estimating = False

    def summary(self, gh: str, *, wait: bool = False) -> GreenhouseSummary:
        row = live_state.summary(self.runtime, gh, self.edge, in_band_pct=self.in_band(gh, wait=wait),
                                 unacked=self.alarms.unacknowledged(gh),
                                 economics=self.economics(gh, wait=wait))
        return row.model_copy(update={"name": self.name(gh)})

    def live(self, gh: str, *, wait: bool = False) -> GreenhouseLive:
        ctl = self.runtime.controllers[gh]
        row = live_state.live(self.runtime, gh, self.edge, in_band_pct=self.in_band(gh, wait=wait),
                              unacked=self.alarms.unacknowledged(gh), economics=self.economics(gh, wait=wait),
                              decision_outlook=econ.outlook(ctl, self.runtime.dispatch.observations.get(gh)))
        return row.model_copy(update={"name": self.name(gh)})

    def overview(self, *, wait: bool = False) -> list[GreenhouseSummary]:
        return [self.summary(gh, wait=wait) for gh in sorted(self.runtime.controllers)]
