"""The lamp switch on a torso of its own: what irrigation learns cannot move the lamps, and back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from policy.bc import lamp_bc_loss
from policy.checkpoint import build_meta, load_member, save_member
from policy.config import PPOConfig
from policy.ensemble import forward_members
from policy.networks import ActorCritic
from policy.tuning import served_expert
from twin.spec import ObservationSpec

ZONES = 6
DIM = ObservationSpec(ZONES).dim


def _agent(seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    agent = ActorCritic(DIM, ZONES, hidden=32, residual=served_expert(ZONES), lamp_logit=3.0, lamp_torso=True)
    agent.update_obs_stats(torch.randn(256, DIM) * 5 + 3)
    with torch.no_grad():  # a trained-looking policy, not the zero-adjustment start
        for head in (agent.actor_head, agent.lamp_head):
            assert head is not None
            head.weight.normal_(0.0, 0.3)
    return agent


def _grads(agent: ActorCritic, loss: torch.Tensor) -> dict[str, bool]:
    agent.zero_grad(set_to_none=True)
    loss.backward()
    return {name: p.grad is not None and bool(p.grad.abs().sum() > 0) for name, p in agent.named_parameters()}


def test_valve_and_lamp_gradients_reach_separate_torsos() -> None:
    agent = _agent()
    obs = torch.randn(128, DIM) * 5 + 3
    out = agent(obs)
    valves = _grads(agent, out[:, :ZONES].square().sum())
    assert any(valves[n] for n in valves if n.startswith("actor_torso"))
    assert not any(valves[n] for n in valves if n.startswith("lamp_"))
    action = agent.act(obs)
    action[:, -1] = 100.0 - action[:, -1]  # the opposite lamps: a loss with a gradient
    lamps = _grads(agent, lamp_bc_loss(agent, obs, action))
    assert any(lamps[n] for n in lamps if n.startswith("lamp_torso"))
    assert not any(lamps[n] for n in lamps if n.startswith("actor_"))


def test_the_untrained_split_actor_is_the_served_rule() -> None:
    agent = ActorCritic(DIM, ZONES, hidden=32, residual=served_expert(ZONES), lamp_logit=3.0, lamp_torso=True)
    plain = ActorCritic(DIM, ZONES, hidden=32, residual=served_expert(ZONES), lamp_logit=3.0)
    obs = torch.randn(64, DIM) * 5 + 3
    for a in (agent, plain):
        a.update_obs_stats(obs)
    assert torch.equal(agent.act(obs), plain.act(obs))


def test_a_split_member_round_trips_and_stacks(tmp_path: Path) -> None:
    members = [_agent(seed) for seed in (0, 1)]
    cfg = PPOConfig.preset("tiny", residual=True, residual_lamp_logit=3.0, lamp_torso=True)
    for i, agent in enumerate(members):
        save_member(tmp_path / f"member_{i}", agent, build_meta(cfg, seed=i, member=i))
    loaded = [load_member(tmp_path / f"member_{i}", expected_zones=ZONES) for i in range(2)]
    assert all(meta["architecture"]["lamp_torso"] is True for _, meta in loaded)
    obs = torch.randn(32, DIM) * 5 + 3
    side_by_side = forward_members([m for m, _ in loaded], obs)
    for k, agent in enumerate(members):
        torch.testing.assert_close(side_by_side[k], agent(obs))
        assert torch.equal(loaded[k][0].act(obs), agent.act(obs))


def test_the_lamp_torso_needs_the_lamp_switch() -> None:
    with pytest.raises(ValueError, match="lamp_torso"):
        PPOConfig.preset("tiny", residual=True, lamp_torso=True)


def test_learning_the_lamps_alone_leaves_irrigation_at_its_start() -> None:
    from policy.ppo import train

    cfg = PPOConfig.preset("tiny", residual=True, residual_lamp_logit=3.0, lamp_torso=True, learn="lamps",
                           total_steps=64 * 48 * 2)
    seen: dict[int, dict[str, torch.Tensor]] = {}

    def validate(iteration: int, env_steps: int, agent: ActorCritic) -> None:
        seen[iteration] = {k: v.detach().clone() for k, v in agent.state_dict().items()}

    agent = train(cfg.replace(validate_every=1), validate=validate).agent
    # The residual's irrigation head starts at zero (the served rule) and stays there; the lamps move.
    assert torch.count_nonzero(agent.actor_head.weight) == 0 and not agent.actor_head.weight.requires_grad
    for k in seen[1]:
        if k.startswith(("actor_torso", "actor_head")):
            assert torch.equal(seen[1][k], seen[2][k]), k
    assert any(not torch.equal(seen[1][k], seen[2][k]) for k in seen[1] if k.startswith("lamp_"))
    with pytest.raises(ValueError, match="learn"):
        PPOConfig.preset("tiny", residual=True, residual_lamp_logit=3.0, learn="lamps")
