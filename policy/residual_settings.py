"""The residual policy's settings as one named value, and how a checkpoint stores them.

A residual policy adjusts a :class:`~policy.baselines.ThresholdExpert`'s decision; the expert, its
valve prior and the lamp switch are part of the policy, so a checkpoint must carry them. They are
stored as the ``residual_cfg`` float64 buffer of :class:`~policy.networks.ActorCritic` (a tensor in
the state_dict, so saving, loading and moving devices need nothing of their own); this module is the
only reader and writer of that buffer's layout: :data:`SLOTS` names each position.

Older checkpoints hold shorter buffers, each a prefix of today's layout, so loading one appends the
defaults of the slots it lacks (:func:`complete_stored`): 5 slots were written before break-even
lighting (their expert lit by the price-blind rule), 8 before the lamp switch (lamps on a Beta).
"""

from __future__ import annotations

import dataclasses

import torch

from policy.baselines import ThresholdExpert

PRICE_BLIND_C0 = -1.0
"""The stored ``c0`` of an expert without break-even lighting: a negative c0 (never a valid one)
stands for the growers' price-blind rule, and keeps the buffer equal to itself (NaN would not)."""


@dataclasses.dataclass(frozen=True)
class ResidualSettings:
    """What a residual policy adjusts and how strongly it starts out trusting it."""

    enabled: bool = False
    """Residual mode: the head adjusts the expert; False: a plain policy (the other fields unused)."""
    refill: float = 0.0
    stop: float = 0.0
    pump_pct: float = 0.0
    prior_logit: float = 0.0
    """Valve logit given to the expert's choice (:func:`policy.networks.action_parameters`)."""
    c0: float = PRICE_BLIND_C0
    """Break-even coefficient; negative (:data:`PRICE_BLIND_C0`): the price-blind growers' rule."""
    par_sat: float = ThresholdExpert.par_sat
    h_max: float = ThresholdExpert.h_max
    lamp_logit: float = 0.0
    """The lamp switch's logit; 0: lamps on a Beta like the pump."""

    @classmethod
    def of_expert(cls, expert: ThresholdExpert, prior_logit: float,
                  lamp_logit: float = 0.0) -> ResidualSettings:
        """The settings of a residual policy around ``expert``."""
        return cls(True, expert.refill, expert.stop, expert.pump_pct, prior_logit,
                   PRICE_BLIND_C0 if expert.c0 is None else expert.c0, expert.par_sat, expert.h_max,
                   lamp_logit)

    def expert(self, zones: int) -> ThresholdExpert | None:
        """The expert these settings describe for ``zones`` zones (None for a plain policy)."""
        if not self.enabled:
            return None
        return ThresholdExpert(zones=zones, refill=self.refill, stop=self.stop, pump_pct=self.pump_pct,
                               c0=None if self.c0 < 0.0 else self.c0, par_sat=self.par_sat, h_max=self.h_max)

    @property
    def switch_logit(self) -> float | None:
        """The lamp switch's logit, or None where the lamps are a Beta (a plain policy has no switch)."""
        return self.lamp_logit if self.enabled and self.lamp_logit > 0.0 else None

    def to_tensor(self, dtype: torch.dtype = torch.float64,
                  device: torch.device | str | None = None) -> torch.Tensor:
        """The stored buffer: one value per :data:`SLOTS` entry, in that order."""
        return torch.tensor([float(getattr(self, name)) for name in SLOTS], dtype=dtype, device=device)

    @classmethod
    def from_tensor(cls, stored: torch.Tensor) -> ResidualSettings:
        """The settings a current-layout buffer holds (an older one goes through :func:`complete_stored`)."""
        if tuple(stored.shape) != (len(SLOTS),):
            raise ValueError(f"residual settings hold {len(SLOTS)} values, got a buffer of shape "
                             f"{tuple(stored.shape)}")
        values = dict(zip(SLOTS, stored.tolist(), strict=True))
        return cls(**{**values, "enabled": values["enabled"] > 0.5})


SLOTS = tuple(f.name for f in dataclasses.fields(ResidualSettings))
"""The buffer's layout: each position's setting, in stored order."""
OLDER_LENGTHS = (5, 8)
"""Buffer lengths of older checkpoints: before break-even lighting, before the lamp switch."""


def complete_stored(stored: torch.Tensor | None) -> torch.Tensor:
    """A stored buffer in today's layout: a missing one (written before residual mode) is a plain
    policy's, an older one gets the defaults of the slots it lacks appended (same dtype and device);
    any other shape is returned as is, for the state_dict's own shape check to refuse."""
    if stored is None:
        return ResidualSettings().to_tensor()
    if stored.ndim != 1 or stored.shape[0] not in OLDER_LENGTHS:
        return stored
    tail = ResidualSettings().to_tensor(stored.dtype, stored.device)[stored.shape[0]:]
    return torch.cat([stored, tail])
