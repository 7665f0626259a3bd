"""The per-greenhouse control loop, driven by telemetry built from the twin's own readings."""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from control import ControlDecision, ExpertProposer, GreenhouseController, ZoneSetup
from policy.baselines import ThresholdExpert
from safety import SafetyLimits
from twin import GreenhouseTwin
from twin.spec import ObservationSpec
from wire.topics import Telemetry

T0 = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
ZONES = [ZoneSetup("loam", 0.21, 0.27, 0.45, 400.0) for _ in range(6)]


def _ids():
    n = 0

    def make() -> uuid.UUID:
        nonlocal n
        n += 1
        return uuid.UUID(int=n)

    return make


def _controller(proposer=None, **kw) -> GreenhouseController:
    return GreenhouseController("gh1", ZONES, proposer or ExpertProposer(ThresholdExpert()),
                                SafetyLimits.default(), step_s=60.0, cmd_id_factory=_ids(), **kw)


def _telemetry(twin: GreenhouseTwin, info: dict | None, k: int, action: np.ndarray,
               estop: bool = False) -> Telemetry:
    r = info["readings"] if info else None
    soil = r["soil_vwc"][0] if r else twin.state.theta[0][:, None].repeat(2, axis=1)
    def num(key):
        return None if r is None or np.isnan(r[key][0]) else float(r[key][0])
    return Telemetry(
        ts=T0 + timedelta(seconds=60 * k), boot_id="b1", seq=k,
        soil_vwc=[[None if np.isnan(v) else float(v) for v in zone] for zone in soil],
        air_temp_c=num("air_temp_c"), air_rh_pct=num("air_rh_pct"), par_umol_m2_s=num("par_umol_m2_s"),
        co2_ppm=num("co2_ppm"), leaf_temp_c=num("leaf_temp_c"),
        flow_l_min=float(r["flow_l_min"][0]) if r else 0.0,
        pump_current_a=float(r["pump_current_frac"][0]) * 4.0 if r else 0.0,
        valve_open=[int(v >= 0.5) for v in action[:6]], pump_pct=float(action[6]), light_pct=float(action[7]),
        estop=estop)


def _run(ctl: GreenhouseController, steps: int, seed: int = 0):
    twin = GreenhouseTwin(1, seed=seed, dt_s=60.0, sensor_noise=0.02)
    twin.reset()
    action = np.zeros(8, np.float32)
    info = None
    decisions = []
    for k in range(steps):
        d = ctl.on_telemetry(_telemetry(twin, info, k, action))
        decisions.append(d)
        action = np.array(d.command.valves + [d.command.pump_pct, d.command.light_pct], np.float32)
        _, _, term, _, info = twin.step(action[None, :])
        assert not term[0], "the controller drove the twin into a hard termination"
    return decisions, twin


def test_decisions_are_safe_and_recorded():
    ctl = _controller()
    decisions, _ = _run(ctl, 120)
    assert [d.seq for d in decisions] == list(range(1, 121))
    for d in decisions:
        valves, pump = np.array(d.command.valves), d.command.pump_pct
        assert pump == 0 or valves.any()
        assert valves.sum() <= SafetyLimits.default().max_open_valves
        rec = d.record()
        assert rec["cmd_id"] == str(d.command.cmd_id) and rec["actor"].startswith(("policy:", "expert"))
    assert len({str(d.command.cmd_id) for d in decisions}) == 120


def test_water_is_accounted_from_measured_flow():
    ctl = _controller()
    twin = GreenhouseTwin(1, seed=0, dt_s=60.0)
    twin.reset()
    tel = _telemetry(twin, None, 0, np.zeros(8))
    ctl.on_telemetry(tel)
    flowing = tel.model_copy(update={"ts": tel.ts + timedelta(seconds=60), "seq": 1, "flow_l_min": 12.0,
                                     "valve_open": [1, 1, 0, 0, 0, 0], "pump_pct": 60.0})
    ctl.on_telemetry(flowing)
    np.testing.assert_allclose(ctl.water_today_l, [6.0, 6.0, 0, 0, 0, 0])


