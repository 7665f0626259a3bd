"""The clipper: one test per rule, then properties over arbitrary actions and contexts."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from safety import CLIP_ORDER, ClipContext, RuleId, SafetyLimits, clip, safe_state

Z = 6
LIMITS = SafetyLimits()  # pump 20-100 %, 4 valves, 250 L, sat 0.45 - 0.03, dwell 120 s, 5 %/s, 16 h, 1000 PAR


def ctx(**overrides: Any) -> ClipContext:
    """A quiet mid-morning context: nothing open, long-settled valves, moist soil, weak sun."""
    base: dict[str, Any] = {
        "dt_s": 10.0,
        "prev_action": np.zeros(Z + 2),
        "valve_state_age_s": np.full(Z, 1e4),
        "zone_water_today_l": np.zeros(Z),
        "moisture_vwc": np.full(Z, 0.20),
        "sensor_ok": np.ones(Z, dtype=bool),
        "natural_par_umol": 200.0,
        "lights_on_hours_today": 2.0,
        "local_hour": 10.0,
    }
    base.update(overrides)
    return ClipContext(**base)


def act(valves: list[float], pump: float, lights: float) -> np.ndarray:
    return np.array([*valves, pump, lights], dtype=float)


def only_firing(report: Any, rule: str, actuator: str) -> tuple[float, float]:
    hits = [f for f in report.firings if f.rule_id == rule and f.actuator == actuator]
    assert len(hits) == 1, report.firings
    return hits[0].before, hits[0].after


# ---- a compliant action is left alone -----------------------------------------------------


def test_compliant_action_passes_unchanged() -> None:
    prev = act([1, 1, 0, 0, 0, 0], 40, 50)
    action = act([1, 1, 0, 0, 0, 0], 60, 50)
    out, report = clip(action, ctx(prev_action=prev), LIMITS)
    np.testing.assert_array_equal(out, action)
    assert report.firings == () and report.notes == () and report.rule_ids == ()
    np.testing.assert_array_equal(report.action_in, action)


def test_rule_ids_are_listed_in_clip_order() -> None:
    assert tuple(RuleId) == CLIP_ORDER and len(set(CLIP_ORDER)) == len(CLIP_ORDER)


def test_safe_state_is_everything_off() -> None:
    np.testing.assert_array_equal(safe_state(6), np.zeros(8))
    np.testing.assert_array_equal(safe_state(-3), np.zeros(2))


# ---- one test per rule -----------------------------------------------------------------------


def test_input_shape_gives_safe_state() -> None:
    for bad in ([1.0, 2.0], np.ones((2, 8)), "open all", None, [1, "x", 3]):
        out, report = clip(bad, ctx(), LIMITS)
        np.testing.assert_array_equal(out, np.zeros(Z + 2))
        assert report.fired(RuleId.INPUT_SHAPE)


def test_input_non_finite_takes_previous_safe_value() -> None:
    prev = act([1, 0, 0, 0, 0, 0], 40, 30)
    out, report = clip(act([1, 0, 0, 0, 0, np.nan], np.nan, np.inf), ctx(prev_action=prev), LIMITS)
    assert out[Z] == 40 and out[Z + 1] == 30 and out[Z - 1] == 0
    before, after = only_firing(report, "input.non_finite", "pump")
    assert math.isnan(before) and after == 40
    assert only_firing(report, "input.non_finite", "lights") == (math.inf, 30)


def test_valves_binary_thresholds_at_half() -> None:
    out, report = clip(act([0.7, 0.2, 0.5, 0, 0, 0], 0, 0), ctx(), LIMITS)
    np.testing.assert_array_equal(out[:Z], [1, 0, 1, 0, 0, 0])
    assert only_firing(report, "valves.binary", "valve[0]") == (0.7, 1.0)
    assert only_firing(report, "valves.binary", "valve[1]") == (0.2, 0.0)


def test_pump_range_clips_and_raises_to_min() -> None:
    prev = act([1, 1, 0, 0, 0, 0], 100, 0)
    out, report = clip(act([1, 1, 0, 0, 0, 0], 150, 0), ctx(prev_action=prev), LIMITS)
    assert out[Z] == 100 and only_firing(report, "pump.range", "pump") == (150, 100)

    prev = act([1, 0, 0, 0, 0, 0], 20, 0)
    out, report = clip(act([1, 0, 0, 0, 0, 0], 8, 0), ctx(prev_action=prev), LIMITS)
    assert out[Z] == 20 and only_firing(report, "pump.range", "pump") == (8, 20)


def test_pump_needs_open_valve() -> None:
    out, report = clip(act([0] * Z, 50, 0), ctx(), LIMITS)
    assert out[Z] == 0 and only_firing(report, "pump.needs_open_valve", "pump") == (50, 0)


def test_pump_command_below_min_without_valves_stops() -> None:
    out, report = clip(act([0] * Z, 10, 0), ctx(), LIMITS)
    assert out[Z] == 0 and report.fired("pump.needs_open_valve") and not report.fired("pump.range")


def test_valves_max_open_keeps_locked_then_open_then_driest() -> None:
    prev = act([0, 0, 0, 1, 1, 1], 40, 0)
    ages = np.array([1e4, 1e4, 1e4, 1e4, 30.0, 30.0])  # zones 4, 5 opened 30 s ago: dwell-locked
    moisture = np.array([0.30, 0.10, 0.25, 0.35, 0.35, 0.35])  # zone 1 is the driest newcomer
    out, report = clip(
        act([1] * Z, 40, 0), ctx(prev_action=prev, valve_state_age_s=ages, moisture_vwc=moisture), LIMITS
    )
    np.testing.assert_array_equal(out[:Z], [0, 1, 0, 1, 1, 1])
    assert only_firing(report, "valves.max_open", "valve[0]") == (1, 0)
    assert only_firing(report, "valves.max_open", "valve[2]") == (1, 0)


def test_valves_max_open_may_close_a_valve_past_its_dwell_but_not_one_inside_it() -> None:
    limits = SafetyLimits(max_open_valves=2)
    prev = act([0, 0, 0, 1, 1, 1], 40, 0)
    ages = np.array([1e4, 1e4, 1e4, 1e4, 30.0, 30.0])  # zone 3 has had its minimum run
    moisture = np.array([0.2, 0.2, 0.2, 0.05, 0.35, 0.35])  # ... and is the driest
    out, report = clip(
        act([0, 0, 0, 1, 1, 1], 40, 0),
        ctx(prev_action=prev, valve_state_age_s=ages, moisture_vwc=moisture),
        limits,
    )
    np.testing.assert_array_equal(out[:Z], [0, 0, 0, 0, 1, 1])
    assert report.rule_ids == ("valves.max_open",)


def test_zone_daily_water_cap_closes_capped_and_unknown() -> None:
    water = np.array([250.0, np.nan, 249.0, 0, 0, 0])
    out, report = clip(act([1, 1, 1, 0, 0, 0], 50, 0), ctx(zone_water_today_l=water), LIMITS)
    np.testing.assert_array_equal(out[:3], [0, 0, 1])
    assert only_firing(report, "zone.daily_water_cap", "valve[0]") == (1, 0)
    assert only_firing(report, "zone.daily_water_cap", "valve[1]") == (1, 0)


def test_zone_daily_water_cap_stops_dead_heading_pump() -> None:
    water = np.full(Z, 300.0)
    out, report = clip(act([1, 0, 0, 0, 0, 0], 50, 0), ctx(zone_water_today_l=water), LIMITS)
    np.testing.assert_array_equal(out, np.zeros(Z + 2))
    assert report.rule_ids == ("zone.daily_water_cap", "pump.needs_open_valve")


def test_the_pump_rests_while_it_would_feed_only_valves_that_moved_no_water() -> None:
    """Valves the box held open while the pump ran and nothing flowed: a dead-head under way. The pump
    rests (the valves stay as told, so the latch can judge them); one more open path lets it run."""
    dry = np.array([False, True, True, False, False, False])
    prev = act([0, 1, 1, 0, 0, 0], 60, 0)
    out, report = clip(act([0, 1, 1, 0, 0, 0], 60, 0), ctx(prev_action=prev, valves_without_flow=dry), LIMITS)
    np.testing.assert_array_equal(out, act([0, 1, 1, 0, 0, 0], 0, 0))
    assert report.rule_ids == ("pump.needs_open_valve",)
    out, report = clip(act([0, 1, 1, 1, 0, 0], 60, 0), ctx(prev_action=prev, valves_without_flow=dry), LIMITS)
    assert out[Z] == 60.0 and report.rule_ids == ()


def test_zone_saturation_margin_uses_the_tighter_saturation() -> None:
    moisture = np.array([0.43, 0.41, 0.38, 0.2, 0.2, 0.2])
    sat = np.array([np.nan, 0.50, 0.40, 0.45, 0.45, 0.45])  # context may only tighten: zone 2 -> 0.40
    out, report = clip(act([1, 1, 1, 0, 0, 0], 50, 0), ctx(moisture_vwc=moisture, saturation_vwc=sat), LIMITS)
    np.testing.assert_array_equal(out[:3], [0, 1, 0])
    assert only_firing(report, "zone.saturation_margin", "valve[0]") == (1, 0)
    assert only_firing(report, "zone.saturation_margin", "valve[2]") == (1, 0)


def test_zone_sensor_failed_follows_fallback_schedule() -> None:
    sensor_ok = np.array([False, False, True, True, True, True])
    moisture = np.array([0.2, 0.2, np.nan, 0.2, 0.2, 0.2])  # zone 2: sensor fine but no estimate
    fallback = np.array([False, True, False, False, False, False])
    out, report = clip(
        act([1, 0, 1, 0, 0, 0], 50, 0),
        ctx(sensor_ok=sensor_ok, moisture_vwc=moisture, fallback_valves=fallback),
        LIMITS,
    )
    np.testing.assert_array_equal(out[:3], [0, 1, 0])
    assert only_firing(report, "zone.sensor_failed", "valve[0]") == (1, 0)
    assert only_firing(report, "zone.sensor_failed", "valve[1]") == (0, 1)
    assert only_firing(report, "zone.sensor_failed", "valve[2]") == (1, 0)


def test_fallback_schedule_cannot_water_a_saturated_zone() -> None:
    sensor_ok = np.array([False, True, True, True, True, True])
    moisture = np.array([0.44, 0.2, 0.2, 0.2, 0.2, 0.2])
    fallback = np.array([True, False, False, False, False, False])
    out, report = clip(
        act([0] * Z, 0, 0), ctx(sensor_ok=sensor_ok, moisture_vwc=moisture, fallback_valves=fallback), LIMITS
    )
    assert out[0] == 0 and report.fired("zone.sensor_failed") and report.fired("zone.saturation_margin")


def test_valve_min_dwell_holds_recent_changes() -> None:
    prev = act([1, 0, 0, 0, 0, 0], 40, 0)
    ages = np.array([60.0, 30.0, 1e4, 1e4, 1e4, 1e4])
    out, report = clip(act([0, 1, 1, 0, 0, 0], 40, 0), ctx(prev_action=prev, valve_state_age_s=ages), LIMITS)
    np.testing.assert_array_equal(out[:3], [1, 0, 1])
    assert only_firing(report, "valve.min_dwell", "valve[0]") == (0, 1)
    assert only_firing(report, "valve.min_dwell", "valve[1]") == (1, 0)


def test_hard_limit_beats_dwell() -> None:
    prev = act([1, 0, 0, 0, 0, 0], 40, 0)
    ages = np.array([5.0, 1e4, 1e4, 1e4, 1e4, 1e4])
    water = np.array([260.0, 0, 0, 0, 0, 0])
    out, report = clip(
        act([1, 0, 0, 0, 0, 0], 40, 0),
        ctx(prev_action=prev, valve_state_age_s=ages, zone_water_today_l=water),
        LIMITS,
    )
    assert out[0] == 0 and out[Z] == 0
    assert report.fired("zone.daily_water_cap") and not report.fired("valve.min_dwell")


def test_pump_ramp_rate_up_down_start_and_stop() -> None:
    valves = [1, 0, 0, 0, 0, 0]
    c = ctx(prev_action=act(valves, 40, 0), dt_s=1.0)
    out, report = clip(act(valves, 80, 0), c, LIMITS)
    assert out[Z] == 45 and only_firing(report, "pump.ramp_rate", "pump") == (80, 45)
    out, _ = clip(act(valves, 25, 0), c, LIMITS)
    assert out[Z] == 35
    out, report = clip(act(valves, 0, 0), c, LIMITS)
    assert out[Z] == 0 and report.firings == ()

    start = ctx(prev_action=act(valves, 0, 0), dt_s=1.0)
    out, _ = clip(act(valves, 60, 0), start, LIMITS)
    assert out[Z] == 25  # may start at pump_min (20), then 5 %/s


def test_pump_single_valve_cap_holds_for_every_source() -> None:
    one = [1, 0, 0, 0, 0, 0]
    # An operator's manual "one valve, pump 100 %" from a running pump: capped, and the report says why.
    out, report = clip(act(one, 100, 0), ctx(prev_action=act(one, 100, 0)), LIMITS)
    assert out[Z] == LIMITS.pump_single_valve_max_pct == 85.0
    assert only_firing(report, "pump.single_valve_cap", "pump") == (100, 85)
    assert "relief valve" in report.firings[-1].detail
    # Two valves may take the full speed; a cut from two valves to one is not slowed by the ramp.
    two = [1, 1, 0, 0, 0, 0]
    out, report = clip(act(two, 100, 0), ctx(prev_action=act(two, 100, 0)), LIMITS)
    assert out[Z] == 100 and report.firings == ()
    out, _ = clip(act(one, 100, 0), ctx(prev_action=act(two, 100, 0), dt_s=1.0), LIMITS)
    assert out[Z] == 85.0


def test_a_single_valve_cap_below_the_running_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="one open valve could never run the pump"):
        SafetyLimits(pump_min_pct=30.0, pump_single_valve_max_pct=25.0)


def test_lights_range() -> None:
    out, report = clip(act([0] * Z, 0, 150), ctx(), LIMITS)
    assert out[Z + 1] == 100 and only_firing(report, "lights.range", "lights") == (150, 100)
    out, _ = clip(act([0] * Z, 0, -3), ctx(), LIMITS)
    assert out[Z + 1] == 0


def test_lights_daily_hours_cap() -> None:
    out, report = clip(act([0] * Z, 0, 80), ctx(lights_on_hours_today=16.0), LIMITS)
    assert out[Z + 1] == 0 and only_firing(report, "lights.daily_hours_cap", "lights") == (80, 0)


def test_lights_dark_period_and_unknown_hour() -> None:
    for hour in (23.0, 0.5, 4.99):
        out, report = clip(act([0] * Z, 0, 80), ctx(natural_par_umol=0.0, local_hour=hour), LIMITS)
        assert out[Z + 1] == 0 and only_firing(report, "lights.dark_period", "lights") == (80, 0)
    for hour in (5.0, 22.99):
        out, report = clip(act([0] * Z, 0, 80), ctx(natural_par_umol=0.0, local_hour=hour), LIMITS)
        assert out[Z + 1] == 80 and report.firings == ()
    out, report = clip(act([0] * Z, 0, 80), ctx(local_hour=math.nan), LIMITS)
    assert out[Z + 1] == 0 and "local hour unknown" in report.firings[0].detail
    out, report = clip(act([0] * Z, 0, 80), ctx(local_hour=25.0), LIMITS)
    assert out[Z + 1] == 0 and [n.subject for n in report.notes] == ["local_hour"]


def test_a_dark_period_under_six_hours_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 6 h"):
        SafetyLimits(dark_start_h=0.0, dark_end_h=5.0)
    assert SafetyLimits(dark_start_h=20.0, dark_end_h=2.0).dark_end_h == 2.0


def test_lights_strong_sun_and_unknown_par() -> None:
    out, report = clip(act([0] * Z, 0, 80), ctx(natural_par_umol=1200.0), LIMITS)
    assert out[Z + 1] == 0 and only_firing(report, "lights.strong_sun", "lights") == (80, 0)
    out, report = clip(act([0] * Z, 0, 80), ctx(natural_par_umol=math.nan), LIMITS)
    assert out[Z + 1] == 80 and report.firings == ()
    assert [n.rule_id for n in report.notes] == ["lights.strong_sun"]


# ---- purity and odd context ------------------------------------------------------------------


def test_clip_is_pure_and_output_read_only() -> None:
    action = act([1, 1, 1, 1, 1, 1], np.nan, 120)
    c = ctx(moisture_vwc=np.array([0.2, np.nan, 0.44, 0.2, 0.2, 0.2]))
    snapshot = (action.copy(), np.array(c.moisture_vwc, copy=True))
    out1, _ = clip(action, c, LIMITS)
    out2, _ = clip(action, c, LIMITS)
    np.testing.assert_array_equal(out1, out2)
    np.testing.assert_array_equal(action, snapshot[0])
    np.testing.assert_array_equal(c.moisture_vwc, snapshot[1])
    with pytest.raises(ValueError):
        out1[0] = 1.0


def test_unusable_context_is_read_conservatively() -> None:
    odd = ClipContext(
        dt_s=math.nan,
        prev_action="?",
        valve_state_age_s=[1, 2],
        zone_water_today_l=None,
        moisture_vwc=np.full(Z, 0.2),
        sensor_ok=np.ones(Z),
        lights_on_hours_today=-1.0,
    )
    out, report = clip(act([1, 0, 0, 0, 0, 0], 50, 50), odd, LIMITS)
    np.testing.assert_array_equal(out, np.zeros(Z + 2))
    subjects = {n.subject for n in report.notes if n.rule_id == "context.invalid"}
    assert {
        "dt_s",
        "prev_action",
        "valve_state_age_s",
        "zone_water_today_l",
        "lights_on_hours_today",
    } <= subjects


class _Exploding:
    """A context whose every field read fails (dunder lookups behave, so pytest can name it)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise RuntimeError(name)


