"""FAO-56 reference evapotranspiration (ET0), written once for numpy and torch.

The twin needs ET0 twice: a daily value from station weather (to drive irrigation
budgets) and an hourly value inside the greenhouse on a batch of simulated instances.
Both follow FAO Irrigation and Drainage Paper 56 (Allen, Pereira, Raes & Smith, 1998);
equation numbers below refer to its chapters 3 and 4.

Every function takes Python floats, numpy arrays or torch tensors and answers in the
namespace of its array inputs (torch in, torch out), so the same code serves the
numpy reference runs and the batched torch twin. Inputs broadcast against each other.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from array_api_compat import array_namespace, device, is_array_api_obj

__all__ = [
    "atmospheric_pressure_kpa",
    "clear_sky_radiation",
    "extraterrestrial_radiation_mj_m2_day",
    "fao56_daily_et0",
    "fao56_hourly_et0",
    "greenhouse_hourly_net_radiation_mj_m2_h",
    "net_longwave_radiation_mj_m2_day",
    "psychrometric_constant_kpa_per_c",
    "saturation_vapour_kpa",
    "saturation_vapour_pressure_kpa",
    "svp_slope_kpa_per_c",
]

Array = Any
"""A numpy ndarray or a torch Tensor (the module never mixes the two)."""

# ---- constants ---------------------------------------------------------------------------
SVP_A_KPA = 0.6108  # kPa, eq. 11 prefactor
SVP_B = 17.27  # dimensionless, eq. 11 exponent coefficient
SVP_C_C = 237.3  # °C, eq. 11 temperature offset
SVP_SLOPE_K = 4098.0  # °C, eq. 13 numerator (= SVP_B * SVP_C_C)
P_SEA_LEVEL_KPA = 101.3  # kPa, eq. 7 standard pressure at sea level
P_T_REF_K = 293.0  # K, eq. 7 reference temperature
LAPSE_RATE_K_PER_M = 0.0065  # K/m, eq. 7 standard lapse rate
P_EXPONENT = 5.26  # dimensionless, eq. 7
PSY_COEF_PER_C = 0.665e-3  # 1/°C, eq. 8: cp / (epsilon * lambda) for lambda = 2.45 MJ/kg
SOLAR_CONSTANT_MJ_M2_MIN = 0.0820  # MJ/m2/min, eq. 21 Gsc
MINUTES_PER_DAY = 24.0 * 60.0  # min/day
DAYS_PER_YEAR = 365.0  # days, eqs. 23-24
CLEAR_SKY_A = 0.75  # dimensionless, eq. 37 sea-level clear-sky transmissivity
CLEAR_SKY_B_PER_M = 2e-5  # 1/m, eq. 37 elevation gain
STEFAN_BOLTZMANN_MJ_K4_M2_DAY = 4.903e-9  # MJ/K^4/m2/day, eq. 39
STEFAN_BOLTZMANN_OFFSET_K = 273.16  # K, °C -> K as written in eq. 39
LONGWAVE_EMISSIVITY_A = 0.34  # dimensionless, eq. 39
LONGWAVE_EMISSIVITY_B_PER_SQRT_KPA = 0.14  # 1/sqrt(kPa), eq. 39
CLOUD_A = 1.35  # dimensionless, eq. 39 cloudiness factor slope
CLOUD_B = 0.35  # dimensionless, eq. 39 cloudiness factor offset
ALBEDO = 0.23  # dimensionless, grass reference crop (eq. 38)
INV_LAMBDA_KG_MJ = 0.408  # kg/MJ, 1 / 2.45 MJ/kg: MJ/m2 of energy -> mm of water
DAILY_AERO_COEF = 900.0  # K mm s^3/(Mg day), eq. 6 Cn for the daily grass reference
HOURLY_AERO_COEF = 37.0  # K mm s^3/(Mg h), eq. 53 Cn for the hourly grass reference
KELVIN_OFFSET_K = 273.0  # K, °C -> K as written in eqs. 6 and 53
SURFACE_RESISTANCE_WIND_S_M = 0.34  # s/m, eq. 6 and 53: r_s / 208 for the grass reference
W_M2_TO_MJ_M2_H = 3600.0 * 1e-6  # (MJ/m2/h) per (W/m2)
GREENHOUSE_LW_FRACTION = 0.10  # dimensionless, daytime net longwave loss as a share of Rns
GREENHOUSE_LW_MIN_MJ_M2_H = 0.02  # MJ/m2/h, floor on the longwave loss (night, ~5.6 W/m2)
_MIN_RSO_MJ_M2_DAY = 1e-6  # MJ/m2/day, keeps Rs/Rso finite during polar night


# ---- namespace handling ------------------------------------------------------------------
def _is_array(value: Any) -> bool:
    """True for numpy arrays and torch tensors; numpy scalars count as plain numbers."""
    return is_array_api_obj(value) and not isinstance(value, np.generic)


def _as_arrays(*values: Any) -> tuple[Any, tuple[Array, ...]]:
    """Namespace of the array inputs, and every input as a floating array in it.

    Numbers (and lists) join the namespace and float dtype of the arrays passed with
    them, so a scalar latitude next to float32 torch tensors does not promote the
    batch to float64. With no array at all, everything becomes numpy float64.
    """
    arrays = [v for v in values if _is_array(v)]
    if not arrays:
        converted = tuple(np.asarray(v, dtype=np.float64) for v in values)
        return array_namespace(*converted), converted
    xp = array_namespace(*arrays)
    floats = [a for a in arrays if xp.isdtype(a.dtype, "real floating")]
    fdtype = xp.result_type(*floats) if floats else xp.float64
    dev = device(arrays[0])
    out = []
    for v in values:
        if not _is_array(v):
            v = xp.asarray(np.asarray(v, dtype=np.float64), dtype=fdtype, device=dev)
        elif not xp.isdtype(v.dtype, "real floating"):
            v = xp.astype(v, fdtype)
        out.append(v)
    return xp, tuple(out)


# ---- chapter 3 helpers -------------------------------------------------------------------
def saturation_vapour_pressure_kpa(t_c: Any) -> Array:
    """e°(T) in kPa (eq. 11); the vapour pressure of air saturated at T in °C."""
    xp, (t,) = _as_arrays(t_c)
    return saturation_vapour_kpa(xp, t)


def saturation_vapour_kpa(xp: Any, t_c: Array) -> Array:
    """Eq. 11 on an array already in namespace ``xp``, as is: no conversion, so the twin's
    compiled step traces it and its dtype stays the caller's."""
    return SVP_A_KPA * xp.exp(SVP_B * t_c / (t_c + SVP_C_C))


