from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest
import torch

from policy.ensemble import Ensemble
from policy.explain import (
    KEPT_FEATURES,
    ExplanationHistory,
    decision_score,
    ensemble_score_fn,
    explain,
    integrated_gradients,
    is_low_confidence,
    neutral_baseline,
    saliency_over_time,
    typical_observation,
)
from policy.networks import ActorCritic
from twin.spec import FEATURES, ObservationSpec

ZONES = 6
SPEC = ObservationSpec(ZONES)
D = SPEC.dim
M2 = SPEC.slices["moisture"].start + 2



def sample_obs(n: int, seed: int = 0) -> np.ndarray:
    """Plausible observations: values inside the spec's ranges, target bands 0.06 wide."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(SPEC.low, SPEC.high, size=(n, D)).astype(np.float32)
    s = SPEC.slices
    lo = rng.uniform(0.15, 0.30, size=(n, ZONES))
    x[:, s["target_low"]], x[:, s["target_high"]] = lo, lo + 0.06
    x[:, s["moisture"]] = rng.uniform(0.05, 0.45, size=(n, ZONES))
    x[:, s["valve_open"]] = rng.integers(0, 2, size=(n, ZONES))
    hour = rng.uniform(0, 2 * np.pi, size=n)
    x[:, s["hour_sin"]], x[:, s["hour_cos"]] = np.sin(hour)[:, None], np.cos(hour)[:, None]
    return x


def fit_normaliser(agent: ActorCritic) -> None:
    """Centre of each feature's range, a quarter of the range as std: as if trained on the twin."""
    with torch.no_grad():
        agent.obs_rms.mean.copy_(torch.from_numpy((SPEC.low + SPEC.high) / 2.0))
        agent.obs_rms.var.copy_(torch.from_numpy(((SPEC.high - SPEC.low) / 4.0) ** 2))
        agent.obs_rms.count.fill_(1000.0)


def member(seed: int, *, fitted: bool = True, head_std: float | None = 1.0) -> ActorCritic:
    torch.manual_seed(seed)
    agent = ActorCritic(D, ZONES, hidden=16)
    if fitted:
        fit_normaliser(agent)
    if head_std is not None:
        with torch.no_grad():
            agent.actor_head.weight.normal_(0.0, head_std)
    return agent


def moisture2_only(seed: int) -> ActorCritic:
    """Every actor input weight zero except moisture[2]'s: it alone drives the action."""
    agent = member(seed, head_std=2.0)
    with torch.no_grad():
        first = agent.actor_torso[0]
        assert isinstance(first, torch.nn.Linear)
        first.weight.zero_()
        first.weight[:, M2] = torch.linspace(-3.0, 3.0, first.out_features)
        first.bias.zero_()
    return agent


def dry_zone2(seed: int = 1) -> np.ndarray:
    x = sample_obs(1, seed)[0]
    x[M2] = x[SPEC.slices["target_low"]][2] - 0.15
    return x


def test_ig_is_exact_for_a_quadratic_and_runs_one_batched_pass() -> None:
    calls: list[tuple[int, ...]] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        calls.append(tuple(x.shape))
        return (x**2).sum(dim=1)

    obs, base = torch.tensor([1.0, -2.0, 3.0]), torch.tensor([0.5, 0.0, 3.0])
    attr = integrated_gradients(f, obs, base, steps=8)
    # The midpoint rule integrates a linear gradient exactly: attribution_i = x_i^2 - b_i^2.
    assert torch.allclose(attr, obs**2 - base**2, atol=1e-5)
    assert calls == [(8 + 2, 3)]  # the path and both endpoints, in one call
    with pytest.raises(ValueError, match="shape"):
        integrated_gradients(f, obs[None], base[None])