@pytest.mark.parametrize("odd", [None, _Exploding(), 42])
def test_missing_context_means_everything_off(odd: Any) -> None:
    out, report = clip(act([1] * Z, 80, 80), odd, LIMITS)
    np.testing.assert_array_equal(out, np.zeros(Z + 2))
    assert report.notes


# ---- properties ------------------------------------------------------------------------------

any_float = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-10.0, 150.0),
    st.sampled_from([0.0, 1.0, 0.5, 20.0, 100.0]),
)


@st.composite
def limits_st(draw: st.DrawFn) -> SafetyLimits:
    zones = draw(st.integers(1, 8))
    pmin = draw(st.floats(0.0, 60.0))
    per_zone = st.lists(st.floats(0.0, 500.0), min_size=zones, max_size=zones).map(tuple)
    return SafetyLimits(
        zones=zones,
        pump_min_pct=pmin,
        pump_max_pct=draw(st.floats(max(pmin, 1.0), 100.0)),
        pump_single_valve_max_pct=draw(st.floats(max(pmin, 1.0), 100.0)),
        max_open_valves=draw(st.integers(0, zones + 1) | st.integers(0, 2)),
        zone_daily_water_cap_l=draw(st.one_of(st.floats(0.0, 500.0), per_zone)),
        saturation_vwc=draw(st.floats(0.2, 0.6)),
        saturation_margin_vwc=draw(st.floats(0.0, 0.1)),
        min_valve_on_s=draw(st.floats(0.0, 600.0)),
        min_valve_off_s=draw(st.floats(0.0, 600.0)),
        pump_ramp_pct_per_s=draw(st.floats(0.1, 20.0)),
        lights_daily_hours_cap=draw(st.floats(0.0, 24.0)),
        strong_sun_par_umol=draw(st.floats(100.0, 2000.0)),
        dark_start_h=(start := draw(st.floats(0.0, 23.9))),
        # (start + 6) % 24 can round to just under 6 h
        dark_end_h=(start + draw(st.floats(6.001, 20.0))) % 24.0,
    )


