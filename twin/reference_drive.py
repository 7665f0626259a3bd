"""The twin driven by a reference model's inputs, to be compared with the reference side by side.

GreenLight (``bench/reference/greenlight_reference.py``) writes its weather, its lamp switching
and its own results hour by hour; :func:`drive_greenlight` runs the twin's climate computer
(``twin.climate.step_air``) and crop (``twin.crop``) on the same weather and lamps at the twin's
10-minute step, and sums the same quantities. The crop starts from GreenLight's young-crop state
and feels no water stress (GreenLight has none).

AquaCrop (``bench/reference/aquacrop_reference.py``) writes its daily water inputs and root zone;
:func:`drive_aquacrop` runs the twin's root-zone bucket with both water stresses on the same
irrigation, rain and potential transpiration.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import cast

import numpy as np

from twin.climate import PAR_PER_W_M2, crop_kc, psychrometric_constant, reference_et0, step_air
from twin.config import ClimateConfig, CropConfig
from twin.crop import CropGrowthConfig, CropState, maintenance_respiration, step_crop_uptake
from twin.et0 import saturation_vapour_kpa
from twin.soil import aeration_stress, step_soil, waterlogged_days
from twin.types import TwinParams

STEPS_PER_HOUR = 6

GREENLIGHT_YOUNG_CROP = {"c_buf": 0.0, "c_leaf": 0.7 * 6240.0, "c_stem": 0.25 * 6240.0,
                         "c_fruit": 0.05 * 6240.0, "t_sum": 0.0}
"""GreenLight's initial crop (``setGlInit``: 6,240 mg CH2O m-2 shared 70/25/5 over leaf, stem and
fruit; empty buffer; the temperature sum starting at first fruit set) [mg CH2O m-2, degC d]."""


@dataclass(frozen=True)
class Drive:
    """One season of the twin on a reference's weather: sums and means comparable with the reference's."""

    t_air_day_c: float
    t_air_night_c: float
    rh_air_pct: float
    co2_day_ppm: float
    co2_night_ppm: float
    heating_kwh_m2: float
    lamp_kwh_m2: float
    par_sun_mol_m2: float
    par_lamp_mol_m2: float
    co2_dosed_kg_m2: float
    fruit_net_growth_fw_kg_m2: float
    fruit_harvest_fw_kg_m2: float
    lai_end: float

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def cover_transmissivity(hours: Mapping[str, np.ndarray]) -> float:
    """The share of outside global radiation the twin must pass to give the reference's sun PAR
    above the canopy (the twin's cover is a parameter of the site, drawn per greenhouse)."""
    return float(np.sum(hours["par_sun_umol_m2_s"]) / (PAR_PER_W_M2 * np.sum(hours["global_rad_w_m2"])))


def drive_greenlight(hours: Mapping[str, np.ndarray], lamp_fracs: Sequence[np.ndarray],
                     climate: ClimateConfig, crop: CropConfig | None = None,
                     growth: CropGrowthConfig | None = None, transmissivity: float | None = None,
                     crop_day0: float = 0.0) -> list[Drive]:
    """Run the twin's climate and crop over the reference's hours (arrays keyed by the reference
    table's columns), once per lamp schedule in ``lamp_fracs`` (the lamps' fraction per hour),
    the schedules side by side in one batch at the twin's 10-minute step."""
    crop = crop or CropConfig()
    growth = growth or CropGrowthConfig()
    tau = cover_transmissivity(hours) if transmissivity is None else transmissivity
    gamma = psychrometric_constant(climate)
    dt = 3600.0 / STEPS_PER_HOUR
    lamps = np.stack([np.asarray(x, dtype=np.float64) for x in lamp_fracs], axis=1)  # [H, S]
    n = lamps.shape[1]
    ones = np.ones(n)
    t_air = ones * float(hours["t_air_c"][0])
    vapour = ones * float(hours["rh_air_pct"][0]) / 100.0 * saturation_vapour_kpa(np, t_air)
    co2 = ones * float(hours["co2_air_ppm"][0])
    state = CropState(**{k: ones * v for k, v in GREENLIGHT_YOUNG_CROP.items()}, t_can24=t_air + 0.0,
                      fruit_dm_cum=np.zeros(n))
    fruit_start = state.c_fruit + 0.0
    uptake = np.zeros(n)
    names = ("day_t", "day_c", "day_n", "night_t", "night_c", "night_n", "rh", "heat", "lamp", "par_sun",
             "par_lamp", "co2", "harvest")
    sums = {k: np.zeros(n) for k in names}
    n_hours = len(hours["t_out_c"])
    for h in range(n_hours):
        t_out = ones * float(hours["t_out_c"][h])
        e_out = ones * float(hours["vp_out_kpa"][h])
        rs = ones * (tau * float(hours["global_rad_w_m2"][h]))
        lights = lamps[h]
        lit = (rs > 0.0) | (lights > 0.0)
        for k in range(STEPS_PER_HOUR):
            day = (h + (k + 0.5) / STEPS_PER_HOUR) / 24.0 + crop_day0
            demand = reference_et0(np, climate, gamma, t_air, vapour, rs, lights * climate.lamp_radiant_w_m2)
            etc_mm_h = demand.et0_mm_h * crop_kc(np, crop, np.array(day))
            air = step_air(np, climate, dt, t_air, vapour, co2, t_out, e_out, rs, lights, etc_mm_h, ones,
                           uptake)
            m_fruit = maintenance_respiration(np, growth, state, dt)[2]
            new, fruit_kg, uptake = step_crop_uptake(np, growth, state, air.par, air.co2, air.leaf_temp,
                                                     ones, dt)
            # What left the plants this step beyond what stayed: the harvest (the fruit cap's overflow).
            sums["harvest"] += state.c_fruit + fruit_kg * (growth.dmc * 1e6) - m_fruit - new.c_fruit
            state = new
            t_air, vapour, co2 = air.air_temp, air.vapour_kpa, air.co2
            for key, mask in (("day", lit), ("night", ~lit)):
                sums[f"{key}_t"] += np.where(mask, t_air, 0.0)
                sums[f"{key}_c"] += np.where(mask, co2, 0.0)
                sums[f"{key}_n"] += mask
            sums["rh"] += air.rh_pct
            sums["heat"] += air.heat_w_m2 * (dt / 3.6e6)
            sums["co2"] += air.co2_dose_mg_m2_s * (dt * 1e-6)
            sums["lamp"] += climate.lamp_power_w_m2 * lights * (dt / 3.6e6)
            sums["par_sun"] += PAR_PER_W_M2 * rs * (dt * 1e-6)
            sums["par_lamp"] += climate.lamp_par_umol_m2_s * lights * (dt * 1e-6)
    steps = n_hours * STEPS_PER_HOUR
    to_fw = 1e-6 / growth.dmc
    net = (state.c_fruit - fruit_start + sums["harvest"]) * to_fw

    def mean(key: str, count: str) -> np.ndarray:
        return np.where(sums[count] > 0, sums[key] / np.maximum(sums[count], 1), math.nan)

    columns = {"t_air_day_c": mean("day_t", "day_n"), "t_air_night_c": mean("night_t", "night_n"),
               "rh_air_pct": sums["rh"] / steps, "co2_day_ppm": mean("day_c", "day_n"),
               "co2_night_ppm": mean("night_c", "night_n"), "heating_kwh_m2": sums["heat"],
               "lamp_kwh_m2": sums["lamp"], "par_sun_mol_m2": sums["par_sun"],
               "par_lamp_mol_m2": sums["par_lamp"],
               "co2_dosed_kg_m2": sums["co2"], "fruit_net_growth_fw_kg_m2": net,
               "fruit_harvest_fw_kg_m2": sums["harvest"] * to_fw, "lai_end": growth.sla * state.c_leaf}
    return [Drive(**{k: float(v[i]) for k, v in columns.items()}) for i in range(n)]


STEPS_PER_DAY = 24 * STEPS_PER_HOUR


@dataclass(frozen=True)
class RootZoneSoil:
    """One uniform soil as the reference describes it [m3/m3]."""

    field_capacity: float
    wilting_point: float
    saturation: float


def bucket_params(soil: RootZoneSoil, root_mm: float, p: float,
                  daily_drain: float | np.ndarray) -> TwinParams:
    """The twin's bucket parameters for ``soil``, one zone per ``daily_drain`` (a share of the water
    above field capacity leaving per day; several side by side), depletion fraction ``p`` for the
    dry side."""
    drain = np.atleast_1d(np.asarray(daily_drain, dtype=np.float64))
    ones = np.ones_like(drain)
    fc, wp = soil.field_capacity, soil.wilting_point
    return cast(TwinParams, SimpleNamespace(
        field_capacity=fc * ones, wilting_point=wp * ones, saturation=soil.saturation * ones,
        drain_frac=1.0 - (1.0 - drain) ** (1.0 / STEPS_PER_DAY),
        inv_stress_span=ones / ((1.0 - p) * (fc - wp)), root_mm=root_mm * ones))


def drive_aquacrop_batch(days: Sequence[Mapping[str, float]], soil: RootZoneSoil, crop: CropConfig, p: float,
                         daily_drain: np.ndarray) -> dict[str, np.ndarray]:
    """The twin's root zone over the reference's season, one bucket per drainage share, side by side:
    transpiration [mm], mean water content and the days on which aeration stress cut uptake.

    Each day's water (irrigation and rain less runoff and soil evaporation: the twin's drip-fed
    house has no bare-soil evaporation of its own) enters at the day's first step; the potential
    transpiration of the reference's canopy is spread over the day; as the reference's roots deepen
    they reach soil still at field capacity.
    """
    fc = soil.field_capacity
    drain = np.atleast_1d(np.asarray(daily_drain, dtype=np.float64))
    theta, aer_days = np.full(drain.shape, fc), np.zeros(drain.shape)
    root = days[0]["root_depth_m"] * 1000.0
    transpired, theta_sum, stressed_days = np.zeros(drain.shape), np.zeros(drain.shape), np.zeros(drain.shape)
    for day in days:
        deeper = day["root_depth_m"] * 1000.0
        if deeper > root:
            theta = (theta * root + fc * (deeper - root)) / deeper
            root = deeper
        params = bucket_params(soil, root, p, drain)
        water_in = day["irrigation_mm"] + day["precip_mm"] - day["runoff_mm"] - day["soil_evap_mm"]
        demand = np.full(drain.shape, day["tr_pot_mm"] / STEPS_PER_DAY)
        none = np.zeros(drain.shape)
        stressed = np.zeros(drain.shape, dtype=bool)
        for k in range(STEPS_PER_DAY):
            ks_aer = aeration_stress(np, params, theta, aer_days, crop.aeration_vol_pct,
                                     crop.aeration_lag_days)
            aer_days = waterlogged_days(np, params, theta, aer_days, crop.aeration_vol_pct,
                                        crop.aeration_lag_days, 1.0 / STEPS_PER_DAY)
            out = step_soil(np, params, theta, none + water_in if k == 0 else none, 1.0, demand, ks_aer)
            theta = np.maximum(out.theta, 0.0)
            transpired += out.uptake_mm
            stressed |= ks_aer < 1.0
        stressed_days += stressed
        theta_sum += theta
    return {"transpiration_mm": transpired, "mean_theta": theta_sum / len(days),
            "aeration_days": stressed_days}


def drive_aquacrop(days: Sequence[Mapping[str, float]], soil: RootZoneSoil, crop: CropConfig, p: float,
                   daily_drain: float) -> dict[str, float]:
    """:func:`drive_aquacrop_batch` for one drainage share."""
    out = drive_aquacrop_batch(days, soil, crop, p, np.array([daily_drain]))
    return {"transpiration_mm": float(out["transpiration_mm"][0]), "mean_theta": float(out["mean_theta"][0]),
            "aeration_days": int(out["aeration_days"][0])}


def fit_daily_drainage(days: Sequence[Mapping[str, float]], soil: RootZoneSoil, crop: CropConfig, p: float,
                       target_theta: float) -> float:
    """The bucket's daily drainage share that gives ``target_theta`` as the season's mean water
    content, as the twin's calibration fits a greenhouse's logs: a coarse grid, then a fine one
    around the crossing (slower drainage, wetter bucket), each one batched run."""
    lo, hi = 0.05, 0.5
    for _ in range(2):
        grid = np.linspace(lo, hi, 48)
        mean = drive_aquacrop_batch(days, soil, crop, p, grid)["mean_theta"]
        wetter = np.nonzero(mean > target_theta)[0]
        i = int(wetter[-1]) if wetter.size else 0
        lo, hi = float(grid[i]), float(grid[min(i + 1, grid.size - 1)])
    mean = drive_aquacrop_batch(days, soil, crop, p, np.array([lo, hi]))["mean_theta"]
    if mean[0] == mean[1]:
        return lo
    return lo + (hi - lo) * float((mean[0] - target_theta) / (mean[0] - mean[1]))
