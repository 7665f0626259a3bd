"""Paired comparison of two controllers scenario by scenario, with a bootstrap confidence interval.

Every controller of an evaluation runs on the same scenarios (same weather, soils, prices and
faults), so the question "is A better than B" is about the per-scenario differences, not about
two independent means: the scenario-to-scenario spread (a dark winter month against a bright
summer one) cancels out of the difference. The interval resamples scenarios with replacement
(percentile bootstrap, Efron & Tibshirani 1993, ch. 13) from a seeded generator, so a report
prints the same interval every time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["PairedDifference", "paired_bootstrap"]


@dataclass(frozen=True)
class PairedDifference:
    """Mean of ``a - b`` over paired scenarios and its bootstrap confidence interval."""

    mean: float
    low: float
    high: float
    n: int
    level: float

    def as_dict(self) -> dict[str, float | int]:
        return {"mean": self.mean, "ci_low": self.low, "ci_high": self.high, "scenarios": self.n,
                "level": self.level}

    def __str__(self) -> str:
        pct = f"{100.0 * self.level:g} %"
        return f"{self.mean:+.3f} ({pct} CI {self.low:+.3f} .. {self.high:+.3f}, {self.n} scenarios)"


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, level: float = 0.95, resamples: int = 10_000,
                     seed: int = 0) -> PairedDifference:
    """Mean difference ``a - b`` of paired values and its percentile bootstrap interval at ``level``.

    ``a[i]`` and ``b[i]`` must come from the same scenario. The same inputs and ``seed`` give the
    same interval.
    """
    x = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if np.shape(a) != np.shape(b) or x.ndim != 1:
        raise ValueError(f"paired values must be two equal-length sequences, got {np.shape(a)} and "
                         f"{np.shape(b)}")
    if x.size == 0:
        raise ValueError("no paired values to compare")
    if not np.all(np.isfinite(x)):
        raise ValueError("paired values must be finite")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return PairedDifference(float(x.mean()), float(low), float(high), int(x.size), level)

