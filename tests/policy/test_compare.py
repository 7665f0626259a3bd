from __future__ import annotations

import numpy as np
import pytest

from policy.compare import paired_bootstrap


def test_a_constant_difference_has_a_zero_width_interval() -> None:
    a = [3.0, 7.5, -1.0, 12.0]
    d = paired_bootstrap(a, [x - 0.25 for x in a], resamples=500)
    assert d.mean == pytest.approx(0.25) and d.low == pytest.approx(0.25) and d.high == pytest.approx(0.25)
    assert d.n == 4 and d.level == 0.95


def test_two_scenarios_give_the_exact_bootstrap_distribution() -> None:
    """Differences {0, 2}: a resampled mean is 0, 1 or 2 with probabilities 1/4, 1/2, 1/4, so the
    2.5 and 97.5 percentiles are exactly 0 and 2, and the 80 % interval is still 0 .. 2 (the
    10th percentile lies inside the quarter of zeros)."""
    d = paired_bootstrap([0.0, 2.0], [0.0, 0.0], resamples=20_000, seed=3)
    assert (d.mean, d.low, d.high) == (1.0, 0.0, 2.0)
    narrow = paired_bootstrap([0.0, 2.0], [0.0, 0.0], level=0.4, resamples=20_000, seed=3)
    assert (narrow.low, narrow.high) == (1.0, 1.0)  # 30th and 70th percentiles fall in the middle half


def test_a_large_sample_matches_the_normal_interval() -> None:
    """400 paired differences of 0 or 1, half each: the mean's standard error is 0.5/sqrt(400) =
    0.025, so the 95 % interval is 0.5 -+ 1.96 x 0.025 = 0.451 .. 0.549 (central limit theorem)."""
    diff = np.tile([0.0, 1.0], 200)
    d = paired_bootstrap(diff, np.zeros_like(diff), resamples=20_000, seed=1)
    assert d.mean == 0.5
    assert d.low == pytest.approx(0.451, abs=0.006) and d.high == pytest.approx(0.549, abs=0.006)


def test_seeded_and_sensitive_to_the_seed() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=30), rng.normal(size=30)
    assert paired_bootstrap(a, b, seed=7) == paired_bootstrap(a, b, seed=7)
    assert paired_bootstrap(a, b, seed=7).low != paired_bootstrap(a, b, seed=8).low


def test_pairing_removes_the_shared_spread() -> None:
    """Scenario-to-scenario spread much larger than the effect cancels out of the paired difference."""
    base = np.linspace(-100.0, 100.0, 20)
    d = paired_bootstrap(base + 1.0 + 0.01 * np.sin(np.arange(20)), base)
    assert 0.99 < d.low <= d.mean <= d.high < 1.01


@pytest.mark.parametrize(("a", "b", "kw", "match"), [
    ([1.0, 2.0], [1.0], {}, "equal-length"),
    ([], [], {}, "no paired"),
    ([1.0, float("nan")], [0.0, 0.0], {}, "finite"),
    ([1.0], [0.0], {"level": 1.0}, "level"),
    ([1.0], [0.0], {"resamples": 0}, "resamples"),
])
def test_bad_input_is_refused(a, b, kw, match) -> None:
    with pytest.raises(ValueError, match=match):
        paired_bootstrap(a, b, **kw)
