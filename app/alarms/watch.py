"""The service's process alarms: every few seconds, each greenhouse's facts are read from its
controller (between decisions, never in the middle of one) and judged by :mod:`app.alarms.conditions`.

Reading a controller costs a few array reductions, so a round over a large site takes well under a
millisecond per greenhouse, on the housekeeping timer and never on a decision's path. A raised
alarm goes through the dispatcher like any other (counted, logged, grouped by the alarm book);
whether a watched alarm is still active is asked of :attr:`ProcessAlarms.tracker`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.alarm_models import AlarmThreshold
from app.alarms.conditions import ConditionTracker, Facts, Thresholds, evaluate
from app.dispatch import Dispatcher
from app.writer import WriterProcess
from control import GreenhouseController

log = logging.getLogger(__name__)

EVERY_S = 5.0


class ProcessAlarms:
    """Evaluates the watched conditions of the greenhouses this replica decides."""

    def __init__(self, controllers: dict[str, GreenhouseController], dispatch: Dispatcher,
                 writer: WriterProcess, outlook_alarms: Callable[[], Iterable[str]],
                 every_s: float = EVERY_S) -> None:
        self.controllers = controllers
        self.dispatch = dispatch
        self.writer = writer
        self.outlook_alarms = outlook_alarms
        self.every_s = every_s
        self.tracker = ConditionTracker()
        self.defaults = Thresholds()
        self.overrides: dict[str, Thresholds] = {}
        self._last_round = -float("inf")
        self._heard: dict[str, tuple[datetime | None, datetime]] = {}
        """Greenhouse -> (its latest telemetry timestamp, when a round first saw it): the box's silence."""

    def thresholds(self, gh: str) -> Thresholds:
        """The greenhouse's limits: its stored override, else the defaults."""
        return self.overrides.get(gh, self.defaults)

    def load(self, sessions: sessionmaker[Session]) -> None:
        """Read every greenhouse's stored override (at start; the API updates them as they change)."""
        with sessions() as s:
            for row in s.scalars(select(AlarmThreshold)):
                try:
                    self.overrides[row.greenhouse_id] = Thresholds.model_validate(row.values)
                except ValueError as exc:  # a row written by another version: the defaults, and say so
                    log.warning("%s: stored alarm thresholds ignored (%s)", row.greenhouse_id, exc)

    def facts(self, gh: str, ctl: GreenhouseController, now: datetime, outlook: tuple[str, ...] = (),
              writer_behind_s: float = 0.0) -> Facts:
        """What the controller holds now, as plain values (the site's outlook and writer lag given)."""
        est = ctl.estimator
        state = est.state
        faulty = (state["missing"] >= est.cfg.offline_after_steps).any(axis=1) | state["drifting"].any(axis=1)
        last, seen = self._heard.get(gh, (None, now))
        if ctl.last_ts != last:
            last, seen = ctl.last_ts, now
            self._heard[gh] = (last, seen)
        return Facts(
            gh=gh, now=now, telemetry_ts=ctl.last_ts, silent_s=(now - seen).total_seconds(),
            moisture=tuple(state["theta"].tolist()),
            band=tuple((z.target_low, z.target_high) for z in ctl.zones),
            water_today_l=tuple(ctl.water_today_l.tolist()),
            water_cap_l=tuple(z.daily_water_cap_l for z in ctl.zones),
            valves_failed=tuple(np.flatnonzero(ctl.valve_failed >= 0.5).tolist()),
            probes_faulty=tuple(np.flatnonzero(faulty).tolist()), estop_latched=ctl.estop_latched,
            fallback_since=self.dispatch.fallback_since.get(gh), outlook_alarms=outlook,
            writer_behind_s=writer_behind_s)

    def _writer_behind_s(self) -> float:
        sealing = 0.0
        since = self.writer.audit_waiting_since
        if self.writer.audit_pending and since is not None:
            sealing = max(0.0, time.time() - since)
        return max(self.writer.behind_s(), sealing)

    def tick(self, now: datetime, busy: Iterable[str] = ()) -> list[tuple[str, str]]:
        """A round (at most every ``every_s``); ``busy`` greenhouses are mid-decision and wait for the next.
        Returns the (greenhouse, kind) raised."""
        mono = time.monotonic()
        if mono - self._last_round < self.every_s:
            return []
        self._last_round = mono
        skip = set(busy)
        outlook, behind = tuple(self.outlook_alarms()), self._writer_behind_s()
        raised: list[tuple[str, str]] = []
        for gh, ctl in list(self.controllers.items()):
            if not self.dispatch.may_command(gh):
                self.tracker.forget(gh)
                continue
            if gh in skip:
                continue
            up, down = self.tracker.apply(gh, evaluate(self.facts(gh, ctl, now, outlook, behind),
                                                              self.thresholds(gh)), now)
            for kind in up:
                self.dispatch.alarm(gh, kind)
                raised.append((gh, kind))
            for kind in down:
                log.info("alarm %s: %s cleared", gh, kind)
        return raised