def svp_slope_kpa_per_c(t_c: Any) -> Array:
    """Δ in kPa/°C (eq. 13); how strongly warming the surface raises its vapour pressure."""
    _, (t,) = _as_arrays(t_c)
    return SVP_SLOPE_K * saturation_vapour_pressure_kpa(t) / (t + SVP_C_C) ** 2


def atmospheric_pressure_kpa(elevation_m: Any) -> Array:
    """P in kPa (eq. 7) from site elevation in m, for stations without a barometer."""
    _, (z,) = _as_arrays(elevation_m)
    return P_SEA_LEVEL_KPA * ((P_T_REF_K - LAPSE_RATE_K_PER_M * z) / P_T_REF_K) ** P_EXPONENT


def psychrometric_constant_kpa_per_c(pressure_kpa: Any) -> Array:
    """γ in kPa/°C (eq. 8); weights the drying power of the air against radiation."""
    _, (p,) = _as_arrays(pressure_kpa)
    return PSY_COEF_PER_C * p


def extraterrestrial_radiation_mj_m2_day(lat_deg: Any, day_of_year: Any) -> Array:
    """Ra in MJ/m2/day (eqs. 21-25): the top-of-atmosphere ceiling on daily sunshine.

    ``lat_deg`` is positive north; ``day_of_year`` counts from 1 on 1 January. The
    sunset-angle argument is clipped to [-1, 1] so polar day and night stay finite.
    """
    xp, (lat_d, doy) = _as_arrays(lat_deg, day_of_year)
    lat = lat_d * (math.pi / 180.0)  # eq. 22
    angle = (2.0 * math.pi / DAYS_PER_YEAR) * doy
    dr = 1.0 + 0.033 * xp.cos(angle)  # eq. 23, inverse relative Earth-Sun distance
    decl = 0.409 * xp.sin(angle - 1.39)  # eq. 24, solar declination in rad
    ws = xp.acos(xp.clip(-xp.tan(lat) * xp.tan(decl), min=-1.0, max=1.0))  # eq. 25
    geometry = ws * xp.sin(lat) * xp.sin(decl) + xp.cos(lat) * xp.cos(decl) * xp.sin(ws)
    return (MINUTES_PER_DAY / math.pi * SOLAR_CONSTANT_MJ_M2_MIN) * dr * geometry  # eq. 21


