"""The greenhouse's own twin, driven by the site's outlook: config, libraries, parameters and start state.

The twin is the training twin (:mod:`twin.dynamics`) with everything that is drawn at random there
fixed to the greenhouse's own values: its zones' soils (the soil classes the service's estimator
uses), bands, lamp setting, crop, prices, and a weather and price "year" that is the site's outlook
laid on the local clock hours it covers (:meth:`twin.weather.WeatherLibrary.from_years`,
:meth:`twin.prices.PriceLibrary.from_hourly`). Faults and sensor noise are off and every variant
shares one random key, so the variants of a batch differ only in what they try, and a forecast is
the same every time it is run on the same scene.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from app.forecast.scene import Scene
from twin.backend import Array, Backend
from twin.config import SOIL_INDEX, SOIL_TYPES, FaultConfig, PriceConfig, TwinConfig
from twin.crop import initial_crop
from twin.dynamics import TwinModel
from twin.et0 import saturation_vapour_kpa
from twin.prices import PriceLibrary
from twin.randomize import initial_state, sample_params
from twin.types import TwinParams, TwinState
from twin.weather import FIELDS, HOURS_PER_YEAR, WeatherLibrary

DT_S = 600.0
"""The twin's step: the policy was trained on 10-minute steps."""
HORIZON_H = 24
SEED = 0
"""Every draw the twin makes is keyed by this (faults and noise are off; the key is still read)."""
RH_PCT, WIND_M_S = 75.0, 2.0
"""The outlook has no humidity or wind: a mild, still day, the same in every variant."""


def twin_config(scene: Scene) -> TwinConfig:
    """A twin of the scene's zones, soils and crop, without faults or sensor noise."""
    soils = tuple(z.soil_type for z in scene.setup.zones)
    return TwinConfig(zones=scene.zones, dt_s=DT_S, episode_days=2.0, sensor_noise=0.0, fixed_soils=soils,
                      faults=FaultConfig(), prices=PriceConfig(adder_eur_mwh=scene.price_adder_eur_mwh))


def _ahead(values: np.ndarray, length: int) -> np.ndarray:
    """``values`` for hours +0 .. +length - 1; past their end the last 24 of them again (a day repeats)."""
    values = np.asarray(values, dtype=np.float64)
    k = np.arange(length)
    day = max(1, min(24, values.size))
    tail = values.size - day
    return values[np.where(k < values.size, k, tail + (k - tail) % day)]


def outlook_hours(scene: Scene, length: int = 3 * 24) -> dict[str, np.ndarray]:
    """Outside temperature, sun and spot price for the clock hours from the scene's hour on: the
    outlook's leads (+1 h first; the hour itself takes lead +1's value), a repeated day beyond them."""
    o = scene.outlook
    temp = _ahead(np.concatenate([o.forecast_temp_c[:1], o.forecast_temp_c]), length)
    solar = _ahead(np.concatenate([o.forecast_solar_w_m2[:1], np.nan_to_num(o.forecast_solar_w_m2)]), length)
    price = _ahead(o.price_eur_mwh, length)
    return {"temp_c": temp, "solar_w_m2": np.maximum(solar, 0.0), "price_eur_mwh": price}


def libraries(scene: Scene, backend: Backend, cfg: TwinConfig) -> tuple[WeatherLibrary, PriceLibrary]:
    """A one-year weather and price library holding the outlook at the scene's local hours of year."""
    hour0 = int(math.floor(scene.local_hour_of_year)) % HOURS_PER_YEAR
    ahead = outlook_hours(scene, HOURS_PER_YEAR)
    rows = (hour0 + np.arange(HOURS_PER_YEAR)) % HOURS_PER_YEAR
    year = np.zeros((HOURS_PER_YEAR, len(FIELDS)))
    year[rows, 0], year[rows, 1], year[rows, 2] = ahead["temp_c"], RH_PCT, ahead["solar_w_m2"]
    year[rows, 3] = WIND_M_S
    prices = np.zeros(HOURS_PER_YEAR)
    prices[rows] = ahead["price_eur_mwh"]
    return (WeatherLibrary.from_years(year[None], backend),
            PriceLibrary.from_hourly(cfg.prices, prices[None], np.zeros(1, dtype=np.int64), backend))


def model(scene: Scene, backend: Backend) -> TwinModel:
    cfg = twin_config(scene)
    weather, prices = libraries(scene, backend, cfg)
    return TwinModel(cfg, backend, SEED, weather=weather, prices=prices)


