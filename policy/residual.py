"""Residual-on-expert helpers: the pump interlock and the batched expert prior.

* :func:`interlock` is the tiny deterministic rule every action passes before it reaches the
  twin, in training rollouts and in :meth:`ActorCritic.act` alike: no pump without an open
  valve (dead-heading) and a capped pump with a single open valve (relief valve). The
  runtime's safety clipper enforces ``pump.needs_open_valve`` too; this only makes training
  see the same plant the policy is served on.
* :func:`expert_prior` runs the (tuned) :class:`ThresholdExpert` on raw observations and
  returns what a residual policy starts from: per-zone valve decisions and pump/lights
  fractions. It is a function of the observation only, so it costs one batched call.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from policy.baselines import ThresholdExpert

SINGLE_VALVE_PUMP_CAP = 85.0
"""Pump % allowed with exactly one valve open: one valve at full speed leaves ~91 % of shut-off
head (relief at 90 %), so the cap keeps a margin for pump wear and valve lag."""


def interlock(action: torch.Tensor, zones: int, single_valve_cap: float = SINGLE_VALVE_PUMP_CAP) -> torch.Tensor:
    """Action [B, zones + 2] with the pump forced to 0 when every valve is closed and capped at
    ``single_valve_cap`` when exactly one is open. Pure: returns a new tensor."""
    n_open = (action[:, :zones] >= 0.5).sum(dim=1)
    pump = action[:, zones]
    pump = torch.where(n_open == 0, torch.zeros_like(pump),
                       torch.where(n_open == 1, pump.clamp(max=single_valve_cap), pump))
    return torch.cat([action[:, :zones], pump[:, None], action[:, zones + 1:]], dim=1)


class ExpertPrior(NamedTuple):
    """The expert's decision for a batch of observations."""

    valves: torch.Tensor
    """[B, zones] bool: the expert opens the valve."""
    cont: torch.Tensor
    """[B, 2] pump and lights as fractions in [0, 1]."""


@torch.no_grad()
def expert_prior(expert: ThresholdExpert, obs: torch.Tensor) -> ExpertPrior:
    """The expert's valves and pump/lights fractions for raw observations [B, obs_dim]."""
    action = expert(obs)
    return ExpertPrior(action[:, : expert.zones] >= 0.5, action[:, expert.zones:] / 100.0)
