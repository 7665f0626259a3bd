"""The safety-limits invariant of the end-to-end suite finds each kind of moment outside the limits
(and stays quiet on a plant that ran within them), on hand-made plant logs."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np

from tests.e2e.plant_log import PlantStep, violations
from wire.topics import Command

ZONES = 6
DT = 60.0
NOON = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def _cmd(ts: datetime, valves: list[int], pump: float, light: float) -> Command:
    return Command(cmd_id=uuid.uuid4(), ts=ts, seq=1, ttl_s=30.0, mode="auto", valves=valves, pump_pct=pump,
                   light_pct=light, policy_version="test")


def _step(start: datetime, valves: list[int], pump: float = 0.0, light: float = 0.0, *, water: float = 0.0,
          wall: float = 1000.0, cmd_ts: datetime | None = None, applied_at: float = 1000.0,
          dead: bool = False, termination: int = 0) -> PlantStep:
    action = np.array([*valves, pump, light], dtype=np.float64)
    cmd = _cmd(cmd_ts or start, valves, pump, light)
    return PlantStep(start=start, wall=wall, commanded=action, ran=action.copy(),
                     water_l=np.array([water if v else 0.0 for v in valves]), dead_heading=dead,
                     termination=termination, in_force=cmd, applied_at=applied_at)


def _run(start: datetime, n: int, **kw: object) -> list[PlantStep]:
    valves = [1, 1, 0, 0, 0, 0]
    return [_step(start + timedelta(seconds=DT * i), valves, **kw) for i in range(n)]  # type: ignore[arg-type]


def test_a_plant_within_the_limits_has_no_violations() -> None:
    steps = _run(NOON, 30, pump=60.0, light=50.0, water=5.0)
    # The lamps of a command decided at 22:59 burn into the first dark minute, within its TTL.
    eve = datetime(2026, 6, 1, 23, 0, tzinfo=UTC)
    steps.append(_step(eve, [0] * ZONES, light=80.0, cmd_ts=eve - timedelta(minutes=1), wall=1000.5))
    assert violations("gh", steps, DT) == []


def test_each_kind_of_violation_is_found() -> None:
    night = datetime(2026, 6, 1, 23, 30, tzinfo=UTC)
    shut = [0] * ZONES
    cases = {
        "pump at 10 %": [_step(NOON, [1, 1, 0, 0, 0, 0], pump=10.0)],
        "with every valve commanded shut": [_step(NOON, shut, pump=50.0)],
        "5 valves open > 4": [_step(NOON, [1, 1, 1, 1, 1, 0], pump=50.0)],
        "pump at 100 % on one valve > 85": [_step(NOON, [1, 0, 0, 0, 0, 0], pump=100.0)],
        "dead-heading for 180 s": _run(NOON, 3, pump=50.0, dead=True),
        "the plant stopped on pump over-current": [_step(NOON, shut, termination=1)],
        "in the dark period (decided in it)": [_step(night, shut, light=40.0)],
        "in the dark period (held past its command's TTL)":
            [_step(night, shut, light=40.0, cmd_ts=night - timedelta(hours=1), wall=1000.0 + 31.0)],
        "L > cap 250 L": _run(NOON, 40, pump=60.0, water=10.0),  # 400 L in a day, 10 L a step
    }
    for what, steps in cases.items():
        found = violations("gh", steps, DT)
        assert found and all(what in v for v in found), f"{what}: {found}"


def test_a_dead_head_within_the_pumps_limit_and_water_within_two_steps_of_the_cap_pass() -> None:
    steps = _run(NOON, 2, pump=50.0, dead=True) + _run(NOON + timedelta(minutes=2), 1, pump=50.0)
    assert violations("gh", steps, DT) == []
    at_cap = _run(NOON, 26, pump=60.0, water=10.0)  # 260 L: the cap crossed within one step, then closed
    assert violations("gh", at_cap, DT) == []
    assert violations("gh", [replace(s, water_l=s.water_l * 1.5) for s in at_cap], DT) != [], \
        "the valve kept open for six steps after the service saw the cap crossed"


def test_water_the_service_never_saw_does_not_count_against_what_it_decided_later() -> None:
    """A command held over a lost link watered past the cap where the service could not see it: what it
    decides on the telemetry after the link is back is judged by the water it saw, not by the plant's."""
    unseen = [replace(s, seen=False) for s in _run(NOON, 30, pump=60.0, water=10.0)]  # 300 L it never saw
    back = _run(NOON + timedelta(seconds=30 * DT), 5, pump=60.0, water=10.0)
    assert violations("gh", unseen + back, DT) == []
    assert violations("gh", [replace(s, seen=True) for s in unseen] + back, DT)  # seen, it is the service's


def test_water_past_the_cap_under_a_command_held_over_a_lost_link_is_the_links_not_the_services() -> None:
    decided = NOON + timedelta(minutes=20)  # 210 L by then; the link drops, the command is held
    held = [_step(NOON + timedelta(minutes=i), [1, 1, 0, 0, 0, 0], pump=60.0, water=10.0, cmd_ts=min(
        NOON + timedelta(minutes=i), decided), wall=1000.0 + 0.1 * i, applied_at=1000.0 + 0.1 * min(i, 20))
        for i in range(40)]
    assert violations("gh", held, DT) == [], "held within its TTL (wall): the service decided before the cap"
    late = [replace(s, wall=s.applied_at + 31.0) if s.start > decided else s for s in held]  # type: ignore[operator]
    assert any("under commands decided after the cap" in v for v in violations("gh", late, DT))


def test_a_dead_head_is_blamed_on_the_commands_that_answered_it() -> None:
    """Past the pump's limit under commands decided before the service could have seen that long a
    dead-head (late, still within their TTL): the plant's speed, not the service. Under a command that
    answered telemetry showing it, or one held past its TTL: a violation, the twin's stop included."""
    first = NOON - timedelta(minutes=1)
    late = _run(NOON, 5, pump=50.0, dead=True, cmd_ts=first, applied_at=1000.0, wall=1000.4)
    late[-1] = replace(late[-1], termination=2)
    assert violations("gh", late, DT) == []
    answered = [replace(s, in_force=_cmd(s.start, [1, 1, 0, 0, 0, 0], 50.0, 0.0)) for s in late]
    found = violations("gh", answered, DT)
    assert any("dead-heading for 180 s" in v for v in found), found
    assert any("stopped on dead-heading" in v for v in found), found
    held_too_long = [replace(s, wall=1000.0 + 31.0) for s in late]
    assert any("dead-heading for 180 s" in v for v in violations("gh", held_too_long, DT))