def test_flow_with_closed_valves_raises_alarm():
    ctl = _controller()
    twin = GreenhouseTwin(1, seed=0, dt_s=60.0)
    twin.reset()
    tel = _telemetry(twin, None, 0, np.zeros(8))
    ctl.on_telemetry(tel)
    leak = tel.model_copy(update={"ts": tel.ts + timedelta(seconds=60), "seq": 1, "flow_l_min": 5.0})
    assert "flow_without_open_valve" in ctl.on_telemetry(leak).alarms


def test_estop_latches_survives_restart_and_needs_a_reasoned_reset():
    ctl = _controller()
    twin = GreenhouseTwin(1, seed=0, dt_s=60.0)
    twin.reset()
    d = ctl.on_telemetry(_telemetry(twin, None, 0, np.zeros(8), estop=True))
    assert d.mode == "estop" and d.command.pump_pct == 0 and not any(d.command.valves)
    restored = _controller()
    restored.restore(copy.deepcopy(ctl.snapshot()))
    d2 = restored.on_telemetry(_telemetry(twin, None, 1, np.zeros(8)))
    assert d2.mode == "estop" and d2.actor == "estop"
    with pytest.raises(ValueError, match="reason"):
        restored.reset_estop("op1", "  ", T0)
    event = restored.reset_estop("op1", "valve inspected", T0)
    assert (event.from_mode, event.to_mode, event.actor) == ("estop", "manual", "op1")
    # The reset is a safe hold: manual, everything off, until an operator acts; the policy does not take over.
    d3 = restored.on_telemetry(_telemetry(twin, None, 2, np.zeros(8)))
    assert d3.mode == "manual" and d3.actor == "operator:op1"
    assert not any(d3.command.valves) and d3.command.pump_pct == 0.0 and d3.command.light_pct == 0.0


def test_an_estop_reset_goes_to_auto_only_when_the_operator_chooses_it():
    ctl = _controller()
    ctl.estop("operator:op1", "leak", T0)
    with pytest.raises(ValueError, match="'manual' or 'auto'"):
        ctl.reset_estop("op1", "checked", T0, "estop")  # type: ignore[arg-type]
    assert ctl.estop_latched
    event = ctl.reset_estop("op1", "checked, policy may resume", T0, "auto")
    assert (event.from_mode, event.to_mode) == ("estop", "auto") and ctl.wants_policy


def _manual_decision(action: list[float]) -> tuple[GreenhouseController, ControlDecision]:
    """A fresh controller's first decision in manual mode holding ``action``."""
    ctl = _controller()
    twin = GreenhouseTwin(1, seed=0, dt_s=60.0)
    twin.reset()
    ctl.set_mode("manual", "op7", "by hand", T0, manual_action=np.array(action, dtype=np.float64))
    return ctl, ctl.on_telemetry(_telemetry(twin, None, 0, np.zeros(8)))


def test_manual_mode_caps_the_pump_on_a_single_valve_and_says_why():
    ctl, d = _manual_decision([1, 0, 0, 0, 0, 0, 100.0, 0.0])
    assert d.actor == "operator:op7" and d.command.valves == [1, 0, 0, 0, 0, 0]
    assert d.command.pump_pct == ctl.limits.pump_single_valve_max_pct < 100.0
    [cap] = [f for f in d.rules_fired if f["rule"] == "pump.single_valve_cap"]
    assert (cap["actuator"], cap["before"], cap["after"]) == ("pump", 100.0, 85.0) \
        and "relief valve" in cap["why"]


def test_manual_mode_still_goes_through_interlocks():
    _, d = _manual_decision([0, 0, 0, 0, 0, 0, 90.0, 0.0])
    assert d.actor == "operator:op7" and d.command.pump_pct == 0.0  # no open valve: pump interlocked off
    # An override is a demonstration: its record keeps the observation the operator acted on.
    assert d.is_override and d.record()["estimate"]["observation"] == d.observation
    assert any(f["rule"] == "pump.needs_open_valve" for f in d.rules_fired)