ZONE_ROW = st.tuples(
    st.sampled_from([0.0, 1.0, 1.0]),  # previous valve state (open more often: max_open, dwell)
    st.one_of(st.floats(0.0, 300.0), st.floats(0.0, 1000.0), st.just(math.inf)),  # valve state age [s]
    st.floats(0.0, 600.0),  # water used today [L]
    st.one_of(st.just(math.nan), st.floats(0.0, 0.7)),  # moisture estimate [m3/m3]
    st.one_of(st.just(math.nan), st.floats(0.2, 0.6)),  # context saturation [m3/m3]
    st.booleans(),  # sensor ok
    st.booleans(),  # fallback schedule open
)


@st.composite
def case_st(draw: st.DrawFn) -> tuple[np.ndarray, ClipContext, SafetyLimits]:
    """A valid, self-consistent context (previous action was safe-shaped) and any action."""
    lim = draw(limits_st())
    z = lim.zones
    cols = np.array(draw(st.lists(ZONE_ROW, min_size=z, max_size=z)), dtype=float).T
    prev_valves, ages, water, moisture, sat, sensor_ok, fallback = cols
    prev_pump = draw(st.one_of(st.just(0.0), st.floats(lim.pump_min_pct, lim.pump_max_pct)))
    c = ClipContext(
        dt_s=draw(st.one_of(st.just(0.0), st.floats(0.0, 5.0), st.floats(0.0, 600.0))),
        prev_action=np.concatenate([prev_valves, [prev_pump, draw(st.floats(0.0, 100.0))]]),
        valve_state_age_s=ages,
        zone_water_today_l=water,
        moisture_vwc=moisture,
        saturation_vwc=sat if draw(st.booleans()) else None,
        sensor_ok=sensor_ok.astype(bool),
        natural_par_umol=draw(st.one_of(st.just(math.nan), st.floats(0.0, 2500.0))),
        lights_on_hours_today=draw(st.floats(0.0, 24.0)),
        local_hour=draw(st.one_of(st.just(math.nan), st.floats(0.0, 23.999))),
        fallback_valves=fallback.astype(bool) if draw(st.booleans()) else None,
        valve_failed=np.array(draw(st.lists(st.booleans(), min_size=z, max_size=z))) if draw(st.booleans())
        else None,
        valves_without_flow=np.array(draw(st.lists(st.booleans(), min_size=z, max_size=z)))
        if draw(st.booleans()) else None,
    )
    action = np.array(draw(st.lists(any_float, min_size=z + 2, max_size=z + 2)), dtype=float)
    return action, c, lim


