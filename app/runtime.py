"""The running service: registered greenhouses, their controllers, the MQTT bridge, recording.

One path for data: the bridge validates a message and hands it to the event loop, where it
waits (in order, per greenhouse) for the next micro-batch: every greenhouse that reported
while the previous batch was being decided is decided together (one Kalman pass, one ensemble
forward). Each decision is written to the journal (one write per batch) and only then is its
command published (QoS 1) and tracked until its ack; explanations, database rows (one
transaction per round, the spool while the database is down) and audit records follow in the
writer process (:mod:`app.writer`), which tails the journal. E-stops and operator actions run
between a batch's phases, never behind it. Controller state is snapshotted after every mode
change and periodically, and restored at start, so a restart never unlatches an e-stop or
resets a cap; the journal and the stored records tell it where the sequence numbers stood.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import pickle
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.audit_sink import AuditSink, record_policy_in_force
from app.controller import (
    ControlDecision,
    DecisionBatch,
    ExpertProposer,
    GreenhouseController,
    ModeEvent,
    Pending,
    Proposer,
    ZoneSetup,
)
from app.core.config import Settings
from app.journal import DecisionJournal
from app.metrics import Metrics
from app.models import Greenhouse, Zone
from app.mqtt.bridge import MqttBridge
from app.mqtt.topics import Ack, Command, EstopEvent, Telemetry
from app.recorder import DecisionRecorder
from app.snapshots import SnapshotStore
from app.writer import DecisionStore, Job, WriterConfig, WriterProcess
from policy.tuning import served_expert
from safety import SafetyLimits

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_BATCH = 64
"""Greenhouses decided together at most; more waiting go to the next batch."""
CHUNK = 16
"""Greenhouses finished (journaled, published) between two chances for an e-stop to run."""


def load_proposer(policy_dir: Path, zones: int) -> Proposer:
    """The shipped (or configured) ensemble; the threshold expert when there is none."""
    if (policy_dir / "ensemble.json").exists():
        from policy.ensemble import load_ensemble

        return load_ensemble(policy_dir, expected_zones=zones)
    log.warning("no policy ensemble at %s: the threshold expert decides", policy_dir)
    return ExpertProposer(served_expert(zones))


@dataclass
class Alarm:
    greenhouse_id: str
    ts: datetime
    kind: str


def _mode_row(event: ModeEvent) -> dict[str, Any]:
    return {"greenhouse_id": event.greenhouse_id, "seq": event.seq, "ts": event.ts, "actor": event.actor,
            "from_mode": event.from_mode, "to_mode": event.to_mode, "reason": event.reason}


def _mode_audit_kind(event: ModeEvent) -> str:
    if event.to_mode == "estop":
        return "estop"
    return "estop_reset" if event.from_mode == "estop" else "mode_change"


class Runtime:
    """All greenhouses of one service process."""

    def __init__(self, settings: Settings, sessions: sessionmaker[Session], *, state_dir: Path,
                 proposer: Proposer | None = None, limits: SafetyLimits | None = None,
                 metrics: Metrics | None = None, audit: AuditSink | None = None,
                 max_batch: int = MAX_BATCH) -> None:
        self.settings = settings
        self.sessions = sessions
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.metrics = metrics or Metrics()
        self.recorder = DecisionRecorder(sessions, self.state_dir / "decision-spool.jsonl")
        self.journal = DecisionJournal(self.state_dir / "journal")
        self.snapshots = SnapshotStore(self.state_dir)
        self.audit = audit
        self.writer = WriterProcess(on_stored=self._on_stored)
        self.limits = limits or SafetyLimits.default()
        self.max_batch = max_batch
        self._proposer = proposer
        self._proposers: dict[int, Proposer] = {}
        self.controllers: dict[str, GreenhouseController] = {}
        self.alarms: list[Alarm] = []
        self.last_decision: dict[str, dict[str, Any]] = {}
        self.last_telemetry: dict[str, Telemetry] = {}
        """Each greenhouse's latest accepted telemetry (read-only for the dashboard's live view)."""
        self.bridge: MqttBridge | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._reconnects_seen = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: dict[str, deque[tuple[Telemetry, float]]] = {}
        self._ready: deque[str] = deque()
        self._drainer: asyncio.Task[None] | None = None
        self._in_flight: frozenset[str] = frozenset()
        self._stopping = False
        self.batches = 0
        """Micro-batches decided so far (with :attr:`decided`, the mean batch size)."""
        self.decided = 0

    # ---- set-up ----------------------------------------------------------------------------
    def _proposer_for(self, zones: int) -> Proposer:
        """One proposer per zone count, shared by its greenhouses: their batches share one forward."""
        if self._proposer is not None:
            return self._proposer
        if zones not in self._proposers:
            self._proposers[zones] = load_proposer(Path(self.settings.policy_dir), zones)
        return self._proposers[zones]

    def load_greenhouses(self) -> None:
        with self.sessions() as s:
            for gh in s.scalars(select(Greenhouse)):
                zones = s.scalars(select(Zone).where(Zone.greenhouse_id == gh.id).order_by(Zone.index)).all()
                setups = [ZoneSetup(z.soil_type, z.target_low_vwc, z.target_high_vwc, z.saturation_vwc,
                                    z.daily_water_cap_l) for z in zones]
                limits = self.limits.model_copy(update={"zones": len(setups)}) if self.limits.zones != len(setups) \
                    else self.limits
                ctl = GreenhouseController(gh.id, setups, self._proposer_for(len(setups)), limits,
                                           command_ttl_s=self.settings.command_ttl_s,
                                           max_age_s=self.settings.max_age_s,
                                           disagreement_threshold=1.0 - self.settings.low_confidence_threshold)
                snap = self.snapshots.load(gh.id)
                if snap is not None:
                    ctl.restore(snap)
                    log.info("restored controller %s at seq %d (mode %s)", gh.id, ctl.seq, ctl.mode)
                self.controllers[gh.id] = ctl
        self._replay_journal()
        for gh, ctl in self.controllers.items():
            recorded = self.recorder.last_seq(gh)
            if recorded > ctl.seq:
                # A crash between two snapshots: continue after the records, never reuse a seq. Each
                # record after the last snapshot is a decision, which also used one command seq.
                log.warning("controller %s: snapshot at seq %d, records up to %d: continuing after them",
                            gh, ctl.seq, recorded)
                ctl.cmd_seq += recorded - ctl.seq
                ctl.seq = recorded

    def _replay_journal(self) -> None:
        """Store what a previous run journaled (so published) but had not stored yet: once, in order."""
        entries = self.journal.recover()
        if entries:
            store = DecisionStore(self.recorder, lambda zones: self._proposer_for(zones or 6), audit=self.audit)
            done = store.store([Job.from_entry(e) for e in entries], skip_stored=True)
            log.warning("journal: %d records of a previous run were not stored yet; stored them now", len(done))
            if self.audit is not None:
                self.audit.flush()
        self.journal.discard_recovered()

    def _writer_config(self) -> WriterConfig:
        bind = getattr(self.sessions, "kw", {}).get("bind")
        url = bind.url.render_as_string(hide_password=False) if bind is not None else self.settings.database_url
        keys = None
        if self.audit is not None:
            store = self.audit.store
            keys = (store.keyring.to_json(), store._signer.to_pem())  # the same keys, rebuilt in the writer
        return WriterConfig(database_url=url, spool_path=self.recorder.spool_path, journal=self.journal.folder,
                            policy_dir=Path(self.settings.policy_dir),
                            proposer=None if self._proposer is None else pickle.dumps(self._proposer),
                            audit_keys=keys, zones=tuple(sorted({c.z for c in self.controllers.values()})))

    async def start(self) -> None:
        self.load_greenhouses()
        if self.audit is not None and self.controllers:
            # A promotion or rollback (another GREENTWIN_POLICY_DIR) shows in the trail at once.
            record_policy_in_force(self.audit.store, [c.proposer.policy_version for c in self.controllers.values()])
        if "torch" in sys.modules:  # an ensemble was loaded (the expert alone does not need torch)
            # Serving batches are small: a thread pool per op gains nothing on them, and its threads
            # would compete for the cores with the bridge and the writer process.
            sys.modules["torch"].set_num_threads(1)
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stopping = False
        self.writer.start(self._writer_config())
        self.bridge = MqttBridge(
            self.settings.mqtt_url, on_telemetry=self.on_telemetry, on_ack=self.on_ack, on_estop=self.on_estop,
            loop=loop, zones=lambda gh: self.controllers[gh].z if gh in self.controllers else 6,
            known_greenhouses=lambda gh: gh in self.controllers, max_age_s=self.settings.max_age_s,
            ack_timeout_s=self.settings.ack_timeout_s, on_reject=self._on_reject)
        self.bridge.start()
        self._tasks.append(asyncio.create_task(self._housekeeping()))
        # Everything loaded so far (libraries, models, controllers) lives as long as the service: a
        # full garbage collection would walk all of it (~0.3 M objects, hundreds of ms, every so
        # often: the p99 of the control loop). Frozen, a collection walks only what came later.
        gc.collect()
        gc.freeze()

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._drainer is not None:  # the batch in progress finishes; waiting telemetry is dropped
            with contextlib.suppress(asyncio.CancelledError):
                await self._drainer
        if self.bridge is not None:
            self.bridge.close()
        self.snapshots.save_all_later({gh: ctl.snapshot() for gh, ctl in self.controllers.items()})
        self.snapshots.close()
        self.journal.close()
        await asyncio.to_thread(self.writer.stop)  # stores the rest, seals and checkpoints the audit trail
        if self.audit is not None:
            self.audit.close()
        self._loop = None
        gc.unfreeze()  # back to the collector's care (matters in a process that goes on, like the tests)

    # ---- inbound ---------------------------------------------------------------------------
    def _on_reject(self, gh: str | None, reason: str, detail: str) -> None:
        self.metrics.telemetry.labels("rejected", reason).inc()

    def on_telemetry(self, gh: str, tel: Telemetry) -> None:
        """Queue for the next micro-batch (messages of one greenhouse are decided in arrival order)."""
        self.metrics.telemetry.labels("accepted", "").inc()
        self.last_telemetry[gh] = tel
        if self._stopping:
            return
        queue = self._inbox.setdefault(gh, deque())
        if not queue:
            self._ready.append(gh)
        queue.append((tel, time.perf_counter()))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.get_running_loop().create_task(self._drain())

    @property
    def waiting(self) -> int:
        """Telemetry messages accepted and not yet decided."""
        return sum(len(q) for q in self._inbox.values())

    async def _drain(self) -> None:
        """Decide batches until no telemetry waits: one message per greenhouse per batch, FIFO."""
        while self._ready and not self._stopping:
            items: list[Pending] = []
            arrived: list[float] = []
            while self._ready and len(items) < self.max_batch:
                gh = self._ready.popleft()
                tel, at = self._inbox[gh].popleft()
                items.append(Pending(self.controllers[gh], tel))
                arrived.append(at)
            for item in items:  # greenhouses with more waiting queue up again, behind this batch
                if self._inbox[item.ctl.gh]:
                    self._ready.append(item.ctl.gh)
            await self._decide(items, arrived)
            await asyncio.sleep(0)

    async def _decide(self, items: list[Pending], arrived: list[float]) -> None:
        """One micro-batch, yielding between phases so e-stops and operator actions are not held up.

        A decision is never split by a yield between its finish and its publication, so an
        e-stop can only come before a decision (which then sees the latch) or after its command.
        """
        self._in_flight = frozenset(i.ctl.gh for i in items)
        when = {i.ctl.gh: at for i, at in zip(items, arrived, strict=True)}
        batch = DecisionBatch(items, strict=False)
        try:
            batch.begin()
            batch.estimate()
            await asyncio.sleep(0)
            for lo in range(0, len(batch), CHUNK):
                batch.observe(lo, lo + CHUNK)
                await asyncio.sleep(0)
            batch.propose()
            await asyncio.sleep(0)
            for lo in range(0, len(batch), CHUNK):
                decisions = []
                for i in range(lo, min(lo + CHUNK, len(batch))):
                    try:
                        decisions.append(batch.finish(i))
                    except Exception:  # one greenhouse's bad message must not cost the others theirs
                        log.exception("decision for %s failed", batch.steps[i].ctl.gh)
                self._emit(decisions, [when[d.greenhouse_id] for d in decisions])
                await asyncio.sleep(0)
            self.batches += 1
            self.decided += len(batch)
        finally:
            self._in_flight = frozenset()
            for item, exc in batch.failed:
                log.error("decision for %s failed: %r", item.ctl.gh, exc, exc_info=exc)

    def on_ack(self, gh: str, ack: Ack) -> None:
        """The bridge has resolved the pending command; every valid ack is recorded (a late or repeated
        one too: the trail says what the edge box answered, and the row update is idempotent)."""
        if ack.status != "applied":
            self._alarm(gh, f"command_{ack.status}")
        ctl = self.controllers.get(gh)
        if ctl is not None:
            ctl.note_ack(ack.cmd_id, ack.status)
        self._record_ack(gh, ack.cmd_id, ack.status, ack.reason, ack.ts)

    def _record_ack(self, gh: str, cmd_id: UUID, status: str, reason: str | None, ts: datetime) -> None:
        """The edge box's answer (or its absence) goes on the decision's row and into the audit trail."""
        row = {"greenhouse_id": gh, "cmd_id": str(cmd_id), "status": status, "reason": reason, "ts": ts}
        self.writer.appended(self.journal.append([Job("ack", row, "command_ack", "edge", ts).entry()]))

    def on_estop(self, gh: str, event: EstopEvent) -> None:
        """The physical button: act at once, do not wait for the next telemetry."""
        ctl = self.controllers[gh]
        if event.pressed and not ctl.estop_latched:
            self.metrics.estops.labels(gh, event.source).inc()
            self._latch(ctl, ctl.estop(f"edge:{event.source}", "e-stop button pressed", event.ts), event.ts)

    # ---- operator actions (API; called from any thread) -------------------------------------
    def _on_loop(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the event loop, so it never interleaves with half a decision; wait for it."""
        loop = self._loop
        if loop is None or not loop.is_running() or _running_loop() is loop:
            return fn()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def call() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:  # handed to the caller's thread
                done.set_exception(exc)

        loop.call_soon_threadsafe(call)
        return done.result(timeout=60.0)

    def apply_mode_event(self, event: ModeEvent, command: Command | None = None) -> threading.Event:
        """Journal the mode change, snapshot the controller, then act (``command``); returns an event
        set once its record is stored."""
        job = Job("mode_change", _mode_row(event), _mode_audit_kind(event), event.actor, event.ts)
        stored = self.writer.waiter(job.key)
        self.writer.appended(self.journal.append([job.entry()]))
        self.save_snapshot(event.greenhouse_id)
        if command is not None and self.bridge is not None:
            self.bridge.publish_command(event.greenhouse_id, command)
        return stored

    def _operator(self, act: Callable[[], tuple[ModeEvent, threading.Event]]) -> ModeEvent:
        """An API action: on the loop, then (off it) wait until its record is readable, as before."""
        event, stored = self._on_loop(act)
        if _running_loop() is None and self.writer.alive and not stored.wait(30.0):
            log.warning("mode change %s/%d not stored within 30 s; it stays journaled", event.greenhouse_id, event.seq)
        return event

    def _latch(self, ctl: GreenhouseController, event: ModeEvent, ts: datetime) -> threading.Event:
        """An e-stop: durable first (journal and snapshot, a few ms), then everything off at once."""
        command = ctl.safe_command(ts) if ctl.last_ts is not None else None
        return self.apply_mode_event(event, command)

    def estop(self, gh: str, actor: str, reason: str) -> ModeEvent:
        def act() -> tuple[ModeEvent, threading.Event]:
            now = datetime.now(UTC)
            ctl = self.controllers[gh]
            event = ctl.estop(actor, reason, now)
            self.metrics.estops.labels(gh, "api").inc()
            return event, self._latch(ctl, event, now)
        return self._operator(act)

    def reset_estop(self, gh: str, actor: str, reason: str) -> ModeEvent:
        def act() -> tuple[ModeEvent, threading.Event]:
            event = self.controllers[gh].reset_estop(actor, reason, datetime.now(UTC))
            return event, self.apply_mode_event(event)
        return self._operator(act)

    def set_mode(self, gh: str, mode: str, actor: str, reason: str, manual_action: list[float] | None) -> ModeEvent:
        action = None if manual_action is None else np.asarray(manual_action, dtype=np.float64)

        def act() -> tuple[ModeEvent, threading.Event]:
            event = self.controllers[gh].set_mode(mode, actor, reason, datetime.now(UTC), action)  # type: ignore[arg-type]
            return event, self.apply_mode_event(event)
        return self._operator(act)

    # ---- outbound --------------------------------------------------------------------------
    def _emit(self, decisions: list[ControlDecision], arrived: list[float] | None = None) -> None:
        """Journal (one write) -> snapshot new latches -> publish -> count; the writer stores the rest."""
        if not decisions:
            return
        entries: list[dict[str, Any]] = []
        for d in decisions:
            entries += [Job("mode_change", _mode_row(ev), _mode_audit_kind(ev), ev.actor, ev.ts).entry()
                        for ev in d.events]
            entries.append(Job("decision", d.record(), "decision", d.actor, d.ts, d.explain,
                               self.controllers[d.greenhouse_id].z).entry())
        self.writer.appended(self.journal.append(entries))
        for d in decisions:
            if d.events:  # telemetry reported the e-stop: the latch outlives a crash before anything acts
                self.metrics.estops.labels(d.greenhouse_id, "telemetry").inc()
                self.save_snapshot(d.greenhouse_id)
        if self.bridge is not None:
            for d in decisions:
                self.bridge.publish_command(d.greenhouse_id, d.command)
        now = time.perf_counter()
        for k, d in enumerate(decisions):
            gh = d.greenhouse_id
            self.metrics.decisions.labels(gh, d.actor.split(":")[0]).inc()
            for firing in d.rules_fired:
                self.metrics.safety_clips.labels(gh, firing["rule"]).inc()
            if d.low_confidence:
                self.metrics.low_confidence.labels(gh).inc()
            for kind in d.alarms:
                if not kind.startswith("held:"):
                    self._alarm(gh, kind)
            if arrived is not None:
                self.metrics.decision_latency.labels(gh).observe(now - arrived[k])

    def _on_stored(self, stored: list[tuple[str, dict[str, Any]]]) -> None:
        """Writer reports (its reader thread): the API shows a decision once it is stored."""
        for gh, summary in stored:
            self.last_decision[gh] = summary

    def _alarm(self, gh: str, kind: str) -> None:
        self.metrics.alarms.labels(gh, kind.split(":")[0]).inc()
        self.alarms.append(Alarm(gh, datetime.now(UTC), kind))
        del self.alarms[:-500]
        log.warning("alarm %s: %s", gh, kind)

    async def _housekeeping(self) -> None:
        """Watchdog, ack time-outs, spool flush and periodic snapshots."""
        while True:
            await asyncio.sleep(2.0)
            now = datetime.now(UTC)
            try:
                stale = [d for gh, ctl in self.controllers.items()
                         if gh not in self._in_flight and (d := ctl.watchdog(now)) is not None]
                self._emit(stale)
                if self.bridge is not None:
                    for entry in self.bridge.tracker.expired():
                        self.metrics.ack_timeouts.labels(entry.gh).inc()
                        self._alarm(entry.gh, "ack_timeout")
                        if self.bridge.tracker.can_retry(entry):
                            self.bridge.retry(entry)
                        else:  # given up: the decision's command never got an answer
                            self._record_ack(entry.gh, entry.cmd_id, "timeout",
                                             f"no ack after {entry.attempts} attempts", now)
                    reconnects = int(self.bridge.stats.get("reconnects", 0))
                    if reconnects > self._reconnects_seen:
                        self.metrics.mqtt_reconnects.inc(reconnects - self._reconnects_seen)
                        self._reconnects_seen = reconnects
                self.writer.restart_if_dead()
                self.metrics.spooled.set(self.writer.spooled)  # the writer process flushes the spool
                await self._snapshot_all()
            except Exception:  # housekeeping must never die; the next round retries
                log.exception("housekeeping round failed")

    async def _snapshot_all(self, chunk: int = 32) -> None:
        """Periodic snapshots: taken on the loop between decisions, written as one file off the loop.

        A greenhouse in the middle of a decision is left out of this round (the next one takes it):
        half a decision is not a state to restore."""
        taken: dict[str, dict[str, Any]] = {}
        ghs = list(self.controllers)
        for lo in range(0, len(ghs), chunk):
            for gh in ghs[lo:lo + chunk]:
                if gh not in self._in_flight:
                    taken[gh] = self.controllers[gh].snapshot()
            await asyncio.sleep(0)
        self.snapshots.save_all_later(taken)

    # ---- persistence -----------------------------------------------------------------------
    def save_snapshot(self, gh: str) -> None:
        """Write this greenhouse's snapshot now (durable when this returns)."""
        self.snapshots.save(gh, self.controllers[gh].snapshot())


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
