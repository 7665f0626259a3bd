"""One greenhouse's control loop: telemetry in, one safe command and one decision record out.

telemetry -> Kalman estimate -> observation -> every ensemble member's action -> vote
-> (low confidence: threshold expert) -> safety clipper -> command -> decision record.

The controller does no I/O: it returns what to publish and what to record, so the same code
runs under the MQTT service, the benchmarks and the tests, and its state can be snapshotted
and restored after a restart (e-stop latch, mode, estimator, dwell timers, daily totals).

:class:`DecisionBatch` runs the same steps for several greenhouses at once (one Kalman pass, one
ensemble forward); ``on_telemetry`` is a batch of one. An ensemble decision's explanation is
captured as an :class:`ExplainRequest` and computed later, for many decisions in one pass
(:func:`explain_decisions`), except in ``on_telemetry``, which still returns it filled in.
"""

from __future__ import annotations

import math
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

import numpy as np

from app.mqtt.topics import Command, Telemetry
from app.observation import ObservationBuilder
from policy.baselines import ThresholdExpert
from policy.tuning import served_expert
from safety import ClipContext, SafetyLimits, clip, safe_state, vote
from safety.interlock import interlock_one
from twin.climate import (
    PAR_PER_W_M2,
    crop_coefficient,
    psychrometric_constant,
    reference_et0,
    saturation_vapour_kpa,
)
from twin.config import SOIL_INDEX, SOIL_TYPES, ClimateConfig, CropConfig, TwinConfig
from twin.estimator import (
    PROBE_STATUS,
    GreenhouseEstimate,
    GreenhouseEstimator,
    ZoneSoilModel,
    update_many,
)
from twin.hydraulics import valve_failure_latch
from twin.spec import FORECAST_HOURS

Mode = Literal["auto", "manual", "estop"]
SNAPSHOT_VERSION = 1
VALVE_JUDGE_S = 5.0
"""A valve is judged failed only on telemetry at least this long after the command (it opens in ~1-3 s)."""


class Proposer(Protocol):
    """An ensemble as the controller sees it."""

    policy_version: str

    def propose(self, obs: np.ndarray) -> np.ndarray:
        """(D,) observation -> (K, Z + 2) member actions."""
        ...


