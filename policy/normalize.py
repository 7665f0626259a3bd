"""Running statistics for observation normalisation and reward scaling.

PPO is sensitive to input and reward scale; the twin's observations span ppm, W/m2 and
m3/m3, and reward scales differ between greenhouses. Both are tracked with a batched
Welford/Chan update so a whole rollout updates the statistics in one call.
"""

from __future__ import annotations

import torch
from torch import nn


class RunningMeanStd(nn.Module):
    """Running mean and variance over the leading axis, kept in buffers (saved in state_dict)."""

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: tuple[int, ...], epsilon: float = 1e-4) -> None:
        super().__init__()
        # float64 so millions of updates do not drift; count starts at epsilon to avoid 0/0.
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge a batch ``x`` of shape [N, *shape] into the running statistics (Chan et al.)."""
        x = x.reshape(-1, *self.mean.shape).to(torch.float64)
        n = x.shape[0]
        if n == 0:
            return
        batch_mean = x.mean(dim=0)
        batch_var = x.var(dim=0, unbiased=False)
        delta = batch_mean - self.mean
        total = self.count + n
        m2 = self.var * self.count + batch_var * n + delta.square() * self.count * n / total
        self.mean.add_(delta * n / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`normalize`: the normaliser as the first layer of a network."""
        return self.normalize(x)

    def normalize(self, x: torch.Tensor, clip: float = 10.0, eps: float = 1e-8) -> torch.Tensor:
        """(x - mean) / std, clipped so one outlier reading cannot saturate the network."""
        mean = self.mean.to(x.dtype)
        std = torch.sqrt(self.var.to(x.dtype) + eps)
        return ((x - mean) / std).clamp(-clip, clip)


class InstanceRewardScaler:
    """Divide each instance's rewards by its own running std of the discounted return.

    One std per instance slot (not one for the batch), so greenhouses with large reward
    magnitudes do not dominate the gradient of those with small ones.
    """

    def __init__(self, num_envs: int, gamma: float, device: str | torch.device = "cpu") -> None:
        self.gamma = gamma
        self.stats = RunningMeanStd((num_envs,)).to(device)
        self.returns = torch.zeros(num_envs, dtype=torch.float64, device=device)

    @torch.no_grad()
    def __call__(self, rewards: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        """Scale a rollout of rewards [T, B]; ``dones`` [T, B] restarts the discounted return."""
        discounted = torch.empty_like(rewards, dtype=torch.float64)
        for t in range(rewards.shape[0]):  # loop over time only; every instance at once
            self.returns = self.returns * self.gamma + rewards[t].to(torch.float64)
            discounted[t] = self.returns
            self.returns = torch.where(dones[t], torch.zeros_like(self.returns), self.returns)
        self.stats.update(discounted)
        std = torch.sqrt(self.stats.var + 1e-8).to(rewards.dtype)
        return rewards / std
