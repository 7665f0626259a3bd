"""The controller's state as one immutable value: nothing changes it in place, a decision replaces it,
and a snapshot is that value serialised in the format snapshots were always written in."""

from __future__ import annotations

import ast
import json
import uuid
from dataclasses import FrozenInstanceError, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from control import ExpertProposer, GreenhouseController, ZoneSetup
from control.state import ControllerState
from policy.baselines import ThresholdExpert
from safety import SafetyLimits
from wire.topics import Telemetry

T0 = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
Z = 2
ROOT = Path(__file__).resolve().parents[2]


def _controller() -> GreenhouseController:
    return GreenhouseController("gh1", [ZoneSetup("loam", 0.21, 0.27, 0.45, 100.0)] * Z,
                                ExpertProposer(ThresholdExpert()),
                                SafetyLimits.default().model_copy(update={"zones": Z}),
                                cmd_id_factory=lambda: uuid.UUID(int=7))


def _telemetry(k: int, vwc: float = 0.15, valves: tuple[int, ...] = (0,) * Z, flow: float = 0.0) -> Telemetry:
    return Telemetry(ts=T0 + timedelta(minutes=k), boot_id="b1", seq=k, soil_vwc=[[vwc, vwc]] * Z,
                     air_temp_c=24.0, air_rh_pct=60.0, par_umol_m2_s=300.0, co2_ppm=420.0, leaf_temp_c=23.0,
                     flow_l_min=flow, pump_current_a=0.0, valve_open=list(valves), pump_pct=0.0,
                     light_pct=0.0, estop=False)


def _decided(steps: int) -> GreenhouseController:
    ctl = _controller()
    for k in range(steps):
        ctl.on_telemetry(_telemetry(k, valves=(1, 0) if k % 3 else (0, 0), flow=6.0 if k % 3 else 0.0))
    return ctl


