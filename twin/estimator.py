"""Per-zone soil-moisture estimation: a Kalman filter around the twin's own bucket model.

Design (one :class:`ZoneEstimator` per zone, one filterpy ``KalmanFilter`` inside each):

* State: theta only, one scalar per zone; every probe is one measurement row z_i = theta + v_i.
  A [theta, bias_1..bias_P] state was rejected because a bias common to all probes cannot be
  told from theta (between the stress point and field capacity the bucket has slope 1, so
  theta + c with biases - c explains the same readings): bias states would be observable only
  through their prior. Drift is instead detected from innovation statistics and the probe is
  excluded; the model prediction is the referee and the other probes the tie-breaker.
* Process model: ``twin.soil.step_soil`` itself, linearised each step as x' = F x + (f(x) - F x)
  with a finite-difference slope F (exact for the piecewise-linear bucket).
* Process noise (std per step, m3/m3): ``q_floor * sqrt(dt_h) + q_etc * ETc/root + q_irr * irr/root``,
  i.e. a small random walk plus relative errors of the ET demand (Kc, weather) and of the flow
  meter. Measurement noise: ``(rel_std * theta)^2 + abs_std^2`` per probe, independent; probes
  err relative to their reading (the twin's sensor model) plus a resolution floor.
* Drift: per-probe normalised innovation against the prediction, nu_i = (z_i - f) / sqrt(S_i),
  smoothed by an EWMA m_i. A probe is a candidate when |m_i| > threshold *and* it differs by more
  than the threshold from the median of the other usable probes (a model error seen by all
  probes is not blamed on one); ``confirm_steps`` candidate steps in a row flag it "drifting"
  and exclude it; ``confirm_steps`` steps with |m_i| < ``recover_threshold`` bring it back.
  With one usable probe the model alone is the referee. When two or more usable probes agree
  that the prediction is off, the model is wrong: Q is inflated so the filter follows them.
* Missing readings: a NaN probe gives no row; with no usable probe the step is prediction only
  and says ``filled=True``; ``offline_after_steps`` missing steps in a row make it "offline".
  Limits: steps are ``dt_s`` long (drainage per step); missing inputs count as 0.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from filterpy.kalman import KalmanFilter

from twin.config import EstimatorConfig
from twin.kalman import SOIL_FIELDS, KalmanState, kalman_step
from twin.soil import step_soil
from twin.types import TwinParams

STATE_VERSION = 1


REFERENCE_SLOPE_H = 1e-6
"""Finite-difference step of the filter's linearisation in float64 (the twin's float32 takes 1e-4)."""


@dataclass(frozen=True)
class ZoneSoilModel:
    """One zone's bucket parameters; ``drain_frac`` is per step of ``dt_s`` seconds."""

    field_capacity: float
    wilting_point: float
    saturation: float
    drain_frac: float
    inv_stress_span: float
    root_mm: float
    dt_s: float

    def step(self, theta: np.ndarray, irrigation_mm: float, etc_mm: float) -> np.ndarray:
        """The twin's own ``step_soil`` on an array of thetas (it reads only the six soil fields)."""
        # A zone area of 1 m2 makes litres equal to millimetres.
        return step_soil(np, cast(TwinParams, self), theta, irrigation_mm, 1.0, etc_mm).theta

    def predict(self, theta: float, irrigation_mm: float, etc_mm: float) -> float:
        """Next-step moisture for the measured irrigation and the unstressed crop demand."""
        return float(self.step(np.array([theta]), irrigation_mm, etc_mm)[0])

    def predict_with_slope(self, theta: float, irrigation_mm: float, etc_mm: float,
                           h: float = REFERENCE_SLOPE_H) -> tuple[float, float]:
        """Prediction and d theta_next / d theta by central difference (piecewise linear model)."""
        lo, mid, hi = self.step(np.array([theta - h, theta, theta + h]), irrigation_mm, etc_mm)
        return float(mid), float(hi - lo) / (2.0 * h)


@dataclass(frozen=True)
class ZoneEstimate:
    """What the runtime needs per zone: the value, its uncertainty and why it can be trusted."""

    theta: float
    std: float
    probe_status: tuple[str, ...]
    """Per probe: "ok", "missing" (NaN this step), "drifting" (excluded) or "offline"."""
    filled: bool
    """True when no probe was used this step: theta is the model prediction."""


