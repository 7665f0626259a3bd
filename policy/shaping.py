"""Potential-based reward shaping with the fruit the crop's carbohydrate buffer will become.

A lamp hour's light enters the crop's buffer at once but reaches the fruit, where the reward pays
for it, over the next day. GAE at gamma-lambda 0.949 per 10-minute step forgets within about three
hours, so the credit a lit step gets is mostly its electricity bill. Shaping with
F = gamma Phi(s') - Phi(s) (Ng, Harada and Russell 1999) pays the buffer's fruit value when the
light is caught and takes it back as the buffer empties into fruit, which the reward then pays:
the optimal policy is unchanged, and the credit arrives where the decision was made.

Phi is read from the observation alone (the carbohydrate buffer, the 24-h canopy temperature, the
temperature sum and the scenario's fruit price), in the reward's units (EUR/m2 over V_ref), so the
same function serves every twin and needs nothing the critic cannot see. Used in training only.
"""

from __future__ import annotations

import torch

from twin.config import TwinConfig
from twin.crop import buffer_fruit_share
from twin.spec import ObservationSpec


class FruitPotential:
    """Phi(obs) [...] in reward units: the fruit value of the carbohydrate buffer."""

    def __init__(self, config: TwinConfig) -> None:
        spec = ObservationSpec(config.zones)
        self.crop = config.crop_growth
        s = spec.slices
        self.buffer, self.t24, self.t_sum, self.price = (s[k].start for k in ("carb_buffer", "t_can24",
                                                                              "temp_sum", "fruit_price"))
        # g CH2O -> kg fresh fruit (1e-3 kg per g of dry matter, dmc kg DM per kg fresh), over V_ref.
        self.scale = 1e-3 / self.crop.dmc / config.economics.v_ref(config.dt_s)

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        share = buffer_fruit_share(torch, self.crop, obs[..., self.t24], obs[..., self.t_sum])
        return obs[..., self.price] * share * obs[..., self.buffer].clamp_min(0.0) * self.scale


def shaped_rewards(rewards: torch.Tensor, potentials: torch.Tensor, next_potentials: torch.Tensor,
                   terminated: torch.Tensor, gamma: float) -> torch.Tensor:
    """r + gamma Phi(s') - Phi(s) per step [T, B]. ``next_potentials[t]`` is Phi of the observation
    after step t, the pre-reset one where the episode was truncated (its future exists); a terminated
    step's successor is worth nothing, so its potential is 0 (which keeps the shaping policy-invariant)."""
    following = torch.where(terminated, torch.zeros_like(next_potentials), next_potentials)
    return rewards + gamma * following - potentials
