"""Validation during training: the curve, the best checkpoint kept, and a trajectory left alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from policy.checkpoint import read_meta, run_hash
from policy.config import PPOConfig
from policy.ensemble import load_ensemble
from policy.ensemble_training import train_ensemble
from policy.evaluate import HELD_OUT_SEEDS, TRAINING_SEEDS
from policy.networks import ActorCritic
from policy.ppo import train
from policy.validation import VALIDATION_SEEDS, BestCheckpoint, ValidationPoint, validate, validation_suite
from twin import ObservationSpec

# Four iterations of 16 x 8 env steps, validated every second on one short scenario.
CFG = PPOConfig.preset("tiny", num_envs=16, num_steps=8, total_steps=16 * 8 * 4, bc_demo_steps=8,
                       bc_pretrain_updates=10, bc_decay_steps=1000, validate_every=2, validation_scenarios=1,
                       validation_days=0.5)


def _point(iteration: int, profit: float) -> ValidationPoint:
    return ValidationPoint(iteration=iteration, env_steps=iteration * 10, profit_eur_m2=profit,
                           yield_kg_m2=0.1, water_l_per_m2=1.0, stress_hours=0.0, hard_terminations=0)


def _agent(seed: int) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(ObservationSpec(6).dim, 6, hidden=8)


def test_validation_seeds_are_their_own() -> None:
    # 20,000+: the unseen seeds reports use
    for other in (TRAINING_SEEDS, HELD_OUT_SEEDS, range(20_000, 20_100)):
        assert not set(VALIDATION_SEEDS) & set(other)
    assert [s.seed for s in validation_suite(3)] == [30_000, 30_001, 30_002]
    with pytest.raises(ValueError):
        validation_suite(0)


def test_best_checkpoint_keeps_the_highest_profit_and_survives_a_restart(tmp_path: Path) -> None:
    keeper = BestCheckpoint()
    first, second = _agent(1), _agent(2)
    assert keeper.offer(_point(2, 0.5), first)
    assert not keeper.offer(_point(4, 0.4), second)  # worse: the weights of iteration 2 stay
    # a resumed run's repeat of iteration 2 is not a new point
    assert not keeper.offer(_point(2, 9.0), second)
    assert [p.iteration for p in keeper.curve] == [2, 4]
    keeper.save(tmp_path)
    again = BestCheckpoint.load(tmp_path)
    assert again.curve == keeper.curve and again.best == _point(2, 0.5)
    assert again.best_state is not None
    for name, value in first.state_dict().items():
        assert torch.equal(again.best_state[name], value)
    assert again.offer(_point(6, 0.7), second)
    assert again.summary()["best_iteration"] == 6
    assert BestCheckpoint.load(tmp_path / "absent").curve == []


def test_validation_does_not_change_the_training_trajectory() -> None:
    seen: list[int] = []
    plain = train(CFG.replace(validate_every=0))
    suite = validation_suite(1, 0.5)

    def check(iteration: int, env_steps: int, agent: ActorCritic) -> None:
        seen.append(iteration)
        validate(agent, suite, iteration, env_steps)

    watched = train(CFG, validate=check)
    assert seen == [2, 4]
    # Everything but the rollout's wall-clock throughput.
    assert [m._replace(steps_per_s=0.0) for m in plain.metrics] \
        == [m._replace(steps_per_s=0.0) for m in watched.metrics]
    for name, value in plain.agent.state_dict().items():
        assert torch.equal(watched.agent.state_dict()[name], value)
    assert run_hash(CFG) == run_hash(CFG.replace(validate_every=0, validation_days=7.0))


def test_member_serves_its_best_validated_checkpoint(tmp_path: Path) -> None:
    train_ensemble(CFG, members=1, out_dir=tmp_path, progress=False)
    member = tmp_path / "member_0"
    summary = read_meta(member)["metrics"]["validation"]
    assert [p["iteration"] for p in summary["curve"]] == [2, 4]
    best = max(summary["curve"], key=lambda p: p["profit_eur_m2"])
    assert summary["best_iteration"] == best["iteration"]
    assert not (member / "best.pt").exists()
    # The weights that were saved score the best point's profit again on the same suite.
    served = load_ensemble(tmp_path).members[0]
    again = validate(served, validation_suite(1, 0.5), best["iteration"], best["env_steps"])
    assert again.profit_eur_m2 == pytest.approx(best["profit_eur_m2"], rel=1e-6)
