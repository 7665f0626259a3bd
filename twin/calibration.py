"""Fit a zone's soil-bucket parameters to logged moisture, irrigation and crop demand.

A twin whose soil does not match the real greenhouse teaches the policy the wrong lesson
(how fast a zone drains, when the crop starts to suffer), so the nightly job fits each zone's
bucket to its logged trajectory. The forward model is the twin's own :func:`twin.soil.step_soil`,
never a re-implementation, so the fitted numbers mean exactly what they mean inside the twin.

Fitted by default: wilting point, field capacity, hourly drainage retention (which gives the
twin's ``drain_frac``), root-zone depth and, unless the log carries it, the start moisture.
Saturation and the depletion fraction p are held fixed: saturation only matters when a zone
overflows, which a sane irrigation log never shows, and p shapes the same stress curve as
the wilting point (the two are barely separable), while the twin takes p from its crop
config anyway.

Log alignment: ``moisture_vwc[t]`` is the reading at the end of step ``t``, after
``irrigation_mm[t]`` was applied and ``etc_mm[t]`` demanded; ``theta0`` is the true water
content before step 0.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from twin.config import CropConfig
from twin.soil import step_soil
from twin.types import TwinParams

SOIL_KEYS = ("wilting_point", "field_capacity", "hourly_retention", "root_mm", "theta0")
"""Parameters :func:`fit_soil_parameters` can fit (any of them can be fixed instead)."""

DEFAULT_BOUNDS: dict[str, tuple[float, float]] = {
    "wilting_point": (0.01, 0.45),
    "field_capacity": (0.03, 0.60),
    "hourly_retention": (0.30, 0.9999),
    "root_mm": (50.0, 1500.0),
    "theta0": (0.0, 0.60),
}
"""Physically plausible ranges for mineral greenhouse soils (m3/m3, mm)."""

_DERIVED_KEYS = frozenset({"drain_frac", "inv_stress_span", "depletion_fraction"})
"""Keys of a result's params that follow from the others; ignored in ``initial`` (warm starts)."""

DEFAULT_SATURATION = 0.5
"""Saturation used when none is given: above every registered soil's field capacity."""

_MIN_SPAN = 1e-3
"""Smallest fc - wp allowed: keeps the stress slope 1/((1-p)(fc-wp)) finite."""

# Typical magnitude of each internal variable, so the optimiser sees well-scaled steps.
_X_SCALE = {"wilting_point": 0.05, "span": 0.05, "hourly_retention": 0.02, "root_mm": 50.0, "theta0": 0.05}


@dataclass(frozen=True)
class SoilLog:
    """One zone's logged trajectory, all arrays of length T (one entry per control step).

    ``moisture_vwc`` may hold NaN where the probes were missing; the driving series may not,
    because the water balance cannot skip a step.
    """

    moisture_vwc: np.ndarray
    """(T,) observed root-zone water content at the end of each step, m3/m3 (NaN = missing)."""
    irrigation_mm: np.ndarray
    """(T,) water applied during each step, mm."""
    etc_mm: np.ndarray
    """(T,) unstressed crop demand per step, ET0 * Kc * dt_h, mm."""
    dt_s: float
    """Step length in seconds (converts hourly retention to the per-step drainage share)."""
    theta0: float | None = None
    """True water content before the first step; None lets the fit estimate it."""

    def __post_init__(self) -> None:
        arrays = {}
        for name in ("moisture_vwc", "irrigation_mm", "etc_mm"):
            a = np.array(getattr(self, name), dtype=np.float64)
            if a.ndim != 1:
                raise ValueError(f"{name} must be 1-D (T,), got shape {a.shape}")
            a.setflags(write=False)
            arrays[name] = a
        lengths = {a.shape[0] for a in arrays.values()}
        if len(lengths) != 1:
            raise ValueError(f"moisture_vwc, irrigation_mm and etc_mm must have equal length, got "
                             f"{[a.shape[0] for a in arrays.values()]}")
        if arrays["moisture_vwc"].shape[0] < 2:
            raise ValueError("a soil log needs at least 2 steps")
        for name in ("irrigation_mm", "etc_mm"):
            a = arrays[name]
            if not np.all(np.isfinite(a)) or np.any(a < 0.0):
                raise ValueError(f"{name} must be finite and non-negative at every step")
        if np.any(np.isinf(arrays["moisture_vwc"])):
            raise ValueError("moisture_vwc may hold NaN for missing readings but not infinity")
        if not (math.isfinite(self.dt_s) and self.dt_s > 0.0):
            raise ValueError(f"dt_s must be positive, got {self.dt_s}")
        if self.theta0 is not None and not (math.isfinite(self.theta0) and 0.0 <= self.theta0 <= 1.0):
            raise ValueError(f"theta0 must lie in [0, 1], got {self.theta0}")
        for name, a in arrays.items():
            object.__setattr__(self, name, a)
        object.__setattr__(self, "dt_s", float(self.dt_s))
        if self.theta0 is not None:
            object.__setattr__(self, "theta0", float(self.theta0))

    @property
    def steps(self) -> int:
        return int(self.moisture_vwc.shape[0])

    @property
    def valid(self) -> np.ndarray:
        """(T,) bool: steps with a moisture reading."""
        return np.isfinite(self.moisture_vwc)


