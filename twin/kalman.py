"""Batched per-zone moisture estimate over [B, Z, P] arrays: the one filter of the project.

:class:`twin.estimator.ZoneEstimator` (filterpy, one zone at a time) is the reference. This
module is the same filter written once for whole batches, on numpy or torch, with no Python
loop over instances or zones: the twin hands the policy the moisture it will see in service
(an estimate with drifting probes excluded), and the service's vectorised
:class:`twin.estimator.GreenhouseEstimator` steps its zones with it too. The state is a scalar
theta per zone, so the Kalman update has a closed form: with n trusted probes of equal variance r,

    P+ = 1 / (1/P- + n/r),    x+ = P+ (x-/P- + sum(z)/r).

Inputs the filter is given, as in service: the measured irrigation per zone and the unstressed
crop demand ET0 x Kc of the step. Drift judgement (normalised innovation EWMA, confirmation
streaks, the median of the other probes as tie-breaker) follows ``ZoneEstimator._judge``
probe by probe, in the same order, so both flag the same probes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from twin.backend import Array, Backend
from twin.config import EstimatorConfig
from twin.soil import next_theta
from twin.types import TwinParams

SOIL_FIELDS = ("field_capacity", "wilting_point", "saturation", "drain_frac", "inv_stress_span", "root_mm")
_SLOPE_H = 1e-4
"""Finite-difference step for the bucket's slope (piecewise linear, so any small step is exact
away from the kinks)."""


@dataclass(frozen=True)
class KalmanState:
    """Filter state per instance; all float arrays so they travel in the twin's state record."""

    theta: Array
    """[B, Z] estimated water content m3/m3."""
    var: Array
    """[B, Z] estimate variance."""
    ewma: Array
    """[B, Z, P] smoothed normalised innovation per probe."""
    drifting: Array
    """[B, Z, P] 1.0 while a probe is judged drifting (excluded)."""
    streak: Array
    """[B, Z, P] consecutive steps a probe's judgement wanted to flip."""


def initial_kalman(backend: Backend, params: TwinParams, probes: int) -> KalmanState:
    """Broad prior over the plant-available range, as ``ZoneEstimator`` starts."""
    fc, wp = params.field_capacity, params.wilting_point
    b, z = fc.shape
    zeros = backend.zeros((b, z, probes))
    return KalmanState(theta=0.5 * (fc + wp), var=(0.5 * (fc - wp)) ** 2, ewma=zeros, drifting=zeros + 0.0,
                       streak=zeros + 0.0)


