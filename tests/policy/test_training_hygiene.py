"""What PPO does around its update: shaping with the crop's buffer, the critic's warm-up, a frozen
normaliser and a fixed reward scale."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from policy.bc import save_demos
from policy.config import PPOConfig
from policy.evaluate import Scenario
from policy.hindsight import hindsight_demos
from policy.networks import ActorCritic
from policy.ppo import _next_potentials, train
from policy.rollout import Rollout
from policy.shaping import FruitPotential, shaped_rewards
from policy.tuning import served_expert
from twin.config import TwinConfig
from twin.crop import CropGrowthConfig, CropState, buffer_fruit_share, step_crop_uptake
from twin.spec import ObservationSpec

ZONES = 6
SPEC = ObservationSpec(ZONES)


def test_the_buffer_share_is_the_crop_steps_own_split_into_fruit() -> None:
    # A dark step drains the buffer into the organs: what became fruit over what left the buffer is
    # the share the potential prices, at a canopy as warm as its 24-h mean.
    cfg = CropGrowthConfig()
    n = 5
    t24 = np.array([14.0, 18.0, 21.0, 24.0, 30.0], dtype=np.float64)
    t_sum = np.array([200.0, 600.0, 1035.0, 2000.0, 3000.0])
    state = CropState(c_buf=np.full(n, 15e3), c_leaf=np.full(n, 80e3), c_stem=np.full(n, 60e3),
                      c_fruit=np.full(n, 100e3), t_can24=t24, t_sum=t_sum, fruit_dm_cum=np.zeros(n))
    new, _, _ = step_crop_uptake(np, cfg, state, par=np.zeros(n), co2=np.full(n, 400.0), t_can=t24,
                                 f_w=np.ones(n), dt_s=600.0)
    left_buffer = state.c_buf - new.c_buf
    assert np.all(left_buffer > 0.0)
    np.testing.assert_allclose(new.fruit_dm_cum / left_buffer, buffer_fruit_share(np, cfg, t24, t_sum),
                               rtol=1e-9)
    share = buffer_fruit_share(np, cfg, t24, t_sum)
    assert np.all((share >= 0.0) & (share < 1.0)) and share[3] > share[1] > share[0]


def test_the_potential_prices_the_buffer_at_the_fruit_price() -> None:
    config = TwinConfig(zones=ZONES)
    phi = FruitPotential(config)
    obs = torch.zeros(3, SPEC.dim)
    s = SPEC.slices
    obs[:, s["carb_buffer"]] = torch.tensor([[0.0], [10.0], [20.0]])
    obs[:, s["t_can24"]], obs[:, s["temp_sum"]], obs[:, s["fruit_price"]] = 20.0, 2000.0, 2.0
    share = float(buffer_fruit_share(torch, config.crop_growth, torch.tensor(20.0), torch.tensor(2000.0)))
    # 10 g CH2O of buffer, as fresh fruit at 2 EUR/kg
    eur = 2.0 * share * 10.0 * 1e-3 / config.crop_growth.dmc
    torch.testing.assert_close(phi(obs),
                               torch.tensor([0.0, eur, 2 * eur]) / config.economics.v_ref(config.dt_s))


def test_shaping_telescopes_to_the_end_potential_and_a_termination_forfeits_it() -> None:
    gamma = 1.0  # undiscounted, so the sum telescopes exactly
    pots = torch.tensor([[1.0], [4.0], [2.0], [7.0]])
    rewards = torch.tensor([[0.5], [0.0], [1.0], [0.25]])
    terminated = torch.zeros(4, 1, dtype=torch.bool)
    truncated = torch.tensor([[False], [False], [False], [True]])
    rollout = Rollout.zeros(4, 1, 1, 1, 1, torch.device("cpu"))
    rollout.potentials.copy_(pots)
    rollout.final_potentials[3] = 9.0  # the truncated episode's last observation
    rollout.truncated.copy_(truncated)
    following = _next_potentials(rollout, torch.tensor([3.0]))
    torch.testing.assert_close(following, torch.tensor([[4.0], [2.0], [7.0], [9.0]]))
    shaped = shaped_rewards(rewards, pots, following, terminated, gamma)
    torch.testing.assert_close(shaped.sum(), rewards.sum() + 9.0 - 1.0)
    ended = shaped_rewards(rewards, pots, following, truncated, gamma)  # the same step terminated instead
    torch.testing.assert_close(ended[3], rewards[3] - 7.0)


@pytest.fixture(scope="module")
def lamp_demos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.Tensor]:
    """Served-rule demonstrations with lamps wherever they may be lit (hourly, four greenhouses, a day)."""
    scenario = Scenario(seed=3, days=1.0, instances=4, dt_s=3600.0)
    demos = hindsight_demos([scenario], served_expert(ZONES), c0=(served_expert(ZONES).c0, 150.0),
                            stride=1).demos
    action = demos.action.clone()
    action[:, -1] = 100.0
    path = tmp_path_factory.mktemp("demos") / "lamps.npz"
    save_demos(path, demos._replace(action=action), SPEC)
    return path, demos.obs


def _snapshots(cfg: PPOConfig) -> dict[int, dict[str, torch.Tensor]]:
    seen: dict[int, dict[str, torch.Tensor]] = {}

    def validate(iteration: int, env_steps: int, agent: ActorCritic) -> None:
        seen[iteration] = {k: v.detach().clone() for k, v in agent.state_dict().items()}

    train(cfg.replace(validate_every=1), validate=validate)
    return seen


def _changed(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], prefix: str) -> bool:
    return any(not torch.equal(a[k], b[k]) for k in a if k.startswith(prefix))


def test_the_warm_up_trains_the_critic_alone_and_the_normaliser_stays_the_clones(
        lamp_demos: tuple[Path, torch.Tensor]) -> None:
    path, _ = lamp_demos
    cfg = PPOConfig.preset("tiny", residual=True, residual_lamp_logit=3.0, lamp_demo_files=(str(path),),
                           lamp_bc_updates=50, total_steps=64 * 48 * 3, critic_warmup_iterations=2,
                           freeze_obs_norm=True, fixed_reward_scale=True)
    seen = _snapshots(cfg)
    assert sorted(seen) == [0, 1, 2, 3]
    for i in (1, 2):  # the warm-up: the critic moves, the cloned actor does not
        assert _changed(seen[0], seen[i], "critic_")
        assert not _changed(seen[0], seen[i], "actor_")
    assert _changed(seen[2], seen[3], "actor_")  # then PPO updates the policy
    # The normaliser is the cloned start's throughout.
    for i in (1, 2, 3):
        assert not _changed(seen[0], seen[i], "obs_rms.")


def test_without_demonstrations_the_normaliser_freezes_after_the_warm_up() -> None:
    cfg = PPOConfig.preset("tiny", residual=True, total_steps=64 * 48 * 3, critic_warmup_iterations=1,
                           freeze_obs_norm=True)
    seen = _snapshots(cfg)
    assert sorted(seen) == [1, 2, 3]
    assert _changed(seen[1], seen[2], "actor_")
    # Iteration 1 folded its rollout in (the statistics we then keep); 2 and 3 changed nothing.
    assert not _changed(seen[1], seen[2], "obs_rms.") and not _changed(seen[2], seen[3], "obs_rms.")
    moving = _snapshots(cfg.replace(freeze_obs_norm=False))
    assert _changed(moving[2], moving[3], "obs_rms.")


def test_shaping_and_the_fixed_scale_change_the_update_and_stay_deterministic() -> None:
    cfg = PPOConfig.preset("tiny", residual=True, total_steps=64 * 48 * 2, fixed_reward_scale=True)
    plain = train(cfg)
    shaped = train(cfg.replace(shaping="fruit_value"))
    again = train(cfg.replace(shaping="fruit_value"))
    # Same rollouts (the first collection happens before any update), different value targets.
    assert plain.metrics[0].mean_reward == shaped.metrics[0].mean_reward
    assert plain.metrics[0].value_loss != shaped.metrics[0].value_loss
    for k, v in shaped.agent.state_dict().items():
        assert torch.equal(v, again.agent.state_dict()[k]), k
    with pytest.raises(ValueError, match="shaping"):
        cfg.replace(shaping="fruit")


def test_a_resumed_shaped_run_with_the_fixed_scale_continues_the_same_trajectory() -> None:
    # The fixed scale is a function of the config, so a snapshot carries no scaler to restore; the
    # shaping's potentials are recomputed from the restored episodes.
    cfg = PPOConfig.preset("tiny", residual=True, total_steps=64 * 48 * 3, fixed_reward_scale=True,
                           shaping="fruit_value", critic_warmup_iterations=1, freeze_obs_norm=True)
    snaps: list[dict] = []
    whole = train(cfg, snapshot=lambda snap: snaps.append(copy.deepcopy(snap)), snapshot_every=2)
    assert len(snaps) == 1 and snaps[0]["scaler"] is None
    resumed = train(cfg, resume=snaps[0])
    for k, v in whole.agent.state_dict().items():
        assert torch.equal(v, resumed.agent.state_dict()[k]), k