@dataclass(frozen=True)
class CalibrationResult:
    """Outcome of one zone's fit; ``params`` is ready for :func:`simulate_zone` and the twin."""

    params: dict[str, float]
    """Fitted and fixed values, plus the derived twin fields drain_frac and inv_stress_span."""
    cost: float
    """Final robust cost reported by least_squares."""
    residual_rmse: float
    """Root-mean-square of observed minus simulated moisture over the valid readings, m3/m3."""
    n_obs: int
    success: bool
    message: str
    fitted: tuple[str, ...] = field(default=())
    """Names of the parameters the optimiser moved (the rest were fixed)."""
    stderr: dict[str, float] = field(default_factory=dict)
    """Gauss-Newton standard error of each fitted parameter (and drain_frac): a large value
    says the log does not pin that parameter down (say, no dry spell for the wilting point)."""


def _soil_params(fc: np.ndarray, wp: np.ndarray, sat: np.ndarray, drain_frac: np.ndarray, root_mm: np.ndarray,
                 p: float) -> TwinParams:
    """TwinParams for B one-zone buckets; fields step_soil does not read are zero placeholders."""
    b = fc.shape[0]
    col = {
        "field_capacity": fc, "wilting_point": wp, "saturation": sat, "drain_frac": drain_frac,
        "inv_stress_span": 1.0 / ((1.0 - p) * (fc - wp)), "root_mm": root_mm,
    }
    values = {f.name: (np.asarray(col[f.name], dtype=np.float64).reshape(b, 1) if f.name in col
                       else np.zeros((b, 1))) for f in dataclasses.fields(TwinParams)}
    return TwinParams(**values)


def _simulate_batch(log: SoilLog, fc: np.ndarray, wp: np.ndarray, sat: np.ndarray, retention: np.ndarray,
                    root_mm: np.ndarray, theta0: np.ndarray, p: float) -> np.ndarray:
    """(B, T) water content after each step for B parameter sets at once.

    Batching is what makes the finite-difference Jacobian cheap: the per-step Python overhead
    of the twin's step is paid once for all perturbed parameter sets.
    """
    drain_frac = 1.0 - retention ** (log.dt_s / 3600.0)
    params = _soil_params(fc, wp, sat, drain_frac, root_mm, p)
    irrigation = log.irrigation_mm.reshape(-1, 1, 1)
    etc = log.etc_mm.reshape(-1, 1, 1)
    theta = np.asarray(theta0, dtype=np.float64).reshape(-1, 1)
    out = np.empty((theta.shape[0], log.steps))
    for t in range(log.steps):
        theta = step_soil(np, params, theta, irrigation[t], 1.0, etc[t]).theta
        out[:, t] = theta[:, 0]
    return out


def _first_reading(log: SoilLog) -> float:
    """Start moisture guess: the mean of the first few readings (noise averages out)."""
    idx = np.flatnonzero(log.valid)
    if idx.size == 0:
        raise ValueError("the log has no moisture reading to start from; give theta0")
    return float(np.mean(log.moisture_vwc[idx[:3]]))


