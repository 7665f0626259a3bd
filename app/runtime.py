"""The running service: registered greenhouses, their controllers, the MQTT bridge, recording.

One path for data: the bridge validates a message and hands it to the event loop; the
greenhouse's controller decides; the command is published (QoS 1) and tracked until its ack;
the decision is recorded (database, or the local spool while the database is down); metrics
are counted. Controller state is snapshotted to a state directory after every mode change and
periodically, and restored at start, so a restart never unlatches an e-stop or resets a cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.audit_sink import AuditSink
from app.controller import (
    ControlDecision,
    ExpertProposer,
    GreenhouseController,
    ModeEvent,
    Proposer,
    ZoneSetup,
)
from app.core.config import Settings
from app.metrics import Metrics
from app.models import Greenhouse, Zone
from app.mqtt.bridge import MqttBridge
from app.mqtt.topics import Ack, EstopEvent, Telemetry
from app.recorder import DecisionRecorder
from policy.baselines import ThresholdExpert
from safety import SafetyLimits

log = logging.getLogger(__name__)


def load_proposer(policy_dir: Path, zones: int) -> Proposer:
    """The shipped (or configured) ensemble; the threshold expert when there is none."""
    if (policy_dir / "ensemble.json").exists():
        from policy.ensemble import load_ensemble

        return load_ensemble(policy_dir, expected_zones=zones)
    log.warning("no policy ensemble at %s: the threshold expert decides", policy_dir)
    return ExpertProposer(ThresholdExpert(zones=zones))


@dataclass
class Alarm:
    greenhouse_id: str
    ts: datetime
    kind: str


class Runtime:
    """All greenhouses of one service process."""

    def __init__(self, settings: Settings, sessions: sessionmaker[Session], *, state_dir: Path,
                 proposer: Proposer | None = None, limits: SafetyLimits | None = None,
                 metrics: Metrics | None = None, audit: AuditSink | None = None) -> None:
        self.settings = settings
        self.sessions = sessions
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.metrics = metrics or Metrics()
        self.recorder = DecisionRecorder(sessions, self.state_dir / "decision-spool.jsonl")
        self.audit = audit
        self.limits = limits or SafetyLimits.default()
        self._proposer = proposer
        self.controllers: dict[str, GreenhouseController] = {}
        self.alarms: list[Alarm] = []
        self.last_decision: dict[str, dict[str, Any]] = {}
        self.bridge: MqttBridge | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._reconnects_seen = 0

    # ---- set-up ----------------------------------------------------------------------------
    def load_greenhouses(self) -> None:
        with self.sessions() as s:
            for gh in s.scalars(select(Greenhouse)):
                zones = s.scalars(select(Zone).where(Zone.greenhouse_id == gh.id).order_by(Zone.index)).all()
                setups = [ZoneSetup(z.soil_type, z.target_low_vwc, z.target_high_vwc, z.saturation_vwc,
                                    z.daily_water_cap_l) for z in zones]
                proposer = self._proposer or load_proposer(Path(self.settings.policy_dir), len(setups))
                limits = self.limits.model_copy(update={"zones": len(setups)}) if self.limits.zones != len(setups) \
                    else self.limits
                ctl = GreenhouseController(gh.id, setups, proposer, limits, command_ttl_s=self.settings.command_ttl_s,
                                           max_age_s=self.settings.max_age_s,
                                           disagreement_threshold=1.0 - self.settings.low_confidence_threshold)
                snap = self._snapshot_path(gh.id)
                if snap.exists():
                    ctl.restore(json.loads(snap.read_text()))
                    log.info("restored controller %s at seq %d (mode %s)", gh.id, ctl.seq, ctl.mode)
                self.controllers[gh.id] = ctl

    async def start(self) -> None:
        self.load_greenhouses()
        loop = asyncio.get_running_loop()
        self.bridge = MqttBridge(
            self.settings.mqtt_url, on_telemetry=self.on_telemetry, on_ack=self.on_ack, on_estop=self.on_estop,
            loop=loop, zones=lambda gh: self.controllers[gh].z if gh in self.controllers else 6,
            known_greenhouses=lambda gh: gh in self.controllers, max_age_s=self.settings.max_age_s,
            ack_timeout_s=self.settings.ack_timeout_s, on_reject=self._on_reject)
        self.bridge.start()
        self._tasks.append(asyncio.create_task(self._housekeeping()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for gh in self.controllers:
            self.save_snapshot(gh)
        if self.bridge is not None:
            self.bridge.close()
        if self.audit is not None:
            self.audit.close()

    # ---- inbound ---------------------------------------------------------------------------
    def _on_reject(self, gh: str | None, reason: str, detail: str) -> None:
        self.metrics.telemetry.labels("rejected", reason).inc()

    def on_telemetry(self, gh: str, tel: Telemetry) -> None:
        t0 = time.perf_counter()
        self.metrics.telemetry.labels("accepted", "").inc()
        ctl = self.controllers[gh]
        was_latched = ctl.estop_latched
        decision = ctl.on_telemetry(tel)
        self._emit(decision)
        if ctl.estop_latched and not was_latched:
            self.metrics.estops.labels(gh, "telemetry").inc()
            self.save_snapshot(gh)
        self.metrics.decision_latency.labels(gh).observe(time.perf_counter() - t0)

    def on_ack(self, gh: str, ack: Ack) -> None:
        if self.bridge is not None:
            self.bridge.tracker.resolve(ack.cmd_id)
        if ack.status != "applied":
            self._alarm(gh, f"command_{ack.status}")

    def on_estop(self, gh: str, event: EstopEvent) -> None:
        """The physical button: act at once, do not wait for the next telemetry."""
        ctl = self.controllers[gh]
        if event.pressed and not ctl.estop_latched:
            self.apply_mode_event(ctl.estop(f"edge:{event.source}", "e-stop button pressed", event.ts))
            self.metrics.estops.labels(gh, event.source).inc()
            self._publish_safe(gh, event.ts)

    # ---- operator actions (API) ------------------------------------------------------------
    def apply_mode_event(self, event: ModeEvent) -> None:
        row = {"greenhouse_id": event.greenhouse_id, "seq": event.seq, "ts": event.ts, "actor": event.actor,
               "from_mode": event.from_mode, "to_mode": event.to_mode, "reason": event.reason}
        self.recorder.record_mode_change(row)
        if self.audit is not None:
            kind = "estop" if event.to_mode == "estop" else ("estop_reset" if event.from_mode == "estop"
                                                              else "mode_change")
            self.audit.add(event.greenhouse_id, kind, event.actor, row, event.ts)
        self.save_snapshot(event.greenhouse_id)

    def estop(self, gh: str, actor: str, reason: str) -> ModeEvent:
        now = datetime.now(UTC)
        event = self.controllers[gh].estop(actor, reason, now)
        self.apply_mode_event(event)
        self.metrics.estops.labels(gh, "api").inc()
        self._publish_safe(gh, now)
        return event

    def reset_estop(self, gh: str, actor: str, reason: str) -> ModeEvent:
        event = self.controllers[gh].reset_estop(actor, reason, datetime.now(UTC))
        self.apply_mode_event(event)
        return event

    def set_mode(self, gh: str, mode: str, actor: str, reason: str, manual_action: list[float] | None) -> ModeEvent:
        action = None if manual_action is None else np.asarray(manual_action, dtype=np.float64)
        event = self.controllers[gh].set_mode(mode, actor, reason, datetime.now(UTC), action)  # type: ignore[arg-type]
        self.apply_mode_event(event)
        return event

    # ---- outbound --------------------------------------------------------------------------
    def _publish_safe(self, gh: str, ts: datetime) -> None:
        """Act on an e-stop at once instead of waiting for the next telemetry."""
        ctl = self.controllers[gh]
        if ctl.last_ts is not None and self.bridge is not None:
            self.bridge.publish_command(gh, ctl.safe_command(ts))

    def _emit(self, decision: ControlDecision) -> None:
        gh = decision.greenhouse_id
        if self.bridge is not None:
            self.bridge.publish_command(gh, decision.command)
        record = decision.record()
        self.recorder.record_decision(record)
        if self.audit is not None:
            self.audit.add(gh, "decision", decision.actor, record, decision.ts)
        self.metrics.decisions.labels(gh, decision.actor.split(":")[0]).inc()
        for firing in decision.rules_fired:
            self.metrics.safety_clips.labels(gh, firing["rule"]).inc()
        if decision.low_confidence:
            self.metrics.low_confidence.labels(gh).inc()
        for kind in decision.alarms:
            if not kind.startswith("held:"):
                self._alarm(gh, kind)
        self.last_decision[gh] = {"seq": decision.seq, "ts": decision.ts.isoformat(), "actor": decision.actor,
                                  "mode": decision.mode, "clipped": decision.clipped,
                                  "confidence": decision.confidence, "alarms": decision.alarms,
                                  "estimate": decision.estimate}

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
                for ctl in self.controllers.values():
                    decision = ctl.watchdog(now)
                    if decision is not None:
                        self._emit(decision)
                if self.bridge is not None:
                    for entry in self.bridge.tracker.expired():
                        self.metrics.ack_timeouts.labels(entry.gh).inc()
                        self._alarm(entry.gh, "ack_timeout")
                        if self.bridge.tracker.can_retry(entry):
                            self.bridge.retry(entry)
                    reconnects = int(self.bridge.stats.get("reconnects", 0))
                    if reconnects > self._reconnects_seen:
                        self.metrics.mqtt_reconnects.inc(reconnects - self._reconnects_seen)
                        self._reconnects_seen = reconnects
                if self.recorder.spooled:
                    self.recorder.flush_spool()
                if self.audit is not None:
                    self.audit.flush()
                self.metrics.spooled.set(self.recorder.spooled)
                for gh in self.controllers:
                    self.save_snapshot(gh)
            except Exception:  # housekeeping must never die; the next round retries
                log.exception("housekeeping round failed")

    # ---- persistence -----------------------------------------------------------------------
    def _snapshot_path(self, gh: str) -> Path:
        return self.state_dir / f"controller-{gh}.json"

    def save_snapshot(self, gh: str) -> None:
        path = self._snapshot_path(gh)
        tmp = path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            json.dump(self.controllers[gh].snapshot(), fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
