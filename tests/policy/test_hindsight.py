"""Hindsight lamp demonstrations and the lamp cloning that learns from them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from policy.baselines import DARK_WINDOW, hour_of_day
from policy.bc import save_demos
from policy.config import PPOConfig
from policy.evaluate import Scenario
from policy.hindsight import hindsight_demos, hindsight_scenarios
from policy.networks import ActorCritic
from policy.ppo import train
from policy.residual import interlock
from policy.tuning import served_expert
from twin.config import in_window
from twin.spec import ObservationSpec

ZONES = 6
SPEC = ObservationSpec(ZONES)


def _candidates() -> tuple[float, float, float]:
    """No lamps, the served rule's own setting in the middle (index 1), and a generous one."""
    served = served_expert(ZONES).c0
    assert 0.0 < served < 150.0
    return (0.0, served, 150.0)


@pytest.fixture(scope="module")
def two_days() -> tuple[Scenario, object]:
    """Three greenhouses over two days, every candidate side by side (a few seconds)."""
    scenario = Scenario(seed=7, days=2.0, instances=3)
    return scenario, hindsight_demos([scenario], served_expert(ZONES), c0=_candidates(), stride=2, margin=0.0)


def test_each_greenhouse_is_shown_its_best_lamp_setting(two_days: tuple[Scenario, object]) -> None:
    scenario, result = two_days
    served = served_expert(ZONES)
    c0 = np.array(result.c0)
    assert result.gains.shape == (3, 3)
    assert np.all(result.gains[list(result.c0).index(served.c0)] == 0.0)  # gains are over the served setting
    # With no margin each greenhouse takes its argmax (the served one on a tie at 0).
    best = result.gains.argmax(axis=0)
    np.testing.assert_array_equal(result.picks, np.where(result.gains.max(axis=0) > 0.0, best, 1))
    # The demonstrated lamps are the picked rule's on the demonstrated observations, greenhouse by greenhouse.
    rows = result.demos.size // scenario.instances
    assert rows == int(np.ceil(2 * 144 / 2))
    for g in range(scenario.instances):
        obs = result.demos.obs[g * rows:(g + 1) * rows]
        rule = dataclasses.replace(served, c0=float(c0[result.picks[g]]))
        want = interlock(torch.as_tensor(rule(obs.numpy()), dtype=torch.float32), ZONES, obs)
        torch.testing.assert_close(result.demos.action[g * rows:(g + 1) * rows], want)
    assert "greenhouses" in result.summary()


def test_a_margin_keeps_the_served_setting_where_others_earn_little(two_days: tuple[Scenario, object]
                                                                    ) -> None:
    scenario, loose = two_days
    margin = float(np.sort(loose.gains.max(axis=0))[-1]) + 1.0  # more than any greenhouse gained
    strict = hindsight_demos([scenario], served_expert(ZONES), c0=_candidates(), stride=2, margin=margin)
    assert np.all(strict.picks == 1)
    np.testing.assert_array_equal(strict.gains, loose.gains)  # same greenhouses, same runs


def test_demonstrations_come_from_training_seeds_only() -> None:
    with pytest.raises(ValueError, match="training seeds"):
        hindsight_scenarios(10_000, 10_003)
    with pytest.raises(ValueError, match="candidates"):
        hindsight_demos([Scenario(seed=1, days=1.0)], served_expert(ZONES), c0=(0.0, 100.0))
    assert [s.seed for s in hindsight_scenarios(100, 102)] == [100, 101, 102]


def test_lamp_cloning_needs_the_lamp_switch() -> None:
    with pytest.raises(ValueError, match="lamp_demo_files"):
        PPOConfig.preset("tiny", residual=True, lamp_demo_files=("x.npz",))


@pytest.fixture()
def lamps_always_on(tmp_path: Path) -> tuple[Path, torch.Tensor]:
    """A demonstration file that lights wherever it may (the served rule's irrigation), and its
    observations."""
    scenario = Scenario(seed=3, days=1.0, instances=4, dt_s=3600.0)
    demos = hindsight_demos([scenario], served_expert(ZONES), c0=(served_expert(ZONES).c0, 150.0),
                            stride=1).demos
    action = demos.action.clone()
    action[:, -1] = 100.0
    path = tmp_path / "lamps.npz"
    save_demos(path, demos._replace(action=action), SPEC)
    return path, demos.obs


def test_training_clones_the_demonstrated_lamps_and_leaves_the_valves(
        lamps_always_on: tuple[Path, torch.Tensor]) -> None:
    # Demonstrations that light wherever the served rule is dark (outside its dark window): the
    # cloned switch must follow them; valves keep the residual's start at the served rule.
    path, obs = lamps_always_on
    cfg = PPOConfig.preset("tiny", residual=True, residual_lamp_logit=3.0, lamp_demo_files=(str(path),),
                           lamp_bc_updates=150, total_steps=64 * 48)
    seen: list[tuple[int, float]] = []

    def validate(iteration: int, env_steps: int, agent: ActorCritic) -> None:
        seen.append((iteration, float((agent.act(obs)[:, -1] > 0).float().mean())))

    agent = train(cfg.replace(validate_every=1), validate=validate).agent
    # The cloned start is validated before the first rollout (a candidate for the best checkpoint).
    assert [i for i, _ in seen] == [0, 1] and seen[0][1] > 0.7
    untrained = ActorCritic(SPEC.dim, ZONES, residual=served_expert(ZONES), lamp_logit=3.0)
    untrained.update_obs_stats(obs)
    before, after = untrained.act(obs), agent.act(obs)
    dark = torch.as_tensor(in_window(hour_of_day(torch, obs, SPEC), *DARK_WINDOW))
    assert float((before[:, -1] > 0)[~dark].float().mean()) < 0.5
    assert float((after[:, -1] > 0)[~dark].float().mean()) > 0.95  # lit wherever the dark period allows
    assert float((after[:, :ZONES] == before[:, :ZONES]).float().mean()) > 0.95


def test_the_leash_can_hold_the_cloned_start_instead_of_the_served_rule(
        lamps_always_on: tuple[Path, torch.Tensor]) -> None:
    # Cloned lamps that light more than the served rule: a leash to the served rule charges for the
    # difference from the first update on, a leash to the start charges nothing until PPO moves.
    path, _ = lamps_always_on
    cfg = PPOConfig.preset("tiny", residual=True, residual_lamp_logit=3.0, lamp_demo_files=(str(path),),
                           lamp_bc_updates=150, total_steps=64 * 48, update_epochs=1, num_minibatches=1)
    to_served = train(cfg).metrics[0].prior_kl
    to_start = train(cfg.replace(prior_kl_to="start")).metrics[0].prior_kl
    assert to_served > 0.5 and abs(to_start) < 1e-4
    with pytest.raises(ValueError, match="prior_kl_to"):
        cfg.replace(prior_kl_to="incumbent")
