"""The service's periodic chores: watchdog, ack time-outs, the writer's health, process alarms, snapshots.

One round every two seconds on the event loop, between batches. A round that fails is logged
and the next one retries: housekeeping must never die, the watchdog depends on it.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.alarms.watch import ProcessAlarms
from app.dispatch import Dispatcher
from app.intake import Intake
from app.metrics import Metrics
from app.outlook.feed import OutlookFeed
from app.snapshots import SnapshotStore
from app.writer import WriterProcess
from control import GreenhouseController

log = logging.getLogger(__name__)

PERIOD_S = 2.0


class Housekeeping:
    """What the service does on a timer rather than on a message."""

    def __init__(self, controllers: dict[str, GreenhouseController], intake: Intake, dispatch: Dispatcher,
                 writer: WriterProcess, snapshots: SnapshotStore, metrics: Metrics, *,
                 outlook: OutlookFeed | None = None, sessions: sessionmaker[Session] | None = None) -> None:
        self.controllers = controllers
        self.intake = intake
        self.dispatch = dispatch
        self.writer = writer
        self.snapshots = snapshots
        self.metrics = metrics
        self._reconnects_seen = 0
        self.sessions = sessions
        self.process_alarms = ProcessAlarms(controllers, dispatch, writer,
                                            (lambda: outlook.for_decisions(None).alarms) if outlook
                                            else tuple)
        """The watched alarm conditions (:mod:`app.alarms.watch`), judged every few rounds."""

    async def run(self, period_s: float = PERIOD_S) -> None:
        """Rounds until cancelled."""
        while True:
            await asyncio.sleep(period_s)
            try:
                self.tick(datetime.now(UTC))
                await self.snapshot_all()
            except Exception:  # housekeeping must never die; the next round retries
                log.exception("housekeeping round failed")

    def tick(self, now: datetime) -> None:
        """Stale greenhouses get the safe state; overdue commands are re-sent or given up; the
        writer is restarted if it died."""
        stale = [d for gh, ctl in self.controllers.items()
                 if gh not in self.intake.in_flight and self.dispatch.may_command(gh)  # another replica's
                 and (d := ctl.watchdog(now)) is not None]
        self.dispatch.emit(stale)
        bridge = self.dispatch.bridge
        if bridge is not None:
            for entry in bridge.overdue_commands():
                self.metrics.ack_timeouts.labels(entry.gh).inc()
                self.dispatch.alarm(entry.gh, "ack_timeout")
                if not self.dispatch.may_command(entry.gh):  # the new holder decides afresh
                    self.dispatch.record_ack(entry.gh, entry.cmd_id, "timeout", "lease lost before an ack",
                                             now)
                elif bridge.can_retry(entry):
                    bridge.retry(entry)
                else:  # given up: the decision's command never got an answer
                    self.dispatch.record_ack(entry.gh, entry.cmd_id, "timeout",
                                             f"no ack after {entry.attempts} attempts", now)
            reconnects = bridge.reconnects
            if reconnects > self._reconnects_seen:
                self.metrics.mqtt_reconnects.inc(reconnects - self._reconnects_seen)
                self._reconnects_seen = reconnects
        self.writer.restart_if_dead()
        self.metrics.spooled.set(self.writer.spooled)  # the writer process flushes the spool
        if self.sessions is not None:  # once: the stored thresholds (a quick read, before the first round)
            try:
                self.process_alarms.load(self.sessions)
                self.sessions = None
            except Exception as exc:  # noqa: BLE001 - the defaults meanwhile; the next round reads again
                log.warning("alarm thresholds not read (%s); the defaults hold until they are",
                            exc.__class__.__name__)
        self.process_alarms.tick(now, busy=self.intake.in_flight)

    async def snapshot_all(self, chunk: int = 32) -> None:
        """Periodic snapshots: taken on the loop between decisions, written as one file off the loop.

        A greenhouse in the middle of a decision is left out of this round (the next one takes it):
        half a decision is not a state to restore."""
        taken: dict[str, dict[str, Any]] = {}
        ghs = list(self.controllers)
        for lo in range(0, len(ghs), chunk):
            for gh in ghs[lo:lo + chunk]:
                if gh not in self.intake.in_flight:
                    taken[gh] = self.controllers[gh].snapshot()
            await asyncio.sleep(0)
        self.snapshots.save_all_later(taken)
