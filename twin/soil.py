"""Root-zone soil water balance per zone (FAO-56 chapter 8, one bucket per zone).

Fluxes are applied in a fixed order (irrigation, overflow above saturation, drainage above
field capacity, crop uptake limited by the water-stress coefficient Ks), and each flux is
returned exactly as applied, so irrigation = storage change + drainage + uptake holds to
rounding.
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
    """[B, Z] FAO-56 water-stress coefficient in [0, 1]."""


def water_stress(xp: Any, params: TwinParams, theta: Array) -> Array:
    """FAO-56 eq. 84 in water-content form: Ks = (theta - wp) / ((1 - p)(fc - wp)), clipped to [0, 1]."""
    return xp.clip((theta - params.wilting_point) * params.inv_stress_span, 0.0, 1.0)


def step_soil(xp: Any, params: TwinParams, theta: Array, irrigation_l: Array, zone_area_m2: float,
              etc_mm: Array) -> SoilOut:
    """Advance every zone's bucket; ``etc_mm`` [B, 1] or [B, Z] is the unstressed crop demand ET0*Kc."""
    irrigation_mm = irrigation_l * (1.0 / zone_area_m2)
    new, overflow, drain, uptake, ks = _bucket(xp, params, theta, irrigation_mm, etc_mm)
    return SoilOut(theta=new, irrigation_mm=irrigation_mm, drainage_mm=(overflow + drain) * params.root_mm,
                   uptake_mm=uptake * params.root_mm, ks=ks)


def next_theta(xp: Any, params: TwinParams, theta: Array, irrigation_mm: Array, etc_mm: Array) -> Array:
    """Only the new water content of :func:`step_soil` (same arithmetic, same bits), for the estimator.

    Inputs broadcast; the estimator calls it at three thetas per zone for the bucket's slope.
    """
    return _bucket(xp, params, theta, irrigation_mm, etc_mm)[0]


def _bucket(xp: Any, params: TwinParams, theta: Array, irrigation_mm: Array, etc_mm: Array
            ) -> tuple[Array, Array, Array, Array, Array]:
    """The fluxes in their fixed order, in m3/m3: (new theta, overflow, drain, uptake, ks)."""
    x = xp
    inv_root = 1.0 / params.root_mm
    wet = theta + irrigation_mm * inv_root
    overflow = x.maximum(wet - params.saturation, 0.0)
    wet = wet - overflow
    drain = x.maximum(wet - params.field_capacity, 0.0) * params.drain_frac
    wet = wet - drain
    ks = water_stress(x, params, wet)
    uptake = x.minimum(etc_mm * ks * inv_root, x.maximum(wet - params.wilting_point, 0.0))
    return wet - uptake, overflow, drain, uptake, ks
