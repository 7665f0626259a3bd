"""Greenhouse air, light and crop demand: the house's climate computer and its heat, vapour and CO2
balances, per step.

The climate is the one a Dutch glasshouse runs (GreenLight, Katzin et al. 2021, as the reference):
heating to day and night setpoints, vents above a ventilation setpoint and a humidity limit, CO2
dosed to a setpoint in light, the lamps' heat in the heat balance. Each step solves the balances
for their equilibrium and relaxes towards it (``step_air``); ``tests/twin/test_reference_greenlight.py``
holds the result to GreenLight on its own weather.

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
from twin.et0 import (
    SVP_C_C,
    SVP_SLOPE_K,
    atmospheric_pressure_kpa,
    psychrometric_constant_kpa_per_c,
    saturation_vapour_kpa,
)

W_M2_TO_MJ_M2_H = 0.0036
PAR_PER_W_M2 = 2.05
"""umol/m2/s of PAR per W/m2 of global solar radiation."""
OUTSIDE_CO2_PPM = 420.0


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
    delta = SVP_SLOPE_K * es / ((air_temp + SVP_C_C) * (air_temp + SVP_C_C))  # eq. 13, es computed once
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
    heat_w_m2: Array
    """[B] heat the heating system delivers to hold its setpoint (boiler output, per m2 floor)."""
    co2_dose_mg_m2_s: Array
    """[B] CO2 dosed to hold the setpoint, at most the dosing capacity."""
    vent_m3_m2_s: Array
    """[B] air exchange with outside: leakage plus what the vents open for heat or humidity."""


RHO_CP_AIR = 1200.0
"""Volumetric heat capacity of air [J m-3 K-1]."""
LATENT_HEAT_J_KG = 2.45e6
"""Latent heat of vaporisation at about 20 degC [J kg-1] (FAO-56 eq. 3-1)."""
WATER_VAPOUR_GAS_CONSTANT = 461.5
"""R / M_w [J kg-1 K-1]: vapour density = e / (R_v T)."""
CO2_MG_M3_PER_PPM = 1.83
"""CO2 density per ppm at about 20 degC and 1 atm [mg m-3 ppm-1]."""
COVER_TEMP_SHARE = 0.5
"""The cover sits this share of the way from the outside air to the inside air (similar film
resistances inside and out): its temperature sets where vapour condenses."""


def light_period(cfg: ClimateConfig, rs_natural_w_m2: Array, lights: Array) -> Array:
    """True while the crop is in light as the climate computer sees it: sun up, or lamps at least at
    ``lamp_on_frac`` (a lamp barely on is no light period: it would switch the day setpoint and CO2
    dosing on for nothing)."""
    return (rs_natural_w_m2 > 0.0) | (lights >= cfg.lamp_on_frac)


def heating_setpoint(xp: Any, cfg: ClimateConfig, rs_natural_w_m2: Array, lights: Array) -> Array:
    """The air's heating floor [degC]: the day setpoint in the light period (:func:`light_period`),
    the night setpoint otherwise."""
    in_light = xp.astype(light_period(cfg, rs_natural_w_m2, lights), rs_natural_w_m2.dtype)
    return cfg.heating_night_c + (cfg.heating_day_c - cfg.heating_night_c) * in_light


def step_air(xp: Any, cfg: ClimateConfig, dt_s: float, air_temp: Array, vapour_kpa: Array, co2: Array,
             outside_temp: Array, outside_vapour_kpa: Array, rs_natural_w_m2: Array, lights: Array,
             transpiration_mm_h: Array, mean_ks: Array, co2_uptake_mg_m2_s: Array) -> AirOut:
    """The house's climate computer and physics over one step, quasi-steady per step.

    A glasshouse is run, not left to float: heating holds the day/night setpoint, the vents open
    above the ventilation setpoint and when the air would pass its humidity limit, and CO2 is
    dosed to its setpoint while the crop is in light (up to the doser's capacity, and not while the
    vents stand wide open). The sensible heat balance per m2 floor (sun and lamps in, transpiration's
    latent heat, the cover and ventilation out) gives the air's equilibrium and the heat the boiler
    must add; a vapour balance (transpiration in; ventilation and condensation on the cover out) and
    a CO2 balance (dosing in; ventilation and the crop's net uptake out, respiration in at night)
    give humidity and CO2. Air temperature relaxes to its equilibrium with ``air_tau_s``; vapour and
    CO2 with the house's air exchange time (house height over ventilation). The heat charged is what
    holds the setpoint at equilibrium: the heat stored in the air itself (about 5 kJ/m2/K, a minute
    of a typical boiler output) is left out, so an evening's cooling is charged from its start.
    """
    # The energy screen is drawn when it is cold outside: below one temperature by day, a higher one by night.
    screen_below = xp.where(rs_natural_w_m2 > 0.0, cfg.screen_below_day_c, cfg.screen_below_night_c)
    screened = xp.astype(outside_temp < screen_below, rs_natural_w_m2.dtype)
    u_cover = cfg.cover_u_day_w_m2k + (cfg.cover_u_screened_w_m2k - cfg.cover_u_day_w_m2k) * screened
    evaporation = transpiration_mm_h * (1.0 / 3600.0)  # kg m-2 s-1
    lamp_w = (cfg.lamp_power_w_m2 * cfg.lamp.air_heat_share) * lights
    gain = cfg.solar_heat_share * rs_natural_w_m2 + lamp_w - LATENT_HEAT_J_KG * evaporation
    t_heat = heating_setpoint(xp, cfg, rs_natural_w_m2, lights)
    t_vent = t_heat + cfg.vent_offset_c
    # Vents for heat: the exchange that holds the ventilation setpoint, between leakage and fully open.
    span = xp.maximum(t_vent - outside_temp, 0.5)
    g_heat = xp.clip((gain / span - u_cover) * (1.0 / RHO_CP_AIR), cfg.leakage_m3_m2_s, cfg.vent_max_m3_m2_s)
    g_heat = xp.where(outside_temp >= t_vent, cfg.vent_max_m3_m2_s, g_heat)
    t_free = outside_temp + gain / (u_cover + RHO_CP_AIR * g_heat)
    t_first = xp.maximum(t_free, t_heat)
    # Vents for humidity: the exchange that keeps the vapour at the humidity limit at that temperature.
    cv = 1000.0 / (WATER_VAPOUR_GAS_CONSTANT * (t_first + 273.15))  # kg m-3 kPa-1
    e_cap = cfg.rh_max_pct * 0.01 * saturation_vapour_kpa(xp, t_first)
    e_cover = saturation_vapour_kpa(xp, outside_temp + COVER_TEMP_SHARE * (t_first - outside_temp))
    condensing = cfg.condensation_kg_m2_s_kpa * xp.maximum(e_cap - e_cover, 0.0)
    room = xp.maximum(e_cap - outside_vapour_kpa, 1e-3)
    g_humid = xp.maximum(evaporation - condensing, 0.0) / (cv * room)
    vent = xp.clip(xp.maximum(g_heat, g_humid), cfg.leakage_m3_m2_s, cfg.vent_max_m3_m2_s)
    # Heating makes up what the final exchange loses below the setpoint.
    loss_coef = u_cover + RHO_CP_AIR * vent
    t_free = outside_temp + gain / loss_coef
    heat = xp.maximum(loss_coef * (t_heat - outside_temp) - gain, 0.0)
    t_eq = xp.maximum(t_free, t_heat)
    temp = t_eq + (air_temp - t_eq) * math.exp(-dt_s / cfg.air_tau_s)
    es = saturation_vapour_kpa(xp, temp)
    # Vapour: ventilation alone, or with condensation on a cover colder than the air's dew point.
    cv = 1000.0 / (WATER_VAPOUR_GAS_CONSTANT * (temp + 273.15))
    g_v = vent * cv
    e_cover = saturation_vapour_kpa(xp, outside_temp + COVER_TEMP_SHARE * (temp - outside_temp))
    e_vent = outside_vapour_kpa + evaporation / g_v
    k_c = cfg.condensation_kg_m2_s_kpa
    e_cond = (evaporation + g_v * outside_vapour_kpa + k_c * e_cover) / (g_v + k_c)
    e_eq = xp.where(e_vent > e_cover, e_cond, e_vent)
    a_air = xp.exp(vent * (-dt_s / cfg.house_height_m))
    vapour = xp.minimum(e_eq + (vapour_kpa - e_eq) * a_air, 0.99 * es)
    par = PAR_PER_W_M2 * rs_natural_w_m2 + cfg.lamp_par_umol_m2_s * lights
    # CO2: the dose that reaches the setpoint by the end of the step, within capacity, in light only.
    k = vent * CO2_MG_M3_PER_PPM
    may_dose = light_period(cfg, rs_natural_w_m2, lights) & (vent <= cfg.co2_dosing_max_vent_m3_m2_s)
    c_target = (cfg.co2_setpoint_ppm - co2 * a_air) / xp.maximum(1.0 - a_air, 1e-6)
    wanted = k * (c_target - OUTSIDE_CO2_PPM) + co2_uptake_mg_m2_s
    dose = xp.where(may_dose, xp.clip(wanted, 0.0, cfg.co2_capacity_mg_m2_s), 0.0)
    c_eq = OUTSIDE_CO2_PPM + (dose - co2_uptake_mg_m2_s) / k
    new_co2 = xp.clip(c_eq + (co2 - c_eq) * a_air, 150.0, 2000.0)
    vpd = es - vapour
    radiant = rs_natural_w_m2 + cfg.lamp_radiant_w_m2 * lights
    leaf = temp + 0.004 * radiant - 1.0 * vpd * mean_ks
    return AirOut(air_temp=temp, vapour_kpa=vapour, rh_pct=100.0 * vapour / es, co2=new_co2, par=par,
                  leaf_temp=leaf, heat_w_m2=heat, co2_dose_mg_m2_s=dose, vent_m3_m2_s=vent)
