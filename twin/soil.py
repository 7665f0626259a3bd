"""Root-zone soil water balance per zone (FAO-56 chapter 8, one bucket per zone).

Fluxes are applied in a fixed order (irrigation, overflow above saturation, drainage above
field capacity, crop uptake limited by the water-stress coefficients), and each flux is
returned exactly as applied, so irrigation = storage change + drainage + uptake holds to
rounding.

Water stress acts on both sides. Dry: FAO-56 Ks (eq. 84) below the readily available water.
Wet: AquaCrop's aeration stress (Raes et al., AquaCrop reference manual ch. 3, "aeration stress";
AquaCrop-OS ``aeration_stress``): above the anaerobiosis point, ``Aer`` vol % below saturation,
roots lack oxygen and transpiration falls linearly to zero at saturation, the full cut reached
after ``LagAer`` days of waterlogging and the day counter reset as soon as the zone drains below
the point. Both multiply the crop's uptake, so the crop's assimilation (``twin.crop``, through
actual over potential uptake) pays for over- as well as under-watering.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twin.backend import Array
from twin.types import TwinParams


@dataclass(frozen=True)
class SoilOut:
    theta: Array
    """[B, Z] water content after the step, m3/m3."""
    irrigation_mm: Array
    """[B, Z]"""
    drainage_mm: Array
    """[B, Z] overflow above saturation plus drainage above field capacity."""
    uptake_mm: Array
    """[B, Z] crop evapotranspiration actually taken from the root zone."""
    ks: Array
    """[B, Z] FAO-56 water-stress coefficient in [0, 1] (the aeration stress is the caller's input)."""


def water_stress(xp: Any, params: TwinParams, theta: Array) -> Array:
    """FAO-56 eq. 84 in water-content form: Ks = (theta - wp) / ((1 - p)(fc - wp)), clipped to [0, 1]."""
    return xp.clip((theta - params.wilting_point) * params.inv_stress_span, 0.0, 1.0)


def aeration_point(params: TwinParams, aeration_vol_pct: float) -> Array:
    """[B, Z] water content above which the roots lack air: saturation less ``Aer`` vol %."""
    return params.saturation - aeration_vol_pct * 0.01


def aeration_stress(xp: Any, params: TwinParams, theta: Array, aer_days: Array, aeration_vol_pct: float,
                    lag_days: float) -> Array:
    """AquaCrop's Ks_aer in [0, 1] for zones ``aer_days`` into waterlogging (0 below the point).

    The cut grows linearly with the days above the point until ``lag_days``, then holds at
    (sat - theta) / (sat - aer): AquaCrop counts whole days, the twin the same days continuously.
    """
    span = aeration_vol_pct * 0.01
    depth = xp.clip((theta - aeration_point(params, aeration_vol_pct)) * (1.0 / span), 0.0, 1.0)
    onset = xp.clip(aer_days * (1.0 / lag_days), 0.0, 1.0) if lag_days > 0.0 else 1.0
    return 1.0 - onset * depth


def waterlogged_days(xp: Any, params: TwinParams, theta: Array, aer_days: Array, aeration_vol_pct: float,
                     lag_days: float, dt_days: float) -> Array:
    """The waterlogging day counter after a step that started at ``theta``: it counts up to the lag
    while the zone sits above the anaerobiosis point and restarts at 0 once it drains below."""
    above = theta > aeration_point(params, aeration_vol_pct)
    return xp.where(above, xp.minimum(aer_days + dt_days, lag_days), 0.0)


def step_soil(xp: Any, params: TwinParams, theta: Array, irrigation_l: Array, zone_area_m2: float,
              etc_mm: Array, ks_aer: Array | float = 1.0) -> SoilOut:
    """Advance every zone's bucket; ``etc_mm`` [B, 1] or [B, Z] is the unstressed crop demand ET0*Kc
    and ``ks_aer`` [B, Z] the aeration stress of :func:`aeration_stress` (1.0: none)."""
    irrigation_mm = irrigation_l * (1.0 / zone_area_m2)
    new, overflow, drain, uptake, ks = _bucket(xp, params, theta, irrigation_mm, etc_mm, ks_aer)
    return SoilOut(theta=new, irrigation_mm=irrigation_mm, drainage_mm=(overflow + drain) * params.root_mm,
                   uptake_mm=uptake * params.root_mm, ks=ks)


def next_theta(xp: Any, params: TwinParams, theta: Array, irrigation_mm: Array, etc_mm: Array) -> Array:
    """Only the new water content of :func:`step_soil` (same arithmetic, same bits), for the estimator.

    Inputs broadcast; the estimator calls it at three thetas per zone for the bucket's slope. It
    leaves aeration stress out: the filter keeps no waterlogging counter, and the uptake it would
    cut is within the process noise of a zone that wet.
    """
    return _bucket(xp, params, theta, irrigation_mm, etc_mm)[0]


def _bucket(xp: Any, params: TwinParams, theta: Array, irrigation_mm: Array, etc_mm: Array,
            ks_aer: Array | float = 1.0) -> tuple[Array, Array, Array, Array, Array]:
    """The fluxes in their fixed order, in m3/m3: (new theta, overflow, drain, uptake, ks)."""
    x = xp
    inv_root = 1.0 / params.root_mm
    wet = theta + irrigation_mm * inv_root
    overflow = x.maximum(wet - params.saturation, 0.0)
    wet = wet - overflow
    drain = x.maximum(wet - params.field_capacity, 0.0) * params.drain_frac
    wet = wet - drain
    ks = water_stress(x, params, wet)
    demand = (etc_mm * ks * inv_root if isinstance(ks_aer, float) and ks_aer == 1.0
              else etc_mm * (ks * ks_aer) * inv_root)
    uptake = x.minimum(demand, x.maximum(wet - params.wilting_point, 0.0))
    return wet - uptake, overflow, drain, uptake, ks
