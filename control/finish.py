"""Stage 6 of a decision: the safety clipper, the command and the decision record.

The chosen action (:func:`control.proposal.choose`) goes through the safety clipper with the
plant's state as the controller knows it; an e-stop latched meanwhile still wins. The clipped
action becomes the command and the previous action of the next decision; the decision record
says what every stage saw and did.
"""

from __future__ import annotations

import math
import os
import threading
import uuid
from dataclasses import replace
from datetime import datetime

import numpy as np

from control.decision_setup import DecisionSetup
from control.explain import capture
from control.proposal import Choice
from control.records import ControlDecision, Mode, action_dict
from control.state import ControllerState
from control.step import Step
from policy.baselines import break_even_price
from safety import ClipContext, clip, safe_state
from twin.spec import ObservationSpec
from wire.topics import Command


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


COMMAND_IDS = CommandIds()
"""The process's command ids (a controller may be given its own factory: tests, replays)."""


def clip_context(step: Step, state: ControllerState) -> ClipContext:
    """The plant as the clipper needs it: previous action, valve ages, today's totals, moisture.

    The dark period and the lamp-hour cap read the site's clock, as the observation does: an edge box
    writing UTC (or any offset) for a site elsewhere gets the site's 23:00-05:00, not its own."""
    setup, tel = step.setup, step.item.tel
    local = tel.ts.astimezone(setup.site_tz)
    moisture, sensor_ok = step.moisture, step.sensor_ok
    assert moisture is not None and sensor_ok is not None
    natural_par = math.nan if tel.par_umol_m2_s is None else \
        float(tel.par_umol_m2_s) - setup.climate.lamp_par_umol_m2_s * tel.light_pct / 100
    return ClipContext(dt_s=step.dt_s, prev_action=state.prev_action,
                       valve_state_age_s=state.valve_ages(tel.ts), zone_water_today_l=state.water_today_l,
                       moisture_vwc=np.where(sensor_ok, moisture, np.nan), sensor_ok=sensor_ok,
                       saturation_vwc=setup.saturation, natural_par_umol=natural_par,
                       lights_on_hours_today=state.lights_hours_today,
                       local_hour=local.hour + local.minute / 60.0 + local.second / 3600.0,
                       valve_failed=None if state.mode == "manual" else state.valve_failed >= 0.5,
                       valves_without_flow=step.without_flow)


def command(setup: DecisionSetup, state: ControllerState, ts: datetime,
            action: np.ndarray) -> tuple[ControllerState, Command]:
    """``action`` as the next command of this greenhouse (its mode as ``state`` has it), and the state
    that has sent it."""
    state, valves = state.sent(action)
    return state, Command(cmd_id=setup.new_cmd_id(), ts=ts, seq=state.cmd_seq, ttl_s=setup.ttl_s,
                          mode=state.effective_mode, valves=valves, pump_pct=float(action[setup.z]),
                          light_pct=float(action[setup.z + 1]) if setup.settings.lamps_ours else None,
                          policy_version=setup.proposer.policy_version)


def lamp_break_even(setup: DecisionSetup, spec: ObservationSpec, obs: np.ndarray) -> float | None:
    """The all-in price (EUR/MWh) below which a lamp hour pays for this crop now: the served expert's
    break-even rule (fruit a lamp MWh grows x fruit price, less the share natural light already gives).
    Recorded so a decision can say 'lamps on: 42 EUR/MWh is below the break-even of 61'; None when the
    expert lights by the clock rather than the price, or the site runs the lamps (nothing here chose them)."""
    c0, par_sat = setup.expert.c0, setup.expert.par_sat
    if c0 is None or not par_sat or not setup.settings.lamps_ours:
        return None
    value = float(break_even_price(np, np.asarray(obs, np.float64)[None, :], spec, c0, par_sat)[0])
    return value if math.isfinite(value) else None


def own_lamps(setup: DecisionSetup, action: np.ndarray) -> np.ndarray:
    """``action`` with the lamps off where greentwin does not control them (the site's climate computer
    does): nothing this service sends may switch lamps it does not run, whoever chose the action."""
    if setup.settings.lamps_ours or np.shape(action) != (setup.z + 2,):
        return action
    out = np.array(action, dtype=np.float64)
    out[setup.z + 1] = 0.0
    return out


