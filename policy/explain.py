"""Why did the ensemble decide this? Integrated-gradients explanations for operators and the audit.

What is explained is one differentiable scalar per observation, :func:`decision_score`:
the sum of the valve-open probabilities (irrigation intent, 0..zones) plus the pump and
lights Beta means on [0, 1]. A single score keeps IG to one backward pass in the control
loop; because IG is linear in the function, the score's attributions are the sum of the
per-actuator ones, so "more water / more pump / more light" all point the same way and a
positive attribution means "this feature pushed the decision towards actuating".

Attributions are taken against :func:`neutral_baseline`: the same observation with every
zone's moisture at the centre of its own target band and the plant-state features at typical
values, while targets, forecasts and time stay. They answer "why act, compared with a
greenhouse whose zones are in band?". The ensemble's attribution is the members' mean
attribution, computed as IG of the mean score (identical, since IG is linear).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike

from policy.ensemble import Ensemble
from policy.networks import ActorCritic
from twin.spec import FEATURES, ObservationSpec

LOW_CONFIDENCE = 0.6
"""The runtime's default: decisions with confidence below this keep a history snapshot."""
TOP_K = 3
KEPT_FEATURES = frozenset({"target_low", "target_high", "hour_sin", "hour_cos", "growth_stage"})
"""Context the baseline never moves: the task (targets), the time and the season. The outlook (weather
forecast, forecast light, prices) moves to its typical values like the state, so an explanation can
name it: lamps planned against tomorrow's prices or a bright afternoon are decided by the outlook. The
crop's state (LAI, fruit load, buffer, temperature sum) moves too: lamps that feed a short buffer name it."""

ModelFn = Callable[[torch.Tensor], torch.Tensor]


# ---- integrated gradients ----------------------------------------------------------------------


