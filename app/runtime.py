"""The running service: registered greenhouses, their controllers, the MQTT bridge, recording.

One path for data, one module per stop: the bridge (:mod:`app.mqtt.bridge`) validates a
message and hands it to the event loop; :meth:`Runtime.on_telemetry` queues it in the intake
(:mod:`app.intake`), where it waits, in order per greenhouse, for the next micro-batch
(:mod:`control`: one Kalman pass, one ensemble forward, the safety clipper). The dispatcher
(:mod:`app.dispatch`) journals each decision (one write per chunk) and only then publishes its
command (QoS 1), tracked until its ack; explanations, database rows and audit records follow in
the writer process (:mod:`app.writer`), which tails the journal. E-stops and operator actions
run between a batch's stages, never behind it. Controller state is snapshotted after every mode
change and periodically (:mod:`app.housekeeping`), and restored at start, so a restart never
unlatches an e-stop or resets a cap; the journal and the stored records tell it where the
sequence numbers stood.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import pickle
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from app.audit_sink import AuditSink, record_at_start, record_policy_in_force
from app.broker_link import remember_sent, repeats_after_reconnect
from app.core.config import Settings
from app.deadletter import DeadLetters
from app.dispatch import Alarm, Dispatcher
from app.fleet import build_controllers, continue_after_records
from app.housekeeping import Housekeeping
from app.intake import MAX_BATCH, Intake
from app.journal import DecisionJournal, JournalUnwritable
from app.journal_replay import replay_journal
from app.leases import LeaseBook, LeaseKeeper, default_holder
from app.loop_calls import call_on_loop, running_loop
from app.metrics import Metrics
from app.mqtt.admission import RateLimit
from app.mqtt.bridge import MqttBridge
from app.outlook.feed import OutlookFeed
from app.policy_swap import FleetSwap
from app.policy_watch import PolicyWatcher
from app.private_files import private_dir
from app.proposers import ProposerCache
from app.recorder import DecisionRecorder
from app.settings_watch import SettingsWatch
from app.snapshots import SnapshotStore
from app.writer import WriterConfig, WriterProcess
from control import GreenhouseController, Mode, ModeEvent, Proposer
from safety import SafetyLimits
from twin.config import DEFAULT_ZONES
from wire.topics import Ack, Command, EstopEvent, Telemetry

log = logging.getLogger(__name__)
T = TypeVar("T")
SHED_ALARM_EVERY_S = 60.0


class Runtime:
    """All greenhouses of one service process: set-up, inbound messages, operator actions."""

    def __init__(self, settings: Settings, sessions: sessionmaker[Session], *, state_dir: Path,
                 proposer: Proposer | None = None, limits: SafetyLimits | None = None,
                 metrics: Metrics | None = None, audit: AuditSink | None = None,
                 max_batch: int = MAX_BATCH, outlook: OutlookFeed | None = None) -> None:
        self.settings = settings
        self.sessions = sessions
        self.state_dir = private_dir(Path(state_dir))
        self.metrics = metrics or Metrics()
        self.recorder = DecisionRecorder(sessions, self.state_dir / "decision-spool.jsonl",
                                         dead_letters=DeadLetters(self.state_dir / "dead-letter.jsonl",
                                                                  on_add=self._on_dead_letter))
        self.journal = DecisionJournal(self.state_dir / "journal")
        self.snapshots = SnapshotStore(self.state_dir)
        self.audit = audit
        if audit is not None and audit.dead_letters is None:
            audit.dead_letters = self.recorder.dead_letters
        self.writer_resume = False
        """Journal segments of a previous run are left to the writer: its first round skips what is stored."""
        self.writer = WriterProcess(on_stored=self._on_stored, on_dead_letter=self._on_dead_letter)
        self.metrics.audit_unsealed.set_function(lambda: self.writer.audit_pending)
        self.metrics.audit_last_seal.set_function(lambda: self.writer.audit_last_seal_at or 0.0)
        self.limits = limits or SafetyLimits.default()
        configured = Path(settings.policy_dir)
        self.proposers = ProposerCache(configured, fixed=proposer, fallback=configured,
                                       on_fallback=lambda d, exc: self.policy_watch.fell_back(d, exc))
        self.settings_watch = SettingsWatch(self, settings.settings_poll_s)
        """New registrations and settings changes, live (:mod:`app.settings_watch`)."""
        self.controllers: dict[str, GreenhouseController] = {}
        self.last_decision: dict[str, dict[str, Any]] = {}
        self.last_telemetry: dict[str, Telemetry] = {}
        """Each greenhouse's latest accepted telemetry (read-only for the dashboard's live view)."""
        self.bridge: MqttBridge | None = None
        self.dispatch = Dispatcher(self.controllers, self.journal, self.writer, self.snapshots, self.metrics)
        self.outlook = outlook or OutlookFeed.from_settings(settings)
        """The site's weather and prices, shared by every greenhouse's decisions (:mod:`app.outlook.feed`)."""
        self.intake = Intake(self.controllers, self.dispatch.emit, max_batch,
                             max_waiting=settings.inbox_per_greenhouse, on_shed=self._on_shed,
                             outlook=self.outlook.for_decisions)
        self._shed_alarmed: dict[str, float] = {}
        self.policy_watch = PolicyWatcher(sessions, configured, self.proposers, FleetSwap(
            self.controllers, self.intake, self.dispatch, self.journal, self.writer),
            poll_s=settings.policy_poll_s, on_swapped=self.writer.follow_policy)
        self.housekeeping = Housekeeping(self.controllers, self.intake, self.dispatch, self.writer,
                                         self.snapshots, self.metrics, outlook=self.outlook,
                                         sessions=sessions)
        holder = settings.replica_id or default_holder(self.state_dir)
        self.leases = LeaseBook(sessions, holder, ttl_s=settings.lease_ttl_s, renew_s=settings.lease_renew_s)
        self.keeper = LeaseKeeper(self.leases, self.controllers, self.recorder.last_seq, self.metrics)
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def alarms(self) -> list[Alarm]:
        """Recent alarms, oldest first."""
        return self.dispatch.alarms

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the controllers live on (None before start): operator calls run there."""
        return self._loop

    @property
    def waiting(self) -> int:
        """Telemetry messages accepted and not yet decided."""
        return self.intake.waiting

    @property
    def batches(self) -> int:
        """Micro-batches decided so far (with :attr:`decided`, the mean batch size)."""
        return self.intake.batches

    @property
    def decided(self) -> int:
        return self.intake.decided

    # ---- set-up ----------------------------------------------------------------------------
    def load_greenhouses(self) -> None:
        if self.proposers.fixed is None:
            self.policy_watch.adopt()
        self.controllers.update(build_controllers(self.sessions, self.settings, self.limits,
                                                  self.proposers.get, self.snapshots))
        for ctl in self.controllers.values():
            ctl.obs_builder.tariff = self.outlook.tariff  # the site's adder on every price slot
        self.writer_resume = replay_journal(self.journal, self.recorder, self.proposers.get, self.audit)
        continue_after_records(self.controllers, self.recorder.last_seq)

    def _writer_config(self) -> WriterConfig:
        bind = getattr(self.sessions, "kw", {}).get("bind")
        url = bind.url.render_as_string(hide_password=False) if bind is not None \
            else self.settings.database_url
        keys = None
        if self.audit is not None:
            store = self.audit.store
            keys = (store.keyring.to_json(), store.signer.to_pem())  # the same keys, rebuilt in the writer
        return WriterConfig(database_url=url, spool_path=self.recorder.spool_path,
                            journal=self.journal.folder, policy_dir=self.proposers.directory,
                            proposer=None if self.proposers.fixed is None
                                     else pickle.dumps(self.proposers.fixed),
                            audit_keys=keys, resume=self.writer_resume,
                            zones=tuple(sorted({c.z for c in self.controllers.values()})))

    async def start(self) -> None:
        self.load_greenhouses()
        if self.audit is not None and self.controllers:
            # A promotion or rollback (another GREENTWIN_POLICY_DIR) shows in the trail at once.
            record_at_start(record_policy_in_force, self.audit.store,
                            [c.proposer.policy_version for c in self.controllers.values()])
        if "torch" in sys.modules:  # an ensemble was loaded (the expert alone does not need torch)
            # Serving batches are small: a thread pool per op gains nothing on them, and its threads
            # would compete for the cores with the bridge and the writer process.
            sys.modules["torch"].set_num_threads(1)
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.intake.stopping = False
        self.writer.start(self._writer_config())
        try:
            await self.keeper.step()  # this replica's greenhouses, before any telemetry is heard
        except Exception as exc:  # noqa: BLE001 - the keeper's rounds retry; nothing is commanded meanwhile
            log.error("no leases at start (%s): commanding nothing until a lease round succeeds", exc)
        self.dispatch.fence = self.leases.token
        cfg = self.settings
        self.bridge = MqttBridge(
            cfg.mqtt_target(), on_telemetry=self.on_telemetry, on_ack=self.on_ack, on_estop=self.on_estop,
            loop=loop, zones=lambda gh: self.controllers[gh].z if gh in self.controllers else DEFAULT_ZONES,
            known_greenhouses=lambda gh: gh in self.controllers, max_age_s=cfg.max_age_s,
            ack_timeout_s=cfg.ack_timeout_s, on_reject=self._on_reject, max_future_s=cfg.max_clock_skew_s,
            rate_limit=RateLimit(cfg.telemetry_rate_per_s, cfg.telemetry_burst), tls=cfg.mqtt_tls(),
            event_rate_limit=RateLimit(cfg.telemetry_rate_per_s, cfg.telemetry_burst),
            byte_budget=RateLimit(cfg.telemetry_bytes_per_s, cfg.telemetry_bytes_burst),
            on_shed=lambda gh: loop.call_soon_threadsafe(self._on_shed, gh, "rate_limit"),
            on_connected=self.on_connected, topic_root=cfg.mqtt_topic_root)
        self.dispatch.bridge = self.bridge
        await asyncio.to_thread(remember_sent, self.bridge.tracker, self.recorder, list(self.controllers))
        self.bridge.start()
        self._tasks.append(asyncio.create_task(self.housekeeping.run()))
        self._tasks.append(asyncio.create_task(self.keeper.run()))
        self._tasks.append(asyncio.create_task(self.outlook.run()))
        self._tasks.append(asyncio.create_task(self.settings_watch.run()))
        if self.proposers.fixed is None:
            self._tasks.append(asyncio.create_task(self.policy_watch.run()))
        # Everything loaded so far (libraries, models, controllers) lives as long as the service: a
        # full garbage collection would walk all of it (~0.3 M objects, hundreds of ms, every so
        # often: the p99 of the control loop). Frozen, a collection walks only what came later.
        gc.collect()
        gc.freeze()

    async def stop(self) -> None:
        self.intake.close()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.intake.drained()  # the batch in progress finishes; waiting telemetry is dropped
        if self.dispatch.fence is not None:  # hand the greenhouses over now rather than at expiry
            await asyncio.to_thread(self.keeper.release)
        if self.bridge is not None:
            self.bridge.close()
        self.snapshots.save_all_later({gh: ctl.snapshot() for gh, ctl in self.controllers.items()})
        self.snapshots.close()
        self.journal.close()
        await asyncio.to_thread(self.writer.stop)  # stores the rest, seals and checkpoints the audit trail
        if self.audit is not None:
            self.audit.close()
        self.outlook.close()
        self._loop = None
        gc.unfreeze()  # back to the collector's care (matters in a process that goes on, like the tests)

    # ---- inbound (the bridge hands these over on the event loop) -----------------------------
    def _on_reject(self, gh: str | None, reason: str, detail: str) -> None:
        self.metrics.telemetry.labels("rejected", reason).inc()

    def _on_shed(self, gh: str, reason: str) -> None:
        """Valid telemetry dropped under load: counted always, alarmed at most once a minute per
        greenhouse."""
        self.metrics.telemetry_shed.labels(gh, reason).inc()
        now = time.monotonic()
        if now - self._shed_alarmed.get(gh, -SHED_ALARM_EVERY_S) >= SHED_ALARM_EVERY_S:
            self._shed_alarmed[gh] = now
            self.dispatch.alarm(gh, f"telemetry_shed:{reason}")

    def on_connected(self, connects: int) -> None:
        """After a reconnect: young commands repeated, valve feedback judged afresh
        (:mod:`app.broker_link`)."""
        if connects <= 1:
            return
        repeats = repeats_after_reconnect(self.controllers, self.intake.in_flight, self.dispatch)
        log.info("MQTT reconnected (connect #%d): %d greenhouse(s) re-commanded", connects, len(repeats))
        self.dispatch.emit(repeats)

    def on_telemetry(self, gh: str, tel: Telemetry) -> None:
        """Queue for the next micro-batch (messages of one greenhouse are decided in arrival order)."""
        self.last_telemetry[gh] = tel
        if not self.dispatch.may_command(gh):  # another replica holds the lease and decides
            self.metrics.telemetry.labels("ignored", "not_mine").inc()
            return
        self.metrics.telemetry.labels("accepted", "").inc()
        self.intake.put(gh, tel)

    def on_ack(self, gh: str, ack: Ack) -> None:
        """The bridge has resolved the pending command; the first answer of each kind to a command this
        service sent that greenhouse is recorded (a late one too: the trail says what the edge box
        answered). Repeats and acks for commands nobody sent stop at the bridge, so a flood of them
        costs no records. Acks of a greenhouse another replica holds are that replica's to record."""
        if not self.dispatch.may_command(gh):
            return
        if ack.status != "applied":
            self.dispatch.alarm(gh, f"command_{ack.status}")
        self.dispatch.record_ack(gh, ack.cmd_id, ack.status, ack.reason, ack.ts)

    def on_estop(self, gh: str, event: EstopEvent) -> None:
        """The physical button: act at once, do not wait for the next telemetry."""
        ctl = self.controllers[gh]
        if not self.dispatch.may_command(gh):  # its holder latches (a take-over reads the latch back)
            return
        if event.pressed and not ctl.estop_latched:
            self.metrics.estops.labels(gh, event.source).inc()
            self._latch(ctl, ctl.estop(f"edge:{event.source}", "e-stop button pressed", event.ts), event.ts)

    # ---- operator actions (API; called from any thread) -------------------------------------
    def _operator(self, gh: str, act: Callable[[], tuple[ModeEvent, threading.Event]]) -> ModeEvent:
        """An API action: on the loop, then (off it) wait until its record is readable, so the caller
        can read back what it did. Only the replica holding the lease acts (ValueError: 409)."""
        if gh in self.controllers and not self.dispatch.may_command(gh):
            raise ValueError(f"{gh} is controlled by another replica; retry (the lease moves within "
                             f"{self.settings.lease_ttl_s + self.settings.lease_renew_s:g} s at most)")
        event, stored = call_on_loop(self._loop, lambda: self._undone_if_unjournaled(gh, act))
        if running_loop() is None and self.writer.alive and not stored.wait(30.0):
            log.warning("mode change %s/%d not stored within 30 s; it stays journaled", event.greenhouse_id,
                        event.seq)
        return event

    def _undone_if_unjournaled(self, gh: str, act: Callable[[], T]) -> T:
        """``act()``; when its record cannot be journaled, the controller goes back to where it was."""
        before = self.controllers[gh].snapshot()
        try:
            return act()
        except JournalUnwritable:
            self.controllers[gh].restore(before)
            raise

    def _latch(self, ctl: GreenhouseController, event: ModeEvent, ts: datetime) -> threading.Event:
        """An e-stop: durable first (journal and snapshot, a few ms), then everything off at once."""
        command: Command | None = ctl.safe_command(ts) if ctl.last_ts is not None else None
        return self.dispatch.apply_mode_event(event, command)

    def estop(self, gh: str, actor: str, reason: str) -> ModeEvent:
        def act() -> tuple[ModeEvent, threading.Event]:
            now = datetime.now(UTC)
            ctl = self.controllers[gh]
            event = ctl.estop(actor, reason, now)
            stored = self._latch(ctl, event, now)
            self.metrics.estops.labels(gh, "api").inc()  # once it is on record (a refused one is not)
            return event, stored
        return self._operator(gh, act)

    def reset_estop(self, gh: str, actor: str, reason: str, to_mode: Mode = "manual") -> ModeEvent:
        def act() -> tuple[ModeEvent, threading.Event]:
            event = self.controllers[gh].reset_estop(actor, reason, datetime.now(UTC), to_mode)
            return event, self.dispatch.apply_mode_event(event)
        return self._operator(gh, act)

    def set_mode(self, gh: str, mode: str, actor: str, reason: str,
                 manual_action: list[float] | None) -> ModeEvent:
        action = None if manual_action is None else np.asarray(manual_action, dtype=np.float64)

        def act() -> tuple[ModeEvent, threading.Event]:
            event = self.controllers[gh].set_mode(mode, actor, reason, datetime.now(UTC), action)  # type: ignore[arg-type]
            return event, self.dispatch.apply_mode_event(event)
        return self._operator(gh, act)

    def _on_dead_letter(self, gh: str, kind: str, reason: str) -> None:
        """A record quarantined (here at replay, or in the writer): an operator must look at it."""
        self.dispatch.alarm(gh, f"dead_letter:{kind}")

    def _on_stored(self, stored: list[tuple[str, dict[str, Any]]]) -> None:
        """Writer reports (its reader thread): the API shows a decision once it is stored."""
        for gh, summary in stored:
            self.last_decision[gh] = summary