def assert_satisfies_every_rule(out: np.ndarray, c: ClipContext, lim: SafetyLimits) -> None:
    """Independent oracle for every rule, written from the spec rather than the implementation."""
    z, tol = lim.zones, 1e-9
    assert out.shape == (z + 2,) and np.isfinite(out).all()
    valves, pump, lights = out[:z], float(out[z]), float(out[z + 1])
    assert set(np.unique(valves)) <= {0.0, 1.0}
    is_open = valves == 1.0

    assert pump == 0.0 or lim.pump_min_pct <= pump <= lim.pump_max_pct
    assert pump == 0.0 or is_open.any()
    closed = np.zeros(z, bool) if c.valves_without_flow is None else np.asarray(c.valves_without_flow)
    assert pump == 0.0 or (is_open & ~closed).any(), "a pump fed only by valves that read closed: a dead-head"
    assert is_open.sum() <= lim.max_open_valves

    moisture = np.asarray(c.moisture_vwc)
    known = np.isfinite(moisture)
    sat = lim.saturation_per_zone()
    if c.saturation_vwc is not None:
        sat = np.fmin(sat, np.asarray(c.saturation_vwc))
    capped = ~(np.asarray(c.zone_water_today_l) < lim.water_cap_per_zone())
    wet = known & (moisture >= sat - lim.saturation_margin_vwc)
    fallback = np.zeros(z, bool) if c.fallback_valves is None else np.asarray(c.fallback_valves)
    unobserved = ~np.asarray(c.sensor_ok) | ~known
    failed = np.zeros(z, bool) if c.valve_failed is None else np.asarray(c.valve_failed)
    blocked = capped | wet | failed | (unobserved & ~fallback)
    assert not (is_open & blocked).any()

    prev = np.asarray(c.prev_action)
    prev_open = prev[:z] >= 0.5
    ages = np.asarray(c.valve_state_age_s)
    locked_open = prev_open & (ages < lim.min_valve_on_s) & ~blocked
    for zone in np.flatnonzero(is_open != prev_open):
        if prev_open[zone]:
            forced = blocked[zone] or locked_open.sum() > lim.max_open_valves
            assert ages[zone] >= lim.min_valve_on_s or forced, zone
        else:
            assert ages[zone] >= lim.min_valve_off_s, zone

    single = is_open.sum() == 1
    assert not single or pump <= lim.pump_single_valve_max_pct
    base = min(max(float(prev[z]), 0.0), lim.pump_max_pct)
    step = lim.pump_ramp_pct_per_s * float(c.dt_s)
    if pump > base:
        assert pump <= max(base, lim.pump_min_pct) + step + tol
    elif pump > 0.0:  # the single-valve cap is a hard limit: it may cut faster than the ramp
        assert pump >= min(base - step, lim.pump_single_valve_max_pct if single else math.inf) - tol

    assert 0.0 <= lights <= 100.0
    if math.isfinite(c.natural_par_umol) and c.natural_par_umol >= lim.strong_sun_par_umol:
        assert lights == 0.0
    if c.lights_on_hours_today >= lim.lights_daily_hours_cap:
        assert lights == 0.0
    dark_length = (lim.dark_end_h - lim.dark_start_h) % 24.0
    if math.isnan(c.local_hour) or (c.local_hour - lim.dark_start_h) % 24.0 < dark_length:
        assert lights == 0.0


