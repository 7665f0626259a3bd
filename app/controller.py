"""One greenhouse's control loop: telemetry in, one safe command and one decision record out.

telemetry -> Kalman estimate -> observation -> every ensemble member's action -> vote
-> (low confidence: threshold expert) -> safety clipper -> command -> decision record.

The controller does no I/O: it returns what to publish and what to record, so the same code
runs under the MQTT service, the benchmarks and the tests, and its state can be snapshotted
and restored after a restart (e-stop latch, mode, estimator, dwell timers, daily totals).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

import numpy as np

from app.mqtt.topics import Command, Telemetry
from app.observation import ObservationBuilder
from policy.baselines import ThresholdExpert
from safety import ClipContext, SafetyLimits, clip, safe_state, vote
from twin.climate import (
    PAR_PER_W_M2,
    crop_coefficient,
    psychrometric_constant,
    reference_et0,
    saturation_vapour_kpa,
)
from twin.config import SOIL_INDEX, SOIL_TYPES, ClimateConfig, CropConfig, TwinConfig
from twin.estimator import GreenhouseEstimator, ZoneSoilModel

Mode = Literal["auto", "manual", "estop"]
SNAPSHOT_VERSION = 1


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

    def record(self) -> dict[str, Any]:
        return {"greenhouse_id": self.greenhouse_id, "seq": self.seq, "ts": self.ts, "actor": self.actor,
                "mode": self.mode, "telemetry": self.telemetry, "estimate": self.estimate,
                "member_actions": self.member_actions, "voted": self.voted, "clipped": self.clipped,
                "rules_fired": self.rules_fired, "reward_terms": None, "confidence": self.confidence,
                "explanation": {**(self.explanation or {}), "alarms": self.alarms,
                                "low_confidence": self.low_confidence},
                "cmd_id": str(self.command.cmd_id), "ack_status": "pending"}


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
                 cmd_id_factory: Callable[[], uuid.UUID] = uuid.uuid4) -> None:
        self.gh = greenhouse_id
        self.zones = zones
        self.z = len(zones)
        self.proposer = proposer
        self.limits = limits
        self.step_s = step_s
        self.threshold = disagreement_threshold
        self.ttl_s = command_ttl_s
        self.max_age_s = max_age_s
        self.new_cmd_id = cmd_id_factory
        twin_cfg = TwinConfig(zones=self.z)
        self.crop = twin_cfg.crop
        self.climate: ClimateConfig = twin_cfg.climate
        self.gamma = psychrometric_constant(self.climate)
        self.expert = ThresholdExpert(zones=self.z)
        self.estimator = GreenhouseEstimator(soil_models(zones, step_s, self.crop), probes_per_zone)
        self.obs_builder = ObservationBuilder(self.z, np.array([z.target_low for z in zones]),
                                              np.array([z.target_high for z in zones]))
        self.mode: Mode = "auto"
        self.estop_latched = False
        self.manual_action = safe_state(self.z)
        self.seq = 0
        self.cmd_seq = 0
        self.prev_action = safe_state(self.z)
        self.valve_changed_at: list[datetime | None] = [None] * self.z
        self.water_today_l = np.zeros(self.z)
        self.lights_hours_today = 0.0
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
        return valve_fb * (litres / n_open) if n_open > 0 else np.zeros(self.z)

    def _etc_mm(self, tel: Telemetry, dt_s: float, day: float) -> float:
        temp = tel.air_temp_c if tel.air_temp_c is not None else self.obs_builder.held["air_temp"]
        rh = tel.air_rh_pct if tel.air_rh_pct is not None else self.obs_builder.held["air_rh"]
        par = tel.par_umol_m2_s if tel.par_umol_m2_s is not None else 0.0
        lamp_par = self.climate.lamp_par_umol_m2_s * tel.light_pct / 100.0
        rs_nat = max(par - lamp_par, 0.0) / PAR_PER_W_M2
        es = float(saturation_vapour_kpa(np, np.float64(temp)))
        demand = reference_et0(np, self.climate, self.gamma, np.array([temp]), np.array([rh / 100.0 * es]),
                               np.array([rs_nat]), np.array([0.5 * self.climate.lamp_power_w_m2 * tel.light_pct / 100]))
        kc, _ = crop_coefficient(np, self.crop, np.array([day]))
        return float(demand.et0_mm_h[0] * kc[0] * dt_s / 3600.0)

    def on_telemetry(self, tel: Telemetry, forecast_temp_c: np.ndarray | None = None,
                     forecast_solar_w_m2: np.ndarray | None = None) -> ControlDecision:
        """One accepted telemetry message -> one decision (the bridge already rejected bad ones)."""
        alarms: list[str] = []
        ts = tel.ts
        dt_s = self.step_s if self.last_ts is None else min(max((ts - self.last_ts).total_seconds(), 1.0), 3600.0)
        self._roll_day(ts)
        zone_water = self._account(tel, dt_s, alarms)
        self.water_today_l += zone_water
        self.lights_hours_today += tel.light_pct / 100.0 * dt_s / 3600.0
        self.obs_builder.add_irrigation(zone_water, dt_s)
        day = self.obs_builder.crop_day0 + (0.0 if self.obs_builder.first_ts is None
                                            else (ts - self.obs_builder.first_ts).total_seconds() / 86400.0)
        etc = self._etc_mm(tel, dt_s, day)
        soil = np.array([[np.nan if v is None else v for v in zone] for zone in tel.soil_vwc], dtype=np.float64)
        estimates = self.estimator.update(soil, zone_water / self.obs_builder.zone_area_m2, etc)
        moisture = np.array([e.theta for e in estimates])
        sensor_ok = np.array([not e.filled or any(s == "ok" for s in e.probe_status) for e in estimates])
        if tel.estop and not self.estop_latched:
            self.estop("edge:estop", "telemetry reports the e-stop pressed", ts)
        fc_t = forecast_temp_c if forecast_temp_c is not None else np.full(6, tel.air_temp_c or 20.0)
        fc_s = forecast_solar_w_m2 if forecast_solar_w_m2 is not None else np.zeros(6)
        obs, held = self.obs_builder.build(
            ts=ts, moisture=moisture, readings=tel.model_dump(), valve_open=np.asarray(tel.valve_open, float),
            pump_pct=tel.pump_pct, light_pct=tel.light_pct, pump_current_a=tel.pump_current_a,
            forecast_temp_c=fc_t, forecast_solar_w_m2=fc_s)
        alarms += [f"held:{name}" for name in held]

        members = np.zeros((0, self.z + 2))
        confidence, low = 1.0, False
        actor = f"policy:{self.proposer.policy_version}"
        if self.estop_latched:
            proposed, actor = safe_state(self.z), "estop"
        elif self.mode == "manual":
            proposed, actor = self.manual_action, "operator:manual"
        else:
            members = self.proposer.propose(obs)
            decision = vote(members, disagreement_threshold=self.threshold, zones=self.z)
            confidence, low = decision.confidence, decision.low_confidence
            proposed = decision.action
            if low:
                proposed = np.asarray(self.expert(obs[None, :])[0], dtype=np.float64)
                actor = "expert:low_confidence"
        ctx = ClipContext(dt_s=dt_s, prev_action=self.prev_action,
                          valve_state_age_s=self._valve_ages(ts), zone_water_today_l=self.water_today_l,
                          moisture_vwc=np.where(sensor_ok, moisture, np.nan), sensor_ok=sensor_ok,
                          saturation_vwc=np.array([z.saturation for z in self.zones]),
                          natural_par_umol=float(tel.par_umol_m2_s) - self.climate.lamp_par_umol_m2_s * tel.light_pct
                          / 100 if tel.par_umol_m2_s is not None else math.nan,
                          lights_on_hours_today=self.lights_hours_today)
        safe, report = clip(proposed, ctx, self.limits)
        if self.estop_latched:
            safe = safe_state(self.z)
        explanation = self._explain(obs, safe, confidence) if len(members) and hasattr(self.proposer, "members") \
            else None
        self._track_valves(safe, ts)
        self.prev_action = np.array(safe, dtype=np.float64)
        self.last_ts = ts
        self.seq += 1
        self.cmd_seq += 1
        mode: Mode = "estop" if self.estop_latched else self.mode
        command = Command(cmd_id=self.new_cmd_id(), ts=ts, seq=self.cmd_seq, ttl_s=self.ttl_s, mode=mode,
                          valves=[int(v >= 0.5) for v in safe[: self.z]], pump_pct=float(safe[self.z]),
                          light_pct=float(safe[self.z + 1]), policy_version=self.proposer.policy_version)
        return ControlDecision(
            greenhouse_id=self.gh, seq=self.seq, ts=ts, actor=actor, mode=mode,
            telemetry=tel.model_dump(mode="json"),
            estimate={"theta": moisture.tolist(), "std": [e.std for e in estimates],
                      "probe_status": [list(e.probe_status) for e in estimates],
                      "filled": [e.filled for e in estimates]},
            member_actions=members.tolist(), voted=_action_dict(np.asarray(proposed), self.z),
            clipped=_action_dict(safe, self.z),
            rules_fired=[{"rule": f.rule_id, "actuator": f.actuator, "before": f.before, "after": f.after}
                         for f in report.firings],
            confidence=float(confidence), low_confidence=bool(low), command=command, alarms=alarms,
            observation=obs.tolist(), explanation=explanation)

    def _explain(self, obs: np.ndarray, action: np.ndarray, confidence: float) -> dict[str, Any]:
        """Top-3 factors for every ensemble decision; with low confidence also the last 10 steps and
        their feature-by-time saliency (the report's heat map)."""
        from policy.explain import ExplanationHistory, explain, saliency_over_time

        if self.history is None:
            self.history = ExplanationHistory(maxlen=10)
        self.history.record(self.gh, obs, action)
        out = explain(self.proposer, obs, confidence).to_dict()  # type: ignore[arg-type]
        if confidence < 1.0 - self.threshold:
            past_obs, past_actions = self.history.snapshot(self.gh)
            out["history"] = {"observations": past_obs.tolist(), "actions": past_actions.tolist(),
                              "saliency": saliency_over_time(self.proposer, past_obs).tolist()}  # type: ignore[arg-type]
        return out

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

    def _valve_ages(self, ts: datetime) -> np.ndarray:
        return np.array([1e9 if t is None else (ts - t).total_seconds() for t in self.valve_changed_at])

    def _track_valves(self, action: np.ndarray, ts: datetime) -> None:
        for i in range(self.z):
            if (action[i] >= 0.5) != (self.prev_action[i] >= 0.5):
                self.valve_changed_at[i] = ts

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state to persist; restore with :meth:`restore` after a restart."""
        return {"version": SNAPSHOT_VERSION, "mode": self.mode, "estop_latched": self.estop_latched,
                "manual_action": self.manual_action.tolist(), "seq": self.seq, "cmd_seq": self.cmd_seq,
                "prev_action": self.prev_action.tolist(),
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
        self.seq, self.cmd_seq = int(snap["seq"]), int(snap["cmd_seq"])
        self.prev_action = np.asarray(snap["prev_action"], dtype=np.float64)
        self.valve_changed_at = [when(v) for v in snap["valve_changed_at"]]
        self.water_today_l = np.asarray(snap["water_today_l"], dtype=np.float64)
        self.lights_hours_today, self.day = float(snap["lights_hours_today"]), snap["day"]
        self.last_ts = when(snap["last_ts"])
        self.estimator.load_state_dict(snap["estimator"])
        self.obs_builder.irrigation_24h_mm = np.asarray(snap["irrigation_24h_mm"], dtype=np.float64)
        self.obs_builder.held = dict(snap["held"])
        self.obs_builder.first_ts = when(snap["first_ts"])
