"""What PPO needs of a batch of twins, and one iteration's rollout storage.

:class:`VectorTwin` is the interface the training loop is written against. Two classes
implement it: the in-process :class:`twin.env.GreenhouseTwin` (torch backend) and
:class:`policy.parallel.vector.ShmVectorTwin`, whose instances live in worker processes.
:class:`Rollout` holds one iteration's transitions in tensors preallocated as [T, B, ...]
(CleanRL's storage), and :func:`collect` fills it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from policy.networks import ActorCritic
from policy.residual import interlock
from twin.config import TwinConfig
from twin.spec import ActionSpec, ObservationSpec
from twin.types import TwinParams, TwinState

StepResult = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]
"""(obs [B, D], reward [B], terminated [B], truncated [B], info): same-step autoreset, with the
pre-reset observation in ``info['final_obs']``."""


class VectorTwin(Protocol):
    """B twin instances stepped together with same-step autoreset (Gymnasium's vector API, in torch)."""

    config: TwinConfig
    observation_spec: ObservationSpec
    action_spec: ActionSpec
    num_instances: int

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Start new episodes everywhere; returns the first observations [B, D]."""
        ...

    def step(self, actions: torch.Tensor) -> StepResult:
        """Apply actions [B, zones + 2] and advance one control step."""
        ...

    @property
    def params(self) -> TwinParams:
        """Every instance's params (read for snapshots; may be the live record)."""
        ...

    @property
    def state(self) -> TwinState:
        """Every instance's state (read for snapshots; may be the live record)."""
        ...

    def episodes(self) -> tuple[TwinParams, TwinState]:
        """Copies of every instance's params and state."""
        ...

    def restore_episodes(self, params: TwinParams, state: TwinState, ids: torch.Tensor | None = None) -> None:
        """Overwrite the instances ``ids`` (all when None) with these rows of params and state."""
        ...


@dataclass(frozen=True)
class Rollout:
    """One iteration's transitions, [T, B, ...] each, written in place by :func:`collect`."""

    obs: torch.Tensor
    """[T, B, D] raw observations the actions were chosen on."""
    actions: torch.Tensor
    """[T, B, zones + 2] sampled actions (before the interlock: what the log-probs are of)."""
    logprobs: torch.Tensor
    """[T, B] log-probability of the sampled action when it was sampled."""
    rewards: torch.Tensor
    """[T, B] raw (unscaled) rewards."""
    values: torch.Tensor
    """[T, B] V(obs)."""
    final_values: torch.Tensor
    """[T, B] V(pre-reset observation) where the step truncated, else 0 (the truncation bootstrap)."""
    terminated: torch.Tensor
    """[T, B] bool: a hard safety limit ended the episode."""
    truncated: torch.Tensor
    """[T, B] bool: the episode clock ended the episode."""
    prior_valves: torch.Tensor
    """[T, B, zones] bool: the residual expert's valve decision (kept so the update need not recompute it)."""
    prior_cont: torch.Tensor
    """[T, B, 2] the residual expert's pump and lights fractions."""
    potentials: torch.Tensor
    """[T, B] the shaping potential Phi(obs) (0 without shaping)."""
    final_potentials: torch.Tensor
    """[T, B] Phi(pre-reset observation) where the step truncated, else 0 (as ``final_values``)."""

    @classmethod
    def zeros(cls, steps: int, envs: int, obs_dim: int, act_dim: int, zones: int,
              device: torch.device) -> Rollout:
        def z(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros((steps, envs, *shape), dtype=dtype, device=device)
        return cls(obs=z(obs_dim), actions=z(act_dim), logprobs=z(), rewards=z(), values=z(),
                   final_values=z(), terminated=z(dtype=torch.bool), truncated=z(dtype=torch.bool),
                   prior_valves=z(zones, dtype=torch.bool), prior_cont=z(2), potentials=z(),
                   final_potentials=z())

    @property
    def dones(self) -> torch.Tensor:
        """[T, B] bool: the episode ended at this step, either way."""
        return self.terminated | self.truncated


Potential = Callable[[torch.Tensor], torch.Tensor]
"""Observations [B, D] -> the shaping potential [B] (:class:`policy.shaping.FruitPotential`)."""


def collect(agent: ActorCritic, twin: VectorTwin, rollout: Rollout, next_obs: torch.Tensor,
            potential: Potential | None = None) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Step ``twin`` for T steps from ``next_obs`` with actions sampled from ``agent``, into ``rollout``.

    Returns the observation after the rollout, its value (the GAE bootstrap) and the env steps
    per second. The twin sees the interlocked action, as in serving; PPO keeps the sampled one.
    With ``potential`` the rollout also keeps Phi of every observation and of truncated episodes'
    last ones (the shaping's bootstrap).
    """
    zones = agent.zones
    start = time.perf_counter()
    with torch.inference_mode():  # nothing here is differentiated: skip even no_grad's bookkeeping
        for t in range(rollout.obs.shape[0]):
            rollout.obs[t] = next_obs
            prior = agent.prior(next_obs)
            if prior is not None:
                rollout.prior_valves[t], rollout.prior_cont[t] = prior
            action, logp, value = agent.sample(next_obs, prior)
            next_obs, reward, terminated, truncated, info = twin.step(interlock(action, zones, next_obs))
            rollout.actions[t], rollout.logprobs[t], rollout.values[t] = action, logp, value
            rollout.rewards[t], rollout.terminated[t], rollout.truncated[t] = reward, terminated, truncated
            rollout.final_values[t] = 0.0
            if potential is not None:
                rollout.potentials[t] = potential(rollout.obs[t])
                rollout.final_potentials[t] = 0.0
            if bool(truncated.any()):
                rollout.final_values[t] = torch.where(truncated, agent.get_value(info["final_obs"]), 0.0)
                if potential is not None:
                    rollout.final_potentials[t] = torch.where(truncated, potential(info["final_obs"]), 0.0)
        last_value = agent.get_value(next_obs)
    steps_per_s = rollout.rewards.numel() / (time.perf_counter() - start)
    return next_obs, last_value, steps_per_s