def finish(step: Step, state: ControllerState, choice: Choice) -> tuple[ControllerState, ControlDecision]:
    """Safety clip -> command -> decision record; the new state has moved on to the clipped action."""
    setup, memory, tel, obs = step.setup, step.memory, step.item.tel, step.obs
    builder = memory.obs_builder
    assert obs is not None and step.estimate is not None and step.moisture is not None
    ts = tel.ts
    safe, report = clip(own_lamps(setup, choice.action), clip_context(step, state), setup.limits)
    if state.estop_latched:
        safe = safe_state(setup.z)
    request = None
    if len(choice.members) and setup.proposer.ensemble is not None:
        request = capture(setup, memory, obs, safe, choice.confidence)
    state, cmd = command(setup, state.decided(safe, ts), ts, safe)
    est = step.estimate
    change, memory.setup_change = memory.setup_change, None
    return state, ControlDecision(
        greenhouse_id=setup.gh, seq=state.seq, ts=ts, actor=choice.actor, mode=cmd.mode,
        telemetry=tel.model_dump(mode="json"),
        # etc_mm and irrigation_mm: the water balance of this step, which the nightly calibration fits to.
        estimate={"theta": step.moisture.tolist(), "std": est.std.tolist(),
                  "probe_status": est.probe_status(), "filled": est.filled.tolist(),
                  "outlook": None if step.outlook is None else step.outlook.record(),
                  "crop_twin": memory.crop_twin.estimates(state.lights_hours_today),
                  "price_eur_mwh": float(obs[builder.spec.slices["price"].start]),
                  "lamp_break_even_eur_mwh": lamp_break_even(setup, builder.spec, obs),
                  "etc_mm": float(step.etc_mm),
                  "irrigation_mm": (step.zone_water / builder.zone_area_m2).tolist(),
                  # The settings this decision was made under; the first one under a change
                  # says who, why, what.
                  "settings_version": setup.settings.version,
                  **({} if change is None else {"settings_change": change.record()})},
        member_actions=choice.members.tolist(), voted=action_dict(np.asarray(choice.action), setup.z),
        clipped=action_dict(safe, setup.z),
        rules_fired=[{"rule": f.rule_id, "actuator": f.actuator, "before": f.before, "after": f.after,
                      "why": f.detail} for f in report.firings],
        confidence=float(choice.confidence), low_confidence=bool(choice.low_confidence), command=cmd,
        alarms=step.alarms, observation=obs.tolist(), events=step.events, explain=request)


def watchdog_decision(setup: DecisionSetup, state: ControllerState,
                      now: datetime) -> tuple[ControllerState, ControlDecision]:
    """Stale telemetry: the safe state as a fresh command, recorded with a ``telemetry_stale`` alarm."""
    return _held_decision(setup, replace(state, prev_action=safe_state(setup.z)), now, "watchdog",
                          ["telemetry_stale"])


def repeat_decision(setup: DecisionSetup, state: ControllerState) -> tuple[ControllerState, ControlDecision]:
    """The service reconnected to the broker: the last decision's action again, as a new command (new
    id) stamped with that decision's time, so a box that fell back while the link was down resumes
    at once, for what is left of the original TTL and no longer. The action was clipped when it was
    decided, for that moment; an e-stop latched since wins."""
    last_ts = state.last_ts
    assert last_ts is not None
    if state.estop_latched:
        state = replace(state, prev_action=safe_state(setup.z))
    return _held_decision(setup, state, last_ts, "reconnect", [])


def _held_decision(setup: DecisionSetup, state: ControllerState, now: datetime, actor: str,
                   alarms: list[str]) -> tuple[ControllerState, ControlDecision]:
    """A decision made on no telemetry, commanding ``state.prev_action`` (recorded like any other)."""
    held = np.array(state.prev_action, dtype=np.float64)
    state, cmd = command(setup, replace(state, seq=state.seq + 1), now, held)
    mode: Mode = cmd.mode
    return state, ControlDecision(greenhouse_id=setup.gh, seq=state.seq, ts=now, actor=actor, mode=mode,
                                  telemetry={}, estimate=None, member_actions=[],
                                  voted=action_dict(held, setup.z), clipped=action_dict(held, setup.z),
                                  rules_fired=[], confidence=1.0, low_confidence=False, command=cmd,
                                  alarms=alarms)