class ZoneEstimator:
    """Kalman filter for one zone's moisture with probe drift and outage handling."""

    def __init__(self, model: ZoneSoilModel, probes: int, config: EstimatorConfig | None = None) -> None:
        self.model, self.probes = model, int(probes)
        self.cfg = config or EstimatorConfig()
        self.kf = KalmanFilter(dim_x=1, dim_z=self.probes, dim_u=1)
        # Broad prior over the plant-available range; the first readings pull it in.
        self.kf.x = np.array([[0.5 * (model.field_capacity + model.wilting_point)]])
        self.kf.P = np.array([[(0.5 * (model.field_capacity - model.wilting_point)) ** 2]])
        self.ewma = np.zeros(self.probes)
        self.missing = np.zeros(self.probes, dtype=np.int64)
        self.drifting = np.zeros(self.probes, dtype=bool)
        self.streak = np.zeros(self.probes, dtype=np.int64)

    def process_std(self, irrigation_mm: float, etc_mm: float) -> float:
        """Model-error std of one step: random walk plus relative ET and flow-meter errors."""
        c, m = self.cfg, self.model
        return (c.q_floor * math.sqrt(m.dt_s / 3600.0)
                + (c.q_etc * abs(etc_mm) + c.q_irr * abs(irrigation_mm)) / m.root_mm)

    def update(self, readings: Any, irrigation_mm: float, etc_mm: float) -> ZoneEstimate:
        """Predict with the measured inputs, judge the probes, update with the trusted ones."""
        c = self.cfg
        z = np.asarray(readings, dtype=float).reshape(self.probes)
        irr = float(irrigation_mm) if math.isfinite(irrigation_mm) else 0.0
        etc = float(etc_mm) if math.isfinite(etc_mm) else 0.0
        theta, p = float(self.kf.x[0, 0]), float(self.kf.P[0, 0])
        f, slope = self.model.predict_with_slope(theta, irr, etc)
        q = self.process_std(irr, etc)
        present = np.isfinite(z)
        r = (c.probe_rel_std * f) ** 2 + c.probe_abs_std ** 2
        nu = np.where(present, z - f, 0.0) / math.sqrt(slope * slope * p + q * q + r)  # against the prior
        self.ewma[present] += c.ewma_alpha * (nu[present] - self.ewma[present])
        self.missing = np.where(present, 0, self.missing + 1)
        self._judge(present)
        usable = present & ~self.drifting
        inflate = c.mismatch_inflation if self._model_mismatch(usable) else 1.0
        self.kf.predict(u=np.array([[f - slope * theta]]), B=np.eye(1), F=np.array([[slope]]),
                        Q=np.array([[inflate * q * q]]))
        if usable.any():
            self.kf.update(np.where(usable, z, 0.0)[:, None], R=np.eye(self.probes) * r,
                           H=usable[:, None].astype(float))  # a zero row of H adds nothing
        return ZoneEstimate(theta=float(self.kf.x[0, 0]), std=math.sqrt(max(float(self.kf.P[0, 0]), 0.0)),
                            probe_status=self._status(present), filled=not bool(usable.any()))

    def _judge(self, present: np.ndarray) -> None:
        """Advance the drift flags from the smoothed innovations of the probes heard this step."""
        c = self.cfg
        for i in np.flatnonzero(present):
            m = float(self.ewma[i])
            if self.drifting[i]:
                bad = abs(m) >= c.recover_threshold
            else:
                others = [float(self.ewma[j]) for j in range(self.probes)
                          if j != i and present[j] and not self.drifting[j]]
                ref = statistics.median(others) if others else 0.0
                bad = abs(m) > c.drift_threshold and abs(m - ref) > c.drift_threshold
            flip = not bad if self.drifting[i] else bad
            self.streak[i] = self.streak[i] + 1 if flip else 0
            if self.streak[i] >= c.confirm_steps:
                self.drifting[i] = not self.drifting[i]
                self.streak[i] = 0

    def _model_mismatch(self, usable: np.ndarray) -> bool:
        """Two or more trusted probes agreeing that the prediction is off."""
        m = self.ewma[usable]
        thr = self.cfg.mismatch_threshold
        return m.size >= 2 and (bool(np.all(m > thr)) or bool(np.all(m < -thr)))

    def _status(self, present: np.ndarray) -> tuple[str, ...]:
        """Absence wins over drift: a probe not heard this step is "missing" or "offline"."""
        out = []
        for i in range(self.probes):
            if not present[i]:
                out.append("offline" if self.missing[i] >= self.cfg.offline_after_steps else "missing")
            else:
                out.append("drifting" if self.drifting[i] else "ok")
        return tuple(out)

    def state_dict(self) -> dict[str, Any]:
        """Plain floats, ints and bools: JSON round trips them exactly."""
        return {"theta": float(self.kf.x[0, 0]), "var": float(self.kf.P[0, 0]), "ewma": self.ewma.tolist(),
                "missing": self.missing.tolist(), "drifting": self.drifting.tolist(),
                "streak": self.streak.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved; the model and config come from the constructor."""
        if len(state["ewma"]) != self.probes:
            raise ValueError(f"state has {len(state['ewma'])} probes, estimator has {self.probes}")
        self.kf.x = np.array([[float(state["theta"])]])
        self.kf.P = np.array([[float(state["var"])]])
        self.ewma = np.asarray(state["ewma"], dtype=float)
        self.missing = np.asarray(state["missing"], dtype=np.int64)
        self.drifting = np.asarray(state["drifting"], dtype=bool)
        self.streak = np.asarray(state["streak"], dtype=np.int64)


def _numpy(a: Any) -> np.ndarray:
    return a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)


def models_from_twin_params(params: TwinParams, index: int, dt_s: float) -> list[ZoneSoilModel]:
    """Zone models of twin instance ``index`` (numpy or torch params; dt_s must be the twin's step)."""
    cols = {name: _numpy(getattr(params, name))[index] for name in SOIL_FIELDS}
    zones = len(cols["field_capacity"])
    return [ZoneSoilModel(**{k: float(v[z]) for k, v in cols.items()}, dt_s=float(dt_s))
            for z in range(zones)]


# ---- the vectorised filter (what the service runs) ----------------------------------------------

PROBE_STATUS = ("ok", "missing", "drifting", "offline")
"""Probe status names by code (:attr:`GreenhouseEstimate.status` holds the codes)."""
_OK, _MISSING, _DRIFTING, _OFFLINE = range(4)


@dataclass(frozen=True)
class _SoilArrays:
    """The six soil fields of many zones as (N, 1) columns, read by ``step_soil`` like TwinParams."""

    field_capacity: np.ndarray
    wilting_point: np.ndarray
    saturation: np.ndarray
    drain_frac: np.ndarray
    inv_stress_span: np.ndarray
    root_mm: np.ndarray

    @classmethod
    def of(cls, models: list[ZoneSoilModel]) -> _SoilArrays:
        return cls(**{name: np.array([[getattr(m, name)] for m in models], dtype=float)
                      for name in SOIL_FIELDS})

    @classmethod
    def concat(cls, parts: list[_SoilArrays]) -> _SoilArrays:
        return cls(**{name: np.concatenate([getattr(p, name) for p in parts]) for name in SOIL_FIELDS})


@dataclass(frozen=True)
class GreenhouseEstimate:
    """One greenhouse's estimates as arrays over its Z zones (P probes each)."""

    theta: np.ndarray
    """(Z,) moisture [m3/m3]."""
    std: np.ndarray
    """(Z,) its standard deviation."""
    status: np.ndarray
    """(Z, P) probe status codes, names in :data:`PROBE_STATUS`."""
    filled: np.ndarray
    """(Z,) bool: no probe was used this step (theta is the model prediction)."""

    def probe_status(self) -> list[list[str]]:
        return [[PROBE_STATUS[c] for c in row] for row in self.status.tolist()]

    def zones(self) -> list[ZoneEstimate]:
        """The same estimates as :class:`ZoneEstimate` records (the per-zone API)."""
        return [ZoneEstimate(theta=t, std=s, probe_status=tuple(st), filled=f)
                for t, s, st, f in zip(self.theta.tolist(), self.std.tolist(), self.probe_status(),
                                       self.filled.tolist(), strict=True)]


def _kalman_step(soil: _SoilArrays, dt_s: np.ndarray, cfg: EstimatorConfig, state: dict[str, np.ndarray],
                 z: np.ndarray, irrigation_mm: np.ndarray, etc_mm: np.ndarray) -> dict[str, np.ndarray]:
    """:meth:`ZoneEstimator.update` for N zones at once; ``state`` arrays are replaced, not mutated.

    The filter is :func:`twin.kalman.kalman_step`, the twin's, with the N zones as its batch
    (shape [N, 1]), in float64 and with the reference's slope step; this adds the bookkeeping
    the service reports: steps since a probe was last heard and each probe's status.
    """
    irr = np.where(np.isfinite(irrigation_mm), irrigation_mm, 0.0)[:, None]
    etc = np.where(np.isfinite(etc_mm), etc_mm, 0.0)[:, None]
    prior = KalmanState(theta=state["theta"][:, None], var=state["var"][:, None],
                        ewma=state["ewma"][:, None, :], drifting=state["drifting"][:, None, :].astype(float),
                        streak=state["streak"][:, None, :].astype(float))
    post = kalman_step(np, cfg, cast(TwinParams, soil), prior, z[:, None, :], irr, etc,
                       (dt_s / 3600.0)[:, None], slope_h=REFERENCE_SLOPE_H)
    present = np.isfinite(z)
    drifting = post.drifting[:, 0, :] >= 0.5
    missing = np.where(present, 0, state["missing"] + 1)
    status = np.where(present, np.where(drifting, _DRIFTING, _OK),
                      np.where(missing >= cfg.offline_after_steps, _OFFLINE, _MISSING)).astype(np.int8)
    return {"theta": post.theta[:, 0], "var": post.var[:, 0], "ewma": post.ewma[:, 0, :], "missing": missing,
            "drifting": drifting, "streak": post.streak[:, 0, :].astype(np.int64), "status": status,
            "filled": ~(present & ~drifting).any(axis=1)}


STATE_KEYS = ("theta", "var", "ewma", "missing", "drifting", "streak")


class GreenhouseEstimator:
    """All zones of a greenhouse in one vectorised filter, persisted as one JSON-able dict.

    Each zone follows :class:`ZoneEstimator` (the filterpy reference) equation for equation;
    :func:`update_many` steps many greenhouses in one call, as the service's micro-batches do.
    """

    def __init__(self, models: list[ZoneSoilModel], probes_per_zone: int = 2,
                 config: EstimatorConfig | None = None) -> None:
        self.probes_per_zone = int(probes_per_zone)
        self.cfg = config or EstimatorConfig()
        self.models = list(models)
        self.soil = _SoilArrays.of(self.models)
        self.dt_s = np.array([m.dt_s for m in self.models], dtype=float)
        z, p = len(self.models), self.probes_per_zone
        # Broad prior over the plant-available range, as the reference filter starts.
        self.state: dict[str, np.ndarray] = {
            "theta": np.array([0.5 * (m.field_capacity + m.wilting_point) for m in self.models], dtype=float),
            "var": np.array([(0.5 * (m.field_capacity - m.wilting_point)) ** 2 for m in self.models],
                            dtype=float),
            "ewma": np.zeros((z, p)), "missing": np.zeros((z, p), dtype=np.int64),
            "drifting": np.zeros((z, p), dtype=bool), "streak": np.zeros((z, p), dtype=np.int64)}

    @property
    def num_zones(self) -> int:
        return len(self.models)

    @property
    def soils(self) -> TwinParams:
        """The zones' soils as (Z, 1) columns, read by the twin's soil functions like TwinParams."""
        return cast(TwinParams, self.soil)

    @classmethod
    def from_twin_params(cls, params: TwinParams, index: int, dt_s: float, probes_per_zone: int = 2,
                         config: EstimatorConfig | None = None) -> GreenhouseEstimator:
        return cls(models_from_twin_params(params, index, dt_s), probes_per_zone, config)

    def _inputs(self, soil_vwc: Any, irrigation_mm: Any,
                etc_mm: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = self.num_zones
        vwc = np.asarray(soil_vwc, dtype=float).reshape(n, self.probes_per_zone)
        irr = np.broadcast_to(np.asarray(irrigation_mm, dtype=float), (n,))
        etc = np.broadcast_to(np.asarray(etc_mm, dtype=float), (n,))
        return vwc, irr, etc

    def update(self, soil_vwc: Any, irrigation_mm: Any, etc_mm: Any) -> list[ZoneEstimate]:
        """``soil_vwc`` (Z, P), NaN/None where missing; ``irrigation_mm`` (Z,); ``etc_mm`` (Z,) or scalar."""
        return update_many([self], [soil_vwc], [irrigation_mm], [etc_mm])[0].zones()

    def state_dict(self) -> dict[str, Any]:
        s = self.state
        zones = [{"theta": float(s["theta"][i]), "var": float(s["var"][i]), "ewma": s["ewma"][i].tolist(),
                  "missing": s["missing"][i].tolist(), "drifting": s["drifting"][i].tolist(),
                  "streak": s["streak"][i].tolist()} for i in range(self.num_zones)]
        return {"version": STATE_VERSION, "probes_per_zone": self.probes_per_zone, "zones": zones}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore after a restart; refuses a state saved for another zone or probe layout."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"estimator state version {state.get('version')!r}, expected {STATE_VERSION}")
        zones = state["zones"]
        if len(zones) != self.num_zones or state["probes_per_zone"] != self.probes_per_zone:
            raise ValueError("estimator state was saved for a different zone/probe layout")
        if any(len(zs["ewma"]) != self.probes_per_zone for zs in zones):
            raise ValueError(f"estimator state does not have {self.probes_per_zone} probes in every zone")
        self.state = {"theta": np.array([float(zs["theta"]) for zs in zones]),
                      "var": np.array([float(zs["var"]) for zs in zones]),
                      "ewma": np.array([zs["ewma"] for zs in zones], dtype=float).reshape(len(zones), -1),
                      "missing": np.array([zs["missing"] for zs in zones],
                                          dtype=np.int64).reshape(len(zones), -1),
                      "drifting": np.array([zs["drifting"] for zs in zones],
                                           dtype=bool).reshape(len(zones), -1),
                      "streak": np.array([zs["streak"] for zs in zones],
                                         dtype=np.int64).reshape(len(zones), -1)}


def update_many(estimators: Sequence[GreenhouseEstimator], soil_vwc: Sequence[Any],
                irrigation_mm: Sequence[Any], etc_mm: Sequence[Any]) -> list[GreenhouseEstimate]:
    """One step of several greenhouses' filters in one vectorised pass (inputs as for ``update``).

    Greenhouses sharing a probe count and config are stacked zone by zone; each keeps its own
    state, so the result equals stepping them one by one.
    """
    if not len(estimators) == len(soil_vwc) == len(irrigation_mm) == len(etc_mm):
        raise ValueError("update_many needs one input of each kind per estimator")
    if len(set(map(id, estimators))) != len(estimators):
        raise ValueError("an estimator appears twice in one update_many call: step it in order instead")
    out: list[GreenhouseEstimate | None] = [None] * len(estimators)
    updates: list[tuple[GreenhouseEstimator, dict[str, np.ndarray]]] = []
    groups: dict[tuple[int, EstimatorConfig], list[int]] = {}
    for i, est in enumerate(estimators):
        groups.setdefault((est.probes_per_zone, est.cfg), []).append(i)
    for (_, cfg), idx in groups.items():
        ests = [estimators[i] for i in idx]
        inputs = [ests[k]._inputs(soil_vwc[i], irrigation_mm[i], etc_mm[i]) for k, i in enumerate(idx)]
        sizes = np.cumsum([e.num_zones for e in ests])[:-1]
        soil = ests[0].soil if len(ests) == 1 else _SoilArrays.concat([e.soil for e in ests])
        state = {k: np.concatenate([e.state[k] for e in ests]) for k in STATE_KEYS}
        new = _kalman_step(soil, np.concatenate([e.dt_s for e in ests]), cfg, state,
                           np.concatenate([v for v, _, _ in inputs]),
                           np.concatenate([r for _, r, _ in inputs]),
                           np.concatenate([e for _, _, e in inputs]))
        parts = {k: np.split(v, sizes) for k, v in new.items()}
        for k, (i, est) in enumerate(zip(idx, ests, strict=True)):
            updates.append((est, {key: parts[key][k] for key in STATE_KEYS}))
            out[i] = GreenhouseEstimate(theta=parts["theta"][k].copy(),
                                        std=np.sqrt(np.maximum(parts["var"][k], 0.0)),
                                        status=parts["status"][k], filled=parts["filled"][k])
    for est, state in updates:  # only once every group is computed: a failure leaves all states as they were
        est.state = state
    return [o for o in out if o is not None]
