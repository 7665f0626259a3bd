"""Combine the ensemble's proposals into one action and say how much they agreed.

Valves go by (weighted) majority, ties closed: an unwatered step is recoverable, an
overwatered one less so. Pump and lights go by (weighted) median, which one wild member
cannot drag. The result is well formed but not yet safe: it still goes through the clipper.

Disagreement, in [0, 1], is the worst of three group scores, so a split on one actuator
group is not hidden by agreement on the others:

* valves: mean over valves of ``2 * minority weight share`` (0 unanimous, 1 an even split);
* pump, lights: weighted mean absolute deviation from the weighted median, divided by 50 %
  (the largest it can be on [0, 100]: half the weight at 0 and half at 100).

``confidence = 1 - disagreement``; ``low_confidence`` when disagreement exceeds the threshold.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from safety.action import DEFAULT_ZONES, safe_state
from safety.report import Decision
from safety.rules import VoteReason

TIE_TOLERANCE = 1e-9
"""Relative slack under which weight shares count as tied (float sums are not exact)."""


def _proposals(raw: object, zones: int | None) -> np.ndarray | None:
    """``raw`` as a float (K, Z+2) array with Z >= 1 (and Z == zones if given), else None."""
    try:
        arr = np.asarray(raw)
        if arr.dtype.kind not in "biuf" or arr.ndim != 2:
            return None
        arr = arr.astype(np.float64)
    except Exception:  # foreign objects may raise anything from __array__; totality wins
        return None
    width = arr.shape[1]
    if width < 3 or (zones is not None and width != zones + 2):
        return None
    return arr


def _fallback_zones(raw: object, zones: int | None) -> int:
    """Zone count for the safe state when the proposals cannot tell us."""
    if zones is not None:
        return zones
    shape = getattr(raw, "shape", None)
    if isinstance(shape, tuple) and len(shape) == 2 and isinstance(shape[1], int) and shape[1] >= 3:
        return shape[1] - 2
    return DEFAULT_ZONES


def _weights(raw: object, k: int) -> np.ndarray | None:
    """``raw`` as K finite non-negative weights, else None."""
    try:
        arr = np.asarray(raw)
        if arr.dtype.kind not in "biuf" or arr.shape != (k,):
            return None
        arr = arr.astype(np.float64)
    except Exception:  # same reason as in _proposals
        return None
    return arr if bool(np.isfinite(arr).all() and (arr >= 0.0).all()) else None


def _member_valid(p: np.ndarray) -> np.ndarray:
    """Per member: all finite, valves in [0, 1], pump and lights in [0, 100] %."""
    finite = np.isfinite(p).all(axis=1)
    valves_ok = ((p[:, :-2] >= 0.0) & (p[:, :-2] <= 1.0)).all(axis=1)
    rest_ok = ((p[:, -2:] >= 0.0) & (p[:, -2:] <= 100.0)).all(axis=1)
    return finite & valves_ok & rest_ok


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """Median under positive ``weights``; equals ``np.median`` when weights are equal.

    When the cumulative weight hits exactly one half, the two straddling values are averaged.
    """
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    cum = np.cumsum(w)
    half = cum[-1] / 2.0
    i = int(np.searchsorted(cum, half * (1.0 - TIE_TOLERANCE)))
    if abs(cum[i] - half) <= TIE_TOLERANCE * cum[-1] and i + 1 < v.size:
        return float((v[i] + v[i + 1]) / 2.0)
    return float(v[i])


def _spread(values: np.ndarray, share: np.ndarray, median: float) -> float:
    """Weighted mean absolute deviation from the median, scaled to [0, 1] over [0, 100] %."""
    return float(min(1.0, float(share @ np.abs(values - median)) / 50.0))


def _arguments(
    k: int, raw_weights: object, quorum: object, threshold: object, reasons: list[str]
) -> tuple[np.ndarray, int, float]:
    """(weights, quorum, threshold), each replaced by its default if unusable."""
    w = np.ones(k)
    if raw_weights is not None:
        given = _weights(raw_weights, k)
        if given is None:
            reasons.append(VoteReason.BAD_ARGUMENT.value)
        else:
            w = given
    need = k // 2 + 1
    if quorum is not None:
        if isinstance(quorum, int) and not isinstance(quorum, bool) and quorum >= 1:
            need = quorum
        else:
            reasons.append(VoteReason.BAD_ARGUMENT.value)
    try:
        limit = float(threshold)  # type: ignore[arg-type]
    except Exception:  # any object may arrive here; an unusable threshold means strictest
        limit = math.nan
    if math.isnan(limit):
        reasons.append(VoteReason.BAD_ARGUMENT.value)
        limit = 0.0
    return w, need, limit


def _no_quorum(zones: int, reasons: list[str], dropped: tuple[int, ...] = ()) -> Decision:
    reasons.append(VoteReason.NO_QUORUM.value)
    return Decision(safe_state(zones), 1.0, True, tuple(reasons), (), dropped)


def vote(
    proposals: ArrayLike,
    *,
    disagreement_threshold: float = 0.35,
    weights: ArrayLike | None = None,
    quorum: int | None = None,
    zones: int | None = None,
) -> Decision:
    """Vote one action from ``proposals`` (K members x (Z+2)); never raises.

    Members with NaN/inf/out-of-range values are dropped (``vote.member_invalid``); members
    with weight 0 abstain. Fewer than ``quorum`` voting members (default: a majority of K)
    gives the safe state with ``vote.no_quorum``. Unusable ``weights``, threshold or
    ``quorum`` are replaced by their defaults (equal weights, 0.0 i.e. strictest, majority)
    with ``vote.bad_argument``. ``zones``, if given, is the width the proposals must have.
    """
    with np.errstate(all="ignore"):
        return _vote(proposals, disagreement_threshold, weights, quorum, zones)


def _vote(
    raw: object, threshold: float, raw_weights: object, quorum: int | None, zones: int | None
) -> Decision:
    reasons: list[str] = []
    if zones is not None and not (isinstance(zones, int) and not isinstance(zones, bool) and zones >= 1):
        reasons.append(VoteReason.BAD_ARGUMENT.value)
        zones = None
    p = _proposals(raw, zones)
    if p is None:
        reasons.append(VoteReason.BAD_SHAPE.value)
        return _no_quorum(_fallback_zones(raw, zones), reasons)
    k, z = p.shape[0], p.shape[1] - 2

    w, need, limit = _arguments(k, raw_weights, quorum, threshold, reasons)
    valid = _member_valid(p)
    dropped = tuple(np.flatnonzero(~valid).tolist())
    if dropped:
        reasons.append(VoteReason.MEMBER_INVALID.value)
    voting = valid & (w > 0.0)
    used = tuple(np.flatnonzero(voting).tolist())
    if len(used) < need:
        return _no_quorum(z, list(dict.fromkeys(reasons)), dropped)

    members = p[voting]
    scaled = w[voting] / w[voting].max()  # so the sum cannot overflow for huge weights
    share = scaled / scaled.sum()
    open_share = share @ (members[:, :z] >= 0.5)
    valves = open_share > 0.5 + TIE_TOLERANCE
    pump = weighted_median(members[:, z], share)
    lights = weighted_median(members[:, z + 1], share)

    valve_score = float(np.mean(2.0 * np.minimum(open_share, 1.0 - open_share)))
    disagreement = max(
        min(1.0, max(0.0, valve_score)),
        _spread(members[:, z], share, pump),
        _spread(members[:, z + 1], share, lights),
    )
    low = disagreement > limit
    reasons.append(VoteReason.LOW_CONFIDENCE.value if low else VoteReason.OK.value)
    action = np.concatenate([valves.astype(np.float64), [pump, lights]])
    return Decision(action, disagreement, low, tuple(dict.fromkeys(reasons)), used, dropped)