def _ig_batch(model_fn: ModelFn, obs: torch.Tensor, baseline: torch.Tensor, steps: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """IG for N observations (N, D): (attributions (N, D), f(obs) (N,), f(baseline) (N,)).

    One forward and one backward of an (N * (steps + 2), D) batch: the path points plus the
    two endpoints, so the completeness check costs no extra forward pass.
    """
    if steps < 1:
        raise ValueError("steps must be >= 1")
    n, d = obs.shape
    # Midpoint rule: error O(1/steps^2) for smooth scores, versus O(1/steps) for the left sum.
    alphas = (torch.arange(steps, dtype=obs.dtype, device=obs.device) + 0.5) / steps
    diff = obs - baseline
    with torch.enable_grad():
        path = (baseline[:, None, :] + alphas[None, :, None] * diff[:, None, :]).reshape(n * steps, d)
        path.requires_grad_(True)
        out = model_fn(torch.cat([path, obs, baseline]))
        (grads,) = torch.autograd.grad(out[: n * steps].sum(), path)
    ends = out[n * steps:].detach()
    return diff * grads.reshape(n, steps, d).mean(dim=1), ends[:n], ends[n:]


def integrated_gradients(model_fn: ModelFn, obs: torch.Tensor, baseline: torch.Tensor,
                         steps: int = 32) -> torch.Tensor:
    """Attributions (D,) of ``model_fn`` ((B, D) -> (B,)) at ``obs`` relative to ``baseline``.

    Completeness: ``attributions.sum() ~= f(obs) - f(baseline)``, up to the Riemann error.
    """
    if obs.ndim != 1 or obs.shape != baseline.shape:
        raise ValueError(f"obs and baseline must both have shape (D,), got {tuple(obs.shape)} and "
                         f"{tuple(baseline.shape)}")
    return _ig_batch(model_fn, obs[None], baseline[None], steps)[0][0]


def decision_score(agent: ActorCritic, obs: torch.Tensor) -> torch.Tensor:
    """Scalar summary (B,) of the policy's intent: sum of P(valve open) + pump mean + lights mean, each in
    [0, 1].

    Probabilities and means, not the thresholded action, so the score is differentiable and
    moves before a valve flips.
    """
    valves, cont = agent.distributions(obs)
    return valves.probs.sum(dim=1) + cont.mean.sum(dim=1)


def ensemble_score_fn(members: Sequence[ActorCritic]) -> ModelFn:
    """The members' mean :func:`decision_score`, on each member's device, returned on the input's."""
    def score(x: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
        for m in members:  # K is small; each member sees the whole path batch at once
            device = next(m.parameters()).device
            total = total + decision_score(m, x.to(device)).to(x.device, x.dtype)
        return total / len(members)
    return score


# ---- baseline ------------------------------------------------------------------------------------


def neutral_baseline(obs: ArrayLike, spec: ObservationSpec, typical: ArrayLike | None = None) -> np.ndarray:
    """The reference observation: moisture at band centre, state features at ``typical``, context kept.

    ``obs`` is (D,) or (T, D). Targets, time of day and growth stage stay as
    observed (:data:`KEPT_FEATURES`); every other non-moisture feature moves to ``typical``
    (D,) if given (e.g. the training mean), else stays too.
    """
    x = np.array(obs, dtype=np.float32, copy=True)
    if x.shape[-1] != spec.dim:
        raise ValueError(f"observation has {x.shape[-1]} features, the layout for {spec.zones} zones has "
                         f"{spec.dim}")
    s = spec.slices
    if typical is not None:
        ref = np.clip(np.asarray(typical, dtype=np.float32), spec.low, spec.high)
        moved = _moved_mask(spec)
        x[..., moved] = np.broadcast_to(ref, x.shape)[..., moved]
    x[..., s["moisture"]] = 0.5 * (x[..., s["target_low"]] + x[..., s["target_high"]])
    return x


@cache
def _moved_mask(spec: ObservationSpec) -> np.ndarray:
    """Indices the baseline sets to typical values: everything but moisture and the kept context."""
    mask = np.zeros(spec.dim, dtype=bool)
    for f in FEATURES:
        if f.name != "moisture" and f.name not in KEPT_FEATURES:
            mask[spec.slices[f.name]] = True
    return mask


def typical_observation(members: Sequence[ActorCritic]) -> np.ndarray | None:
    """The members' mean normaliser mean (the training distribution's centre), or None if never fitted."""
    rms = [m.obs_rms for m in members if float(m.obs_rms.count) > 1.0]
    if not rms:
        return None
    return torch.stack([r.mean.detach().cpu() for r in rms]).mean(dim=0).numpy().astype(np.float32)


# ---- explanation records -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Factor:
    """One observation feature's part in a decision, with a sentence an operator can read."""

    feature: str
    value: float
    unit: str
    delta_vs_baseline: float
    share_pct: float
    """|attribution| as a percentage of the summed |attribution| over all features."""
    attribution: float
    """Signed: > 0 pushed the decision score up (more water, pump or light)."""
    sentence: str
    band_low: float | None = None
    """A zone's moisture: its target band (m3/m3), so the sentence can say in, below or above it in any
    language (:mod:`audit.decision_words`); None for other features."""
    band_high: float | None = None


@dataclass(frozen=True, slots=True)
class Explanation:
    """The top factors behind one ensemble decision, JSON-able for the audit trail."""

    confidence: float
    top: tuple[Factor, ...]
    score: float
    """Members' mean :func:`decision_score` at the observation."""
    baseline_score: float
    attributed: float
    """Sum of all attributions; far from ``score - baseline_score`` means the score jumps on the path
    (e.g. a residual policy's thresholded expert prior) and the factors tell only part of the story."""
    members: int
    steps: int

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of floats, strings and lists (``json.dumps`` takes it as is)."""
        d = asdict(self)
        d["top"] = [dict(f) for f in d["top"]]
        return d


def _fmt(v: float) -> str:
    a = abs(v)
    return (f"{v:.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.2f}" if a >= 0.01 or a == 0
            else f"{v:.1g}")


@cache
def _labels(spec: ObservationSpec) -> tuple[str, ...]:
    """Readable names: 'zone 3 moisture' for per-zone features, the spec's names otherwise."""
    out: list[str] = []
    for f in FEATURES:
        if f.per == "zone":
            out += [f"zone {z} {f.name}" for z in range(spec.zones)]
        else:
            out += list(spec.names[spec.slices[f.name]])
    return tuple(out)


def _sentence(i: int, x: np.ndarray, base: np.ndarray, share: float, spec: ObservationSpec) -> str:
    label, unit, v = _labels(spec)[i], spec.units[i], float(x[i])
    head = f"{label} {_fmt(v)} {unit}"
    s = spec.slices["moisture"]
    if s.start <= i < s.stop:
        z = i - s.start
        lo, hi = float(x[spec.slices["target_low"]][z]), float(x[spec.slices["target_high"]][z])
        if v < lo:
            where = f"{_fmt(lo - v)} below its target band"
        elif v > hi:
            where = f"{_fmt(v - hi)} above its target band"
        else:
            where = f"within its target band {_fmt(lo)}-{_fmt(hi)}"
    else:
        d = v - float(base[i])
        where = f"{_fmt(abs(d))} {'above' if d >= 0 else 'below'} the reference {_fmt(float(base[i]))}"
    return f"{head}, {where}: {share:.0f} %"


def _factors(attr: np.ndarray, x: np.ndarray, base: np.ndarray, spec: ObservationSpec) -> tuple[Factor, ...]:
    mag = np.abs(attr)
    total = float(mag.sum())
    if total <= 0.0 or not np.isfinite(total):
        return ()
    k = min(TOP_K, int(np.count_nonzero(mag)))
    idx = np.argpartition(-mag, k - 1)[:k] if k < mag.size else np.arange(mag.size)
    idx = idx[np.argsort(-mag[idx], kind="stable")]
    out = []
    moisture = spec.slices["moisture"]
    for i in idx.tolist():  # at most TOP_K: the per-feature work is only for the reported ones
        share = 100.0 * float(mag[i]) / total
        band: tuple[float | None, float | None] = (None, None)
        if moisture.start <= i < moisture.stop:
            z = i - moisture.start
            band = (float(x[spec.slices["target_low"]][z]), float(x[spec.slices["target_high"]][z]))
        out.append(Factor(spec.names[i], float(x[i]), spec.units[i], float(x[i] - base[i]), share,
                          float(attr[i]), _sentence(i, x, base, share, spec), *band))
    return tuple(out)


def _spec_for(ensemble: Ensemble) -> ObservationSpec:
    spec = ObservationSpec(ensemble.zones)
    if spec.dim != ensemble.obs_dim:
        raise ValueError(f"ensemble takes {ensemble.obs_dim} features, the layout for {ensemble.zones} zones "
                         f"has {spec.dim}")
    return spec


def _attributions(ensemble: Ensemble, x: np.ndarray, base: np.ndarray, steps: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean-member IG for (N, D) observations against (N, D) baselines, with both endpoint scores."""
    attr, fx, fb = _ig_batch(ensemble_score_fn(ensemble.members), torch.tensor(x), torch.tensor(base), steps)
    return attr.numpy(), fx.numpy(), fb.numpy()


def explain(ensemble: Ensemble, obs: np.ndarray, confidence: float, *, steps: int = 32,
            baseline: np.ndarray | None = None) -> Explanation:
    """Top-3 factors of the ensemble's decision at ``obs`` (D,), against :func:`neutral_baseline` by default.

    ``confidence`` is the vote's (``Decision.confidence``); it is recorded, not recomputed.
    """
    spec = _spec_for(ensemble)
    x = np.asarray(obs, dtype=np.float32)
    if x.shape != (spec.dim,):
        raise ValueError(f"explain takes one observation of shape ({spec.dim},), got {x.shape}")
    base = None if baseline is None else np.asarray(baseline, dtype=np.float32)[None]
    return explain_many(ensemble, x[None], [confidence], steps=steps, baselines=base)[0]


def explain_many(ensemble: Ensemble, obs: ArrayLike, confidences: Sequence[float], *, steps: int = 32,
                 baselines: np.ndarray | None = None) -> list[Explanation]:
    """:func:`explain` for N observations (N, D) in one integrated-gradients pass.

    Each observation is explained against its own baseline, exactly as one by one: the path
    points of all N are one (N * (steps + 2), D) batch, so the service explains a whole
    micro-batch of decisions for about the price of one.
    """
    spec = _spec_for(ensemble)
    x = np.asarray(obs, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != spec.dim:
        raise ValueError(f"explain_many takes observations of shape (N, {spec.dim}), got {x.shape}")
    if len(confidences) != len(x):
        raise ValueError(f"{len(x)} observations but {len(confidences)} confidences")
    if len(x) == 0:
        return []
    base = (neutral_baseline(x, spec, typical_observation(ensemble.members)) if baselines is None
            else np.asarray(baselines, dtype=np.float32))
    if base.shape != x.shape:
        raise ValueError(f"baselines must have the observations' shape {x.shape}, got {base.shape}")
    attr, fx, fb = _attributions(ensemble, x, base, steps)
    return [Explanation(float(c), _factors(attr[i], x[i], base[i], spec), float(fx[i]), float(fb[i]),
                        float(attr[i].sum()), len(ensemble), steps) for i, c in enumerate(confidences)]


def saliency_over_time(ensemble: Ensemble, history: ArrayLike, *, steps: int = 16) -> np.ndarray:
    """Attributions (T, D) for each of ``history``'s (T, D) observations, for a heat map in the report.

    Each step is explained against its own neutral baseline, all T in one batched pass.
    """
    return saliency_many(ensemble, [history], steps=steps)[0]


def saliency_many(ensemble: Ensemble, histories: Sequence[ArrayLike], *, steps: int = 16) -> list[np.ndarray]:
    """:func:`saliency_over_time` for several histories (T_i, D) in one batched pass."""
    spec = _spec_for(ensemble)
    hs = [np.asarray(h, dtype=np.float32) for h in histories]
    for h in hs:
        if h.ndim != 2 or h.shape[1] != spec.dim:
            raise ValueError(f"history must have shape (T, {spec.dim}), got {h.shape}")
    rows = np.concatenate(hs) if hs else np.zeros((0, spec.dim), dtype=np.float32)
    if len(rows) == 0:
        return [np.zeros((0, spec.dim), dtype=np.float32) for _ in hs]
    base = neutral_baseline(rows, spec, typical_observation(ensemble.members))
    attr = _attributions(ensemble, rows, base, steps)[0]
    return np.split(attr, np.cumsum([len(h) for h in hs])[:-1])


# ---- history ---------------------------------------------------------------------------------------


class ExplanationHistory:
    """The last ``maxlen`` (obs, action) pairs per greenhouse, so a low-confidence decision can show its
    lead-up.

    Thread-safe: the control loop records while the reporting path snapshots.
    """

    def __init__(self, maxlen: int = 10) -> None:
        if maxlen < 1:
            raise ValueError("maxlen must be >= 1")
        self.maxlen = maxlen
        self._buf: dict[str, deque[tuple[np.ndarray, np.ndarray]]] = {}
        self._lock = threading.Lock()

    def record(self, greenhouse: str, obs: ArrayLike, action: ArrayLike) -> None:
        """Append one step (copied, so later mutation of the caller's arrays cannot rewrite history)."""
        pair = (np.array(obs, dtype=np.float32, copy=True), np.array(action, dtype=np.float32, copy=True))
        with self._lock:
            self._buf.setdefault(greenhouse, deque(maxlen=self.maxlen)).append(pair)

    def snapshot(self, greenhouse: str) -> tuple[np.ndarray, np.ndarray]:
        """(obs (T, D), actions (T, A)), oldest first; T == 0 (shapes (0, 0)) for an unknown greenhouse."""
        with self._lock:
            pairs = list(self._buf.get(greenhouse, ()))
        if not pairs:
            return np.zeros((0, 0), dtype=np.float32), np.zeros((0, 0), dtype=np.float32)
        return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])

    def __len__(self) -> int:
        """Number of greenhouses with a history."""
        with self._lock:
            return len(self._buf)


def is_low_confidence(confidence: float, threshold: float = LOW_CONFIDENCE) -> bool:
    """Whether the runtime should snapshot the history and explain the decision."""
    return confidence < threshold