@dataclass
class SplitProposer:
    policy_version: str = "split"
    ensemble: None = None

    def propose(self, obs: np.ndarray) -> np.ndarray:
        a = np.zeros((4, 8))
        a[:2, :6] = 1.0
        a[:2, 6] = 80.0
        return a

    def propose_many(self, obs: np.ndarray) -> np.ndarray:
        return np.stack([self.propose(o) for o in obs], axis=1)


def test_low_confidence_falls_back_to_expert():
    ctl = _controller(SplitProposer())
    d = _run(ctl, 1)[0][0]
    assert d.low_confidence and d.actor == "expert:low_confidence" and d.confidence < 0.65


def test_watchdog_sends_safe_state_on_stale_telemetry():
    ctl = _controller(max_age_s=120.0)
    _run(ctl, 3)
    assert ctl.watchdog(T0 + timedelta(seconds=150)) is None
    d = ctl.watchdog(T0 + timedelta(seconds=400))
    assert d is not None and d.actor == "watchdog" and "telemetry_stale" in d.alarms
    assert d.command.pump_pct == 0 and not any(d.command.valves)


def test_snapshot_restore_gives_identical_next_decision():
    ctl = _controller()
    _, twin = _run(ctl, 30)
    twin_copy_state = twin.state
    restored = _controller()
    restored.restore(copy.deepcopy(ctl.snapshot()))
    restored.new_cmd_id = ctl.new_cmd_id = (lambda: uuid.UUID(int=999))
    tel = _telemetry(twin, None, 30, np.zeros(8))
    a, b = ctl.on_telemetry(tel), restored.on_telemetry(tel)
    assert a.command == b.command and a.estimate == b.estimate and twin_copy_state is twin.state


def test_ensemble_decisions_carry_top3_explanations_and_low_confidence_history():
    import json
    from pathlib import Path

    from policy.ensemble import load_ensemble

    ensemble = load_ensemble(Path(__file__).resolve().parents[2] / "policy" / "shipped")
    ctl = _controller(ensemble)
    decisions, _ = _run(ctl, 3)
    exp = decisions[-1].explanation
    assert exp is not None and 1 <= len(exp["top"]) <= 3
    assert all("%" in f["sentence"] for f in exp["top"])
    # stored as JSON in the decision row and the audit trail
    json.dumps(decisions[-1].record()["explanation"])
    # Every decision is "low confidence" with a zero threshold: it keeps the last steps and a heat map.
    strict = _controller(ensemble, disagreement_threshold=0.0)
    d = _run(strict, 4)[0][-1]
    if d.low_confidence:
        hist = d.explanation["history"]
        assert len(hist["observations"]) == 4 and len(hist["saliency"]) == 4


OPEN_2_3 = np.array([0, 0, 1, 1, 0, 0, 70.0, 0.0])
"""An operator's valve test: zones 2 and 3 open, the pump at 70 %."""
SHUT_2 = np.array([0, 0, 0, 1, 0, 0, 70.0, 0.0])
"""The feedback of that test when valve 2 stays closed."""


def _box(ctl: GreenhouseController, twin: GreenhouseTwin, k: int, feedback: np.ndarray,
         held: ControlDecision | None) -> ControlDecision:
    """Telemetry ``k`` from a box that holds ``held``'s command (None: its own safe state)."""
    tel = _telemetry(twin, None, k, feedback).model_copy(
        update={"cmd_seq": None if held is None else held.command.seq})
    return ctl.on_telemetry(tel)


def _failed_alarms(d: ControlDecision) -> list[str]:
    return [a for a in d.alarms if a.startswith(("valve_failed", "valve_feedback_mismatch"))]


def _valve_test() -> tuple[GreenhouseController, GreenhouseTwin, ControlDecision]:
    """An operator opens zones 2 and 3 by hand: the controller, its plant and the first decision."""
    ctl = _controller()
    twin = GreenhouseTwin(1, seed=0, dt_s=60.0)
    twin.reset()
    ctl.set_mode("manual", "op7", "valve test", T0, manual_action=OPEN_2_3)
    return ctl, twin, _box(ctl, twin, 0, np.zeros(8), None)