def clear_sky_radiation(ra: Any, elevation_m: Any) -> Array:
    """Rso in the unit of ``ra`` (eq. 37); the reference that makes Rs/Rso a cloudiness index."""
    _, (ra_, z) = _as_arrays(ra, elevation_m)
    return (CLEAR_SKY_A + CLEAR_SKY_B_PER_M * z) * ra_


def net_longwave_radiation_mj_m2_day(
    tmax_c: Any,
    tmin_c: Any,
    ea_kpa: Any,
    rs: Any,
    rso: Any,
    *,
    rs_rso_floor: float | None = None,
) -> Array:
    """Rnl in MJ/m2/day (eq. 39): thermal loss, damped by humid air and by cloud.

    Rs/Rso is limited to <= 1.0 as FAO-56 prescribes. FAO-56 sets no lower limit, so on
    very dark days (Rs/Rso < 0.26) the cloud factor turns negative and Rnl becomes a
    small gain. ``rs_rso_floor=0.3`` applies the ASCE-EWRI (2005) lower limit instead,
    which is also what ``pyet`` does.
    """
    xp, (tmax, tmin, ea, rs_, rso_) = _as_arrays(tmax_c, tmin_c, ea_kpa, rs, rso)
    ratio = xp.clip(rs_ / xp.clip(rso_, min=_MIN_RSO_MJ_M2_DAY), min=rs_rso_floor, max=1.0)
    tmax_k4 = (tmax + STEFAN_BOLTZMANN_OFFSET_K) ** 4
    tmin_k4 = (tmin + STEFAN_BOLTZMANN_OFFSET_K) ** 4
    emission = STEFAN_BOLTZMANN_MJ_K4_M2_DAY * 0.5 * (tmax_k4 + tmin_k4)
    humidity = LONGWAVE_EMISSIVITY_A - LONGWAVE_EMISSIVITY_B_PER_SQRT_KPA * xp.sqrt(ea)
    cloud = CLOUD_A * ratio - CLOUD_B
    return emission * humidity * cloud


# ---- daily ET0 ---------------------------------------------------------------------------
def fao56_daily_et0(
    tmax_c: Any,
    tmin_c: Any,
    rh_max_pct: Any,
    rh_min_pct: Any,
    u2_m_s: Any,
    rs_mj_m2_day: Any,
    lat_deg: Any,
    elevation_m: Any,
    day_of_year: Any,
    *,
    rs_rso_floor: float | None = None,
) -> Array:
    """Daily grass reference ET0 in mm/day (FAO-56 Penman-Monteith, eq. 6), clipped at >= 0.

    Soil heat flux is taken as zero over a day (eq. 42); es is the mean of e°(Tmax) and
    e°(Tmin) (eq. 12) because e° is convex and e°(Tmean) would understate it; ea comes
    from RHmax and RHmin (eq. 17). Δ and the aerodynamic term use Tmean = (Tmax+Tmin)/2
    (eq. 9). ``rs_rso_floor`` is passed on to the net longwave term (see there).
    """
    xp, (tmax, tmin, rh_max, rh_min, u2, rs, lat, z, doy) = _as_arrays(
        tmax_c, tmin_c, rh_max_pct, rh_min_pct, u2_m_s, rs_mj_m2_day, lat_deg, elevation_m, day_of_year
    )
    tmean = 0.5 * (tmax + tmin)  # eq. 9
    e_tmax = saturation_vapour_pressure_kpa(tmax)
    e_tmin = saturation_vapour_pressure_kpa(tmin)
    es = 0.5 * (e_tmax + e_tmin)  # eq. 12
    ea = 0.5 * (e_tmin * (rh_max / 100.0) + e_tmax * (rh_min / 100.0))  # eq. 17
    delta = svp_slope_kpa_per_c(tmean)
    gamma = psychrometric_constant_kpa_per_c(atmospheric_pressure_kpa(z))
    rso = clear_sky_radiation(extraterrestrial_radiation_mj_m2_day(lat, doy), z)
    rns = (1.0 - ALBEDO) * rs  # eq. 38
    rnl = net_longwave_radiation_mj_m2_day(tmax, tmin, ea, rs, rso, rs_rso_floor=rs_rso_floor)
    rn = rns - rnl  # eq. 40
    aero = gamma * (DAILY_AERO_COEF / (tmean + KELVIN_OFFSET_K)) * u2 * (es - ea)
    num = INV_LAMBDA_KG_MJ * delta * rn + aero
    den = delta + gamma * (1.0 + SURFACE_RESISTANCE_WIND_S_M * u2)
    return xp.clip(num / den, min=0.0)