def simulate_zone(params: Mapping[str, float], log: SoilLog, *,
                  depletion_fraction: float | None = None) -> np.ndarray:
    """(T,) simulated water content after each step of ``log`` with the given soil parameters.

    ``params`` needs field_capacity, wilting_point, root_mm and hourly_retention (or the
    twin's per-step drain_frac); saturation, depletion_fraction and theta0 are optional
    (theta0 falls back to the log's, then to the first readings).
    """
    missing = [k for k in ("field_capacity", "wilting_point", "root_mm") if k not in params]
    if missing:
        raise ValueError(f"simulate_zone needs {missing}")
    dt_h = log.dt_s / 3600.0
    if "hourly_retention" in params:
        retention = float(params["hourly_retention"])
    elif "drain_frac" in params:
        retention = (1.0 - float(params["drain_frac"])) ** (1.0 / dt_h)
    else:
        raise ValueError("simulate_zone needs hourly_retention or drain_frac")
    fc, wp = float(params["field_capacity"]), float(params["wilting_point"])
    if not fc > wp:
        raise ValueError(f"field_capacity ({fc}) must exceed wilting_point ({wp})")
    p = _depletion(params, depletion_fraction)
    theta0 = params.get("theta0", log.theta0)
    theta0 = _first_reading(log) if theta0 is None else float(theta0)
    one = np.ones(1)
    sim = _simulate_batch(log, fc * one, wp * one, params.get("saturation", DEFAULT_SATURATION) * one,
                          retention * one, float(params["root_mm"]) * one, theta0 * one, p)
    return sim[0]


def _depletion(params: Mapping[str, float], override: float | None) -> float:
    if override is not None:
        return float(override)
    return float(params.get("depletion_fraction", CropConfig().depletion_fraction))


def _noise_scale(log: SoilLog) -> float:
    """Robust reading-noise estimate from successive differences (MAD / sqrt 2).

    The true moisture moves little in one step except while irrigating, so the median
    absolute difference of consecutive readings is dominated by probe noise; used as the
    soft_l1 scale, residuals beyond it count linearly (outliers lose their pull).
    """
    m = log.moisture_vwc
    d = m[1:] - m[:-1]
    d = d[np.isfinite(d)]
    if d.size < 2:
        return 0.005
    mad = float(np.median(np.abs(d - np.median(d))))
    return max(1.4826 * mad / math.sqrt(2.0), 1e-4)