def test_a_valve_the_box_held_open_that_reads_closed_is_latched_failed_until_seen_open():
    ctl, twin, d0 = _valve_test()
    assert d0.command.valves[2] == 1
    # The first telemetry that shows the box holding the open command starts the watch: no verdict yet.
    d1 = _box(ctl, twin, 1, SHUT_2, d0)
    assert ctl.valve_failed.sum() == 0 and not any(a.startswith("valve_failed") for a in d1.alarms)
    d2 = _box(ctl, twin, 2, SHUT_2, d1)  # still held open a minute later, still closed: evidence
    assert "valve_failed:2" in d2.alarms and "valve_feedback_mismatch:2" in d2.alarms
    spec_failed = d2.observation[ObservationSpec(6).slices["valve_failed"]]
    assert spec_failed == [0, 0, 1, 0, 0, 0]
    ctl.set_mode("auto", "op7", "back to the policy", T0)
    d3 = _box(ctl, twin, 3, SHUT_2, d2)
    assert d3.command.valves[2] == 0  # never commanded while failed, nor counted as a path
    assert d3.command.pump_pct == 0 or sum(d3.command.valves) >= 2
    restored = _controller()
    restored.restore(copy.deepcopy(ctl.snapshot()))
    assert restored.valve_failed.tolist() == [0, 0, 1, 0, 0, 0]
    seen = np.array([0, 0, 1, 0, 0, 0, 0.0, 0.0])  # an operator's test opened it
    d = _box(restored, twin, 4, seen, d3)
    assert not any(a.startswith("valve_failed") for a in d.alarms) and restored.valve_failed.sum() == 0


def test_the_boxs_fall_back_after_an_outage_latches_nothing_and_irrigation_resumes():
    """A broker outage or a service restart longer than the command TTL: the box fell back to its
    safe state (cmd_seq null) and reads every valve closed against the last open command. That is
    the box doing as told, not a failed valve: nothing latches, nothing is alarmed, and the next
    decision opens the valves again."""
    ctl, twin, held = _valve_test()
    for k in (1, 2):
        held = _box(ctl, twin, k, OPEN_2_3, held)
    after = _box(ctl, twin, 4, np.zeros(8), None)  # two minutes of silence, then the fall-back's telemetry
    assert ctl.valve_failed.sum() == 0 and _failed_alarms(after) == []
    assert after.command.valves[2:4] == [1, 1]
    # A restart in between (the snapshot taken while the valves were held open) latches nothing either.
    restored = _controller()
    restored.restore(copy.deepcopy(ctl.snapshot()))
    d = _box(restored, twin, 6, np.zeros(8), None)
    assert restored.valve_failed.sum() == 0 and _failed_alarms(d) == []


def test_a_command_the_box_never_took_says_nothing_about_its_valves():
    """The box still holds an older command (the newer one was rejected, expired or lost): its valves
    read as that one told them, so closed feedback must not latch them failed."""
    ctl = _controller()
    twin = GreenhouseTwin(1, seed=0, dt_s=60.0)
    twin.reset()
    ctl.set_mode("manual", "op7", "all off", T0, manual_action=np.zeros(8))
    shut = _box(ctl, twin, 0, np.zeros(8), None)
    ctl.set_mode("manual", "op7", "valve test", T0, manual_action=OPEN_2_3)
    opened = _box(ctl, twin, 1, np.zeros(8), shut)
    assert opened.command.valves[2] == 1
    for k in (2, 3, 4):  # the box reports it still holds the closed command
        d = _box(ctl, twin, k, np.zeros(8), shut)
        assert ctl.valve_failed.sum() == 0 and _failed_alarms(d) == []


