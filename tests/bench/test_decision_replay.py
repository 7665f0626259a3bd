"""bench/decision_replay.py on a short script: the same session gives the same hashes, a change in what
the control path decides is caught at the decision where it happens, and the script walks the paths it
promises (policy, expert fallback, e-stops from the panel and an operator, manual, a settings change,
a latched valve, a held reading, the clipper)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.bench.load import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("decision_replay")


@pytest.fixture(scope="module")
def short(bench: ModuleType) -> Any:
    """Every event of the full script, squeezed into 130 steps of four greenhouses."""
    return bench.Script(greenhouses=4, steps=130, dead_probe=(3, 4, range(20, 40)), gap=(0, range(50, 55)),
                        silent_co2=(1, range(60, 70)), panel_estop=(1, 10), operator_estop=(2, 70),
                        reset_after=10, auto_after=15, band_change=(0, 30), lamp_budget=(3, 45),
                        initial_vwc=0.185, water_cap_l=2.0)


@pytest.fixture(scope="module")
def recorded(bench: ModuleType, short: Any) -> dict[str, Any]:
    return bench.replay(short, keep_records=True)


def test_the_same_session_gives_the_same_hashes(bench: ModuleType, short: Any,
                                                recorded: dict[str, Any]) -> None:
    again = bench.replay(short, keep_records=True)
    assert again["digest"] == recorded["digest"] and again["hashes"] == recorded["hashes"]
    assert bench.first_difference(recorded, again) is None


def test_the_script_walks_the_paths_a_refactor_can_break(bench: ModuleType, short: Any,
                                                         recorded: dict[str, Any]) -> None:
    records = recorded["records"]
    decisions = [r for r in records if r["kind"] == "decision"]
    modes = [(r["greenhouse_id"], r["from_mode"], r["to_mode"], r["actor"]) for r in records
             if r["kind"] == "mode"]
    assert ("gh2", "auto", "estop", "edge:estop") in modes \
        and ("gh3", "auto", "estop", "operator:olga") in modes
    assert ("gh2", "estop", "manual", "operator:olga") in modes \
        and ("gh2", "manual", "auto", "operator:olga") in modes
    actors = {r["actor"].split(":")[0] for r in decisions}
    assert {"policy", "expert", "estop", "operator"} <= actors, actors
    assert any(r["rules_fired"] for r in decisions), "the clipper changes something"
    alarms = {a.split(":")[0] for r in decisions for a in r["alarms"]}
    assert {"valve_failed", "held"} <= alarms, alarms
    assert sum(1 for r in decisions if (r["estimate"] or {}).get("settings_change")) == 2
    gh1 = {r["ts"] for r in decisions if r["greenhouse_id"] == "gh1"}
    gap = {(bench.T0 + timedelta(minutes=k)).isoformat() for k in short.gap[1]}
    assert not gh1 & gap and (bench.T0 + timedelta(minutes=short.gap[1].stop)).isoformat() in gh1


def test_a_changed_decision_is_named_where_it_happens(bench: ModuleType, short: Any, recorded: dict[str, Any],
                                                      tmp_path: Path) -> None:
    """The threshold expert in the ensemble's place (a folder without one) decides otherwise from the first
    decision the policy would have made: the replays agree up to there and the difference names it."""
    changed = bench.replay(short, policy_dir=tmp_path, keep_records=True)
    where = bench.first_difference(recorded, changed)
    assert where is not None
    index = int(where.split()[1])
    assert recorded["hashes"][:index] == changed["hashes"][:index] and index < len(recorded["hashes"])
    assert recorded["records"][index]["actor"].startswith("policy:"), \
        "the first policy decision is the first to differ"
    assert "actor" in where and "member_actions" in where
    assert bench.first_difference(recorded, {**recorded, "digest": "", "hashes": recorded["hashes"][:-1],
                                             "count": recorded["count"] - 1}).startswith(
        "the replays differ in length")
