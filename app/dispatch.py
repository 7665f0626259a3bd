"""How a decided batch leaves the control loop: journal, then publish, then count.

A decision is journaled (one write per chunk) before its command is published, so a crash can
lose a command but never publish one that is not on record; the writer process stores what the
journal holds (:mod:`app.writer`). When the journal cannot be written (a full state directory)
nothing is published: each greenhouse's decision raises a ``journal_unwritable`` alarm, the
edge boxes fall back to their safe state once the last command's TTL runs out, and commanding
resumes with the first batch that is on disk again. Mode changes take the same way, with a snapshot of the
controller in between, so a latched e-stop outlives a crash before anything acts on it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from app.journal import DecisionJournal, JournalUnwritable
from app.metrics import Metrics
from app.mqtt.bridge import MqttBridge
from app.snapshots import SnapshotStore
from app.writer import Job, WriterProcess
from control import ControlDecision, GreenhouseController, ModeEvent
from wire.topics import Command

log = logging.getLogger(__name__)

ALARMS_KEPT = 500
MAX_HELD = 10_000
"""Mode changes and acks kept in memory while the journal refuses writes (hours of a large site's acks)."""
"""Recent alarms the service keeps for the API; the metrics count them all."""


@dataclass
class Alarm:
    greenhouse_id: str
    ts: datetime
    kind: str


class Dispatcher:
    """The service's outbound side: journal, snapshots of new latches, commands, metrics, alarms."""

    def __init__(self, controllers: dict[str, GreenhouseController], journal: DecisionJournal,
                 writer: WriterProcess, snapshots: SnapshotStore, metrics: Metrics) -> None:
        self.controllers = controllers
        self.journal = journal
        self.writer = writer
        self.snapshots = snapshots
        self.metrics = metrics
        self.bridge: MqttBridge | None = None
        """Set once the service is connected; without it nothing is published (tests, replays)."""
        self.fence: Callable[[str], int | None] | None = None
        """Set by a runtime that holds leases (:mod:`app.leases`): the fencing token to command a
        greenhouse with, None while another replica controls it. Unset, every greenhouse is ours."""
        self.alarms: list[Alarm] = []
        self.observations: dict[str, tuple[datetime, list[float]]] = {}
        """Each greenhouse's latest decided observation (the dashboard's outlook reads its forecast and
        prices)."""
        self.journal_failing_since: datetime | None = None
        """When the journal last started refusing writes (None while it takes them): /readyz fails."""
        self.fallback_since: dict[str, datetime] = {}
        """Each greenhouse's first decision of its current run of expert fallbacks (the process alarms read
        it)."""
        self.published_at: dict[str, float] = {}
        """Monotonic time of each greenhouse's latest command publication (a reconnect repeats a young
        one)."""
        self._held: list[dict[str, Any]] = []
        """Mode changes the telemetry reported (a panel e-stop) and acks the journal refused: written ahead
        of the next entries it takes, so a full disk delays their records and never loses them. A refused
        decision needs none: it was not commanded."""

    def emit(self, decisions: list[ControlDecision], arrived: list[float] | None = None) -> None:
        """Journal (one write) -> snapshot new latches -> publish -> count; the writer stores the rest."""
        if self.fence is not None and not all(self.may_command(d.greenhouse_id) for d in decisions):
            for d in decisions:
                if not self.may_command(d.greenhouse_id):
                    log.warning("%s: lease lost while deciding seq %d: dropped, not commanded",
                                d.greenhouse_id, d.seq)
            decisions = [d for d in decisions if self.may_command(d.greenhouse_id)]
        if not decisions:
            return
        entries: list[dict[str, Any]] = []
        for d in decisions:
            entries += [Job.mode_change(ev).entry() for ev in d.events]
            entries.append(Job.decision(d, self.controllers[d.greenhouse_id].z).entry())
        if not self._journal(entries, [d.greenhouse_id for d in decisions], hold=True):
            return
        for d in decisions:
            if d.events:  # telemetry reported the e-stop: the latch outlives a crash before anything acts
                self.metrics.estops.labels(d.greenhouse_id, "telemetry").inc()
                try:
                    self.save_snapshot(d.greenhouse_id)
                except OSError as exc:  # the journal holds the latch too: a replay restores it
                    log.error("%s: snapshot of the e-stop latch not written (%s); the journal has it",
                              d.greenhouse_id, exc.strerror or exc)
        for d in decisions:
            self.publish(d.greenhouse_id, d.command)
            if d.observation is not None:
                self.observations[d.greenhouse_id] = (d.ts, d.observation)
        now = time.perf_counter()
        for k, d in enumerate(decisions):
            self._count(d, None if arrived is None else now - arrived[k])

    def _journal(self, entries: list[dict[str, Any]], greenhouses: list[str], *, hold: bool = False) -> bool:
        """Journal ``entries`` after any held ones; False (alarmed, counted, logged once per spell) when the
        disk refuses them, and then, with ``hold``, their mode changes and acks wait for the next write."""
        batch = self._held + entries
        try:
            self.writer.appended(self.journal.append(batch))
            self._held = []
        except OSError as exc:
            kept = entries if hold else []
            self._held = self._held + [e for e in kept if e["kind"] != "decision"]
            if len(self._held) > MAX_HELD:
                log.error("journal: %d held records over the %d kept in memory; the oldest are lost",
                          len(self._held) - MAX_HELD, MAX_HELD)
                del self._held[:-MAX_HELD]
            if self.journal_failing_since is None:
                self.journal_failing_since = datetime.now(UTC)
                log.error("journal write failed (%s): decisions are not commanded until it is writable "
                          "again; the edge boxes fall back to their safe state", exc.strerror or exc)
            for gh in greenhouses:
                self.metrics.unjournaled.labels(gh).inc()
                self.alarm(gh, "journal_unwritable")
            return False
        if self.journal_failing_since is not None:
            log.warning("journal writable again (it failed from %s); commanding resumes",
                        self.journal_failing_since.isoformat(timespec="seconds"))
            self.journal_failing_since = None
        return True

    def _count(self, d: ControlDecision, latency_s: float | None) -> None:
        gh = d.greenhouse_id
        self.metrics.decisions.labels(gh, d.actor.split(":")[0]).inc()
        for firing in d.rules_fired:
            self.metrics.safety_clips.labels(gh, firing["rule"]).inc()
        if d.low_confidence:
            self.metrics.low_confidence.labels(gh).inc()
            self.fallback_since.setdefault(gh, d.ts)
        elif d.actor not in ("watchdog", "reconnect"):
            # a decision on telemetry that did not fall back ends the run
            self.fallback_since.pop(gh, None)
        for kind in d.alarms:
            if not kind.startswith("held:"):
                self.alarm(gh, kind)
        if latency_s is not None:
            self.metrics.decision_latency.labels(gh).observe(latency_s)

    def apply_mode_event(self, event: ModeEvent, command: Command | None = None) -> threading.Event:
        """Journal the mode change, snapshot the controller, then act (``command``); returns an event
        set once its record is stored."""
        job = Job.mode_change(event)
        stored = self.writer.waiter(job.key)
        if not self._journal([job.entry()], [event.greenhouse_id]):
            raise JournalUnwritable(f"{event.greenhouse_id}: the state directory is full; "
                                    f"the {event.to_mode} was neither recorded nor applied")
        self.save_snapshot(event.greenhouse_id)
        if command is not None:
            self.publish(event.greenhouse_id, command)
        return stored

    def may_command(self, gh: str) -> bool:
        """Whether this replica holds ``gh``'s lease now (always, without leases)."""
        return self.fence is None or self.fence(gh) is not None

    def publish(self, gh: str, command: Command) -> None:
        """Publish with this replica's fencing token; nothing for a greenhouse it does not hold."""
        if self.bridge is None:
            return
        self.published_at[gh] = time.monotonic()
        if self.fence is None:
            self.bridge.publish_command(gh, command)
            return
        token = self.fence(gh)
        if token is None:
            log.warning("%s: lease lost: command seq %d not published", gh, command.seq)
            return
        self.bridge.publish_command(gh, command.model_copy(update={"fencing_token": token}))

    def record_ack(self, gh: str, cmd_id: UUID, status: str, reason: str | None, ts: datetime) -> None:
        """The edge box's answer (or its absence) goes on the decision's row and into the audit trail (held
        in memory while the journal refuses writes)."""
        self._journal([Job.ack(gh, cmd_id, status, reason, ts).entry()], [gh], hold=True)

    def save_snapshot(self, gh: str) -> None:
        """Write this greenhouse's snapshot now (durable when this returns)."""
        self.snapshots.save(gh, self.controllers[gh].snapshot())

    def alarm(self, gh: str, kind: str) -> None:
        self.metrics.alarms.labels(gh, kind.split(":")[0]).inc()
        self.alarms.append(Alarm(gh, datetime.now(UTC), kind))
        del self.alarms[:-ALARMS_KEPT]
        log.warning("alarm %s: %s", gh, kind)
