"""A dead-head under way: the box held valves open, the pump ran and nothing flowed.

When the valves read closed, the clipper rests the pump at the first telemetry (the failure latch
judges a valve only on its second look, a valve taking seconds to move): the valves stay as told so
the latch can judge them next time. When the feedback only echoes the command, the flow is the only
evidence, and it counts once the pump and the valves have been held long enough."""

from __future__ import annotations

import numpy as np

from control import ControlDecision, GreenhouseController
from tests.control.test_controller import OPEN_2_3, T0, _telemetry, _valve_test
from twin import GreenhouseTwin

DEAD = np.array([0, 0, 0, 0, 0, 0, 70.0, 0.0])
"""The box holds zones 2 and 3 open with the pump at 70 %; both read closed and no water flows."""


def _rested(d: ControlDecision) -> bool:
    return any(r["rule"] == "pump.needs_open_valve" and "dead-heading" in r["why"] for r in d.rules_fired)


def _look(ctl: GreenhouseController, twin: GreenhouseTwin, k: int, feedback: np.ndarray,
          held: ControlDecision, flow: float = 0.0) -> ControlDecision:
    """Telemetry ``k`` from a box holding ``held``'s command, reading ``feedback`` and ``flow`` L/min."""
    tel = _telemetry(twin, None, k, feedback).model_copy(update={"cmd_seq": held.command.seq,
                                                                 "flow_l_min": flow})
    return ctl.on_telemetry(tel)


def test_the_pump_rests_at_the_first_sight_of_a_dead_head_and_the_latch_judges_next() -> None:
    ctl, twin, d0 = _valve_test()  # an operator's command: the clipper holds it to the rule too
    d1 = _look(ctl, twin, 1, DEAD, d0)
    assert _rested(d1) and d1.command.pump_pct == 0.0
    assert d1.command.valves[2:4] == [1, 1], "the valves stay as told, so the latch can judge them"
    assert ctl.valve_failed.sum() == 0, "one look latches nothing"
    d2 = _look(ctl, twin, 2, np.zeros(8), d1)  # a minute later, still held open, still closed
    assert "valve_failed:2,3" in d2.alarms
    ctl.set_mode("auto", "op7", "back to the rule", T0)
    d3 = _look(ctl, twin, 3, np.zeros(8), d2)
    assert d3.command.valves[2:4] == [0, 0]


def test_feedback_that_echoes_the_command_rests_the_pump_on_the_second_look_and_latches_nothing() -> None:
    """A box whose valve feedback only repeats the command (no limit switches): a stuck valve shows in
    the flow alone. The first look may be a pump still spinning up; once the pump and the valves have
    been held long enough, no flow is a dead-head (or a dead meter): the pump rests, nothing latches."""
    ctl, twin, d0 = _valve_test()
    first = _look(ctl, twin, 1, OPEN_2_3, d0)
    assert not _rested(first) and first.command.pump_pct > 0.0
    second = _look(ctl, twin, 2, OPEN_2_3, first)
    assert _rested(second) and second.command.pump_pct == 0.0
    assert "valve_open_no_flow" in second.alarms and ctl.valve_failed.sum() == 0


def test_water_flowing_is_no_dead_head() -> None:
    ctl, twin, d0 = _valve_test()
    wiring = _look(ctl, twin, 1, DEAD, d0, flow=12.0)  # feedback says closed, the meter says water flows
    assert not _rested(wiring) and wiring.command.pump_pct > 0.0
    held = wiring
    for k in (2, 3):  # long held, feedback open, water flowing: a healthy path
        held = _look(ctl, twin, k, OPEN_2_3, held, flow=12.0)
        assert not _rested(held) and held.command.pump_pct > 0.0


def test_the_evidence_notes_the_pump_and_reads_snapshots_from_before_it() -> None:
    from datetime import timedelta

    from control.valve_evidence import ValveEvidence

    ev = ValveEvidence().with_sent(1, [1, 0], pump=True).with_sent(2, [1, 0], pump=False)
    assert ev.to_json() == [[1, [1, 0], 1], [2, [1, 0], 0]]
    ev, _, _, pump = ev.observe(1, T0, 2)
    assert not pump, "the first look at a running pump is no evidence yet"
    _, _, judged, pump = ev.observe(1, T0 + timedelta(seconds=60), 2)
    assert pump and judged.all()
    _, _, judged, pump = ev.observe(2, T0 + timedelta(seconds=120), 2)
    assert not pump and judged[0], "a stopped pump says nothing of the flow; the valve's run goes on"
    old = ValveEvidence.from_json([[7, [1, 0]]])  # a snapshot written before the pump was noted
    assert old.sent[0].pump is False and old.sent[0].valves == (True, False)