def _median_of(xp: Any, values: list[Array], masks: list[Array]) -> Array:
    """Median of the ``values`` columns ([B, Z] each) where their ``masks`` hold; 0 where none does."""
    if len(values) == 1:
        return xp.where(masks[0], values[0], 0.0)
    v = xp.stack(values, axis=2)
    m = xp.stack(masks, axis=2)
    k = xp.sum(xp.astype(m, v.dtype), axis=2)
    ordered = xp.sort(xp.where(m, v, math.inf), axis=2)
    lo = xp.astype(xp.maximum(k - 1.0, 0.0) // 2.0, xp.int64)
    hi = xp.astype(k // 2.0, xp.int64)
    pick = [xp.sum(xp.where(xp.arange(len(values))[None, None, :] == idx[:, :, None], ordered, 0.0), axis=2)
            for idx in (lo, hi)]
    return xp.where(k > 0.0, 0.5 * (pick[0] + pick[1]), 0.0)


def kalman_step(xp: Any, cfg: EstimatorConfig, params: TwinParams, state: KalmanState, probes: Array,
                irrigation_mm: Array, etc_mm: Array, dt_h: Any, slope_h: float = _SLOPE_H) -> KalmanState:
    """One predict-judge-update step for every zone of every instance.

    ``probes`` [B, Z, P] with NaN where missing; ``irrigation_mm`` [B, Z]; ``etc_mm`` [B, Z] or [B, 1];
    ``dt_h`` a number or an array that broadcasts against [B, Z]. ``params`` needs only the soil
    fields (:data:`SOIL_FIELDS`), so the service steps its zones with it too (zones as the batch,
    float64, ``slope_h`` 1e-6 as its filterpy reference).
    """
    theta, var = state.theta, state.var

    # The bucket at theta - h, theta and theta + h: the prediction and its slope. Three calls, not one
    # on a stacked [3, B, Z] copy: the same bits, and the compiled step fuses them with what follows.
    lo, f, hi = (next_theta(xp, params, t, irrigation_mm, etc_mm)  # per m2: L = mm
                 for t in (theta - slope_h, theta, theta + slope_h))
    slope = (hi - lo) * (1.0 / (2.0 * slope_h))

    root_dt = math.sqrt(dt_h) if isinstance(dt_h, (int, float)) else xp.sqrt(dt_h)
    q = (cfg.q_floor * root_dt
         + (cfg.q_etc * xp.abs(etc_mm) + cfg.q_irr * xp.abs(irrigation_mm)) / params.root_mm)
    present = probes == probes
    r = (cfg.probe_rel_std * f) ** 2 + cfg.probe_abs_std ** 2
    innovation_std = xp.sqrt(slope * slope * var + q * q + r)
    nu = xp.where(present, probes - f[:, :, None], 0.0) / innovation_std[:, :, None]
    ewma = xp.where(present, state.ewma + cfg.ewma_alpha * (nu - state.ewma), state.ewma)

    n_probe = probes.shape[2]
    ewmas = [ewma[:, :, i] for i in range(n_probe)]
    heard = [present[:, :, i] for i in range(n_probe)]
    drifting = [state.drifting[:, :, i] >= 0.5 for i in range(n_probe)]
    flags: list[Any] = []
    streaks: list[Any] = []
    for i in range(n_probe):  # in probe order, like ZoneEstimator._judge
        m = ewmas[i]
        was = drifting[i]
        # Probes before i were judged this step already: their new flags count, as in the loop there.
        others = [j for j in range(n_probe) if j != i]
        if others:
            ref = _median_of(xp, [ewmas[j] for j in others],
                             [heard[j] & ~(flags[j] if j < i else drifting[j]) for j in others])
        else:
            ref = xp.zeros_like(m)
        size = xp.abs(m)
        bad = xp.where(was, size >= cfg.recover_threshold,
                       (size > cfg.drift_threshold) & (xp.abs(m - ref) > cfg.drift_threshold))
        streak = state.streak[:, :, i]
        run = xp.where(heard[i], xp.where(was ^ bad, streak + 1.0, 0.0), streak)  # the judgement wants a flip
        toggle = run >= cfg.confirm_steps
        flags.append(was ^ toggle)
        streaks.append(xp.where(toggle, 0.0, run))
    drifting_now = xp.stack(flags, axis=2)

    # Counts and all-of tests probe by probe: exact, and cheaper than reductions over a short axis.
    usable_i = [heard[i] & ~flags[i] for i in range(n_probe)]
    n_use = xp.astype(usable_i[0], theta.dtype)
    all_high = ~usable_i[0] | (ewmas[0] > cfg.mismatch_threshold)
    all_low = ~usable_i[0] | (ewmas[0] < -cfg.mismatch_threshold)
    for i in range(1, n_probe):
        n_use = n_use + xp.astype(usable_i[i], theta.dtype)
        all_high = all_high & (~usable_i[i] | (ewmas[i] > cfg.mismatch_threshold))
        all_low = all_low & (~usable_i[i] | (ewmas[i] < -cfg.mismatch_threshold))
    mismatch = (n_use >= 2.0) & (all_high | all_low)
    inflate = 1.0 + (cfg.mismatch_inflation - 1.0) * xp.astype(mismatch, theta.dtype)

    prior_var = slope * slope * var + inflate * q * q
    # The trusted probes' sum column by column, left to right from +0.0 as numpy sums a short row
    # (the same bits); compiled, a per-row reduction over two probes costs more than two loads.
    total = xp.where(usable_i[0], probes[:, :, 0], 0.0) + 0.0
    for i in range(1, n_probe):
        total = total + xp.where(usable_i[i], probes[:, :, i], 0.0)
    post_var = 1.0 / (1.0 / prior_var + n_use / r)
    post = post_var * (f / prior_var + total / r)
    seen = n_use > 0.0
    return KalmanState(theta=xp.where(seen, post, f), var=xp.where(seen, post_var, prior_var), ewma=ewma,
                       drifting=xp.astype(drifting_now, theta.dtype), streak=xp.stack(streaks, axis=2))
