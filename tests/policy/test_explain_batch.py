"""Batched serving paths against their one-at-a-time references.

The service decides a micro-batch of greenhouses with one ensemble forward and explains it
with one integrated-gradients pass; both must give what asking one observation at a time gives.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from policy.baselines import ThresholdExpert
from policy.ensemble import Ensemble, act_stacked, load_ensemble
from policy.explain import explain, explain_many, saliency_many, saliency_over_time
from policy.networks import ActorCritic
from twin.spec import ObservationSpec

ZONES = 6
SPEC = ObservationSpec(ZONES)
SHIPPED = Path(__file__).resolve().parents[2] / "policy" / "shipped"


def sample_obs(n: int, seed: int) -> np.ndarray:
    """Observations inside the spec's ranges with plausible target bands and hours."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(SPEC.low, SPEC.high, size=(n, SPEC.dim)).astype(np.float32)
    s = SPEC.slices
    lo = rng.uniform(0.15, 0.30, size=(n, ZONES))
    x[:, s["target_low"]], x[:, s["target_high"]] = lo, lo + 0.06
    x[:, s["moisture"]] = rng.uniform(0.05, 0.45, size=(n, ZONES))
    x[:, s["valve_open"]] = rng.integers(0, 2, size=(n, ZONES))
    hour = rng.uniform(0, 2 * np.pi, size=n)
    x[:, s["hour_sin"]], x[:, s["hour_cos"]] = np.sin(hour)[:, None], np.cos(hour)[:, None]
    return x


def member(seed: int, *, residual: bool) -> ActorCritic:
    torch.manual_seed(seed)
    agent = ActorCritic(SPEC.dim, ZONES, hidden=16, residual=ThresholdExpert(refill=0.1 * (seed % 3 + 1))
                        if residual else None)
    with torch.no_grad():
        agent.actor_head.weight.normal_(0.0, 1.0)
        agent.obs_rms.mean.copy_(torch.from_numpy((SPEC.low + SPEC.high) / 2.0))
        agent.obs_rms.var.copy_(torch.from_numpy(((SPEC.high - SPEC.low) / 4.0) ** 2))
    return agent


@pytest.fixture(scope="module")
def shipped() -> Ensemble:
    return load_ensemble(SHIPPED)


@pytest.mark.parametrize("residual", [False, True])
def test_stacked_forward_is_bit_identical_to_each_members_act(residual: bool) -> None:
    members = [member(k, residual=residual) for k in range(4)]  # residual: two different experts
    for n in (1, 7):
        x = torch.from_numpy(sample_obs(n, seed=n))
        expected = torch.stack([m.act(x) for m in members])
        got = act_stacked(members, x)
        # Valve decisions exactly; pump and lights to the last bits only: on some CPUs the matrix
        # kernels block rows by the batch size, and the stacked forward runs K x N rows at once.
        assert torch.equal(got[..., :ZONES], expected[..., :ZONES])
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-5)


def test_shipped_ensemble_proposes_as_its_members_act(shipped: Ensemble) -> None:
    x = sample_obs(9, seed=3)
    with torch.no_grad():
        expected = np.stack([m.act(torch.from_numpy(x)).numpy() for m in shipped.members])
    got = shipped.propose_many(x)
    expected = np.clip(expected, 0.0, np.array([1.0] * ZONES + [100.0, 100.0], np.float32))
    # Stacked (K, N) matmuls and per-member ones may round apart in the last bits; valves may not.
    assert np.array_equal(got[..., :ZONES], expected[..., :ZONES])
    np.testing.assert_allclose(got[..., ZONES:], expected[..., ZONES:], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(shipped.propose(x[4]), got[:, 4], atol=1e-4)  # a batch of one may round apart
    with pytest.raises(ValueError, match="batch"):
        shipped.propose_many(x[0])


def test_members_that_cannot_be_stacked_fall_back_to_act() -> None:
    mixed = Ensemble([member(0, residual=True), member(1, residual=False)], "mixed")
    x = sample_obs(3, seed=1)
    with torch.no_grad():
        expected = np.stack([m.act(torch.from_numpy(x)).numpy() for m in mixed.members])
    assert np.array_equal(mixed.propose(x), np.clip(expected, mixed._low, mixed._high))
    assert mixed._stacked is False


def test_batched_explanations_equal_single_ones(shipped: Ensemble) -> None:
    x = sample_obs(6, seed=11)
    confidences = [0.9, 0.5, 1.0, 0.7, 0.66, 0.3]
    batched = explain_many(shipped, x, confidences)
    assert len(batched) == 6
    for obs, conf, got in zip(x, confidences, batched, strict=True):
        one = explain(shipped, obs, conf).to_dict()
        many = got.to_dict()
        assert [f["feature"] for f in many["top"]] == [f["feature"] for f in one["top"]]
        for a, b in zip(many["top"], one["top"], strict=True):
            assert a["attribution"] == pytest.approx(b["attribution"], rel=1e-3, abs=1e-6)
            assert a["share_pct"] == pytest.approx(b["share_pct"], abs=1e-2)
            assert a["value"] == b["value"] and a["unit"] == b["unit"]
        for key in ("score", "baseline_score", "attributed"):
            assert many[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6)
        assert (many["confidence"], many["members"], many["steps"]) == (conf, one["members"], one["steps"])
    assert explain_many(shipped, x[:0], []) == []
    with pytest.raises(ValueError, match="confidences"):
        explain_many(shipped, x, [0.5])


def test_batched_saliency_equals_one_history_at_a_time(shipped: Ensemble) -> None:
    histories = [sample_obs(t, seed=20 + t) for t in (1, 4, 10)]
    batched = saliency_many(shipped, histories)
    for h, got in zip(histories, batched, strict=True):
        np.testing.assert_allclose(got, saliency_over_time(shipped, h), rtol=1e-4, atol=1e-6)
    assert [s.shape for s in saliency_many(shipped, [histories[0][:0], histories[1]])] == [(0, SPEC.dim),
                                                                                            (4, SPEC.dim)]