@settings(max_examples=300, deadline=None)
@given(case_st())
def test_output_satisfies_every_rule(case: tuple[np.ndarray, ClipContext, SafetyLimits]) -> None:
    action, c, lim = case
    out, report = clip(action, c, lim)
    assert_satisfies_every_rule(out, c, lim)
    assert (report.action_out == out).all()
    assert set(report.rule_ids) <= set(RuleId)
    again, _ = clip(out, c, lim)  # a safe action is a fixed point
    np.testing.assert_array_equal(again, out)


junk = st.one_of(
    st.sampled_from([None, "", "open", object(), [1, "x"], [[1.0, 2.0], [3.0]], 1 + 2j]),
    st.floats(allow_nan=True, allow_infinity=True),
    arrays(float, st.integers(0, 9), elements=st.floats(allow_nan=True, allow_infinity=True)),
)


@settings(max_examples=300, deadline=None)
@given(
    action=st.one_of(junk, arrays(float, Z + 2, elements=any_float)),
    fields=st.lists(junk, min_size=13, max_size=13),
)
def test_never_raises_on_garbage(action: Any, fields: list[Any]) -> None:
    names = [
        "dt_s",
        "prev_action",
        "valve_state_age_s",
        "zone_water_today_l",
        "moisture_vwc",
        "sensor_ok",
        "saturation_vwc",
        "natural_par_umol",
        "lights_on_hours_today",
        "fallback_valves",
        "valve_failed",
        "local_hour",
        "valves_without_flow",
    ]
    out, report = clip(action, ClipContext(**dict(zip(names, fields, strict=True))), LIMITS)
    assert out.shape == (Z + 2,) and np.isfinite(out).all()
    assert set(np.unique(out[:Z])) <= {0.0, 1.0}
    assert out[Z] == 0.0 or (out[:Z].any() and LIMITS.pump_min_pct <= out[Z] <= LIMITS.pump_max_pct)
    assert out[:Z].sum() <= LIMITS.max_open_valves and 0.0 <= out[Z + 1] <= 100.0
    assert isinstance(report.rule_ids, tuple)
