"""The trainer's shortcuts (entropy-free sampling, a prior computed once) change no result."""

from __future__ import annotations

import dataclasses

import torch

from policy.networks import ActorCritic
from policy.tuning import load_tuned_threshold
from twin import GreenhouseTwin

ZONES = 6


def _observations(n: int = 64, steps: int = 12) -> torch.Tensor:
    """Observations the expert visits, so valve priors are both open and closed."""
    twin = GreenhouseTwin(n, backend="torch", seed=4, dt_s=3600.0)
    expert = load_tuned_threshold()
    obs, rows = twin.reset(), []
    for _ in range(steps):
        rows.append(obs.clone())
        obs, *_ = twin.step(expert(obs))
    return torch.cat(rows)


def _residual_agent(obs: torch.Tensor) -> ActorCritic:
    torch.manual_seed(0)
    agent = ActorCritic(obs.shape[1], ZONES,
                        residual=dataclasses.replace(load_tuned_threshold(), zones=ZONES))
    torch.nn.init.normal_(agent.actor_head.weight, std=0.05)  # a trained-looking head, not the zero start
    agent.update_obs_stats(obs)
    return agent


def test_sample_draws_what_get_action_and_value_draws() -> None:
    obs = _observations()
    agent = _residual_agent(obs)
    torch.manual_seed(11)
    action, logp, _, value = agent.get_action_and_value(obs)
    torch.manual_seed(11)
    action2, logp2, value2 = agent.sample(obs, agent.prior(obs))
    assert torch.equal(action, action2) and torch.equal(logp, logp2) and torch.equal(value, value2)
    assert 0 < int(action[:, :ZONES].sum()) < action[:, :ZONES].numel()


def test_a_stored_prior_gives_the_same_update_forward() -> None:
    obs = _observations()
    agent = _residual_agent(obs)
    prior = agent.prior(obs)
    assert prior is not None and 0 < int(prior.valves.sum()) < prior.valves.numel()
    with torch.no_grad():
        action = agent.get_action_and_value(obs)[0]
    fresh = agent.get_action_and_value(obs, action)
    stored = agent.get_action_and_value(obs, action, prior)
    for a, b in zip(fresh, stored, strict=True):
        assert torch.equal(a, b)


def test_residual_settings_follow_the_buffer() -> None:
    obs = _observations(8, 2)
    plain = ActorCritic(obs.shape[1], ZONES)
    assert not plain.is_residual and plain.prior(obs) is None
    residual = _residual_agent(obs)
    plain.load_state_dict(residual.state_dict())  # changes the buffer in place
    assert plain.is_residual and plain.expert() == residual.expert()
    with torch.no_grad():
        plain.residual_cfg[1] = 0.5
    expert = plain.expert()
    assert expert is not None and expert.refill == 0.5
    plain.residual_cfg = torch.zeros_like(plain.residual_cfg)  # a new tensor altogether
    assert not plain.is_residual
