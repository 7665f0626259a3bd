"""Stage 2: calibrate each greenhouse's twin against its logged moisture (the twin's scipy fit).

Per zone: the soil class's table values are the "before" twin, :func:`twin.calibration.fit_soil_parameters`
the "after"; both are reported as the RMSE of simulated against logged moisture and as the
distance (Wasserstein-1, m3/m3) between the simulated and the logged moisture distributions. A
zone the fit cannot pin down (too few readings, a failed fit) keeps its table values and says why.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import wasserstein_distance

from app.retraining.window import GreenhouseWindow
from twin.calibration import SoilLog, fit_soil_parameters, simulate_zone
from twin.config import SOIL_INDEX, SOIL_TYPES, CropConfig


def _table_params(soil: str) -> dict[str, float]:
    s = SOIL_TYPES[SOIL_INDEX[soil]]
    r_lo, r_hi = CropConfig().root_depth_m
    return {"field_capacity": s.field_capacity, "wilting_point": s.wilting_point, "saturation": s.saturation,
            "hourly_retention": s.hourly_retention, "root_mm": 500.0 * (r_lo + r_hi)}


def _fit_error(params: dict[str, float], log: SoilLog) -> tuple[float, float]:
    """(RMSE, Wasserstein-1) of the simulated against the logged moisture, over the valid readings."""
    sim = simulate_zone(params, log)
    valid = log.valid
    obs, got = log.moisture_vwc[valid], sim[valid]
    if obs.size == 0:
        return math.nan, math.nan
    return float(np.sqrt(np.mean((got - obs) ** 2))), float(wasserstein_distance(obs, got))


def _airless(params: dict[str, float]) -> float:
    """The highest field capacity the twin takes: a root zone at rest keeps air (the anaerobiosis
    point, aeration_vol_pct under saturation), less a margin."""
    return params["saturation"] - CropConfig().aeration_vol_pct * 0.01 - 1e-3


def calibrate_zone(soil: str, log: SoilLog) -> dict[str, Any]:
    """One zone: table values, fitted values, and the fit error of each."""
    before = _table_params(soil)
    rmse_b, dist_b = _fit_error(before, log)
    out: dict[str, Any] = {"soil": soil, "steps": log.steps, "readings": int(log.valid.sum()),
                           "before": {"params": before, "rmse": rmse_b, "distance": dist_b}}
    try:
        fit = fit_soil_parameters(log, fixed={"saturation": before["saturation"]})
    except ValueError as exc:
        out.update(after=None, fitted=False, why=str(exc))
        return out
    params = {k: float(fit.params[k]) for k in ("field_capacity", "wilting_point", "saturation",
                                                "hourly_retention", "root_mm", "theta0")}
    rmse_a, dist_a = _fit_error(params, log)
    usable = fit.success and math.isfinite(rmse_a) and not rmse_a > rmse_b
    why = "" if usable else f"fit not better than the table ({fit.message})"
    # No field capacity fits between a wilting point this high and the anaerobiosis point: the
    # twin would refuse the soil (a short window can put the wilting point there).
    if usable and not params["wilting_point"] < _airless(params):
        usable, why = False, (f"fitted wilting point {params['wilting_point']:.3f} leaves no field capacity "
                              f"under the anaerobiosis point {_airless(params):.3f}")
    out.update(after={"params": params, "rmse": rmse_a, "distance": dist_a}, fitted=bool(usable), why=why)
    return out


def calibrate_greenhouse(window: GreenhouseWindow) -> dict[str, Any]:
    """Every zone of one greenhouse, plus the soils and root depth its calibrated twin uses."""
    zones = [calibrate_zone(soil, window.soil_log(z)) for z, soil in enumerate(window.soils)]
    soils, roots = [], []
    for z in zones:
        p = z["after"]["params"] if z["fitted"] else z["before"]["params"]
        # The twin needs air in a root zone at rest: field capacity stays under the anaerobiosis point.
        fc = min(max(p["field_capacity"], p["wilting_point"] + 1e-3), _airless(p))
        soils.append([fc, p["wilting_point"], p["saturation"], min(max(p["hourly_retention"], 1e-3), 0.9999)])
        roots.append(p["root_mm"])
    used = [z["after"] if z["fitted"] else z["before"] for z in zones]
    return {"greenhouse_id": window.greenhouse_id, "steps": window.steps, "dt_s": window.dt_s,
            "skipped_decisions": window.skipped, "zones": zones, "zone_soils": soils,
            "root_mm": float(np.median(roots)),
            "rmse_before": _mean([z["before"]["rmse"] for z in zones]),
            "rmse_after": _mean([u["rmse"] for u in used]),
            "distance_before": _mean([z["before"]["distance"] for z in zones]),
            "distance_after": _mean([u["distance"] for u in used])}


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan
