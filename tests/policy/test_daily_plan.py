"""Daily lamp plans from paired branches: labels from the best option of each greenhouse-day, on the
oracle's states or on a learner's (DAgger)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from app.cli.demos import main as demos_main
from policy.bc import load_demos
from policy.daily_plan import daily_plan_demos
from policy.evaluate import Scenario
from policy.oracles import daily_oracle
from policy.residual import Interlocked, interlock
from policy.tuning import served_expert
from twin.spec import ObservationSpec

ZONES = 6
SERVED = served_expert(ZONES)
OPTIONS = (0.0, float(SERVED.c0), 150.0)


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    """Three greenhouses over three hourly days: days to go on from, quickly."""
    return Scenario(seed=11, days=3.0, instances=3, dt_s=3600.0)


@pytest.fixture(scope="module")
def oracle_plans(scenario: Scenario):
    return daily_plan_demos([scenario], SERVED, c0=OPTIONS, stride=1)


def test_each_day_is_labelled_by_the_option_its_branches_scored_best(scenario: Scenario,
                                                                     oracle_plans) -> None:
    days = 3
    assert oracle_plans.picks.shape == (scenario.instances * days,) and np.all(oracle_plans.gains >= 0.0)
    # The same choices as the daily oracle row's, day by day, on the same path.
    seen = []
    options = tuple(dataclasses.replace(SERVED, c0=c) for c in OPTIONS)
    daily_oracle(scenario, options, 1, on_day=lambda d: seen.append(d.picks))
    np.testing.assert_array_equal(oracle_plans.picks.reshape(scenario.instances, days),
                                  np.stack(seen, axis=1))
    # Every demonstrated action is the picked option's rule behind the interlock, on the demonstrated
    # observation.
    demos = oracle_plans.demos
    per_gh = demos.size // scenario.instances
    assert per_gh == days * 24
    for g in range(scenario.instances):
        for d in range(days):
            rule = dataclasses.replace(SERVED, c0=OPTIONS[oracle_plans.picks[g * days + d]])
            rows = slice(g * per_gh + d * 24, g * per_gh + (d + 1) * 24)
            obs = demos.obs[rows]
            want = interlock(torch.as_tensor(rule(obs.numpy()), dtype=torch.float32), ZONES, obs)
            torch.testing.assert_close(demos.action[rows], want)
    assert "greenhouse-days" in oracle_plans.summary() and set(demos.who) == {"daily-oracle"}


def test_a_learner_that_is_the_served_rule_sees_the_oracles_first_day_and_then_its_own(
        scenario: Scenario, oracle_plans) -> None:
    learner = Interlocked(SERVED, zones=ZONES)
    dagger = daily_plan_demos([scenario], SERVED, c0=OPTIONS, stride=1, learner=learner)
    per_gh = dagger.demos.size // scenario.instances
    first = np.concatenate([np.arange(g * per_gh, g * per_gh + 24) for g in range(scenario.instances)])
    # Day 1 starts from the same states, so its branches, labels and demonstrations are the same.
    torch.testing.assert_close(dagger.demos.obs[first], oracle_plans.demos.obs[first])
    np.testing.assert_array_equal(dagger.picks.reshape(3, 3)[:, 0], oracle_plans.picks.reshape(3, 3)[:, 0])
    # Where the oracle lit differently on day 1, day 2 starts from the learner's own state instead.
    moved = oracle_plans.picks.reshape(3, 3)[:, 0] != 1
    day2 = np.array([g * per_gh + 24 for g in range(scenario.instances)])
    differs = (dagger.demos.obs[day2] != oracle_plans.demos.obs[day2]).any(dim=1).numpy()
    assert moved.any() and not moved.all()
    np.testing.assert_array_equal(differs, moved)  # where it picked the served rule, the paths still agree
    # With a margin no option can reach, every day is the served rule's and the two paths agree.
    never = daily_plan_demos([scenario], SERVED, c0=OPTIONS, stride=1, margin=1e9)
    same = daily_plan_demos([scenario], SERVED, c0=OPTIONS, stride=1, margin=1e9, learner=learner)
    assert np.all(never.picks == 1)
    torch.testing.assert_close(never.demos.obs, same.demos.obs)


def test_the_command_writes_loadable_demonstrations(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "daily.npz"
    args = argparse.Namespace(demos_command="daily", out=str(out), seeds="100", days=1.0, learner=None,
                              stride=6, jobs=1)
    assert demos_main(args) == 0
    assert "greenhouse-days" in capsys.readouterr().out
    demos = load_demos(out, ObservationSpec(ZONES))
    assert demos.size == 8 * 24  # eight greenhouses, 144 steps a day kept one in six
    bad = argparse.Namespace(**{**vars(args), "seeds": "10000"})
    assert demos_main(bad) == 2 and "training seeds" in capsys.readouterr().err
    missing = argparse.Namespace(**{**vars(args), "learner": str(tmp_path / "nowhere")})
    assert demos_main(missing) == 2 and "not a policy directory" in capsys.readouterr().err
    # The hindsight demonstrations go through the same writer.
    hindsight = argparse.Namespace(demos_command="hindsight", out=str(tmp_path / "hindsight.npz"),
                                   seeds="100", days=1.0, stride=6, jobs=1)
    assert demos_main(hindsight) == 0 and "greenhouses" in capsys.readouterr().out
    assert load_demos(tmp_path / "hindsight.npz", ObservationSpec(ZONES)).size == 8 * 24
    assert demos_main(argparse.Namespace(**{**vars(hindsight), "days": 0.0})) == 2
    assert "--days" in capsys.readouterr().err
