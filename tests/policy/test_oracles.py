"""Hindsight rows that bound a controller which tells greenhouses (and days) apart: the per-greenhouse
pick of a rule family and the daily lamp oracle built from paired twin branches."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from policy.baselines import ThresholdExpert
from policy.eval_cli import run_eval
from policy.evaluate import (
    HELD_OUT_SEEDS,
    BestOf,
    Scenario,
    _expand,
    _metrics,
    _Tally,
    evaluate_all,
    run_scenario,
    scenarios_from_seeds,
)
from policy.oracles import DailyLampOracle, DayBranches, daily_oracle
from policy.residual import Interlocked
from policy.tuning import hindsight_row, per_greenhouse, served_expert

ZONES = 6
SERVED = served_expert(ZONES)


def profit(m) -> float:
    return m.profit_eur_m2


def lamp_family() -> tuple[ThresholdExpert, ...]:
    """The served irrigation under lamps from none to generous: greenhouses differ in which pays."""
    return tuple(dataclasses.replace(SERVED, c0=c) for c in (0.0, 50.0, 125.0))


def wrecks_the_first(obs: np.ndarray) -> np.ndarray:
    """The served rule, except that it dead-heads the first greenhouse of every scenario (a hard limit)."""
    a = np.array(SERVED(obs), dtype=np.float32)
    a[0, :ZONES] = 0.0
    a[0, ZONES] = 80.0
    return a


@pytest.fixture(scope="module")
def scenarios() -> list[Scenario]:
    """Two held-out scenarios (healthy, faulty) of three greenhouses over a day."""
    return scenarios_from_seeds(HELD_OUT_SEEDS[0], HELD_OUT_SEEDS[0] + 1, days=1.0, instances=3)


@pytest.fixture(scope="module")
def two_days() -> list[Scenario]:
    """Two held-out scenarios (healthy, faulty) of two greenhouses over two days: a day to go on from."""
    return scenarios_from_seeds(HELD_OUT_SEEDS[0], HELD_OUT_SEEDS[0] + 1, days=2.0, instances=2)


def test_per_greenhouse_pick_beats_every_candidate_on_every_greenhouse(scenarios: list[Scenario]) -> None:
    cands = (*lamp_family(), wrecks_the_first)
    row = BestOf(cands, profit, per="greenhouse")
    for s in scenarios:
        runs = run_scenario(s, cands)
        (full, masked), picks = row.choose(runs)
        assert len(picks) == s.instances
        for tally, _ in runs:
            assert np.all(full.profit >= tally.profit)
        # Each greenhouse's sums are its pick's, both counts picked by the full count's profit.
        for g, j in enumerate(picks):
            assert full.profit[g] == runs[j][0].profit[g] and masked.reward[g] == runs[j][1].reward[g]
            assert full.profit[g] == max(t.profit[g] for t, _ in runs)
        assert picks[0] != len(cands) - 1  # the wrecked pump's damage is never the best


def test_per_greenhouse_row_bounds_the_per_scenario_row_and_keeps_every_output_consistent(
        scenarios: list[Scenario]) -> None:
    cands = (*lamp_family(), wrecks_the_first)
    rows = {"wreck": wrecks_the_first, "scenario": BestOf(cands, profit),
            "oracle": BestOf(cands, profit, per="greenhouse")}
    masked: dict = {}
    intact: dict = {}
    per: dict = {}
    chosen: dict = {}
    r = evaluate_all(rows, scenarios, masked=masked, intact=intact, intact_among=["wreck"], by_scenario=per,
                     chosen=chosen)
    assert r["oracle"]["profit_eur_m2"] >= r["scenario"]["profit_eur_m2"]
    for i, s in enumerate(scenarios):
        assert per["oracle"][i].profit_eur_m2 >= per["scenario"][i].profit_eur_m2
        assert per["oracle"][i].greenhouses == s.instances
    assert len(chosen["scenario"]) == len(scenarios)
    assert len(chosen["oracle"]) == sum(s.instances for s in scenarios)  # one pick per greenhouse
    # The same picks, counted from the candidates' own runs, give every output of the row.
    runs = [run_scenario(s, cands) for s in scenarios]
    sizes = np.cumsum([0] + [s.instances for s in scenarios])
    picks = [np.array(chosen["oracle"][a:b]) for a, b in zip(sizes[:-1], sizes[1:], strict=True)]
    full = [_Tally.pick([t for t, _ in run], p) for run, p in zip(runs, picks, strict=True)]
    before = [_Tally.pick([m for _, m in run], p) for run, p in zip(runs, picks, strict=True)]
    # assert_equal: a greenhouse that lit no lamp has a NaN price capture.
    np.testing.assert_equal(r["oracle"], _metrics(full).as_dict())
    np.testing.assert_equal(masked["oracle"], _metrics(before).as_dict())
    np.testing.assert_equal([m.as_dict() for m in per["oracle"]], [_metrics([t]).as_dict() for t in full])
    assert intact["oracle"].greenhouses == sum(s.instances for s in scenarios) - len(scenarios)
    wrecked = np.concatenate([run[-1][0].terminated for run in runs])  # the wrecking candidate runs last
    assert intact["oracle"] == _metrics(full, ~wrecked)
    with pytest.raises(ValueError, match="per"):
        BestOf(cands, profit, per="day")  # type: ignore[arg-type]


def test_with_one_greenhouse_per_scenario_both_picks_agree() -> None:
    single = scenarios_from_seeds(HELD_OUT_SEEDS[0], HELD_OUT_SEEDS[0] + 2, days=1.0, instances=1)
    row = hindsight_row(SERVED, 1)
    chosen: dict = {}
    r = evaluate_all({"scenario": row, "oracle": per_greenhouse(row)}, single, chosen=chosen)
    assert chosen["oracle"] == chosen["scenario"] and len(chosen["oracle"]) == len(single)
    assert r["oracle"] == r["scenario"]


def test_the_per_greenhouse_row_reuses_the_ceilings_runs() -> None:
    ceiling = hindsight_row(SERVED, 8, interlocked=True)
    oracle = per_greenhouse(ceiling)
    assert oracle.candidates is ceiling.candidates and oracle.per == "greenhouse" \
        and ceiling.per == "scenario"
    run, alone, members = _expand([Interlocked(SERVED), ceiling, oracle])
    assert len(run) == 1 + len(ceiling.candidates) and alone == []
    assert members[1] == members[2]


@pytest.fixture(scope="module")
def three_days() -> tuple[Scenario, list[DayBranches]]:
    """Two faulty greenhouses over three days; the served setting twice among the options (index 1 and 2)."""
    s = dataclasses.replace(scenarios_from_seeds(HELD_OUT_SEEDS[0] + 1, HELD_OUT_SEEDS[0] + 1)[0], days=3.0,
                            instances=2)
    days: list[DayBranches] = []
    options = (dataclasses.replace(SERVED, c0=0.0), SERVED, SERVED)
    daily_oracle(s, options, served=1, on_day=days.append)
    return s, days


def test_daily_branches_are_paired(three_days: tuple[Scenario, list[DayBranches]]) -> None:
    s, days = three_days
    per_day = round(86400.0 / s.dt_s)
    assert [d.step for d in days] == [0, per_day, 2 * per_day]
    for d in days:
        # Common random numbers: the same option in two branches, the same bits.
        np.testing.assert_array_equal(d.obs[1], d.obs[2])
        np.testing.assert_array_equal(d.scores[1], d.scores[2])
        assert d.scores.shape == d.profit.shape == (3, s.instances)
        # The served setting wins a tie; otherwise the best score.
        best = d.scores.max(axis=0)
        np.testing.assert_array_equal(d.picks, np.where(d.scores[1] >= best, 1, d.scores.argmax(axis=0)))
    # The served setting's branch of the first day is the served row's first day, bit for bit.
    seen: dict[int, np.ndarray] = {}
    run_scenario(s, [Interlocked(SERVED, zones=ZONES)],
                 on_step=lambda step, obs, _: seen.setdefault(step, obs.copy()))
    np.testing.assert_array_equal(days[0].obs[1], seen[per_day])


def test_daily_scores_count_the_buffer_only_while_the_episode_goes_on(
        three_days: tuple[Scenario, list[DayBranches]]) -> None:
    _, days = three_days
    # The lookahead ends a day before the episode does: the buffer's fruit counts (nothing where the
    # crop is still vegetative, whose buffer grows leaves).
    assert np.all(days[0].value >= 0.0) and np.any(days[0].value > 0.0)
    assert np.all(days[1].value == 0.0) and np.all(days[2].value == 0.0)
    np.testing.assert_array_equal(days[2].scores, days[2].profit)  # the last day: no lookahead either
    assert np.all(days[0].scores != days[0].profit)


def test_daily_oracle_with_only_the_served_setting_is_the_served_row(two_days: list[Scenario]) -> None:
    """Copying the twin into branches, counting the day there and going on from the pick changes nothing."""
    masked: dict = {}
    r = evaluate_all({"served": Interlocked(SERVED, zones=ZONES),
                      "daily": DailyLampOracle(SERVED, c0=(SERVED.c0,))},
                     two_days, masked=masked)
    assert r["daily"] == r["served"] and masked["daily"] == masked["served"]


def test_daily_oracle_is_deterministic_and_the_same_on_worker_processes(two_days: list[Scenario]) -> None:
    rows = {"served": Interlocked(SERVED, zones=ZONES),
            "daily": DailyLampOracle(SERVED, c0=(0.0, SERVED.c0, 125.0))}
    one = evaluate_all(rows, two_days)
    assert evaluate_all(rows, two_days, jobs=2) == one  # a fresh run, on other processes: the same bits
    assert one["daily"] != one["served"]  # the other lamps were picked somewhere
    with pytest.raises(ValueError, match="options"):
        DailyLampOracle(SERVED, c0=(0.0, 125.0))


def test_eval_prints_the_oracle_rows_and_their_gaps(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    shipped = Path(__file__).parents[2] / "policy/shipped"
    args = argparse.Namespace(policy=str(shipped), seeds=f"{HELD_OUT_SEEDS[0]}-{HELD_OUT_SEEDS[0]}", days=1.0,
                              json=str(tmp_path / "eval.json"), retune=False, hindsight=True, lamps="ours",
                              jobs=1)
    assert run_eval(args) == 0
    out = capsys.readouterr().out
    table = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert {"ceiling", "oracle", "daily"} <= table
    for top in ("ceiling", "oracle", "daily"):
        assert f"of the served-to-{top} profit gap" in out
    assert "per scenario, not an upper bound" in out
    for pair in ("oracle - served", "daily - served", "policy - daily"):
        assert f"  {pair} " in out