def test_a_state_cannot_be_changed_in_place() -> None:
    state = ControllerState.initial(Z)
    with pytest.raises(FrozenInstanceError):
        state.seq = 3  # type: ignore[misc]
    for name in ("manual_action", "prev_action", "valve_failed", "water_today_l"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(state, name)[0] = 1.0
    mine = np.array([1.0, 0.0, 50.0, 0.0])
    held = replace(state, manual_action=mine)
    mine[0] = 0.0  # the caller's array stays the caller's: the state took a copy
    assert held.manual_action.tolist() == [1.0, 0.0, 50.0, 0.0] and not held.manual_action.flags.writeable
    assert held is not state and state.manual_action.tolist() == [0.0] * (Z + 2), "replace gives a new value"


def test_a_decision_replaces_the_state_and_leaves_the_one_it_began_with() -> None:
    ctl = _decided(4)
    before = ctl.state
    frozen_json = json.dumps(before.to_json())
    decision = ctl.on_telemetry(_telemetry(4, vwc=0.12, valves=(1, 0), flow=6.0))
    assert ctl.state is not before and json.dumps(before.to_json()) == frozen_json
    assert (ctl.state.seq, ctl.state.cmd_seq, ctl.state.last_ts) \
        == (before.seq + 1, before.cmd_seq + 1, decision.ts)
    assert ctl.seq == ctl.state.seq and ctl.water_today_l is ctl.state.water_today_l, \
        "the controller reads its state"
    event = ctl.estop("operator:olga", "smoke", decision.ts)
    assert (event.seq, ctl.state.estop_latched, ctl.state.mode, before.mode) \
        == (before.seq + 2, True, "estop", "auto")
    with pytest.raises(AttributeError, match="replace the state value"):
        ctl.seq = 99  # type: ignore[misc]  # a field set on the controller would shadow its state
    assert ctl.seq == ctl.state.seq == before.seq + 2


def test_the_state_round_trips_through_json() -> None:
    state = _decided(6).state
    assert state.water_today_l.sum() > 0 and state.valve_evidence.to_json(), "a state with something in it"
    text = json.dumps(state.to_json())
    back = ControllerState.from_json(json.loads(text), Z)
    assert json.dumps(back.to_json()) == text
    for f in fields(ControllerState):
        mine, theirs = getattr(state, f.name), getattr(back, f.name)
        if isinstance(mine, np.ndarray):
            assert np.array_equal(mine, theirs) and not theirs.flags.writeable, f.name
        elif f.name == "valve_evidence":
            assert theirs.to_json() == mine.to_json()
        else:
            assert theirs == mine, f.name


def _old_snapshot() -> dict[str, Any]:
    """A snapshot as the controller wrote it before its state was one value: its keys, in its order."""
    fresh = _controller()
    changed = datetime(2026, 6, 1, 5, 10, tzinfo=UTC)
    return {"version": 1, "mode": "manual", "estop_latched": False, "manual_action": [1.0, 0.0, 40.0, 0.0],
            "manual_actor": "operator:olga", "seq": 41, "cmd_seq": 39, "prev_action": [1.0, 0.0, 40.0, 0.0],
            "valve_failed": [0.0, 1.0], "commands_sent": [],
            "valve_changed_at": [changed.isoformat(), None], "water_today_l": [12.5, 0.0],
            "lights_hours_today": 1.25, "crop_twin": fresh.crop_twin.snapshot(), "day": "2026-06-01",
            "last_ts": (T0 - timedelta(minutes=1)).isoformat(), "estimator": fresh.estimator.state_dict(),
            "irrigation_24h_mm": [0.0, 0.0], "held": dict(fresh.obs_builder.held), "first_ts": None}


def test_a_snapshot_written_before_restores_the_same_and_is_written_back_byte_for_byte() -> None:
    old = _old_snapshot()
    ctl = _controller()
    ctl.restore(json.loads(json.dumps(old)))
    s = ctl.state
    assert (s.mode, s.manual_actor, s.seq, s.cmd_seq, s.day, s.lights_hours_today) == \
        ("manual", "operator:olga", 41, 39, "2026-06-01", 1.25)
    assert s.valve_failed.tolist() == [0.0, 1.0] and s.water_today_l.tolist() == [12.5, 0.0]
    assert s.valve_changed_at == (datetime(2026, 6, 1, 5, 10, tzinfo=UTC), None)
    assert s.last_ts == T0 - timedelta(minutes=1)
    assert json.dumps(ctl.snapshot()) == json.dumps(old), "the same bytes: the format and its key order kept"
    decision = ctl.on_telemetry(_telemetry(0))
    assert (decision.seq, decision.command.seq, decision.actor) == (42, 40, "operator:olga")


def test_an_older_snapshot_takes_the_defaults_of_what_it_did_not_keep() -> None:
    old = _old_snapshot()
    for key in ("manual_actor", "valve_failed", "commands_sent"):
        del old[key]
    ctl = _controller()
    ctl.restore(old)
    assert ctl.state.manual_actor == "operator:manual" and ctl.state.valve_failed.tolist() == [0.0, 0.0]
    assert ctl.state.valve_evidence.to_json() == []


def test_taking_over_numbers_on_after_the_records_through_the_controller() -> None:
    ctl = _decided(3)
    seq, cmd_seq = ctl.seq, ctl.cmd_seq
    ctl.continue_after(seq - 1)
    assert (ctl.seq, ctl.cmd_seq) == (seq, cmd_seq), "never backwards"
    ctl.continue_after(seq + 5)
    assert (ctl.seq, ctl.cmd_seq) == (seq + 5, cmd_seq + 5)
    ctl.adopt_estop()
    assert ctl.state.estop_latched and ctl.effective_mode == "estop"


STATE_FIELDS = {f.name for f in fields(ControllerState)}


def test_the_service_and_the_control_path_never_assign_the_state_field_by_field() -> None:
    """The controller's forwarding fields accept assignment for tests that set a plant up; the code
    that runs replaces the whole value (stages, mode changes, take-overs), so one place changes it."""
    offenders = []
    for folder in ("control", "app"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
                for t in (e for target in targets for e in ast.walk(target)):
                    if isinstance(t, ast.Attribute) and t.attr in STATE_FIELDS and \
                            isinstance(t.value, ast.Name) and \
                            t.value.id in ("ctl", "controller", "self") and \
                            (t.value.id != "self" or path.name == "controller.py"):
                        offenders.append(f"{path.relative_to(ROOT)}:{t.lineno} {t.value.id}.{t.attr}")
    assert offenders == []
