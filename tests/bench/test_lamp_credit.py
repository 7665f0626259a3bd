"""bench/lamp_credit.py on tiny runs, lamp and valve flips: the pairing is exact, the figures obey the
identities GAE and potential shaping promise, the draw is seeded, and the report has its structure."""

from __future__ import annotations

import json
import math
from types import ModuleType
from typing import Any

import pytest

from tests.bench.load import load_bench

TINY = ["--scenarios", "2", "--greenhouses", "4", "--days", "1", "--window", "0-1", "--flips", "3",
        "--controls", "2", "--seed", "5"]




@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("lamp_credit")


@pytest.fixture(scope="module")
def report(bench: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("lamp_credit") / "out.json"
    bench.main([*TINY, "--json", str(path)])
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def test_report_structure(bench: ModuleType, report: dict[str, Any]) -> None:
    assert set(report) == {"settings", "member", "scenarios", "summary", "timing", "flips"}
    assert report["summary"]["undone"] == 0, "a lamp flip is never undone"
    assert report["settings"]["gamma"] == pytest.approx(0.999) \
        and report["settings"]["lam"] == pytest.approx(0.95)
    assert len(report["scenarios"]) == 2
    summary = report["summary"]
    flips = [f for f in report["flips"] if f["kind"] != "control"]
    assert summary["lit"]["count"] + summary["unlit"]["count"] == len(flips) == 6
    assert summary["lit"]["count"] == summary["unlit"]["count"] == 3  # both classes drawn in full
    for name in ("lit", "unlit"):
        for k in bench.MEASURES:
            entry = summary[name][k]
            assert set(entry) == {"share_positive", "median", "mean", "sign_agrees"}
            assert 0.0 <= entry["share_positive"] <= 1.0 and 0.0 <= entry["sign_agrees"] <= 1.0
        assert summary[name]["true"]["sign_agrees"] == 1.0
        health = summary[name]["by_health"]
        assert health["healthy"]["count"] + health["faulty"]["count"] == summary[name]["count"]
    for f in flips:  # each flip is counted in the class of the clone's decision
        assert f["clone_on"] == (f["kind"] == "lit") and 0.0 <= f["day"] <= 1.0 and 5.0 <= f["hour"] < 23.0
    # the suite's first is healthy
    assert {f["faulty"] for f in report["flips"] if f["seed"] == 200} <= {False}
    assert {f["faulty"] for f in report["flips"] if f["seed"] == 201} <= {True}
    timing = report["timing"]
    assert timing["torch_threads"] == 1 and len(timing["load_average_start"]) == 3 \
        and timing["s_per_flip"] > 0


def test_a_flip_that_inverts_nothing_changes_nothing(report: dict[str, Any]) -> None:
    """The control pairs: same instance id, same actions, so every figure is exactly zero."""
    controls = [f for f in report["flips"] if f["kind"] == "control"]
    assert len(controls) == 2 and report["summary"]["controls"]["max_abs"] == 0.0
    for f in controls:
        for k in ("true", "discounted", "gae", "gae_shaped", "gae_null", "gae_null_shaped", "gl_discounted",
                  "shaped_discounted", "potential_term"):
            assert f[k] == 0.0, (k, f)
    # A real flip changes at least the lamp's energy bill.
    assert all(f["true"] != 0.0 for f in report["flips"] if f["kind"] != "control")


def test_figures_obey_the_identities(report: dict[str, Any]) -> None:
    whole = [f for f in report["flips"] if not f["terminated"]]  # a hard termination ends GAE's trajectory
    assert len(whole) >= 6
    for f in whole:
        # V = 0: GAE's credit is the (gamma lambda)-discounted reward difference.
        assert f["gae_null"] == pytest.approx(f["gl_discounted"], rel=1e-9, abs=1e-9)
        # Shaping telescopes: the discounted shaped return differs by gamma^k (Phi_A - Phi_B) at the end
        # (Phi at the flip step is the same state on both sides and cancels).
        assert f["shaped_discounted"] == pytest.approx(f["discounted"] + f["potential_term"], rel=1e-9,
                                                       abs=1e-9)
        assert math.isfinite(f["gae"]) and math.isfinite(f["gae_shaped"])


def test_same_seed_same_numbers(bench: ModuleType, report: dict[str, Any]) -> None:
    args = bench.Settings(scenarios=2, greenhouses=4, days=1.0, window=(0.0, 1.0), flips=3, controls=2,
                          seed=5)
    again = json.loads(json.dumps(bench.run(args)["flips"]))
    assert again == report["flips"]


def test_command_line(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        bench.main(["--help"])
    assert done.value.code == 0 and "--flips" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:  # a flip window outside the episode is refused before any run
        bench.main(["--days", "2", "--window", "1-3"])
    assert done.value.code == 2


@pytest.fixture(scope="module")
def valve_report(bench: ModuleType) -> dict[str, Any]:
    settings = bench.Settings(actuator="valves", scenarios=2, greenhouses=4, days=1.0, window=(0.0, 1.0),
                              flips=3, controls=2, seed=5)
    loaded: dict[str, Any] = json.loads(json.dumps(bench.run(settings)))
    return loaded


def test_valve_flips_invert_one_zone_exactly_paired(valve_report: dict[str, Any]) -> None:
    summary, flips = valve_report["summary"], valve_report["flips"]
    assert set(summary) == {"open", "shut", "controls", "reclassified", "undone"}
    real = [f for f in flips if f["kind"] != "control" and not f["undone"]]
    assert summary["open"]["count"] + summary["shut"]["count"] == len(real) == 6 - summary["undone"]
    assert summary["shut"]["count"] == 3, "opening a zone left dry is never undone"
    assert summary["controls"]["max_abs"] == 0.0, "a pair that inverts nothing stays its trunk bit for bit"
    for f in flips:
        if f["undone"]:  # the interlock gave the zone back as the second path: the rows ran the same
            assert f["kind"] == "open" and f["true"] == f["gae"] == 0.0
    for f in real:
        assert f["clone_on"] == (f["kind"] == "open") and 0 <= f["zone"] < 6
        assert f["true"] != 0.0, "watering a zone or not changes the water bill at least"
        if not f["terminated"]:
            assert f["gae_null"] == pytest.approx(f["gl_discounted"], rel=1e-9, abs=1e-9)