def test_neutral_baseline_moves_moisture_to_band_centre_and_keeps_context() -> None:
    x = sample_obs(1)[0]
    typical = (SPEC.low + SPEC.high) / 2.0
    typical[SPEC.slices["co2"]] = 1e6  # out of range: clipped to the spec
    b = neutral_baseline(x, SPEC, typical)
    s = SPEC.slices
    assert np.allclose(b[s["moisture"]], (x[s["target_low"]] + x[s["target_high"]]) / 2)
    for f in FEATURES:
        if f.name in KEPT_FEATURES:
            assert np.array_equal(b[s[f.name]], x[s[f.name]]), f.name
    assert np.allclose(b[s["air_temp"]], typical[s["air_temp"]])
    assert float(b[s["co2"]][0]) == pytest.approx(SPEC.high[s["co2"]][0])
    untouched = neutral_baseline(x, SPEC)  # no typical values: only moisture moves
    assert np.array_equal(np.delete(untouched, np.r_[s["moisture"]]), np.delete(x, np.r_[s["moisture"]]))
    assert neutral_baseline(sample_obs(4), SPEC).shape == (4, D)
    with pytest.raises(ValueError, match="features"):
        neutral_baseline(x[:-1], SPEC)


def test_typical_observation_is_none_for_an_unfitted_normaliser() -> None:
    assert typical_observation([member(0, fitted=False)]) is None
    typical = typical_observation([member(0), member(1)])
    assert typical is not None and np.allclose(typical, (SPEC.low + SPEC.high) / 2, rtol=1e-6)


def test_one_feature_driving_the_action_is_ranked_first() -> None:
    ens = Ensemble([moisture2_only(k) for k in range(3)], "test")
    x = dry_zone2()
    e = explain(ens, x, confidence=0.8)
    assert e.top[0].feature == "moisture[2]"
    assert e.top[0].share_pct > 90.0
    assert e.top[0].unit == "m3/m3"
    assert e.top[0].value == pytest.approx(float(x[M2]))
    assert "zone 2 moisture" in e.top[0].sentence and "below its target band" in e.top[0].sentence
    # Nothing else is wired in, so the whole attribution is moisture[2]'s.
    assert len(e.top) == 1 and e.top[0].share_pct == pytest.approx(100.0)
    # Completeness: the attributions add up to the score change from the baseline.
    base = neutral_baseline(x, SPEC, typical_observation(ens.members))
    attr = integrated_gradients(ensemble_score_fn(ens.members), torch.tensor(x), torch.tensor(base))
    gap = e.score - e.baseline_score
    assert abs(gap) > 1e-2
    assert float(attr.sum()) == pytest.approx(gap, rel=0.05)


def test_completeness_on_a_random_ensemble() -> None:
    members = [member(k) for k in range(5)]
    fn = ensemble_score_fn(members)
    for seed in range(3):
        x = sample_obs(1, seed)[0]
        base = neutral_baseline(x, SPEC, typical_observation(members))
        attr = integrated_gradients(fn, torch.tensor(x), torch.tensor(base), steps=32)
        with torch.no_grad():
            fx, fb = fn(torch.tensor(np.stack([x, base]))).tolist()
        assert float(attr.sum()) == pytest.approx(fx - fb, rel=0.05, abs=1e-4)


def test_ensemble_attribution_is_the_member_mean() -> None:
    members = [member(k) for k in range(3)]
    x = torch.tensor(sample_obs(1, 5)[0])
    b = torch.tensor(neutral_baseline(x.numpy(), SPEC, typical_observation(members)))
    mean = integrated_gradients(ensemble_score_fn(members), x, b)
    each = torch.stack([integrated_gradients(partial(decision_score, m), x, b) for m in members])
    assert torch.allclose(mean, each.mean(dim=0), atol=1e-5)


def test_explanation_of_a_fresh_ensemble_is_readable_and_json_serialisable() -> None:
    ens = Ensemble([member(k, fitted=k % 2 == 0, head_std=None) for k in range(5)], "fresh")
    x = sample_obs(1, 2)[0]
    e = explain(ens, x, confidence=0.42)
    assert e.confidence == 0.42 and e.members == 5 and len(e.top) == 3
    shares = [f.share_pct for f in e.top]
    assert shares == sorted(shares, reverse=True) and sum(shares) <= 100.0 + 1e-6
    for f in e.top:
        assert f.unit in f.sentence and f.sentence.endswith(" %") and f"{f.share_pct:.0f} %" in f.sentence
        i = SPEC.names.index(f.feature)
        assert f.value == pytest.approx(float(x[i]))
    d = json.loads(json.dumps(e.to_dict()))
    assert d["confidence"] == 0.42 and len(d["top"]) == 3 and set(d["top"][0]) >= {
        "feature", "value", "unit", "delta_vs_baseline", "share_pct", "sentence"}