# ---- hourly ET0 (hot path) ---------------------------------------------------------------
def fao56_hourly_et0(
    temp_c: Any,
    rh_pct: Any,
    u2_m_s: Any,
    rn_mj_m2_h: Any,
    g_mj_m2_h: Any,
    pressure_kpa: Any,
) -> Array:
    """Hourly grass reference ET0 in mm/hour (FAO-56 eq. 53), clipped at >= 0.

    Runs every twin step on (B,) batches, so e°(T) is computed once (one exp) and
    reused for both Δ (eq. 13) and the vapour pressure deficit e°(T)(1 - RH/100)
    (eq. 54); constants are folded so a call is about two dozen elementwise operations.
    """
    xp, (t, rh, u2, rn, g, p) = _as_arrays(temp_c, rh_pct, u2_m_s, rn_mj_m2_h, g_mj_m2_h, pressure_kpa)
    tc = t + SVP_C_C
    e0 = SVP_A_KPA * xp.exp(SVP_B * t / tc)  # eq. 11
    delta = SVP_SLOPE_K * e0 / (tc * tc)  # eq. 13
    gamma = PSY_COEF_PER_C * p  # eq. 8 (0-d when the pressure is one number)
    gamma_u2 = gamma * u2  # shared by the aerodynamic term and the denominator
    # eq. 53 aerodynamic term with the deficit e0 - ea = e0 (100 - RH) / 100 (eq. 54)
    aero = (HOURLY_AERO_COEF / 100.0) * gamma_u2 * e0 * (100.0 - rh) / (t + KELVIN_OFFSET_K)
    num = INV_LAMBDA_KG_MJ * delta * (rn - g) + aero
    den = delta + gamma + SURFACE_RESISTANCE_WIND_S_M * gamma_u2
    return xp.clip(num / den, min=0.0)


def greenhouse_hourly_net_radiation_mj_m2_h(rs_in_w_m2: Any) -> Array:
    """Net radiation Rn in MJ/m2/h over the crop inside a greenhouse, for eq. 53.

    Only the shortwave that the cover transmits (``rs_in_w_m2``, negative sensor noise
    read as 0) is known, so the longwave term is an assumption, not FAO-56: the cover
    traps most thermal radiation, leaving a net longwave loss of 10 % of the net
    shortwave (1 - 0.23) Rs by day, and never less than 0.02 MJ/m2/h (about 5.6 W/m2),
    which is all that remains at night. Rn is therefore -0.02 MJ/m2/h in the dark; any
    negative ET0 this produces is removed by the clip in :func:`fao56_hourly_et0`.
    """
    xp, (rs,) = _as_arrays(rs_in_w_m2)
    rns = ((1.0 - ALBEDO) * W_M2_TO_MJ_M2_H) * xp.clip(rs, min=0.0)
    return rns - xp.clip(GREENHOUSE_LW_FRACTION * rns, min=GREENHOUSE_LW_MIN_MJ_M2_H)
