"""One greenhouse's controller: its state, its modes, and the entry point of a decision.

telemetry -> accounting -> Kalman estimate -> observation -> every ensemble member's action ->
vote (low confidence: threshold expert) -> safety clipper -> command -> decision record.
The stages live in :mod:`control.estimation`, :mod:`control.proposal` and
:mod:`control.finish`, in that order; :mod:`control.batch` runs them for several
greenhouses at once, and :meth:`GreenhouseController.on_telemetry` is a batch of one.

The controller does no I/O: a decision is returned, to be published and recorded by the caller,
so the same code runs under the MQTT service, the benchmarks and the tests, and its state can be
snapshotted and restored after a restart (e-stop latch, mode, estimator, dwell timers, daily totals).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np

from control.batch import DecisionBatch
from control.crop_twin import CropTwin
from control.estimation import soil_models
from control.explain import explain_decisions
from control.finish import COMMAND_IDS, command, repeat_decision, watchdog_decision
from control.observation import ObservationBuilder
from control.outlook import Outlook
from control.proposal import Proposer
from control.records import ControlDecision, Mode, ModeEvent, ZoneSetup
from control.setup import GreenhouseSetup, SetupChange, effective_limits
from control.step import Pending
from control.valve_evidence import ValveEvidence
from policy.tuning import served_expert
from safety import SafetyLimits, safe_state
from twin.climate import psychrometric_constant
from twin.config import ClimateConfig, TwinConfig
from twin.estimator import GreenhouseEstimator
from wire.topics import Command, Telemetry

SNAPSHOT_VERSION = 1


class GreenhouseController:
    """Decisions for one greenhouse; see the module docstring for the pipeline."""

    def __init__(self, greenhouse_id: str, zones: list[ZoneSetup], proposer: Proposer, limits: SafetyLimits, *,
                 probes_per_zone: int = 2, step_s: float = 60.0, disagreement_threshold: float = 0.35,
                 command_ttl_s: float = 30.0, max_age_s: float = 120.0, max_future_s: float = 30.0,
                 site_timezone: str = "UTC", cmd_id_factory: Callable[[], uuid.UUID] | None = None) -> None:
        self.gh = greenhouse_id
        self.zones = zones
        self.z = len(zones)
        self.proposer = proposer
        self.limits = limits
        self.step_s = step_s
        self.threshold = disagreement_threshold
        self.ttl_s = command_ttl_s
        self.max_age_s = max_age_s
        self.max_future_s = max_future_s
        self.site_tz = ZoneInfo(site_timezone)
        """The daily caps count the site's calendar day, whatever offset an edge box writes."""
        self.new_cmd_id = cmd_id_factory or COMMAND_IDS
        twin_cfg = TwinConfig(zones=self.z)
        self.crop = twin_cfg.crop
        self.climate: ClimateConfig = twin_cfg.climate
        self.gamma = psychrometric_constant(self.climate)
        self.expert = served_expert(self.z)  # tuned behind the interlock it is served with
        self.estimator = GreenhouseEstimator(soil_models(zones, step_s, self.crop), probes_per_zone)
        self.obs_builder = ObservationBuilder(self.z, np.array([z.target_low for z in zones]),
                                              np.array([z.target_high for z in zones]), crop=self.crop,
                                              growth=twin_cfg.crop_growth)
        self.saturation = np.array([z.saturation for z in zones])
        self.mode: Mode = "auto"
        self.estop_latched = False
        self.manual_action = safe_state(self.z)
        self.manual_actor = "operator:manual"
        """Who set the manual action: its decisions are that operator's demonstrations."""
        self.seq = 0
        self.cmd_seq = 0
        self.prev_action = safe_state(self.z)
        self.valve_failed = np.zeros(self.z)
        """1.0 for a valve the edge box held open that stayed closed, until it is seen open (as in the twin)."""
        self.valve_evidence = ValveEvidence()
        """The commands sent and what the box was seen holding: when feedback is evidence (:mod:`control.valve_evidence`)."""
        self.valve_changed_at: list[datetime | None] = [None] * self.z
        self.water_today_l = np.zeros(self.z)
        self.lights_hours_today = 0.0
        """Lamp hours since site-local midnight: the one count the safety cap, the observation and the
        API read (the crop twin keeps none of its own)."""
        self.crop_twin = CropTwin(crop=self.crop, growth=twin_cfg.crop_growth)
        """The crop beside this greenhouse: crop age, today's light and lamp hours, yield to date."""
        self.day: str | None = None
        self.last_ts: datetime | None = None
        self.history: Any = None  # policy.explain.ExplanationHistory, created with the first explanation
        self.setup = GreenhouseSetup(name=greenhouse_id, zones=tuple(zones))
        """The operator settings in force (:meth:`apply_setup`); the limits above already hold them."""
        self.setup_change: SetupChange | None = None
        """A change not yet used by a decision: the next decision's record carries it."""
        self.staged_setup: tuple[GreenhouseSetup, SafetyLimits, SetupChange | None] | None = None
        """Settings that arrived while a decision was under way: taken before the next one begins."""

    # ---- the decision --------------------------------------------------------------------------
    def on_telemetry(self, tel: Telemetry, outlook: Outlook | None = None) -> ControlDecision:
        """One accepted telemetry message -> one decision, explanation included (a batch of one)."""
        batch = DecisionBatch([Pending(self, tel, outlook)])
        decision = batch.run()[0]
        if decision.explain is not None:
            decision.explanation = explain_decisions(self.proposer, [decision.explain])[0]
        return decision

    @property
    def wants_policy(self) -> bool:
        """The ensemble decides: auto mode and no e-stop."""
        return not self.estop_latched and self.mode == "auto"

    @property
    def effective_mode(self) -> Mode:
        """The mode a command carries: a latched e-stop overrides the selected mode."""
        return "estop" if self.estop_latched else self.mode

    def watchdog(self, now: datetime) -> ControlDecision | None:
        """Stale telemetry: send the safe state and raise an alarm (None while telemetry is fresh).

        A last timestamp further ahead of ``now`` than the skew bound vouches for nothing: it came
        from a wrong clock, and must not keep the watchdog quiet until the wall clock catches up."""
        if self.last_ts is None:
            return None
        age = now - self.last_ts
        if timedelta(seconds=-self.max_future_s) <= age <= timedelta(seconds=self.max_age_s):
            return None
        return watchdog_decision(self, now)

    def forget_held_commands(self) -> None:
        """What the box was seen holding vouches for nothing any more (commands queued during an outage
        may reach it late): valve feedback is judged afresh."""
        self.valve_evidence = self.valve_evidence.unseen()

    def after_reconnect(self, repeat: bool) -> ControlDecision | None:
        """The service reconnected to the broker. Commands queued meanwhile may reach the box late, so
        what it was seen holding before vouches for nothing (valve feedback is judged afresh); with
        ``repeat`` (the caller's clock says the last command is younger than its TTL) that command's
        action goes out again as a new one. None otherwise: the next telemetry decides."""
        self.forget_held_commands()
        return repeat_decision(self) if repeat and self.last_ts is not None else None

    def safe_command(self, ts: datetime) -> Command:
        """Everything off, as a fresh command (watchdog, e-stop): also becomes the previous action."""
        self.prev_action = safe_state(self.z)
        return command(self, ts, self.prev_action)

    # ---- settings ------------------------------------------------------------------------------
    def apply_setup(self, setup: GreenhouseSetup, site: SafetyLimits, change: SetupChange | None = None) -> None:
        """Take new operator settings between two decisions: the next one observes, estimates and clips
        with them. ``site`` is the safety limits file's; each cap becomes the lower of it and the setting.
        The Kalman estimate carries over a change of soil (the process model changes, not the moisture)."""
        if len(setup.zones) != self.z:
            raise ValueError(f"{self.gh} has {self.z} zones, the settings {len(setup.zones)}")
        limits = effective_limits(site, setup)  # first: a bad combination leaves the controller as it was
        soils = [(z.soil_type, z.saturation, z.root_mm) for z in setup.zones]
        if soils != [(z.soil_type, z.saturation, z.root_mm) for z in self.zones]:
            state = self.estimator.state_dict()
            self.estimator = GreenhouseEstimator(soil_models(list(setup.zones), self.step_s, self.crop),
                                                 self.estimator.probes_per_zone, self.estimator.cfg)
            self.estimator.load_state_dict(state)
        self.setup, self.zones, self.limits = setup, list(setup.zones), limits
        self.obs_builder.target_low = np.array([z.target_low for z in setup.zones])
        self.obs_builder.target_high = np.array([z.target_high for z in setup.zones])
        self.obs_builder.lamps_ours = setup.lamps_ours
        self.saturation = np.array([z.saturation for z in setup.zones])
        if change is not None:
            self.setup_change = change

    def stage_setup(self, setup: GreenhouseSetup, site: SafetyLimits, change: SetupChange | None = None) -> None:
        """Settings for the next decision (a decision under way keeps those it began with)."""
        if setup.version > max(self.setup.version, self.staged_setup[0].version if self.staged_setup else 0):
            self.staged_setup = (setup, site, change)

    def take_staged_setup(self) -> None:
        """Between two decisions: the staged settings come into force."""
        if self.staged_setup is not None:
            staged, self.staged_setup = self.staged_setup, None
            self.apply_setup(*staged)

    # ---- modes ---------------------------------------------------------------------------------
    def estop(self, actor: str, reason: str, ts: datetime) -> ModeEvent:
        """Latch the e-stop: everything off until an authorised reset."""
        self.estop_latched = True
        return self._mode_event("estop", actor, reason, ts)

    def reset_estop(self, actor: str, reason: str, ts: datetime, to_mode: Mode = "manual") -> ModeEvent:
        """Release the latch into a safe hold: manual with everything off, unless the operator asks
        for ``auto`` (then the policy decides from the next telemetry on). Whatever tripped the
        e-stop was looked at by a person, not by the policy, so the policy does not take over unasked."""
        if not reason.strip():
            raise ValueError("an e-stop reset needs a reason")
        if not self.estop_latched:
            raise ValueError("no e-stop is latched")
        if to_mode not in ("auto", "manual"):
            raise ValueError(f"an e-stop reset goes to 'manual' or 'auto', got {to_mode!r}")
        self.estop_latched = False
        if to_mode == "manual":
            self.manual_action = safe_state(self.z)
            self.manual_actor = actor if actor.startswith("operator:") else f"operator:{actor}"
        return self._mode_event(to_mode, actor, reason, ts)

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

    def _mode_event(self, to: Mode, actor: str, reason: str, ts: datetime) -> ModeEvent:
        self.seq += 1
        event = ModeEvent(self.gh, self.seq, ts, actor, self.mode, to, reason)
        self.mode = to
        return event

    # ---- bookkeeping ---------------------------------------------------------------------------
    def crop_estimates(self) -> dict[str, Any]:
        """The crop twin's estimates with today's lamp hours as the safety cap counts them."""
        return self.crop_twin.estimates(self.lights_hours_today)

    def roll_day(self, ts: datetime) -> None:
        """A new calendar day resets the daily water and light totals the caps are counted against."""
        day = ts.astimezone(self.site_tz).date().isoformat()
        if day != self.day:
            self.day = day
            self.water_today_l = np.zeros(self.z)
            self.lights_hours_today = 0.0

    def valve_ages(self, ts: datetime) -> np.ndarray:
        """Seconds each valve has held its state (dwell limits); never switched counts as very old."""
        return np.array([1e9 if t is None else (ts - t).total_seconds() for t in self.valve_changed_at])

    def track_valves(self, action: np.ndarray, ts: datetime) -> None:
        """Note when each valve of ``action`` changes state against the previous action."""
        for i in range(self.z):
            if (action[i] >= 0.5) != (self.prev_action[i] >= 0.5):
                self.valve_changed_at[i] = ts

    # ---- persistence ---------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """JSON-able state to persist; restore with :meth:`restore` after a restart."""
        return {"version": SNAPSHOT_VERSION, "mode": self.mode, "estop_latched": self.estop_latched,
                "manual_action": self.manual_action.tolist(), "manual_actor": self.manual_actor,
                "seq": self.seq, "cmd_seq": self.cmd_seq,
                "prev_action": self.prev_action.tolist(), "valve_failed": self.valve_failed.tolist(),
                "commands_sent": self.valve_evidence.to_json(),
                "valve_changed_at": [None if t is None else t.isoformat() for t in self.valve_changed_at],
                "water_today_l": self.water_today_l.tolist(), "lights_hours_today": self.lights_hours_today,
                "crop_twin": self.crop_twin.snapshot(),
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
        self.valve_evidence = ValveEvidence.from_json(snap.get("commands_sent"))
        self.valve_changed_at = [when(v) for v in snap["valve_changed_at"]]
        self.water_today_l = np.asarray(snap["water_today_l"], dtype=np.float64)
        self.lights_hours_today, self.day = float(snap["lights_hours_today"]), snap["day"]
        self.last_ts = when(snap["last_ts"])
        if "crop_twin" in snap:
            self.crop_twin.restore(snap["crop_twin"])
        else:  # written before the crop twin: continue its day's totals and crop age, grow a fresh crop
            first = when(snap["first_ts"])
            self.crop_twin.date = snap["day"]
            self.crop_twin.dli_today = float(snap.get("par_mol_today", 0.0))
            if first is not None and self.last_ts is not None:
                self.crop_twin.day += (self.last_ts - first).total_seconds() / 86400.0
        self.estimator.load_state_dict(snap["estimator"])
        self.obs_builder.irrigation_24h_mm = np.asarray(snap["irrigation_24h_mm"], dtype=np.float64)
        self.obs_builder.held = dict(snap["held"])
        self.obs_builder.first_ts = when(snap["first_ts"])
