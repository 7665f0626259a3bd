"""Named reward terms and their weighted sum.

Each term depends only on the state and the action of the step; the weighted terms are
returned one by one (they sum to the reward) so people, dashboards and the explanation code
can see why a step scored what it did.
"""

from __future__ import annotations

from typing import Any

from twin.backend import Array
from twin.config import TwinConfig
from twin.types import TwinParams

TERMS = ("moisture", "growth", "water", "energy")
GROWTH_EPS_MM_H = 0.05
"""Regularises the growth ratio at night, when both transpirations are near zero."""
GROWTH_CAP = 1.25


def moisture_term(xp: Any, params: TwinParams, theta: Array, tolerance: float) -> Array:
    """1 inside the target band, falling linearly to -1 at twice ``tolerance`` outside; zone mean."""
    below = params.band_low - theta
    above = theta - params.band_high
    dist = xp.maximum(xp.maximum(below, above), 0.0)
    return xp.mean(1.0 - xp.clip(dist * (1.0 / tolerance), 0.0, 2.0), axis=1)


def reward_terms(xp: Any, cfg: TwinConfig, params: TwinParams, theta: Array, uptake_mm: Array,
                 et0_natural_mm_h: Array, kc: Array, zone_water_l: Array, energy_kwh: Array
                 ) -> tuple[Array, dict[str, Array]]:
    """Weighted terms and their sum. Raw scales: moisture [-1, 1]; growth = actual transpiration over
    the unstressed transpiration under natural light [0, 1.25]; water = irrigation rate over the
    reference rate; energy = power over the installed pump + lamp power."""
    rc = cfg.reward
    dt_h = cfg.dt_h
    moisture = moisture_term(xp, params, theta, rc.band_tolerance_vwc)
    actual = xp.mean(uptake_mm, axis=1) * (1.0 / dt_h)
    potential = et0_natural_mm_h * kc
    growth = xp.clip((actual + GROWTH_EPS_MM_H) / (potential + GROWTH_EPS_MM_H), 0.0, GROWTH_CAP)
    area = cfg.zones * cfg.hydraulics.zone_area_m2
    water_mm = xp.sum(zone_water_l, axis=1) * (1.0 / area)
    water = water_mm * (1.0 / (rc.reference_water_mm_day * dt_h / 24.0))
    installed_kw = cfg.hydraulics.pump_rated_power_kw + cfg.climate.lamp_power_w_m2 * area / 1000.0
    energy = energy_kwh * (1.0 / (installed_kw * dt_h))
    weighted = {"moisture": rc.moisture * moisture, "growth": rc.growth * growth, "water": rc.water * water,
                "energy": rc.energy * energy}
    total = weighted["moisture"] + weighted["growth"] + weighted["water"] + weighted["energy"]
    return total, weighted
