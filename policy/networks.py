"""Actor-critic for the greenhouse action space: Bernoulli valves, Beta pump and lights.

Valves are binary in the twin (thresholded at 0.5), so each gets a Bernoulli; pump and
lights are bounded percentages, so a Beta on (0, 1) scaled to 0-100 puts no probability
mass outside the actuator range (a clipped Gaussian would). Observation normalisation
lives inside the module so a saved state_dict carries it to serving.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.distributions import Bernoulli, Beta

from policy.normalize import RunningMeanStd

BETA_EPS = 1e-4
"""Scaled continuous actions are clamped into (eps, 1 - eps): Beta log-densities are infinite at 0 and 1."""
ACTION_SCALE = 100.0


def layer_init(layer: nn.Linear, gain: float = math.sqrt(2.0), bias: float = 0.0) -> nn.Linear:
    """Orthogonal weights, constant bias (the CleanRL / PPO-implementation-details default)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(in_dim: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(layer_init(nn.Linear(in_dim, hidden)), nn.Tanh(),
                         layer_init(nn.Linear(hidden, hidden)), nn.Tanh())


class ActorCritic(nn.Module):
    """Policy and value function over observations [B, obs_dim]; actions are [B, zones + 2]."""

    def __init__(self, obs_dim: int, zones: int, hidden: int = 64, shared_torso: bool = False) -> None:
        super().__init__()
        self.obs_dim, self.zones = obs_dim, zones
        self.obs_rms = RunningMeanStd((obs_dim,))
        self.actor_torso = mlp(obs_dim, hidden)
        self.critic_torso = self.actor_torso if shared_torso else mlp(obs_dim, hidden)
        # Small policy gain: near-uniform valves and Beta(~2, ~2) at the start.
        self.actor_head = layer_init(nn.Linear(hidden, zones + 4), gain=0.01)
        self.critic_head = layer_init(nn.Linear(hidden, 1), gain=1.0)

    def update_obs_stats(self, obs: torch.Tensor) -> None:
        """Fold a batch of raw observations into the normaliser (call on rollouts, not on updates)."""
        self.obs_rms.update(obs)

    def distributions(self, obs: torch.Tensor) -> tuple[Bernoulli, Beta]:
        """Valve Bernoullis [B, zones] and pump/lights Betas [B, 2] for raw observations."""
        h = self.actor_torso(self.obs_rms.normalize(obs))
        out = self.actor_head(h)
        logits, conc = out[:, : self.zones], out[:, self.zones:]
        # >= 1 keeps the density finite at the edges; exp (not softplus) lets BC reach the near-0
        # pump of "all valves closed" within a few hundred steps.
        conc = 1.0 + conc.clamp(-10.0, 8.0).exp()
        return Bernoulli(logits=logits), Beta(conc[:, :2], conc[:, 2:])

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        """State value [B]."""
        return self.critic_head(self.critic_torso(self.obs_rms.normalize(obs))).squeeze(-1)

    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample (or evaluate the given) action: returns (action, logprob [B], entropy [B], value [B])."""
        valves, cont = self.distributions(obs)
        if action is None:
            with torch.no_grad():
                v = valves.sample()
                u = cont.sample().clamp(BETA_EPS, 1.0 - BETA_EPS)
            action = torch.cat([v, u * ACTION_SCALE], dim=1)
        else:
            v = (action[:, : self.zones] >= 0.5).to(action.dtype)
            u = (action[:, self.zones:] / ACTION_SCALE).clamp(BETA_EPS, 1.0 - BETA_EPS)
        logprob = valves.log_prob(v).sum(1) + cont.log_prob(u).sum(1)
        entropy = valves.entropy().sum(1) + cont.entropy().sum(1)
        return action, logprob, entropy, self.get_value(obs)

    def log_prob_parts(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-valve log-probs [B, zones] and per-actuator continuous log-probs [B, 2] (for BC weighting)."""
        valves, cont = self.distributions(obs)
        v = (action[:, : self.zones] >= 0.5).to(action.dtype)
        u = (action[:, self.zones:] / ACTION_SCALE).clamp(BETA_EPS, 1.0 - BETA_EPS)
        return valves.log_prob(v), cont.log_prob(u)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action for serving: valve open iff p >= 0.5, pump and lights at the Beta mean."""
        valves, cont = self.distributions(obs)
        return torch.cat([(valves.probs >= 0.5).to(obs.dtype), cont.mean * ACTION_SCALE], dim=1)
