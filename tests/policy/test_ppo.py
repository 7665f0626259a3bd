from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from policy.baselines import RandomController, ThresholdExpert
from policy.config import PPOConfig
from policy.ppo import make_twin, train

EVAL_SEED = 123



def mean_reward(cfg: PPOConfig, controller, steps: int = 48, num_envs: int = 64) -> tuple[float, int]:
    """Mean reward per env step and the number of terminations on an evaluation twin."""
    twin = make_twin(cfg, num_instances=num_envs, seed=EVAL_SEED)
    obs = twin.reset()
    total, terminations = 0.0, 0
    with torch.no_grad():
        for _ in range(steps):
            obs, reward, terminated, _, _ = twin.step(controller(obs))
            total += float(reward.mean())
            terminations += int(terminated.sum())
    return total / steps, terminations


def test_config_derived_sizes_and_presets() -> None:
    cfg = PPOConfig.preset("tiny")
    assert cfg.batch_size == cfg.num_envs * cfg.num_steps
    assert cfg.minibatch_size * cfg.num_minibatches == cfg.batch_size
    assert cfg.num_iterations == cfg.total_steps // cfg.batch_size
    full, small = PPOConfig.preset("full"), PPOConfig.preset("small")
    assert full.batch_size > small.batch_size and full.total_steps > small.total_steps
    # 'small' is the shipped ensemble's recipe: residual, as recorded in every shipped member.
    shipped = json.loads((Path(__file__).parents[2] / "policy/shipped/member_0/meta.json").read_text())
    assert small.residual and shipped["train_config"]["residual"] is True
    recipe = ("num_envs", "num_steps", "total_steps", "gamma", "stagger_starts", "prior_kl_coef", "lr",
              "update_epochs")
    assert tuple(getattr(small, k) for k in recipe) == tuple(shipped["train_config"][k] for k in recipe)
    with pytest.raises(ValueError):
        PPOConfig(num_envs=10, num_steps=3, num_minibatches=4)
    with pytest.raises(ValueError):
        PPOConfig.preset("huge")  # type: ignore[arg-type]


def test_short_training_beats_random_controller() -> None:
    cfg = PPOConfig.preset("tiny", num_steps=32, total_steps=64 * 32 * 6, bc_decay_steps=64 * 32 * 4,
                           bc_pretrain_updates=200)
    start = time.perf_counter()
    result = train(cfg)
    elapsed = time.perf_counter() - start
    assert len(result.metrics) == 6
    m = result.metrics[-1]
    assert m.env_steps == 64 * 32 * 6 and m.steps_per_s > 0 and m.bc_coef == 0.0
    assert all(torch.isfinite(torch.tensor(list(x[1:]))).all() for x in result.metrics)
    # the served threshold's, on the same states
    assert all(0.0 <= x.expert_open_rate <= 1.0 for x in result.metrics)

    trained, _ = mean_reward(cfg, result.agent.act)
    random, _ = mean_reward(cfg, RandomController(seed=EVAL_SEED))
    expert, _ = mean_reward(cfg, ThresholdExpert())
    print(f"trained {trained:.3f} random {random:.3f} expert {expert:.3f} "
          f"rollout steps/s {[round(x.steps_per_s) for x in result.metrics]} train {elapsed:.1f}s")
    assert trained > random + 0.5


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device (bench/device_check.sh runs it on a lent GPU)"))])
def test_same_seed_gives_identical_weights(device: str) -> None:
    cfg = PPOConfig.preset("tiny", num_envs=16, num_steps=16, total_steps=16 * 16 * 2, bc_demo_steps=16,
                           bc_pretrain_updates=10, bc_decay_steps=1000, device=device)
    a = train(cfg).agent.state_dict()
    b = train(cfg).agent.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    c = train(cfg.replace(seed=1)).agent.state_dict()
    assert not torch.equal(a["actor_head.weight"], c["actor_head.weight"])


def test_stagger_spreads_the_instances_clocks_over_a_day() -> None:
    from policy.ppo import stagger_clocks
    from policy.tuning import served_expert
    from twin.spec import observation_spec

    cfg = PPOConfig.preset("tiny", num_envs=96)  # hourly steps: 24 per day
    twin = make_twin(cfg)
    obs = twin.reset()
    assert len(set(twin.state.step.tolist())) == 1  # every episode starts at midnight, in step
    obs = stagger_clocks(twin, obs, 24, torch.Generator().manual_seed(0), served_expert(6), 6)
    steps = twin.state.step
    assert int(steps.min()) >= 1 and int(steps.max()) <= 24
    assert len(set(steps.tolist())) >= 20  # 96 instances over 24 phases
    sl = observation_spec(6).slices
    # what the policy sees
    assert len(set(torch.round(obs[:, sl["hour_sin"]].squeeze(1), decimals=4).tolist())) >= 10
    again = make_twin(cfg)
    again_obs = stagger_clocks(again, again.reset(), 24, torch.Generator().manual_seed(0), served_expert(6),
                               6)
    assert torch.equal(again.state.step, steps) and torch.equal(again_obs, obs)  # seeded
