"""Greenhouse air, light and crop demand: first-order responses to weather, sun and lamps.

Inside reference evapotranspiration is FAO-56 hourly Penman-Monteith (eq. 53) evaluated with
the inside air, the radiation transmitted by the cover plus the lamps' radiant share, and the
low air speed of a closed house. ET0 is linear in net radiation, so the unstressed demand under
natural light alone (the growth baseline) costs one multiply more, not a second evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from twin.backend import Array
from twin.config import ClimateConfig, CropConfig
from twin.et0 import atmospheric_pressure_kpa, psychrometric_constant_kpa_per_c

W_M2_TO_MJ_M2_H = 0.0036
LAMP_RADIANT_SHARE = 0.5
"""Share of lamp electrical power reaching the canopy as radiation (LED, the rest is heat)."""
PAR_PER_W_M2 = 2.05
"""umol/m2/s of PAR per W/m2 of global solar radiation."""
OUTSIDE_CO2_PPM = 420.0


def saturation_vapour_kpa(xp: Any, t_c: Array) -> Array:
    """FAO-56 eq. 11."""
    return 0.6108 * xp.exp(17.27 * t_c / (t_c + 237.3))


def crop_coefficient(xp: Any, crop: CropConfig, day: Array) -> tuple[Array, Array]:
    """FAO-56 single crop coefficient curve (fig. 25) and the season fraction elapsed."""
    return crop_kc(xp, crop, day), season_stage(xp, crop, day)


def crop_kc(xp: Any, crop: CropConfig, day: Array) -> Array:
    """The crop coefficient alone (the twin's step needs no stage)."""
    l1, l2, l3, l4 = crop.stage_days
    return (crop.kc_ini + (crop.kc_mid - crop.kc_ini) * xp.clip((day - l1) / l2, 0.0, 1.0)
            + (crop.kc_end - crop.kc_mid) * xp.clip((day - l1 - l2 - l3) / l4, 0.0, 1.0))


def season_stage(xp: Any, crop: CropConfig, day: Array) -> Array:
    """The season fraction elapsed alone (the observation needs no Kc)."""
    l1, l2, l3, l4 = crop.stage_days
    return xp.clip(day / (l1 + l2 + l3 + l4), 0.0, 1.0)


@dataclass(frozen=True)
class Demand:
    et0_mm_h: Array
    """[B] inside reference ET0 with natural light and lamps."""
    et0_natural_mm_h: Array
    """[B] the same under natural light only (growth baseline)."""
    es_kpa: Array
    """[B] saturation vapour pressure at the air temperature."""


def psychrometric_constant(cfg: ClimateConfig) -> float:
    """gamma at the site's elevation (FAO-56 eq. 7 and 8), a constant of the run."""
    return float(psychrometric_constant_kpa_per_c(float(atmospheric_pressure_kpa(cfg.elevation_m))))


def reference_et0(xp: Any, cfg: ClimateConfig, gamma: float, air_temp: Array, vapour_kpa: Array,
                  rs_natural_w_m2: Array, rs_lamp_w_m2: Array) -> Demand:
    """Inside hourly ET0 (FAO-56 eq. 53) for natural light and natural + lamp light."""
    u2 = cfg.inside_wind_m_s
    es = saturation_vapour_kpa(xp, air_temp)
    delta = 4098.0 * es / ((air_temp + 237.3) * (air_temp + 237.3))
    ea = xp.minimum(vapour_kpa, es)
    denom = 1.0 / (delta + gamma * (1.0 + 0.34 * u2))
    aero = gamma * (37.0 * u2) / (air_temp + 273.0) * (es - ea) * denom
    # Net radiation: albedo 0.23, a 10 % net long-wave loss under the cover; G = 0.1 Rn (eq. 45).
    rad_coef = 0.408 * delta * denom * (0.77 * 0.9 * 0.9 * W_M2_TO_MJ_M2_H)
    natural = rad_coef * rs_natural_w_m2 + aero
    total = natural + rad_coef * rs_lamp_w_m2
    return Demand(et0_mm_h=xp.maximum(total, 0.0), et0_natural_mm_h=xp.maximum(natural, 0.0), es_kpa=es)


@dataclass(frozen=True)
class AirOut:
    air_temp: Array
    vapour_kpa: Array
    rh_pct: Array
    co2: Array
    par: Array
    leaf_temp: Array


def heating_setpoint(xp: Any, cfg: ClimateConfig, rs_natural_w_m2: Array, lights: Array) -> Array:
    """The air's heating floor [degC]: the day setpoint while the crop is in light (sun up or lamps
    on, the light period a climate computer switches its setpoint on), the night setpoint otherwise."""
    in_light = xp.astype((rs_natural_w_m2 > 0.0) | (lights > 0.0), rs_natural_w_m2.dtype)
    return cfg.heating_night_c + (cfg.heating_day_c - cfg.heating_night_c) * in_light


def step_air(xp: Any, cfg: ClimateConfig, dt_s: float, air_temp: Array, vapour_kpa: Array, co2: Array,
             outside_temp: Array, outside_vapour_kpa: Array, rs_natural_w_m2: Array, lights: Array,
             transpiration_mm_h: Array, mean_ks: Array) -> AirOut:
    """First-order relaxation of air temperature, humidity and CO2 towards their equilibria."""
    a_t = math.exp(-dt_s / cfg.air_tau_s)
    a_e = math.exp(-dt_s / cfg.humidity_tau_s)
    a_c = math.exp(-dt_s / cfg.co2_tau_s)
    t_eq = xp.maximum(outside_temp + cfg.solar_gain_c_per_w_m2 * rs_natural_w_m2 + cfg.lamp_heat_c * lights,
                      heating_setpoint(xp, cfg, rs_natural_w_m2, lights))
    temp = t_eq + (air_temp - t_eq) * a_t
    es = saturation_vapour_kpa(xp, temp)
    e_eq = outside_vapour_kpa + cfg.transpiration_humidification_kpa_per_mm_h * transpiration_mm_h
    vapour = xp.minimum(e_eq + (vapour_kpa - e_eq) * a_e, 0.99 * es)
    par = PAR_PER_W_M2 * rs_natural_w_m2 + cfg.lamp_par_umol_m2_s * lights
    # Photosynthesis draws CO2 down in light; respiration builds it up in the dark.
    c_eq = xp.clip(OUTSIDE_CO2_PPM + 150.0 * xp.astype(par < 10.0, temp.dtype) - 0.12 * par, 280.0, 900.0)
    new_co2 = c_eq + (co2 - c_eq) * a_c
    vpd = es - vapour
    radiant = rs_natural_w_m2 + LAMP_RADIANT_SHARE * cfg.lamp_power_w_m2 * lights
    leaf = temp + 0.004 * radiant - 1.0 * vpd * mean_ks
    return AirOut(air_temp=temp, vapour_kpa=vapour, rh_pct=100.0 * vapour / es, co2=new_co2, par=par, leaf_temp=leaf)
