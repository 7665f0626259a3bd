"""Generalised advantage estimation for a same-step-autoreset vectorised twin.

With same-step autoreset the observation after a finished step is already the next
episode's first one, so it must not bootstrap the finished episode. Termination (a hard
safety limit) means no future; truncation (the episode clock) means the future exists and is
worth the value of the pre-reset observation, which the caller evaluates as ``final_values``.
"""

from __future__ import annotations

import torch


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, terminated: torch.Tensor,
                truncated: torch.Tensor,
                final_values: torch.Tensor, last_value: torch.Tensor, gamma: float, lam: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns [T, B].

    ``values[t]`` is V(obs_t); ``final_values[t]`` is V(final obs of step t) wherever step t
    truncated (ignored elsewhere); ``last_value`` is V(obs_T) after the rollout.
    """
    terminated = terminated.bool()
    truncated = truncated.bool()
    next_values = torch.cat([values[1:], last_value[None]], dim=0)
    next_values = torch.where(truncated, final_values, next_values)
    next_values = torch.where(terminated, torch.zeros_like(next_values), next_values)
    carry_on = (~(terminated | truncated)).to(rewards.dtype)
    deltas = rewards + gamma * next_values - values
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(last_value)
    for t in range(rewards.shape[0] - 1, -1, -1):
        last = deltas[t] + gamma * lam * carry_on[t] * last
        advantages[t] = last
    return advantages, advantages + values