@dataclass(frozen=True)
class ExpertProposer:
    """The threshold expert as a one-member ensemble (no trained policy available)."""

    expert: ThresholdExpert
    policy_version: str = "expert"

    def propose(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(self.expert(obs[None, :].astype(np.float32)), dtype=np.float64)

    def propose_many(self, obs: np.ndarray) -> np.ndarray:
        """(N, D) -> (1, N, Z + 2): the expert is batched already."""
        return np.asarray(self.expert(obs.astype(np.float32)), dtype=np.float64)[None]


def propose_many(proposer: Proposer, obs: np.ndarray) -> np.ndarray:
    """(N, D) observations -> (K, N, Z + 2): one call when the proposer takes a batch (the ensemble does)."""
    many = getattr(proposer, "propose_many", None)
    if many is not None:
        return np.asarray(many(obs))
    return np.stack([np.asarray(proposer.propose(o)) for o in obs], axis=1)


@dataclass(frozen=True)
class ZoneSetup:
    """A registered zone: soil class, target band and limits."""

    soil_type: str
    target_low: float
    target_high: float
    saturation: float
    daily_water_cap_l: float
    root_mm: float = 300.0


@dataclass(frozen=True)
class ModeEvent:
    """A recorded mode change (who and why)."""

    greenhouse_id: str
    seq: int
    ts: datetime
    actor: str
    from_mode: Mode
    to_mode: Mode
    reason: str


@dataclass(frozen=True)
class ExplainRequest:
    """Inputs of one decision's explanation, captured when it was decided (the history moves on)."""

    obs: np.ndarray
    """(D,) float32 observation the ensemble saw."""
    confidence: float
    history: tuple[np.ndarray, np.ndarray] | None
    """(observations (T, D), actions (T, A)) up to this decision, kept for low-confidence ones."""


@dataclass
class ControlDecision:
    """Everything one decision produced; ``record()`` is the decision-table row."""

    greenhouse_id: str
    seq: int
    ts: datetime
    actor: str
    mode: Mode
    telemetry: dict[str, Any]
    estimate: dict[str, Any] | None
    member_actions: list[list[float]]
    voted: dict[str, Any]
    clipped: dict[str, Any]
    rules_fired: list[dict[str, Any]]
    confidence: float
    low_confidence: bool
    command: Command
    alarms: list[str] = field(default_factory=list)
    observation: list[float] | None = None
    explanation: dict[str, Any] | None = None
    events: list[ModeEvent] = field(default_factory=list)
    """Mode changes made while deciding (telemetry reporting the e-stop), to be recorded before it."""
    explain: ExplainRequest | None = None
    """What :func:`explain_decisions` needs, for an ensemble decision whose explanation is still to come."""

    @property
    def is_override(self) -> bool:
        """An operator's manual action: stored with its observation, a demonstration for training."""
        return self.mode == "manual" and self.actor.startswith("operator:")

    def record(self) -> dict[str, Any]:
        estimate = self.estimate
        if self.is_override and self.observation is not None:
            estimate = {**(estimate or {}), "observation": self.observation}
        return {"greenhouse_id": self.greenhouse_id, "seq": self.seq, "ts": self.ts, "actor": self.actor,
                "mode": self.mode, "telemetry": self.telemetry, "estimate": estimate,
                "member_actions": self.member_actions, "voted": self.voted, "clipped": self.clipped,
                "rules_fired": self.rules_fired, "reward_terms": None, "confidence": self.confidence,
                "explanation": {**(self.explanation or {}), "alarms": self.alarms,
                                "low_confidence": self.low_confidence},
                "cmd_id": str(self.command.cmd_id), "ack_status": "pending"}


class CommandIds:
    """Random (version 4) command UUIDs drawn from the OS 256 at a time.

    ``uuid.uuid4`` asks the OS for 16 bytes per command; each call lets other threads take the
    interpreter lock and the control loop wait to get it back, once per command. One draw per
    256 commands gives the same kind of id at a fraction of the waits.
    """

    def __init__(self, per_draw: int = 256) -> None:
        self.per_draw = per_draw
        self._buf = b""
        self._pos = 0
        self._lock = threading.Lock()

    def __call__(self) -> uuid.UUID:
        with self._lock:
            if self._pos >= len(self._buf):
                self._buf, self._pos = os.urandom(16 * self.per_draw), 0
            raw = self._buf[self._pos:self._pos + 16]
            self._pos += 16
        return uuid.UUID(bytes=raw, version=4)


_COMMAND_IDS = CommandIds()


def _action_dict(action: np.ndarray, zones: int) -> dict[str, Any]:
    return {"valves": [int(v >= 0.5) for v in action[:zones]], "pump_pct": float(action[zones]),
            "light_pct": float(action[zones + 1])}


def soil_models(zones: list[ZoneSetup], dt_s: float, crop: CropConfig) -> list[ZoneSoilModel]:
    """Estimator process models for registered zones, from the soil class table."""
    out = []
    for z in zones:
        soil = SOIL_TYPES[SOIL_INDEX[z.soil_type]]
        fc, wp = soil.field_capacity, soil.wilting_point
        out.append(ZoneSoilModel(field_capacity=fc, wilting_point=wp, saturation=min(soil.saturation, z.saturation),
                                 drain_frac=1.0 - soil.hourly_retention ** (dt_s / 3600.0),
                                 inv_stress_span=1.0 / ((1.0 - crop.depletion_fraction) * (fc - wp)),
                                 root_mm=z.root_mm, dt_s=dt_s))
    return out


class GreenhouseController:
    """Decisions for one greenhouse; see the module docstring for the pipeline."""

    def __init__(self, greenhouse_id: str, zones: list[ZoneSetup], proposer: Proposer, limits: SafetyLimits, *,
                 probes_per_zone: int = 2, step_s: float = 60.0, disagreement_threshold: float = 0.35,
                 command_ttl_s: float = 30.0, max_age_s: float = 120.0,
                 cmd_id_factory: Callable[[], uuid.UUID] | None = None) -> None:
        self.gh = greenhouse_id
        self.zones = zones
        self.z = len(zones)
        self.proposer = proposer
        self.limits = limits
        self.step_s = step_s
        self.threshold = disagreement_threshold
        self.ttl_s = command_ttl_s
        self.max_age_s = max_age_s
        self.new_cmd_id = cmd_id_factory or _COMMAND_IDS
        twin_cfg = TwinConfig(zones=self.z)
        self.crop = twin_cfg.crop
        self.climate: ClimateConfig = twin_cfg.climate
        self.gamma = psychrometric_constant(self.climate)
        self.expert = served_expert(self.z)  # tuned behind the interlock it is served with
        self.estimator = GreenhouseEstimator(soil_models(zones, step_s, self.crop), probes_per_zone)
        self.obs_builder = ObservationBuilder(self.z, np.array([z.target_low for z in zones]),
                                              np.array([z.target_high for z in zones]))
        self._saturation = np.array([z.saturation for z in zones])
        self.mode: Mode = "auto"
        self.estop_latched = False
        self.manual_action = safe_state(self.z)
        self.manual_actor = "operator:manual"
        """Who set the manual action: its decisions are that operator's demonstrations."""
        self.seq = 0
        self.cmd_seq = 0
        self.prev_action = safe_state(self.z)
        self.valve_failed = np.zeros(self.z)
        """1.0 for a valve commanded open that stayed closed, until it is seen open (as in the twin)."""
        self.last_cmd_id: uuid.UUID | None = None
        self.last_cmd_refused = False
        """The edge box answered the last command ``rejected`` or ``expired``: its valves were never
        told to move, so closed feedback says nothing about them."""
        self.valve_changed_at: list[datetime | None] = [None] * self.z
        self.water_today_l = np.zeros(self.z)
        self.lights_hours_today = 0.0
        self.par_mol_today = 0.0
        self.day: str | None = None
        self.last_ts: datetime | None = None
        self.history: Any = None  # policy.explain.ExplanationHistory, created with the first explanation

    # ---- modes ---------------------------------------------------------------------------
    def _mode_event(self, to: Mode, actor: str, reason: str, ts: datetime) -> ModeEvent:
        self.seq += 1
        event = ModeEvent(self.gh, self.seq, ts, actor, self.mode, to, reason)
        self.mode = to
        return event

    def estop(self, actor: str, reason: str, ts: datetime) -> ModeEvent:
        """Latch the e-stop: everything off until an authorised reset."""
        self.estop_latched = True
        return self._mode_event("estop", actor, reason, ts)

    def reset_estop(self, actor: str, reason: str, ts: datetime) -> ModeEvent:
        if not reason.strip():
            raise ValueError("an e-stop reset needs a reason")
        if not self.estop_latched:
            raise ValueError("no e-stop is latched")
        self.estop_latched = False
        return self._mode_event("auto", actor, reason, ts)

    def set_mode(self, mode: Mode, actor: str, reason: str, ts: datetime,
                 manual_action: np.ndarray | None = None) -> ModeEvent:
        """Switch between auto and manual; e-stop goes through :meth:`estop` / :meth:`reset_estop`."""
        if self.estop_latched:
            raise ValueError("e-stop is latched: reset it first")
        if mode not in ("auto", "manual"):
            raise ValueError(f"set_mode takes 'auto' or 'manual', got {mode!r}")
        if mode == "manual":
            if manual_action is None or np.shape(manual_action) != (self.z + 2,):
                raise ValueError(f"manual mode needs an action of {self.z + 2} values")
            self.manual_action = np.asarray(manual_action, dtype=np.float64)
            self.manual_actor = actor if actor.startswith("operator:") else f"operator:{actor}"
        return self._mode_event(mode, actor, reason, ts)

    # ---- the decision ----------------------------------------------------------------------
    def _account(self, tel: Telemetry, dt_s: float, alarms: list[str]) -> np.ndarray:
        """Water per zone from the measured flow (not the command), with feedback checks."""
        valve_fb = np.asarray(tel.valve_open, dtype=np.float64)
        litres = tel.flow_l_min * dt_s / 60.0
        n_open = valve_fb.sum()
        prev_valves = self.prev_action[: self.z] >= 0.5
        if litres > 0.5 and n_open == 0:
            alarms.append("flow_without_open_valve")
        if prev_valves.any() and self.prev_action[self.z] > 0 and n_open > 0 and tel.flow_l_min < 0.05:
            alarms.append("valve_open_no_flow")
        mismatch = np.flatnonzero(prev_valves != (valve_fb >= 0.5))
        if self.last_ts is not None and mismatch.size:
            alarms.append("valve_feedback_mismatch:" + ",".join(str(i) for i in mismatch))
        if self.last_ts is not None and dt_s >= VALVE_JUDGE_S and not self.last_cmd_refused:
            self.valve_failed = valve_failure_latch(np, self.valve_failed, prev_valves, valve_fb >= 0.5)
        failed = np.flatnonzero(self.valve_failed >= 0.5)
        if failed.size:
            alarms.append("valve_failed:" + ",".join(str(i) for i in failed))
        return valve_fb * (litres / n_open) if n_open > 0 else np.zeros(self.z)

    def on_telemetry(self, tel: Telemetry, forecast_temp_c: np.ndarray | None = None,
                     forecast_solar_w_m2: np.ndarray | None = None) -> ControlDecision:
        """One accepted telemetry message -> one decision, explanation included (a batch of one)."""
        batch = DecisionBatch([Pending(self, tel, forecast_temp_c, forecast_solar_w_m2)])
        decision = batch.run()[0]
        if decision.explain is not None:
            decision.explanation = explain_decisions(self.proposer, [decision.explain])[0]
        return decision

    # The phases of one decision; :class:`DecisionBatch` runs each for many greenhouses at once.
    def _begin(self, item: Pending) -> _Step:
        """Time step, day roll-over, water and light accounting: everything before the estimate."""
        tel, alarms = item.tel, []
        ts = tel.ts
        dt_s = self.step_s if self.last_ts is None else min(max((ts - self.last_ts).total_seconds(), 1.0), 3600.0)
        self._roll_day(ts)
        zone_water = self._account(tel, dt_s, alarms)
        self.water_today_l += zone_water
        self.lights_hours_today += tel.light_pct / 100.0 * dt_s / 3600.0
        if tel.par_umol_m2_s is not None and math.isfinite(tel.par_umol_m2_s):
            self.par_mol_today += max(float(tel.par_umol_m2_s), 0.0) * dt_s * 1e-6
        self.obs_builder.add_irrigation(zone_water, dt_s)
        day = self.obs_builder.crop_day0 + (0.0 if self.obs_builder.first_ts is None
                                            else (ts - self.obs_builder.first_ts).total_seconds() / 86400.0)
        return _Step(self, item, dt_s, alarms, zone_water, day)

    def _etc_inputs(self, step: _Step) -> tuple[float, float, float, float]:
        """(air temperature, actual vapour pressure, natural and lamp radiation) for the step's ET0."""
        tel = step.item.tel
        temp = tel.air_temp_c if tel.air_temp_c is not None else self.obs_builder.held["air_temp"]
        rh = tel.air_rh_pct if tel.air_rh_pct is not None else self.obs_builder.held["air_rh"]
        par = tel.par_umol_m2_s if tel.par_umol_m2_s is not None else 0.0
        lamp_par = self.climate.lamp_par_umol_m2_s * tel.light_pct / 100.0
        es = float(saturation_vapour_kpa(np, np.float64(temp)))
        return (temp, rh / 100.0 * es, max(par - lamp_par, 0.0) / PAR_PER_W_M2,
                0.5 * self.climate.lamp_power_w_m2 * tel.light_pct / 100)

    def _observe(self, step: _Step) -> None:
        """Estimate -> e-stop latch from telemetry -> the policy's observation."""
        tel, est = step.item.tel, step.estimate
        assert est is not None
        step.moisture = est.theta
        step.sensor_ok = ~est.filled | (est.status == PROBE_STATUS.index("ok")).any(axis=1)
        if tel.estop and not self.estop_latched:
            step.events.append(self.estop("edge:estop", "telemetry reports the e-stop pressed", tel.ts))
        fc_t = step.item.forecast_temp_c if step.item.forecast_temp_c is not None \
            else np.full(FORECAST_HOURS, tel.air_temp_c or 20.0)
        fc_s = step.item.forecast_solar_w_m2 if step.item.forecast_solar_w_m2 is not None \
            else np.zeros(FORECAST_HOURS)
        step.obs, held = self.obs_builder.build(
            ts=tel.ts, moisture=step.moisture, readings=tel.model_dump(), valve_open=np.asarray(tel.valve_open, float),
            pump_pct=tel.pump_pct, light_pct=tel.light_pct, pump_current_a=tel.pump_current_a,
            forecast_temp_c=fc_t, forecast_solar_w_m2=fc_s, valve_failed=self.valve_failed,
            dli_today=self.par_mol_today, lamp_hours_today=self.lights_hours_today)
        step.alarms += [f"held:{name}" for name in held]

    def _wants_policy(self) -> bool:
        return not self.estop_latched and self.mode == "auto"

    def _finish(self, step: _Step) -> ControlDecision:
        """Vote -> fallback -> safety clip -> command. Reads the mode *now*: an e-stop or a mode
        change that arrived while the batch was being prepared applies to this decision."""
        tel, ts, obs = step.item.tel, step.item.tel.ts, step.obs
        assert obs is not None and step.moisture is not None and step.sensor_ok is not None
        members = np.zeros((0, self.z + 2))
        confidence, low = 1.0, False
        actor = f"policy:{self.proposer.policy_version}"
        if self.estop_latched:
            proposed, actor = safe_state(self.z), "estop"
        elif self.mode == "manual":
            proposed, actor = self.manual_action, self.manual_actor
        else:
            members = step.members if step.members is not None else self.proposer.propose(obs)
            decision = vote(members, disagreement_threshold=self.threshold, zones=self.z)
            confidence, low = decision.confidence, decision.low_confidence
            proposed = decision.action
            if low:
                proposed = np.asarray(self.expert(obs[None, :])[0], dtype=np.float64)
                actor = "expert:low_confidence"
            # The vote of interlocked members need not be interlocked (nor is the expert): no pump
            # on a single path, no command to a failed valve. Manual mode is the operator's own test.
            proposed = interlock_one(proposed, obs, self.z)
        moisture, sensor_ok = step.moisture, step.sensor_ok
        ctx = ClipContext(dt_s=step.dt_s, prev_action=self.prev_action,
                          valve_state_age_s=self._valve_ages(ts), zone_water_today_l=self.water_today_l,
                          moisture_vwc=np.where(sensor_ok, moisture, np.nan), sensor_ok=sensor_ok,
                          saturation_vwc=self._saturation,
                          natural_par_umol=float(tel.par_umol_m2_s) - self.climate.lamp_par_umol_m2_s * tel.light_pct
                          / 100 if tel.par_umol_m2_s is not None else math.nan,
                          lights_on_hours_today=self.lights_hours_today,
                          local_hour=ts.hour + ts.minute / 60.0 + ts.second / 3600.0,
                          valve_failed=None if self.mode == "manual" else self.valve_failed >= 0.5)
        safe, report = clip(proposed, ctx, self.limits)
        if self.estop_latched:
            safe = safe_state(self.z)
        request = None
        if len(members) and hasattr(self.proposer, "members"):
            request = self._explain_request(obs, safe, confidence)
        self._track_valves(safe, ts)
        self.prev_action = np.array(safe, dtype=np.float64)
        self.last_ts = ts
        self.seq += 1
        self.cmd_seq += 1
        mode: Mode = "estop" if self.estop_latched else self.mode
        command = Command(cmd_id=self.new_cmd_id(), ts=ts, seq=self.cmd_seq, ttl_s=self.ttl_s, mode=mode,
                          valves=[int(v >= 0.5) for v in safe[: self.z]], pump_pct=float(safe[self.z]),
                          light_pct=float(safe[self.z + 1]), policy_version=self.proposer.policy_version)
        self.last_cmd_id, self.last_cmd_refused = command.cmd_id, False
        est = step.estimate
        assert est is not None
        return ControlDecision(
            greenhouse_id=self.gh, seq=self.seq, ts=ts, actor=actor, mode=mode,
            telemetry=tel.model_dump(mode="json"),
            estimate={"theta": moisture.tolist(), "std": est.std.tolist(), "probe_status": est.probe_status(),
                      "filled": est.filled.tolist()},
            member_actions=members.tolist(), voted=_action_dict(np.asarray(proposed), self.z),
            clipped=_action_dict(safe, self.z),
            rules_fired=[{"rule": f.rule_id, "actuator": f.actuator, "before": f.before, "after": f.after}
                         for f in report.firings],
            confidence=float(confidence), low_confidence=bool(low), command=command, alarms=step.alarms,
            observation=obs.tolist(), events=step.events, explain=request)

    def _explain_request(self, obs: np.ndarray, action: np.ndarray, confidence: float) -> ExplainRequest:
        """Top-3 factors for every ensemble decision; with low confidence also the last 10 steps
        (the report's heat map). Captured now; :func:`explain_decisions` computes them later."""
        from policy.explain import ExplanationHistory

        if self.history is None:
            self.history = ExplanationHistory(maxlen=10)
        self.history.record(self.gh, obs, action)
        history = self.history.snapshot(self.gh) if confidence < 1.0 - self.threshold else None
        return ExplainRequest(np.array(obs, dtype=np.float32), float(confidence), history)

    def watchdog(self, now: datetime) -> ControlDecision | None:
        """Stale telemetry: send the safe state and raise an alarm (None while telemetry is fresh)."""
        if self.last_ts is None or (now - self.last_ts) <= timedelta(seconds=self.max_age_s):
            return None
        self.seq += 1
        safe = safe_state(self.z)
        command = self.safe_command(now)
        mode: Mode = command.mode
        return ControlDecision(greenhouse_id=self.gh, seq=self.seq, ts=now, actor="watchdog", mode=mode,
                               telemetry={}, estimate=None, member_actions=[], voted=_action_dict(safe, self.z),
                               clipped=_action_dict(safe, self.z), rules_fired=[], confidence=1.0,
                               low_confidence=False, command=command, alarms=["telemetry_stale"])

    def note_ack(self, cmd_id: uuid.UUID, status: str) -> None:
        """The edge box's answer to a command; only the latest command's matters here."""
        if cmd_id == self.last_cmd_id:
            self.last_cmd_refused = status in ("rejected", "expired")

    def safe_command(self, ts: datetime) -> Command:
        """Everything off, as a fresh command (watchdog, e-stop): also becomes the previous action."""
        self.cmd_seq += 1
        self.prev_action = safe_state(self.z)
        mode: Mode = "estop" if self.estop_latched else self.mode
        return Command(cmd_id=self.new_cmd_id(), ts=ts, seq=self.cmd_seq, ttl_s=self.ttl_s, mode=mode,
                       valves=[0] * self.z, pump_pct=0.0, light_pct=0.0, policy_version=self.proposer.policy_version)

    # ---- bookkeeping --------------------------------------------------------------------
    def _roll_day(self, ts: datetime) -> None:
        day = ts.date().isoformat()
        if day != self.day:
            self.day = day
            self.water_today_l = np.zeros(self.z)
            self.lights_hours_today = 0.0
            self.par_mol_today = 0.0

    def _valve_ages(self, ts: datetime) -> np.ndarray:
        return np.array([1e9 if t is None else (ts - t).total_seconds() for t in self.valve_changed_at])

    def _track_valves(self, action: np.ndarray, ts: datetime) -> None:
        for i in range(self.z):
            if (action[i] >= 0.5) != (self.prev_action[i] >= 0.5):
                self.valve_changed_at[i] = ts

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state to persist; restore with :meth:`restore` after a restart."""
        return {"version": SNAPSHOT_VERSION, "mode": self.mode, "estop_latched": self.estop_latched,
                "manual_action": self.manual_action.tolist(), "manual_actor": self.manual_actor,
                "seq": self.seq, "cmd_seq": self.cmd_seq,
                "prev_action": self.prev_action.tolist(), "valve_failed": self.valve_failed.tolist(),
                "valve_changed_at": [None if t is None else t.isoformat() for t in self.valve_changed_at],
                "water_today_l": self.water_today_l.tolist(), "lights_hours_today": self.lights_hours_today,
                "day": self.day, "last_ts": None if self.last_ts is None else self.last_ts.isoformat(),
                "estimator": self.estimator.state_dict(),
                "irrigation_24h_mm": self.obs_builder.irrigation_24h_mm.tolist(),
                "held": dict(self.obs_builder.held),
                "first_ts": None if self.obs_builder.first_ts is None else self.obs_builder.first_ts.isoformat()}

    def restore(self, snap: dict[str, Any]) -> None:
        if snap.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"controller snapshot version {snap.get('version')!r}, expected {SNAPSHOT_VERSION}")

        def when(v: str | None) -> datetime | None:
            return None if v is None else datetime.fromisoformat(v)

        self.mode, self.estop_latched = snap["mode"], bool(snap["estop_latched"])
        self.manual_action = np.asarray(snap["manual_action"], dtype=np.float64)
        self.manual_actor = str(snap.get("manual_actor", "operator:manual"))
        self.seq, self.cmd_seq = int(snap["seq"]), int(snap["cmd_seq"])
        self.prev_action = np.asarray(snap["prev_action"], dtype=np.float64)
        self.valve_failed = np.asarray(snap.get("valve_failed", np.zeros(self.z)), dtype=np.float64)
        self.valve_changed_at = [when(v) for v in snap["valve_changed_at"]]
        self.water_today_l = np.asarray(snap["water_today_l"], dtype=np.float64)
        self.lights_hours_today, self.day = float(snap["lights_hours_today"]), snap["day"]
        self.last_ts = when(snap["last_ts"])
        self.estimator.load_state_dict(snap["estimator"])
        self.obs_builder.irrigation_24h_mm = np.asarray(snap["irrigation_24h_mm"], dtype=np.float64)
        self.obs_builder.held = dict(snap["held"])
        self.obs_builder.first_ts = when(snap["first_ts"])


# ---- micro-batches --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """One greenhouse's accepted telemetry, waiting for its decision."""

    ctl: GreenhouseController
    tel: Telemetry
    forecast_temp_c: np.ndarray | None = None
    forecast_solar_w_m2: np.ndarray | None = None


@dataclass
class _Step:
    """A decision between its phases."""

    ctl: GreenhouseController
    item: Pending
    dt_s: float
    alarms: list[str]
    zone_water: np.ndarray
    day: float
    events: list[ModeEvent] = field(default_factory=list)
    etc_mm: float = 0.0
    estimate: GreenhouseEstimate | None = None
    moisture: np.ndarray | None = None
    sensor_ok: np.ndarray | None = None
    obs: np.ndarray | None = None
    members: np.ndarray | None = None


class DecisionBatch:
    """Decisions for several greenhouses (one message each) with the vectorisable work done once.

    Phases, in order: :meth:`begin` (accounting), :meth:`estimate` (ET demand and the Kalman
    update of every zone in one pass), :meth:`observe` (per greenhouse), :meth:`propose` (one
    ensemble forward per proposer for all greenhouses in auto mode) and :meth:`finish` (per
    greenhouse: vote, clip, command). Each greenhouse's state changes exactly as its own
    ``on_telemetry`` would change it; a caller may run other work (an e-stop) between phases,
    and :meth:`finish` reads the mode at that moment.

    ``strict=False`` (the service): a message that fails a phase drops out of the batch alone
    and lands in :attr:`failed`; a failed vectorised phase is retried one greenhouse at a time
    to find it. ``strict=True`` raises, as ``on_telemetry`` always did.
    """

    def __init__(self, items: list[Pending], *, strict: bool = True) -> None:
        if len({id(i.ctl) for i in items}) != len(items):
            raise ValueError("a batch holds at most one message per greenhouse (the next one waits for it)")
        self.items = items
        self.strict = strict
        self.steps: list[_Step] = []
        self.failed: list[tuple[Pending, BaseException]] = []

    def __len__(self) -> int:
        return len(self.steps)

    def _each(self, fn: Callable[[_Step], None], steps: list[_Step]) -> None:
        for step in steps:
            try:
                fn(step)
            except Exception as exc:
                if self.strict:
                    raise
                self.failed.append((step.item, exc))
                self.steps.remove(step)

    def _vectorised(self, fn: Callable[[list[_Step]], None]) -> None:
        try:
            fn(self.steps)
        except Exception:
            if self.strict:
                raise
            self._each(lambda step: fn([step]), list(self.steps))

    def begin(self) -> None:
        self.steps = []
        for item in self.items:
            try:
                self.steps.append(item.ctl._begin(item))
            except Exception as exc:
                if self.strict:
                    raise
                self.failed.append((item, exc))

    def estimate(self) -> None:
        self._vectorised(_estimate)

    def observe(self, lo: int = 0, hi: int | None = None) -> None:
        self._each(lambda step: step.ctl._observe(step), self.steps[lo:hi])

    def propose(self) -> None:
        self._vectorised(_propose)

    def finish(self, i: int) -> ControlDecision:
        return self.steps[i].ctl._finish(self.steps[i])

    def run(self) -> list[ControlDecision]:
        """Every phase in one go (tests, benchmarks, the single-message path)."""
        self.begin()
        self.estimate()
        self.observe()
        self.propose()
        return [self.finish(i) for i in range(len(self.steps))]


def _estimate(steps: list[_Step]) -> None:
    """ET demand per greenhouse (vectorised per climate), then every zone's Kalman update at once."""
    groups: dict[tuple[Any, ...], list[_Step]] = {}
    for step in steps:
        c = step.ctl
        groups.setdefault((c.climate, c.crop, c.gamma), []).append(step)
    for (climate, crop, gamma), group in groups.items():
        temp, vapour, rs_nat, rs_lamp = (np.array(v, dtype=np.float64)
                                         for v in zip(*(s.ctl._etc_inputs(s) for s in group), strict=True))
        demand = reference_et0(np, climate, gamma, temp, vapour, rs_nat, rs_lamp)
        kc, _ = crop_coefficient(np, crop, np.array([s.day for s in group]))
        etc = demand.et0_mm_h * kc * np.array([s.dt_s for s in group]) / 3600.0
        for step, e in zip(group, etc.tolist(), strict=True):
            step.etc_mm = e
    soils = [np.array([[np.nan if v is None else v for v in zone] for zone in s.item.tel.soil_vwc],
                      dtype=np.float64) for s in steps]
    estimates = update_many([s.ctl.estimator for s in steps], soils,
                            [s.zone_water / s.ctl.obs_builder.zone_area_m2 for s in steps],
                            [s.etc_mm for s in steps])
    for step, est in zip(steps, estimates, strict=True):
        step.estimate = est


def _propose(steps: list[_Step]) -> None:
    """One forward per proposer for every greenhouse the policy decides (auto mode, no e-stop)."""
    groups: dict[int, list[_Step]] = {}
    for step in steps:
        if step.ctl._wants_policy():
            groups.setdefault(id(step.ctl.proposer), []).append(step)
    for group in groups.values():
        proposals = propose_many(group[0].ctl.proposer, np.stack([s.obs for s in group]))  # type: ignore[misc]
        for k, step in enumerate(group):
            step.members = proposals[:, k]


def explain_decisions(proposer: Proposer, requests: list[ExplainRequest]) -> list[dict[str, Any]]:
    """The explanation records of several ensemble decisions: one integrated-gradients pass for all
    their top factors and one for the saliency maps of the low-confidence ones."""
    from policy.explain import explain_many, saliency_many

    if not requests:
        return []
    ensemble: Any = proposer
    out = [e.to_dict() for e in explain_many(ensemble, np.stack([r.obs for r in requests]),
                                             [r.confidence for r in requests])]
    with_history = [i for i, r in enumerate(requests) if r.history is not None]
    maps = saliency_many(ensemble, [requests[i].history[0] for i in with_history])  # type: ignore[index]
    for i, saliency in zip(with_history, maps, strict=True):
        past_obs, past_actions = requests[i].history  # type: ignore[misc]
        out[i]["history"] = {"observations": past_obs.tolist(), "actions": past_actions.tolist(),
                             "saliency": saliency.tolist()}
    return out