@dataclass(frozen=True)
class _Layout:
    """Maps the optimiser's vector to named soil parameters.

    wp < fc is enforced by construction: the vector holds the span fc - wp (bounded above
    zero) instead of field capacity, so no step of the optimiser can invert the two.
    """

    names: tuple[str, ...]
    fixed: dict[str, float]
    lower: np.ndarray
    upper: np.ndarray

    def unpack(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """x of shape (B, n) -> named (B,) arrays for every soil parameter."""
        v = {name: x[:, i] for i, name in enumerate(self.names)}
        b = x.shape[0]
        out = {k: np.full(b, val) for k, val in self.fixed.items()}
        if "wilting_point" in v:
            out["wilting_point"] = v["wilting_point"]
        if "span" in v:
            if "wilting_point" in out:
                out["field_capacity"] = out["wilting_point"] + v["span"]
            else:
                out["wilting_point"] = out["field_capacity"] - v["span"]
        for name in ("hourly_retention", "root_mm", "theta0"):
            if name in v:
                out[name] = v[name]
        return out

    def fitted(self) -> tuple[tuple[str, ...], np.ndarray]:
        """Free parameters in user terms and the matrix A with d(user)/d(x) (span maps to wp/fc)."""
        names: list[str] = []
        rows: list[np.ndarray] = []
        n = len(self.names)
        for i, name in enumerate(self.names):
            row = np.zeros(n)
            row[i] = 1.0
            if name != "span":
                names.append(name)
                rows.append(row)
            elif "wilting_point" in self.names:
                names.append("field_capacity")
                rows.append(row + np.eye(n)[self.names.index("wilting_point")])
            elif "field_capacity" in self.fixed:
                names.append("wilting_point")
                rows.append(-row)
            else:
                names.append("field_capacity")
                rows.append(row)
        return tuple(names), np.array(rows).reshape(len(names), n)


def _layout(start: dict[str, float], fixed: dict[str, float], bounds: dict[str, tuple[float, float]]
            ) -> tuple[_Layout, np.ndarray]:
    """Choose the free variables, their bounds and a feasible start vector."""
    free_wp = "wilting_point" not in fixed
    free_fc = "field_capacity" not in fixed
    wp_lo, wp_hi = bounds["wilting_point"]
    fc_lo, fc_hi = bounds["field_capacity"]
    names: list[str] = []
    lo: list[float] = []
    hi: list[float] = []
    x0: list[float] = []

    def add(name: str, value: float, lower: float, upper: float) -> None:
        if not lower < upper:
            raise ValueError(f"empty bounds for {name}: ({lower}, {upper})")
        names.append(name)
        lo.append(lower)
        hi.append(upper)
        pad = 1e-6 * (upper - lower)
        x0.append(min(max(value, lower + pad), upper - pad))

    span0 = start["field_capacity"] - start["wilting_point"]
    if free_wp and free_fc:
        add("wilting_point", start["wilting_point"], wp_lo, wp_hi)
        add("span", span0, max(fc_lo - wp_hi, _MIN_SPAN), fc_hi - wp_lo)
    elif free_fc:
        wp = fixed["wilting_point"]
        add("span", span0, max(fc_lo - wp, _MIN_SPAN), fc_hi - wp)
    elif free_wp:
        fc = fixed["field_capacity"]
        add("span", span0, max(fc - wp_hi, _MIN_SPAN), fc - wp_lo)
    for name in ("hourly_retention", "root_mm", "theta0"):
        if name not in fixed:
            add(name, start[name], *bounds[name])
    layout = _Layout(names=tuple(names), fixed=dict(fixed), lower=np.array(lo), upper=np.array(hi))
    return layout, np.array(x0)


def _forward_jacobian(model: Callable[[np.ndarray], np.ndarray], x: np.ndarray, lower: np.ndarray,
                      upper: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Forward differences, all perturbations in one batched simulation; steps stay in bounds."""
    h = math.sqrt(np.finfo(np.float64).eps) * np.maximum(np.abs(x), scale)
    h = np.where(x + h > upper, -h, h)
    xs = np.repeat(x[None, :], x.size + 1, axis=0)
    xs[1:] += np.diag(h)
    f = model(xs)
    return (f[1:] - f[0]).T / h


def _standard_errors(model: Callable[[np.ndarray], np.ndarray], x: np.ndarray, resid: np.ndarray,
                     layout: _Layout, scale: np.ndarray) -> tuple[tuple[str, ...], dict[str, float]]:
    """Linearised standard errors at the solution, s^2 (J^T J)^-1 mapped to user parameters.

    Directions the log does not constrain (a near-zero singular value of the scaled Jacobian)
    get an infinite error rather than the zero a pseudo-inverse would silently report.
    """
    names, a = layout.fitted()
    jac = _forward_jacobian(model, x, layout.lower, layout.upper, scale) * scale[None, :]
    _, sv, vt = np.linalg.svd(jac, full_matrices=False)
    s2 = float(resid @ resid) / max(resid.size - x.size, 1)
    with np.errstate(divide="ignore"):
        inv_sv2 = (np.where(sv > 1e-9 * sv[0], 1.0 / (sv * sv), np.inf) if sv[0] > 0
                   else np.full(sv.shape, np.inf))
    a_scaled = (a * scale[None, :]) @ vt.T  # user parameters in the singular basis
    with np.errstate(invalid="ignore"):
        terms = np.where(a_scaled == 0.0, 0.0, a_scaled * a_scaled * inv_sv2[None, :])
    var = s2 * terms.sum(axis=1)
    return names, {n: float(math.sqrt(v)) for n, v in zip(names, var, strict=True)}


def fit_soil_parameters(log: SoilLog, *, initial: Mapping[str, float] | None = None,
                        bounds: Mapping[str, tuple[float, float]] | None = None,
                        fixed: Mapping[str, float] | None = None, depletion_fraction: float | None = None,
                        loss: str = "soft_l1", f_scale: float | None = None, max_nfev: int = 200
                        ) -> CalibrationResult:
    """Fit one zone's bucket to its log by robust nonlinear least squares.

    ``initial`` overrides the starting guess (default: field capacity at the 75th percentile
    of the readings, wilting point at 45 % of it, retention 0.95, the crop's mid root depth);
    ``fixed`` holds parameters known from elsewhere (say a measured root depth) and
    ``saturation``; ``bounds`` narrows the plausible ranges in :data:`DEFAULT_BOUNDS`.
    Missing readings are skipped; ``soft_l1`` with a noise-sized ``f_scale`` (estimated from
    the readings when None) keeps a few spikes from dragging the fit.
    """
    valid = log.valid
    n_obs = int(valid.sum())
    fixed_d = {k: float(v) for k, v in (fixed or {}).items()}
    unknown = set(fixed_d) - set(SOIL_KEYS) - {"saturation"}
    unknown |= set(initial or {}) - set(SOIL_KEYS) - {"saturation"} - _DERIVED_KEYS
    unknown |= set(bounds or {}) - set(SOIL_KEYS)
    if unknown:
        raise ValueError(f"unknown soil parameters {sorted(unknown)}; "
                         f"known: {list(SOIL_KEYS)} and saturation")
    if log.theta0 is not None:
        fixed_d.setdefault("theta0", log.theta0)
    p = _depletion({}, depletion_fraction)
    all_bounds = {**DEFAULT_BOUNDS, **{k: (float(a), float(b)) for k, (a, b) in (bounds or {}).items()}}

    obs = log.moisture_vwc[valid]
    fc_guess = float(np.percentile(obs, 75)) if n_obs else 0.27
    r_lo, r_hi = CropConfig().root_depth_m
    start = {"field_capacity": fc_guess, "wilting_point": 0.45 * fc_guess, "hourly_retention": 0.95,
             "root_mm": 500.0 * (r_lo + r_hi), "theta0": _first_reading(log) if n_obs else 0.2}
    start.update({k: float(v) for k, v in (initial or {}).items() if k not in _DERIVED_KEYS})
    start.update(fixed_d)
    sat = float(start.get("saturation", DEFAULT_SATURATION))
    fixed_d.setdefault("saturation", sat)

    layout, x0 = _layout(start, {k: v for k, v in fixed_d.items() if k != "saturation"}, all_bounds)
    if n_obs <= len(layout.names):
        raise ValueError(f"{n_obs} valid readings cannot determine {len(layout.names)} parameters")
    scale = np.array([_X_SCALE[n] for n in layout.names])

    def model(xs: np.ndarray) -> np.ndarray:
        v = layout.unpack(xs)
        sim = _simulate_batch(log, v["field_capacity"], v["wilting_point"], np.full(xs.shape[0], sat),
                              v["hourly_retention"], v["root_mm"], v["theta0"], p)
        return sim[:, valid] - obs[None, :]

    result = least_squares(
        lambda x: model(x[None, :])[0], x0,
        jac=lambda x: _forward_jacobian(model, x, layout.lower, layout.upper, scale),
        bounds=(layout.lower, layout.upper), x_scale=scale, loss=loss,
        f_scale=_noise_scale(log) if f_scale is None else float(f_scale), max_nfev=max_nfev,
    )
    best = {k: float(v[0]) for k, v in layout.unpack(result.x[None, :]).items()}
    best["saturation"] = sat
    best["depletion_fraction"] = p
    best["drain_frac"] = 1.0 - best["hourly_retention"] ** (log.dt_s / 3600.0)
    best["inv_stress_span"] = 1.0 / ((1.0 - p) * (best["field_capacity"] - best["wilting_point"]))
    resid = model(result.x[None, :])[0]
    names, stderr = _standard_errors(model, result.x, resid, layout, scale)
    if "hourly_retention" in stderr:
        dt_h = log.dt_s / 3600.0
        stderr["drain_frac"] = stderr["hourly_retention"] * dt_h * best["hourly_retention"] ** (dt_h - 1.0)
    return CalibrationResult(
        params=best, cost=float(result.cost), residual_rmse=float(np.sqrt(np.mean(resid * resid))),
        n_obs=n_obs,
        success=bool(result.success), message=str(result.message), fitted=names,
        stderr=stderr,
    )


def fit_zones(logs: Sequence[SoilLog], *, initial: Mapping[str, float] | None = None,
              bounds: Mapping[str, tuple[float, float]] | None = None,
              fixed: Mapping[str, float] | None = None, depletion_fraction: float | None = None
              ) -> list[CalibrationResult]:
    """Fit every zone independently (zones share no soil parameters), in log order."""
    return [fit_soil_parameters(log, initial=initial, bounds=bounds, fixed=fixed,
                                depletion_fraction=depletion_fraction) for log in logs]