def params(scene: Scene, twin: TwinModel) -> TwinParams:
    """One instance per variant, every draw replaced by the greenhouse's own value."""
    b, cfg = twin.backend, twin.cfg
    n, z = len(scene.variants), scene.zones
    ids = b.arange(n)
    keys = b.instance_keys(SEED, ids)
    drawn = sample_params(cfg, b, keys, ids, b.zeros((n,), dtype=b.int), twin.weather.n_years)
    soil = [SOIL_TYPES[SOIL_INDEX[zone.soil_type]] for zone in scene.setup.zones]
    fc = np.array([s.field_capacity for s in soil])
    wp = np.array([s.wilting_point for s in soil])
    sat = np.array([min(s.saturation, zone.saturation)
                    for s, zone in zip(soil, scene.setup.zones, strict=True)])
    p = cfg.crop.depletion_fraction
    setups = [scene.setup_of(v) for v in scene.variants]
    lows = [[zone.target_low for zone in s.zones] for s in setups]
    highs = [[zone.target_high for zone in s.zones] for s in setups]
    lamps = [1.0 if s.lamps_ours else 0.0 for s in setups]

    def rows(values: np.ndarray | list[float], dtype: object = None) -> Array:
        arr = np.broadcast_to(np.asarray(values, dtype=np.float64), (n, *np.shape(values))).copy()
        return b.asarray(arr) if dtype is None else b.asarray(arr.astype(dtype))

    def mid(span: tuple[float, float]) -> Array:
        return b.full((n,), 0.5 * (span[0] + span[1]))

    hyd, econ = cfg.hydraulics, cfg.economics
    no = b.zeros((n,))
    return replace(
        drawn, key=b.asarray(np.full(n, int(b.to_numpy(keys)[0]), dtype=np.int64)),
        soil_type=rows(np.array([SOIL_INDEX[zone.soil_type] for zone in scene.setup.zones]), np.int64),
        field_capacity=rows(fc), wilting_point=rows(wp), saturation=rows(sat),
        drain_frac=rows(1.0 - np.array([s.hourly_retention for s in soil]) ** cfg.dt_h),
        inv_stress_span=rows(1.0 / ((1.0 - p) * (fc - wp))),
        root_mm=rows(np.array([zone.root_mm for zone in scene.setup.zones])),
        band_low=b.asarray(np.array(lows)), band_high=b.asarray(np.array(highs)),
        valve_delay_s=rows(np.full(z, float(np.mean(hyd.valve_delay_s)))),
        valve_tau_s=rows(np.full(z, float(np.mean(hyd.valve_tau_s)))),
        pump_qmax=b.full((n,), hyd.pump_runout_flow_l_s), network_k=b.full((n,), hyd.network_resistance),
        transmissivity=b.full((n,), scene.transmissivity), year=b.zeros((n,), dtype=b.int),
        start_hour=b.full((n,), scene.local_hour_of_year % HOURS_PER_YEAR),
        crop_day0=b.full((n,), scene.crop_day), forecast_bias_temp=no + 0.0, forecast_bias_solar=no + 0.0,
        fruit_price=b.full((n,), scene.fruit_price_eur_kg),
        water_price=b.full((n,), scene.water_price_eur_m3),
        drain_price=mid(econ.drain_price_eur_m3), price_adder=b.full((n,), scene.price_adder_eur_mwh),
        heat_price=mid(econ.heat_price_eur_kwh), co2_price=mid(econ.co2_price_eur_kg),
        price_scale=b.full((n,), 1.0), lamps_ours=b.asarray(np.array(lamps)),
        p_drift=no + 0.0, p_comm_loss=no + 0.0, p_offline=no + 0.0, p_valve_stuck=no + 0.0,
        p_pump_wear=no + 0.0)


def start_state(scene: Scene, twin: TwinModel, prm: TwinParams) -> tuple[TwinState, Array]:
    """The greenhouse's state now in every instance, and its first observation."""
    b, cfg = twin.backend, twin.cfg
    n = len(scene.variants)
    temp = b.full((n,), scene.air_temp_c)
    vapour = b.full((n,), scene.air_rh_pct * 0.01
                    * float(saturation_vapour_kpa(np, np.float64(scene.air_temp_c))))
    state = initial_state(cfg, b, prm, b.zeros((n,), dtype=b.int), temp, vapour)
    theta = np.clip(np.nan_to_num(np.array(scene.moisture), nan=0.2), 0.01, b.to_numpy(prm.saturation)[0])
    if scene.crop_pools is not None:
        pools = {k: b.full((n,), v) for k, v in scene.crop_pools.items()}
    else:
        start = initial_crop(np, cfg.crop_growth, np.full(n, scene.crop_day), np.full(n, scene.air_temp_c),
                             season_days=float(sum(cfg.crop.stage_days)))
        pools = {k: b.asarray(v) for k, v in start._asdict().items()}
    theta_rows = b.asarray(np.broadcast_to(theta, (n, scene.zones)).copy())
    state = state.replace(theta=theta_rows, est_theta=theta_rows + 0.0, air_temp=temp, vapour_kpa=vapour,
                          co2=b.full((n,), scene.co2_ppm), dli_today=b.full((n,), scene.dli_today),
                          lamp_h_today=b.full((n,), scene.lamp_hours_today),
                          irrigation_24h=b.asarray(np.broadcast_to(np.array(scene.irrigation_24h_mm),
                                                                   (n, scene.zones)).copy()), **pools)
    return twin.start(prm, state)