def test_after_a_reconnect_the_watch_starts_again():
    """Commands queued while the service was away may reach the box late: feedback seen before a
    reconnect vouches for nothing, and a valve the box just re-opened is not judged at once."""
    ctl, twin, d = _valve_test()
    d = _box(ctl, twin, 1, OPEN_2_3, d)
    ctl.forget_held_commands()
    d = _box(ctl, twin, 2, SHUT_2, d)  # opening again after the box took a late command
    assert ctl.valve_failed.sum() == 0 and _failed_alarms(d) == []
    d = _box(ctl, twin, 3, SHUT_2, d)
    assert "valve_failed:2" in d.alarms


def test_a_reconnect_repeats_a_young_action_as_a_new_command_and_nothing_stale():
    ctl, twin, d = _valve_test()
    again = ctl.after_reconnect(repeat=True)
    assert again is not None and again.actor == "reconnect" and again.seq == d.seq + 1
    assert again.command.cmd_id != d.command.cmd_id and again.command.seq == d.command.seq + 1
    assert (again.command.valves, again.command.pump_pct) == (d.command.valves, d.command.pump_pct)
    assert again.command.ts == d.command.ts  # in force for what is left of the original TTL, no longer
    # Past the TTL (the caller's clock says so) the box has fallen back: the next telemetry decides.
    assert ctl.after_reconnect(repeat=False) is None
    ctl.estop("operator:op7", "leak", d.ts)
    held = ctl.after_reconnect(repeat=True)
    assert held is not None and held.command.mode == "estop" and not any(held.command.valves)
    assert held.command.pump_pct == 0.0


def test_lamps_the_site_runs_are_left_to_it_on_the_wire():
    """With ``lamps_ours`` off the command carries no lamp level (null: the edge box leaves the lamps to
    the site's climate computer) where a level of 0 would switch the site's lamps off."""
    from control.setup import GreenhouseSetup

    ctl = _controller()
    ctl.apply_setup(GreenhouseSetup("gh1", tuple(ctl.zones), lamps_ours=False, version=2),
                    SafetyLimits.default())
    twin = GreenhouseTwin(1, seed=0, dt_s=60.0)
    twin.reset()
    d = ctl.on_telemetry(_telemetry(twin, None, 0, np.zeros(8, np.float32)))
    assert d.command.light_pct is None and d.command.valves == [int(v) for v in d.clipped["valves"]]
    assert d.clipped["light_pct"] == 0.0  # the decision's own action: greentwin burns no lamp
    ctl.apply_setup(GreenhouseSetup("gh1", tuple(ctl.zones), lamps_ours=True, version=3),
                    SafetyLimits.default())
    assert isinstance(_run(ctl, 1)[0][0].command.light_pct, float)


def test_each_decision_records_the_break_even_price_its_lamps_were_weighed_against():
    """The all-in price below which a lamp hour pays for this crop, so a decision can say 'lamps on: 42
    EUR/MWh is below the break-even of 61'; none where the expert lights by the clock or the site runs the
    lamps."""
    import dataclasses

    from control.setup import GreenhouseSetup
    from policy.baselines import LAMP_PAR_PER_PCT

    ctl = _controller()
    ctl.expert = dataclasses.replace(ctl.expert, c0=75.0, par_sat=1000.0)
    d = _run(ctl, 1)[0][0]
    sl, obs = ctl.obs_builder.spec.slices, np.asarray(d.observation)
    natural = obs[sl["par"].start] - obs[sl["lights"].start] * LAMP_PAR_PER_PCT
    expected = 75.0 * obs[sl["fruit_price"].start] * (1.0 - min(max(natural / 1000.0, 0.0), 1.0))
    assert d.estimate["lamp_break_even_eur_mwh"] == pytest.approx(expected) and expected > 0
    ctl.expert = dataclasses.replace(ctl.expert, c0=None)
    assert _run(ctl, 1)[0][0].estimate["lamp_break_even_eur_mwh"] is None
    ctl.expert = dataclasses.replace(ctl.expert, c0=75.0)
    ctl.apply_setup(GreenhouseSetup("gh1", tuple(ctl.zones), lamps_ours=False, version=2),
                    SafetyLimits.default())
    assert _run(ctl, 1)[0][0].estimate["lamp_break_even_eur_mwh"] is None
