"""The crop beside one greenhouse: what no sensor measures, estimated from what the sensors do.

A :class:`CropTwin` runs the twin's own crop model (:mod:`twin.crop`, the same pure functions) on
the greenhouse's telemetry (PAR at the canopy, leaf temperature, CO2) and its root-zone water
stress on both sides (the Kalman estimate: dry below the readily available water, short of air
above the anaerobiosis point, with the days each zone has been waterlogged kept here), so the
policy's crop features (crop age, today's light) and the yield to date come from the greenhouse
itself, not from constants. Its state is part of the controller's snapshot, so a restart continues
the same crop.

Today's lamp hours are not counted here: the controller's count (the one the safety clipper caps)
is the only one, so the observation, the cap and the API cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from twin.climate import season_stage
from twin.config import CropConfig
from twin.crop import CropGrowthConfig, CropState, initial_crop, leaf_area_index, step_crop
from twin.soil import aeration_stress, water_stress, waterlogged_days
from twin.types import TwinParams

CROP_DAY0 = 60.0
"""Crop age [days since planting] assumed when the service first sees a greenhouse."""


def initial_pools(crop: CropConfig, growth: CropGrowthConfig, day: float, temp_c: float) -> CropState:
    """The pools :func:`twin.crop.initial_crop` gives a crop ``day`` days old whose 24-h canopy
    temperature starts at ``temp_c``, as arrays of one."""
    return initial_crop(np, growth, np.array([float(day)]), np.array([float(temp_c)]),
                        season_days=float(sum(crop.stage_days)))


@dataclass
class CropTwin:
    """One greenhouse's crop and today's light (site-local calendar day)."""

    crop: CropConfig = field(default_factory=CropConfig)
    growth: CropGrowthConfig = field(default_factory=CropGrowthConfig)
    day: float = CROP_DAY0
    """Crop age [days since planting]."""
    dli_today: float = 0.0
    """PAR at the canopy since local midnight, natural plus lamps [mol/m2]."""
    yield_kg_m2: float = 0.0
    """Fresh fruit harvested since the twin started [kg/m2]."""
    date: str | None = None
    """The local calendar day today's totals count."""
    state: CropState | None = None
    """The crop's pools, arrays of one; None until the first telemetry gives a temperature."""
    aer_days: list[float] = field(default_factory=list)
    """Days each zone has sat above its anaerobiosis point (:func:`twin.soil.waterlogged_days`);
    empty until the first estimate."""

    def root_zone_stress(self, theta: np.ndarray, soils: TwinParams,
                         dt_s: float) -> tuple[float, list[float]]:
        """The crop's water-stress factor in [0, 1] from the zones' estimated moisture ``theta`` (Z,)
        on their ``soils`` ((Z, 1) columns, the estimator's), and the waterlogging counters after this
        step: the zone mean of the twin's dry-side Ks times its aeration Ks, the counters advanced by
        the twin's rule (:func:`twin.soil.waterlogged_days`). Nothing is stored: the caller keeps the
        counters once the crop step they belong to has run, so a retried step does not count its
        waterlogging twice."""
        column = theta.reshape(-1, 1)
        days = np.array(self.aer_days if len(self.aer_days) == theta.size
                        else [0.0] * theta.size).reshape(-1, 1)
        vol, lag = self.crop.aeration_vol_pct, self.crop.aeration_lag_days
        ks_aer = aeration_stress(np, soils, column, days, vol, lag)
        after = waterlogged_days(np, soils, column, days, vol, lag, dt_s / 86400.0).ravel().tolist()
        return float(np.mean(water_stress(np, soils, column) * ks_aer)), after

    def account(self, local_ts: datetime, dt_s: float, par_umol_m2_s: float | None) -> None:
        """Age the crop and book the light of the ``dt_s`` seconds before ``local_ts``; a new local
        day starts today's light at zero."""
        date = local_ts.date().isoformat()
        if date != self.date:
            self.date, self.dli_today = date, 0.0
        self.day += dt_s / 86400.0
        if par_umol_m2_s is not None and np.isfinite(par_umol_m2_s):
            self.dli_today += max(float(par_umol_m2_s), 0.0) * dt_s * 1e-6

    def pools(self, temp_c: float) -> CropState:
        """The crop's pools; before the first telemetry grew them, the initial pools for the crop's age
        with the 24-h canopy temperature at ``temp_c`` (the start :func:`grow_many` would give)."""
        return (self.state if self.state is not None
                else initial_pools(self.crop, self.growth, self.day, temp_c))

    def grow(self, dt_s: float, par_umol_m2_s: float, co2_ppm: float, leaf_temp_c: float,
             water_stress: float) -> None:
        """One crop step (photosynthesis, growth, harvest) under the measured climate; ``water_stress``
        is the root zone's stress factor in [0, 1] (1: unstressed)."""
        grow_many([self], [dt_s], [par_umol_m2_s], [co2_ppm], [leaf_temp_c], [water_stress])

    def estimates(self, lamp_hours_today: float) -> dict[str, Any]:
        """What the twin believes now, for the API and the decision record (rounded); today's lamp
        hours are the controller's count, shown beside the light they added."""
        out: dict[str, Any] = {
            "crop_day": round(self.day, 3),
            "growth_stage": round(float(season_stage(np, self.crop, np.float64(self.day))), 4),
            "dli_today_mol_m2": round(self.dli_today, 3),
            "lamp_hours_today": round(lamp_hours_today, 3),
            "yield_kg_m2": round(self.yield_kg_m2, 5), "lai": None, "fruit_load_g_m2": None,
            "waterlogged_days": [round(d, 3) for d in self.aer_days]}
        if self.state is not None:
            out["lai"] = round(float(leaf_area_index(np, self.growth, self.state.c_leaf)[0]), 3)
            out["fruit_load_g_m2"] = round(float(self.state.c_fruit[0]) / 1000.0, 2)
        return out

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state (the controller's snapshot carries it)."""
        return {"day": self.day, "dli_today": self.dli_today, "yield_kg_m2": self.yield_kg_m2,
                "date": self.date, "aer_days": list(self.aer_days),
                "state": (None if self.state is None
                          else {k: float(v[0]) for k, v in self.state._asdict().items()})}

    def restore(self, snap: dict[str, Any]) -> None:
        self.day, self.dli_today = float(snap["day"]), float(snap["dli_today"])
        self.yield_kg_m2 = float(snap["yield_kg_m2"])
        self.date = snap["date"]
        self.aer_days = [float(d) for d in snap.get("aer_days", [])]
        pools = snap.get("state")
        self.state = (None if pools is None
                      else CropState(**{k: np.array([float(v)]) for k, v in pools.items()}))


def grow_many(twins: list[CropTwin], dt_s: list[float], par_umol_m2_s: list[float], co2_ppm: list[float],
              leaf_temp_c: list[float], water_stress: list[float]) -> None:
    """:meth:`CropTwin.grow` for several greenhouses in one call of the crop model (a micro-batch's
    greenhouses share its cost). Twins sharing crop parameters and step length are grown together."""
    groups: dict[tuple[CropGrowthConfig, float], list[int]] = {}
    for i, twin in enumerate(twins):
        if twin.state is None:
            twin.state = initial_pools(twin.crop, twin.growth, twin.day, leaf_temp_c[i])
        groups.setdefault((twin.growth, float(dt_s[i])), []).append(i)
    for (growth, dt), idx in groups.items():
        members = [twins[i] for i in idx]
        state = CropState(*(np.concatenate([getattr(t.state, f) for t in members])
                            for f in CropState._fields))

        def col(values: list[float], lo: float = -np.inf, hi: float = np.inf) -> np.ndarray:
            return np.clip(np.array([float(values[i]) for i in idx]), lo, hi)  # noqa: B023 - used at once

        new, fruit = step_crop(np, growth, state, col(par_umol_m2_s, 0.0), col(co2_ppm),
                               col(leaf_temp_c), col(water_stress, 0.0, 1.0), dt)
        for k, twin in enumerate(members):
            twin.state = CropState(*(v[k:k + 1] for v in new))
            twin.yield_kg_m2 += float(fruit[k])
