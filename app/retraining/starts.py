"""Logged start states and how far the twin's state distributions lie from the logged ones.

The fine-tuning's episodes start where a greenhouse really was (:func:`start_states`: a seeded
sample of its window's steps, each with its moisture estimate, crop age and local time of year,
in its calibrated soils). :func:`distances` says whether that, and the calibration, brought the
twin closer to the log: the Wasserstein-1 distance between the logged and the simulated zone
moisture at the training starts and over a short rollout of the served controller, and between
the logged and the simulated daily irrigation of that rollout, each "before" (the soil classes'
table twin, random starts) and "after" (the calibrated twin, logged starts).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from scipy.stats import wasserstein_distance

from app.retraining.window import GreenhouseWindow
from control.crop_twin import CROP_DAY0
from policy.residual import interlock
from policy.tuning import served_expert
from twin import GreenhouseTwin
from twin.config import StartState, TwinConfig


def start_states(window: GreenhouseWindow, calibration: dict[str, Any], limit: int,
                 seed: int) -> list[StartState]:
    """Up to ``limit`` of the window's steps with every zone's moisture logged (a seeded sample, in
    time order), in the greenhouse's calibrated soils and root depth."""
    moisture = window.logged_moisture()
    rows = np.flatnonzero(np.all(np.isfinite(moisture), axis=1))
    if rows.size > limit:
        rows = np.sort(np.random.default_rng(seed).choice(rows, size=limit, replace=False))
    hours = window.hour_of_year if window.hour_of_year is not None else np.zeros(window.steps)
    crop = window.crop_day if window.crop_day is not None else np.full(window.steps, np.nan)
    soils = tuple(tuple(float(v) for v in s) for s in calibration["zone_soils"])
    out = []
    for t in rows:
        day = float(crop[t]) if math.isfinite(crop[t]) else CROP_DAY0  # the service's own assumption
        out.append(StartState(hour_of_year=float(hours[t]), crop_day=max(day, 0.0),
                              theta=tuple(float(np.clip(v, 0.0, 1.0)) for v in moisture[t]),
                              zone_soils=soils, root_mm=float(calibration["root_mm"])))  # type: ignore[arg-type]
    return out


def before_after(window: GreenhouseWindow, starts: list[StartState],
                 dt_s: float) -> tuple[TwinConfig, TwinConfig]:
    """The greenhouse's twin before calibration (its soil classes' table values, random starts)
    and after (its fitted soils and root depth, its logged starts)."""
    before = TwinConfig(fixed_soils=window.soils, dt_s=dt_s)
    return before, dataclasses.replace(before, start_states=tuple(starts))


def _w1(logged: np.ndarray, simulated: np.ndarray) -> float:
    a, b = logged[np.isfinite(logged)], simulated[np.isfinite(simulated)]
    return float(wasserstein_distance(a, b)) if a.size and b.size else math.nan


def logged_daily_irrigation(window: GreenhouseWindow) -> np.ndarray:
    """Per zone and whole logged day, the irrigation [mm/day]; a window shorter than a day gives
    its mean rate scaled to a day."""
    per_day = max(1, round(86_400.0 / window.dt_s))
    days = window.steps // per_day
    if days == 0:
        return window.irrigation_mm.mean(axis=0) * per_day
    return window.irrigation_mm[:days * per_day].reshape(days, per_day, -1).sum(axis=1).reshape(-1)


def _rollout(cfg: TwinConfig, instances: int, days: float, seed: int) -> dict[str, np.ndarray]:
    """Start moisture, then the served controller (behind the interlock) for ``days``: moisture
    as observed each step and irrigation per zone and day."""
    import torch

    twin = GreenhouseTwin(instances, backend="numpy", seed=seed, config=cfg)
    obs = twin.reset()
    start = np.asarray(twin.state.theta, dtype=np.float64).reshape(-1)
    z = cfg.zones
    moisture_slice = twin.observation_spec.slices["moisture"]
    served = served_expert(z)
    per_day = max(1, round(86_400.0 / cfg.dt_s))
    steps = round(days * per_day)
    moisture, irrigation = [], np.zeros((steps, instances, z))
    for t in range(steps):
        obs_t = torch.as_tensor(np.asarray(obs), dtype=torch.float32)
        action = interlock(served(obs_t), z, obs_t).numpy()
        obs, _, _, _, info = twin.step(action)
        moisture.append(np.asarray(obs[:, moisture_slice], dtype=np.float64))
        irrigation[t] = np.asarray(info["irrigation_mm"], dtype=np.float64)
    whole = steps // per_day
    daily = irrigation[:whole * per_day].reshape(whole, per_day, instances, z).sum(axis=1)
    return {"start": start, "moisture": np.concatenate(moisture).reshape(-1),
            "daily_irrigation": daily.reshape(-1)}


def distances(window: GreenhouseWindow, starts: list[StartState], *, instances: int, days: float, seed: int,
              dt_s: float = 600.0) -> dict[str, Any]:
    """Wasserstein-1 between logged and simulated states, before and after the calibration:
    ``start_moisture`` and ``rollout_moisture`` [m3/m3], ``daily_irrigation_mm`` [mm/day]."""
    days = max(days, 1.0)  # whole days at least: the irrigation is compared per day
    logged_moisture = window.logged_moisture().reshape(-1)
    logged_irrigation = logged_daily_irrigation(window)
    out: dict[str, Any] = {"instances": instances, "rollout_days": days, "start_states": len(starts)}
    if not starts:
        return out | {"why": "no step of the window has every zone's moisture"}
    sims = {name: _rollout(cfg, instances, days, seed)
            for name, cfg in zip(("before", "after"), before_after(window, starts, dt_s), strict=True)}
    for key, logged, sim_key in (("start_moisture", logged_moisture, "start"),
                                 ("rollout_moisture", logged_moisture, "moisture"),
                                 ("daily_irrigation_mm", logged_irrigation, "daily_irrigation")):
        out[key] = {name: _w1(logged, sim[sim_key]) for name, sim in sims.items()}
    return out


def describe(greenhouse_id: str, result: dict[str, Any]) -> str:
    """One line: each distance before -> after."""
    parts = []
    for key, unit in (("start_moisture", "m3/m3"), ("rollout_moisture", "m3/m3"),
                      ("daily_irrigation_mm", "mm/day")):
        d = result.get(key)
        if d:
            parts.append(f"{key} {d['before']:.4f} -> {d['after']:.4f} {unit}")
    body = ", ".join(parts) if parts else result.get("why", "no distances")
    return f"{greenhouse_id}: logged vs simulated (W1, before -> after calibration): {body}"
