"""Residual-on-expert helpers: the pump interlock and the batched expert prior.

* :func:`interlock` is the tiny deterministic rule every action passes before it reaches the
  twin, in training rollouts and in :meth:`ActorCritic.act` alike: no pump without an open
  valve (dead-heading), a capped pump with a single open valve (relief valve), no command to
  a valve known to have failed, and never the pump on a single valve (a second one is opened
  with it). The last rule is what keeps a valve that sticks closed unseen from dead-heading
  the pump for a whole 10-minute step: feedback only tells after the step. The runtime's safety clipper
  enforces ``pump.needs_open_valve`` too; this makes training see the plant it is served on.
* :func:`expert_prior` runs the (tuned) :class:`ThresholdExpert` on raw observations and
  returns what a residual policy starts from: per-zone valve decisions and pump/lights
  fractions. It is a function of the observation only, so it costs one batched call.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from policy.baselines import ThresholdExpert
from safety.interlock import DARK_PERIOD_H, SINGLE_VALVE_PUMP_CAP
from safety.limits import PUMP_MIN_RUNNING_PCT
from twin.config import DEFAULT_ZONES, in_window
from twin.spec import observation_spec


def interlock(action: torch.Tensor, zones: int, obs: torch.Tensor | None = None,
              single_valve_cap: float = SINGLE_VALVE_PUMP_CAP,
              min_running: float = PUMP_MIN_RUNNING_PCT,
              dark: tuple[float, float] = DARK_PERIOD_H) -> torch.Tensor:
    """Action [B, zones + 2] with the pump forced to 0 when every valve is closed, raised to
    ``min_running`` when it runs slower (the clipper's minimum speed) and capped at
    ``single_valve_cap`` when exactly one valve is open. With the observation, failed valves
    are closed, the pump never runs on a single path (see :func:`two_paths`) and the lamps are
    off in the ``dark`` local window (the observation's clock tells the hour). Pure.

    The minimum speed matters to learning, not only to the plant: the reward barely changes with
    pump speed (behind this interlock the served threshold scores 0.7037 at 70 %, 0.7041 at 25 %,
    0.7040 at 10 % on six held-out scenarios), so PPO follows the small energy saving down, and
    without a floor it reached 3-4 %, where the flow no longer keeps up with the crop."""
    lights = action[:, zones + 1:]
    if obs is not None:
        action = two_paths(action, obs, zones)
        lights = torch.where(_dark(obs, zones, dark)[:, None], torch.zeros_like(lights), lights)
    n_open = (action[:, :zones] >= 0.5).sum(dim=1)
    pump = action[:, zones]
    pump = torch.where(pump > 0.0, pump.clamp(min=min_running), pump)  # a running pump runs at min or more
    pump = torch.where(n_open == 0, torch.zeros_like(pump),
                       torch.where(n_open == 1, pump.clamp(max=single_valve_cap), pump))
    return torch.cat([action[:, :zones], pump[:, None], lights], dim=1)


def _dark(obs: torch.Tensor, zones: int, dark: tuple[float, float]) -> torch.Tensor:
    """[B] bool: the observation's local hour lies in the dark window (as
    :func:`safety.interlock.hour_from_phase`, rounded to the minute)."""
    sl = observation_spec(zones).slices
    hour = torch.atan2(obs[:, sl["hour_sin"].start], obs[:, sl["hour_cos"].start]) * (12.0 / torch.pi) % 24.0
    hour = torch.floor(hour * 60.0 + 0.5) / 60.0 % 24.0
    return in_window(hour, *dark)


def two_paths(action: torch.Tensor, obs: torch.Tensor, zones: int) -> torch.Tensor:
    """Close valves known to have failed; with the pump on and a single valve left, open a second.

    A valve can stick closed at any step, and feedback only tells after the step: a pump on one
    valve then runs dead-headed for a whole step. With two paths one stuck valve leaves the
    other. The second valve is the healthy closed zone lowest in its target band (the next to
    need water anyway), so its water comes a little early rather than wasted.
    """
    sl = observation_spec(zones).slices
    failed = obs[:, sl["valve_failed"]] >= 0.5
    valves = (action[:, :zones] >= 0.5) & ~failed
    single = (action[:, zones] > 0.0) & (valves.sum(dim=1) == 1)
    if zones >= 2 and bool(single.any()):
        low, high = obs[:, sl["target_low"]], obs[:, sl["target_high"]]
        level = (obs[:, sl["moisture"]] - low) / (high - low).clamp(min=1e-3)
        level = torch.where(valves | failed, torch.full_like(level, float("inf")), level)
        best, second = level.min(dim=1)
        extra = (torch.nn.functional.one_hot(second, zones).to(torch.bool)
                 & (single & torch.isfinite(best))[:, None])
        valves = valves | extra
    return torch.cat([valves.to(action.dtype), action[:, zones:]], dim=1)


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


class Interlocked:
    """A batched controller ``obs -> action`` (numpy or torch) behind :func:`interlock`, as the
    service runs every proposal; returns numpy."""

    def __init__(self, controller: Any, zones: int = DEFAULT_ZONES) -> None:
        self.controller = controller
        self.zones = zones

    def __call__(self, obs: Any) -> np.ndarray:
        action = torch.as_tensor(np.asarray(self.controller(obs)), dtype=torch.float32)
        return interlock(action, self.zones, torch.as_tensor(np.asarray(obs), dtype=torch.float32)).numpy()
