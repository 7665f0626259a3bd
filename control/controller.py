"""One greenhouse's controller: its state, its modes, and the entry point of a decision.

telemetry -> accounting -> Kalman estimate -> observation -> every ensemble member's action ->
vote (low confidence: threshold expert) -> safety clipper -> command -> decision record.
The stages live in :mod:`control.estimation`, :mod:`control.proposal` and
:mod:`control.finish`, in that order; :mod:`control.batch` runs them for several
greenhouses at once, and :meth:`GreenhouseController.on_telemetry` is a batch of one.

The controller does no I/O: a decision is returned, to be published and recorded by the caller,
so the same code runs under the MQTT service, the benchmarks and the tests, and its state can be
snapshotted and restored after a restart (e-stop latch, mode, estimator, dwell timers, daily totals).
Modes, counters and daily totals are one immutable :class:`~control.state.ControllerState`, which the
stages and the mode changes replace whole; what a decision only reads is one immutable
:class:`~control.decision_setup.DecisionSetup`, built anew when settings or the proposer change; the
estimator, the crop twin and the observation builder are still objects changed in place, held together
with the current state in one :class:`~control.decision_setup.DecisionMemory`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np

from control.batch import DecisionBatch
from control.crop_twin import CropTwin
from control.decision_setup import DecisionMemory, DecisionSetup, MemoryField, SetupField
from control.estimation import soil_models
from control.explain import explain_decisions
from control.finish import COMMAND_IDS, command, repeat_decision, watchdog_decision
from control.observation import ObservationBuilder
from control.outlook import Outlook
from control.proposal import Proposer
from control.records import ControlDecision, Mode, ModeEvent, ZoneSetup
from control.setup import GreenhouseSetup, SetupChange, effective_limits
from control.state import ControllerState, StateField
from control.step import Pending
from policy.baselines import ThresholdExpert
from policy.tuning import served_expert
from safety import SafetyLimits, safe_state
from twin.climate import psychrometric_constant
from twin.config import ClimateConfig, CropConfig, TwinConfig
from twin.estimator import GreenhouseEstimator
from wire.topics import Command, Telemetry

SNAPSHOT_VERSION = 1


class GreenhouseController:
    """Decisions for one greenhouse; see the module docstring for the pipeline."""

    # The state's fields read as the controller's own, for the code around the control path.
    mode = StateField[Mode]()
    estop_latched = StateField[bool]()
    manual_action = StateField[np.ndarray]()
    seq = StateField[int]()
    cmd_seq = StateField[int]()
    valve_failed = StateField[np.ndarray]()
    water_today_l = StateField[np.ndarray]()
    lights_hours_today = StateField[float]()
    day = StateField[str | None]()
    last_ts = StateField[datetime | None]()
    # The set-up's fields, likewise: assigning one builds a new set-up (the next decision's).
    gh = SetupField[str]()
    zones = SetupField[tuple[ZoneSetup, ...]]()
    setup = SetupField[GreenhouseSetup]("settings")
    """The operator settings in force (:meth:`apply_setup`); the limits already hold them."""
    limits = SetupField[SafetyLimits]()
    proposer = SetupField[Proposer]()
    expert = SetupField[ThresholdExpert]()
    step_s = SetupField[float]()
    threshold = SetupField[float]()
    ttl_s = SetupField[float]()
    site_tz = SetupField[ZoneInfo]()
    new_cmd_id = SetupField[Callable[[], uuid.UUID]]()
    crop = SetupField[CropConfig]()
    climate = SetupField[ClimateConfig]()
    # The objects a decision changes in place, shared with the stages through the memory.
    estimator = MemoryField[GreenhouseEstimator]()
    obs_builder = MemoryField[ObservationBuilder]()
    crop_twin = MemoryField[CropTwin]()

    def __init__(self, greenhouse_id: str, zones: list[ZoneSetup], proposer: Proposer, limits: SafetyLimits,
                 *, probes_per_zone: int = 2, step_s: float = 60.0, disagreement_threshold: float = 0.35,
                 command_ttl_s: float = 30.0, max_age_s: float = 120.0, max_future_s: float = 30.0,
                 site_timezone: str = "UTC", cmd_id_factory: Callable[[], uuid.UUID] | None = None) -> None:
        self.z = len(zones)
        self.max_age_s = max_age_s
        self.max_future_s = max_future_s
        twin_cfg = TwinConfig(zones=self.z)
        crop, climate = twin_cfg.crop, twin_cfg.climate
        self.decision_setup = DecisionSetup(
            gh=greenhouse_id, limits=limits, proposer=proposer, step_s=step_s,
            settings=GreenhouseSetup(name=greenhouse_id, zones=tuple(zones)), expert=served_expert(self.z),
            threshold=disagreement_threshold, ttl_s=command_ttl_s, site_tz=ZoneInfo(site_timezone),
            new_cmd_id=cmd_id_factory or COMMAND_IDS, crop=crop, climate=climate,
            gamma=psychrometric_constant(climate))
        """What a decision reads and never writes: replaced whole, never changed in place."""
        self.memory = DecisionMemory(
            state=ControllerState.initial(self.z),
            estimator=GreenhouseEstimator(soil_models(zones, step_s, crop), probes_per_zone),
            obs_builder=ObservationBuilder(self.z, np.array([z.target_low for z in zones]),
                                           np.array([z.target_high for z in zones]), crop=crop,
                                           growth=twin_cfg.crop_growth),
            crop_twin=CropTwin(crop=crop, growth=twin_cfg.crop_growth))
        """The current state and the objects a decision changes in place, shared with the stages."""
        self.staged_setup: tuple[GreenhouseSetup, SafetyLimits, SetupChange | None] | None = None
        """Settings that arrived while a decision was under way: taken before the next one begins."""

    @property
    def state(self) -> ControllerState:
        """Modes, counters and memory between decisions: replaced whole by each stage and mode change."""
        return self.memory.state

    @state.setter
    def state(self, value: ControllerState) -> None:
        self.memory.state = value

    # ---- the decision --------------------------------------------------------------------------
    def pending(self, tel: Telemetry, outlook: Outlook | None = None) -> Pending:
        """``tel`` waiting for its decision, under the settings in force now: settings staged since the
        last decision hold for all of this one (so build it just before the batch begins)."""
        self.take_staged_setup()
        return Pending(self.decision_setup, self.memory, tel, outlook)

    def on_telemetry(self, tel: Telemetry, outlook: Outlook | None = None) -> ControlDecision:
        """One accepted telemetry message -> one decision, explanation included (a batch of one)."""
        batch = DecisionBatch([self.pending(tel, outlook)])
        decision = batch.run()[0]
        if decision.explain is not None:
            decision.explanation = explain_decisions(self.proposer, [decision.explain])[0]
        return decision

    @property
    def wants_policy(self) -> bool:
        """The ensemble decides: auto mode and no e-stop."""
        return not self.state.estop_latched and self.state.mode == "auto"

    @property
    def effective_mode(self) -> Mode:
        """The mode a command carries: a latched e-stop overrides the selected mode."""
        return self.state.effective_mode

    def watchdog(self, now: datetime) -> ControlDecision | None:
        """Stale telemetry: send the safe state and raise an alarm (None while telemetry is fresh).

        A last timestamp further ahead of ``now`` than the skew bound vouches for nothing: it came
        from a wrong clock, and must not keep the watchdog quiet until the wall clock catches up."""
        if self.state.last_ts is None:
            return None
        age = now - self.state.last_ts
        if timedelta(seconds=-self.max_future_s) <= age <= timedelta(seconds=self.max_age_s):
            return None
        self.state, decision = watchdog_decision(self.decision_setup, self.state, now)
        return decision

    def forget_held_commands(self) -> None:
        """What the box was seen holding vouches for nothing any more (commands queued during an outage
        may reach it late): valve feedback is judged afresh."""
        self.state = replace(self.state, valve_evidence=self.state.valve_evidence.unseen())

    def after_reconnect(self, repeat: bool) -> ControlDecision | None:
        """The service reconnected to the broker. Commands queued meanwhile may reach the box late, so
        what it was seen holding before vouches for nothing (valve feedback is judged afresh); with
        ``repeat`` (the caller's clock says the last command is younger than its TTL) that command's
        action goes out again as a new one. None otherwise: the next telemetry decides."""
        self.forget_held_commands()
        if not repeat or self.state.last_ts is None:
            return None
        self.state, decision = repeat_decision(self.decision_setup, self.state)
        return decision

    def safe_command(self, ts: datetime) -> Command:
        """Everything off, as a fresh command (watchdog, e-stop): also becomes the previous action."""
        safe = safe_state(self.z)
        self.state, cmd = command(self.decision_setup, replace(self.state, prev_action=safe), ts, safe)
        return cmd

    # ---- settings ------------------------------------------------------------------------------
    def apply_setup(self, setup: GreenhouseSetup, site: SafetyLimits,
                    change: SetupChange | None = None) -> None:
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
        self.decision_setup = replace(self.decision_setup, settings=setup, limits=limits)
        self.obs_builder.target_low = np.array([z.target_low for z in setup.zones])
        self.obs_builder.target_high = np.array([z.target_high for z in setup.zones])
        self.obs_builder.lamps_ours = setup.lamps_ours
        if change is not None:
            self.memory.setup_change = change

    def stage_setup(self, setup: GreenhouseSetup, site: SafetyLimits,
                    change: SetupChange | None = None) -> None:
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
        return self._mode_event("estop", actor, reason, ts, estop_latched=True)

    def reset_estop(self, actor: str, reason: str, ts: datetime, to_mode: Mode = "manual") -> ModeEvent:
        """Release the latch into a safe hold: manual with everything off, unless the operator asks
        for ``auto`` (then the policy decides from the next telemetry on). Whatever tripped the
        e-stop was looked at by a person, not by the policy, so the policy does not take over unasked."""
        if not reason.strip():
            raise ValueError("an e-stop reset needs a reason")
        if not self.state.estop_latched:
            raise ValueError("no e-stop is latched")
        if to_mode not in ("auto", "manual"):
            raise ValueError(f"an e-stop reset goes to 'manual' or 'auto', got {to_mode!r}")
        manual = ({"manual_action": safe_state(self.z), "manual_actor": _operator(actor)}
                  if to_mode == "manual" else {})
        return self._mode_event(to_mode, actor, reason, ts, estop_latched=False, **manual)

    def set_mode(self, mode: Mode, actor: str, reason: str, ts: datetime,
                 manual_action: np.ndarray | None = None) -> ModeEvent:
        """Switch between auto and manual; e-stop goes through :meth:`estop` / :meth:`reset_estop`."""
        if self.state.estop_latched:
            raise ValueError("e-stop is latched: reset it first")
        if mode not in ("auto", "manual"):
            raise ValueError(f"set_mode takes 'auto' or 'manual', got {mode!r}")
        manual: dict[str, Any] = {}
        if mode == "manual":
            if manual_action is None or np.shape(manual_action) != (self.z + 2,):
                raise ValueError(f"manual mode needs an action of {self.z + 2} values")
            manual = {"manual_action": manual_action, "manual_actor": _operator(actor)}
        return self._mode_event(mode, actor, reason, ts, **manual)

    def _mode_event(self, to: Mode, actor: str, reason: str, ts: datetime, **changes: Any) -> ModeEvent:
        """The mode change and what comes with it as one new state; the event takes the next seq."""
        self.state, event = self.state.moved(self.gh, to, actor, reason, ts, **changes)
        return event

    def continue_after(self, recorded_seq: int) -> None:
        """Records up to ``recorded_seq`` exist that this state has not seen (another replica's, or
        decisions after the last snapshot): number on after them, never reusing a seq. Each was a
        decision, which also used one command seq."""
        if recorded_seq > self.state.seq:
            self.state = replace(self.state, seq=recorded_seq,
                                 cmd_seq=self.state.cmd_seq + recorded_seq - self.state.seq)

    def adopt_estop(self) -> None:
        """An e-stop latched under another replica holds here too; its mode event is recorded already."""
        self.state = replace(self.state, estop_latched=True, mode="estop")

    # ---- bookkeeping ---------------------------------------------------------------------------
    def crop_estimates(self) -> dict[str, Any]:
        """The crop twin's estimates with today's lamp hours as the safety cap counts them."""
        return self.crop_twin.estimates(self.state.lights_hours_today)

    def roll_day(self, ts: datetime) -> None:
        """A new calendar day resets the daily water and light totals the caps are counted against."""
        self.state = self.state.rolled(self.decision_setup.site_day(ts))

    # ---- persistence ---------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """JSON-able state to persist; restore with :meth:`restore` after a restart. The keys keep the
        order snapshots were always written in."""
        state = self.state.to_json()
        # the crop twin's entry has always stood before them
        day, last_ts = state.pop("day"), state.pop("last_ts")
        return {"version": SNAPSHOT_VERSION, **state, "crop_twin": self.crop_twin.snapshot(), "day": day,
                "last_ts": last_ts, "estimator": self.estimator.state_dict(),
                "irrigation_24h_mm": self.obs_builder.irrigation_24h_mm.tolist(),
                "held": dict(self.obs_builder.held),
                "first_ts": (None if self.obs_builder.first_ts is None
                             else self.obs_builder.first_ts.isoformat())}

    def restore(self, snap: dict[str, Any]) -> None:
        if snap.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"controller snapshot version {snap.get('version')!r}, "
                             f"expected {SNAPSHOT_VERSION}")

        def when(v: str | None) -> datetime | None:
            return None if v is None else datetime.fromisoformat(v)

        self.state = state = ControllerState.from_json(snap, self.z)
        if "crop_twin" in snap:
            self.crop_twin.restore(snap["crop_twin"])
        else:  # written before the crop twin: continue its day's totals and crop age, grow a fresh crop
            first = when(snap["first_ts"])
            self.crop_twin.date = snap["day"]
            self.crop_twin.dli_today = float(snap.get("par_mol_today", 0.0))
            if first is not None and state.last_ts is not None:
                self.crop_twin.day += (state.last_ts - first).total_seconds() / 86400.0
        self.estimator.load_state_dict(snap["estimator"])
        self.obs_builder.irrigation_24h_mm = np.asarray(snap["irrigation_24h_mm"], dtype=np.float64)
        self.obs_builder.held = dict(snap["held"])
        self.obs_builder.first_ts = when(snap["first_ts"])


def _operator(actor: str) -> str:
    """Manual actions are an operator's: the actor as the decisions it sets record it."""
    return actor if actor.startswith("operator:") else f"operator:{actor}"