def test_non_moisture_sentences_name_the_reference() -> None:
    ens = Ensemble([member(k, head_std=3.0) for k in range(2)], "test")
    x = sample_obs(1, 7)[0]
    x[SPEC.slices["moisture"]] = (x[SPEC.slices["target_low"]] + x[SPEC.slices["target_high"]]) / 2
    e = explain(ens, x, confidence=0.5)  # moisture in band: the other features explain the decision
    assert e.top and all(not f.feature.startswith("moisture") for f in e.top)
    assert all("the reference" in f.sentence for f in e.top)


def test_an_observation_equal_to_its_baseline_has_no_factors() -> None:
    ens = Ensemble([member(0)], "test")
    x = sample_obs(1, 3)[0]
    e = explain(ens, x, confidence=1.0, baseline=x)
    assert e.top == () and e.score == pytest.approx(e.baseline_score)


def test_explain_rejects_wrong_shapes() -> None:
    ens = Ensemble([member(0)], "test")
    with pytest.raises(ValueError, match="shape"):
        explain(ens, sample_obs(2), confidence=0.5)


def test_saliency_over_time_gives_one_row_per_step() -> None:
    members = [member(k) for k in range(3)]
    ens = Ensemble(members, "test")
    history = sample_obs(10, 9)
    sal = saliency_over_time(ens, history, steps=16)
    assert sal.shape == (10, D) and sal.dtype == np.float32 and np.isfinite(sal).all()
    base = neutral_baseline(history[4], SPEC, typical_observation(members))
    row = integrated_gradients(ensemble_score_fn(members), torch.tensor(history[4]), torch.tensor(base),
                               steps=16)
    assert np.allclose(sal[4], row.numpy(), atol=1e-5)
    assert saliency_over_time(ens, history[:0]).shape == (0, D)
    with pytest.raises(ValueError, match="history"):
        saliency_over_time(ens, history[:, :-1])


def test_history_keeps_the_last_ten_pairs_per_greenhouse() -> None:
    h = ExplanationHistory()
    for t in range(15):
        obs = np.full(D, t, dtype=np.float32)
        h.record("gh-a", obs, np.full(ZONES + 2, t))
        obs[:] = -1  # the caller reusing its buffer must not rewrite history
    h.record("gh-b", np.zeros(D), np.zeros(ZONES + 2))
    obs, actions = h.snapshot("gh-a")
    assert obs.shape == (10, D) and actions.shape == (10, ZONES + 2)
    assert obs[:, 0].tolist() == list(range(5, 15)) and actions[-1, 0] == 14
    assert h.snapshot("gh-b")[0].shape == (1, D) and len(h) == 2
    assert h.snapshot("unknown")[0].shape[0] == 0
    assert is_low_confidence(0.59) and not is_low_confidence(0.6)
    with pytest.raises(ValueError):
        ExplanationHistory(maxlen=0)


@pytest.mark.parametrize("feature", ["price[+0h]", "forecast_solar[+3h]", "dli_natural_tomorrow"])
def test_an_outlook_feature_can_lead_the_explanation(feature: str) -> None:
    """Prices and the weather ahead move in the baseline like the state, so a decision they drive names
    them."""
    i = SPEC.names.index(feature)

    def only_outlook(seed: int) -> ActorCritic:
        agent = member(seed, head_std=2.0)
        with torch.no_grad():
            first = agent.actor_torso[0]
            assert isinstance(first, torch.nn.Linear)
            first.weight.zero_()
            first.weight[:, i] = torch.linspace(-3.0, 3.0, first.out_features)
            first.bias.zero_()
        return agent

    ens = Ensemble([only_outlook(k) for k in range(3)], "test")
    x = sample_obs(1, 3)[0]
    x[i] = SPEC.high[i] * 0.9  # far from the typical (mid-range) value
    e = explain(ens, x, confidence=0.9)
    assert e.top[0].feature == feature and e.top[0].share_pct > 90.0
    assert "above the reference" in e.top[0].sentence
