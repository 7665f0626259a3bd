"""Process alarms: the catalogue's words, the pure evaluation of constructed facts, the tracker's hold and
clearing, and the watch reading a real controller (between decisions) and raising through the dispatcher."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from app.alarms.catalogue import KINDS, at_least, describe, is_watched, severity
from app.alarms.conditions import ConditionTracker, Facts, Thresholds, evaluate
from app.alarms.watch import ProcessAlarms
from app.dispatch import Dispatcher
from app.journal import DecisionJournal
from app.metrics import Metrics
from app.snapshots import SnapshotStore
from app.writer import WriterProcess
from control import ExpertProposer, GreenhouseController, ZoneSetup
from policy.baselines import ThresholdExpert
from safety import SafetyLimits

T0 = datetime(2026, 6, 1, 12, tzinfo=UTC)
BAND = ((0.20, 0.30), (0.20, 0.30), (0.20, 0.30))


def _facts(**kw: object) -> Facts:
    base: dict[str, object] = {"gh": "gh1", "now": T0, "telemetry_ts": T0, "moisture": (0.25, 0.25, 0.25),
                               "band": BAND, "water_today_l": (0.0, 0.0, 0.0),
                               "water_cap_l": (100.0, 100.0, 100.0)}
    return Facts(**{**base, **kw})  # type: ignore[arg-type]


def _kinds(f: Facts, th: Thresholds | None = None) -> set[str]:
    return {r.kind for r in evaluate(f, th or Thresholds()).readings}


def test_every_kind_reads_in_words_with_zones_numbered_from_one() -> None:
    text = describe("zone_dry:2")
    assert (text.severity, text.title, text.watched) == ("critical", "Zone dry", True)
    assert text.description.startswith("The moisture estimate of zone 3 ") and "Check" in text.action
    assert describe("valve_failed:0,3").description.startswith("The valve of zones 1, 4 ")
    assert describe("water_cap:0").description.startswith("Zone 1 had all the water")
    assert describe("outlook_prices:stale").title == "Price outlook stale"
    assert severity("ack_timeout") == "warning" and not is_watched("ack_timeout")
    odd = describe("something_new:x")
    assert odd.severity == "warning" and "something_new:x" in odd.description, "an unknown kind still reads"
    for code in KINDS:  # every template fills without a KeyError, with and without a detail
        assert describe(code).title and describe(f"{code}:1").description
    assert at_least("critical", "warning") and not at_least("info", "warning")


def test_a_zone_outside_its_band_reads_dry_or_wet_and_nothing_without_telemetry() -> None:
    f = _facts(moisture=(0.15, 0.25, 0.35))
    readings = {r.kind: r for r in evaluate(f, Thresholds()).readings}
    assert set(readings) == {"zone_dry:0", "zone_wet:2"}
    assert readings["zone_dry:0"].hold_s == 30 * 60 and readings["zone_dry:0"].at == T0, "greenhouse clock"
    assert _kinds(_facts(moisture=(0.19, 0.25, 0.25)), Thresholds(zone_band_margin_pct=2.0)) == set(), \
        "within the margin"
    never = evaluate(_facts(telemetry_ts=None, moisture=(0.0, 0.0, 0.0), valves_failed=(1,)), Thresholds())
    assert never.readings == [] and "zone_dry" not in never.known and "valve_failed" not in never.known, \
        "no telemetry ever: no evidence either way"


def test_stale_telemetry_raises_offline_and_leaves_the_zone_states_alone() -> None:
    f = _facts(now=T0 + timedelta(minutes=6), silent_s=360.0, moisture=(0.1, 0.1, 0.1), probes_faulty=(1,))
    ev = evaluate(f, Thresholds())
    assert {r.kind for r in ev.readings} == {"edge_offline"}
    assert {"zone_dry", "probe_fault"}.isdisjoint(ev.known) and "edge_offline" in ev.known
    assert _kinds(_facts(silent_s=240.0)) == set()
    assert _kinds(_facts(silent_s=240.0), Thresholds(edge_offline_minutes=3)) == {"edge_offline"}
    ahead = _facts(telemetry_ts=T0 + timedelta(days=3), silent_s=360.0)
    assert "edge_offline" in _kinds(ahead), "silence counts on the service's clock, not the box's"


def test_caps_latches_faults_estop_outlook_fallback_and_writer_lag() -> None:
    f = _facts(water_today_l=(100.0, 99.0, 0.0), valves_failed=(0, 2), probes_faulty=(1,), estop_latched=True,
               outlook_alarms=("outlook_weather:stale",), fallback_since=T0 - timedelta(minutes=11),
               writer_behind_s=121.0)
    assert _kinds(f) == {"water_cap:0", "valve_failed:0,2", "probe_fault:1", "estop_latched",
                         "outlook_weather:stale", "expert_fallback", "audit_behind"}
    assert "water_cap:1" in _kinds(f, Thresholds(water_cap_pct=95)), "99 L of a 100 L cap is past 95 %"
    assert "expert_fallback" not in _kinds(_facts(fallback_since=T0 - timedelta(minutes=9)))
    assert "audit_behind" not in _kinds(_facts(writer_behind_s=100.0))


def test_thresholds_refuse_nonsense_and_unknown_fields() -> None:
    with pytest.raises(ValueError):
        Thresholds(zone_band_minutes=0)
    with pytest.raises(ValueError):
        Thresholds.model_validate({"zone_band_minutes": 5, "typo": 1})


def test_the_tracker_raises_after_the_hold_clears_at_once_and_keeps_state_without_evidence() -> None:
    tracker, th = ConditionTracker(), Thresholds(zone_band_minutes=30)

    def step(minutes: float, moisture: float, *,
             now_minutes: float | None = None) -> tuple[list[str], list[str]]:
        ts = T0 + timedelta(minutes=minutes)
        now = T0 + timedelta(minutes=minutes if now_minutes is None else now_minutes)
        facts = _facts(now=now, telemetry_ts=ts, silent_s=(now - ts).total_seconds(),
                       moisture=(moisture, 0.25, 0.25))
        return tracker.apply("gh1", evaluate(facts, th), now)

    assert step(0, 0.1) == ([], [])
    assert step(29, 0.1) == ([], []), "dry for 29 minutes: not yet"
    assert step(30, 0.1) == (["zone_dry:0"], [])
    assert step(31, 0.1) == ([], []) and tracker.is_active("gh1", "zone_dry:0"), "raised once"
    assert step(31, 0.25, now_minutes=40) == (["edge_offline"], []), \
        "stale: the zone neither cleared nor raised"
    assert tracker.is_active("gh1", "zone_dry:0")
    up, down = step(41, 0.25)
    assert up == [] and sorted(down) == ["edge_offline", "zone_dry:0"]
    assert tracker.cleared_at[("gh1", "zone_dry:0")] == T0 + timedelta(minutes=41)
    assert step(42, 0.1) == ([], []) and step(60, 0.1) == ([], []), "the hold starts again from 42"
    assert step(72, 0.1) == (["zone_dry:0"], [])
    assert tracker.forget("gh1") == ["zone_dry:0"] and tracker.active() == []


def test_a_changed_set_of_failed_valves_clears_the_old_kind_and_raises_the_new() -> None:
    tracker = ConditionTracker()
    up, _ = tracker.apply("gh1", evaluate(_facts(valves_failed=(0,)), Thresholds()), T0)
    assert up == ["valve_failed:0"]
    up, down = tracker.apply("gh1", evaluate(_facts(valves_failed=(0, 2)), Thresholds()), T0)
    assert (up, down) == (["valve_failed:0,2"], ["valve_failed:0"])


ZONES = [ZoneSetup("loam", 0.21, 0.27, 0.45, 100.0) for _ in range(3)]


def test_the_watch_reads_a_controller_and_raises_through_the_dispatcher(tmp_path: Path) -> None:
    ctl = GreenhouseController("gh1", ZONES, ExpertProposer(ThresholdExpert()), SafetyLimits.default(),
                               probes_per_zone=2)
    metrics = Metrics()
    dispatch = Dispatcher({"gh1": ctl}, DecisionJournal(tmp_path / "journal"), WriterProcess(),
                          SnapshotStore(tmp_path), metrics)
    watch = ProcessAlarms({"gh1": ctl}, dispatch, dispatch.writer, lambda: ("outlook_prices:fallback",),
                          every_s=0.0)
    assert watch.tick(T0) == [("gh1", "outlook_prices:fallback")], "a greenhouse never heard: only the site's"
    ctl.state = replace(ctl.state, last_ts=T0, estop_latched=True, valve_failed=np.array([0.0, 1.0, 0.0]),
                        water_today_l=np.array([100.0, 0.0, 0.0]))
    ctl.estimator.state["drifting"][2, 0] = True
    ctl.estimator.state["theta"][:] = [0.24, 0.10, 0.24]
    raised = watch.tick(T0 + timedelta(seconds=1), busy={"gh1"})
    assert raised == [], "a greenhouse in the middle of a decision waits for the next round"
    raised = {k for _, k in watch.tick(T0 + timedelta(seconds=1))}
    assert raised == {"estop_latched", "valve_failed:1", "water_cap:0", "probe_fault:2"}
    assert {a.kind for a in dispatch.alarms} >= raised
    assert metrics.alarms.labels("gh1", "estop_latched")._value.get() == 1
    ctl.state = replace(ctl.state, estop_latched=False)
    assert watch.tick(T0 + timedelta(seconds=2)) == [] and not watch.tracker.is_active("gh1", "estop_latched")
    later = T0 + timedelta(minutes=6)
    assert ("gh1", "edge_offline") in watch.tick(later), \
        "no new telemetry for six minutes of the service's clock"
    ctl.state = replace(ctl.state,
                        last_ts=T0 + timedelta(hours=1))  # heard again (its clock runs ahead: no matter)
    watch.tick(later + timedelta(seconds=1))
    assert not watch.tracker.is_active("gh1", "edge_offline")
    dispatch.fence = lambda gh: None  # another replica took the lease: its alarms are judged there
    watch.tick(T0 + timedelta(seconds=3))
    assert watch.tracker.active() == []
