"""Domain randomisation: per-episode parameters and initial state for a set of instances.

Every draw is a counter-based uniform keyed by (seed, instance id, episode number, stream),
so an instance's episode is the same whichever other instances are reset with it.
"""

from __future__ import annotations

import math

import numpy as np

from twin.backend import Array, Backend
from twin.config import SOIL_TYPES, TwinConfig
from twin.crop import initial_crop
from twin.kalman import initial_kalman
from twin.spec import ObservationSpec
from twin.types import TwinParams, TwinState
from twin.weather import HOURS_PER_YEAR

# RNG streams used at reset (one per family of draws; never reuse a number).
(_S_SOIL, _S_SOIL_JITTER, _S_VALVE, _S_PUMP, _S_SITE, _S_INIT, _S_FAULT_SEL, _S_FORECAST,
 _S_ECON) = range(100, 109)
_S_START = 109
_S_CLIMATE_PRICES = 110
# Columns of the start-state table (:func:`start_rows`); the zone moisture and soils follow.
_C_HOUR, _C_CROP, _C_ROOT, _C_HAS_SOILS, _C_THETA = range(5)


def _normal(backend: Backend, u1: Array, u2: Array) -> Array:
    """Box-Muller standard normal from two uniforms."""
    xp = backend.xp
    return xp.sqrt(-2.0 * xp.log(1.0 - u1)) * xp.cos(2.0 * math.pi * u2)


def start_table(cfg: TwinConfig) -> np.ndarray:
    """``cfg.start_states`` as one float table [S, 4 + 5 Z]: hour, crop day, root depth, has soils,
    then the zones' moisture, then their soils (fc, wp, sat, retention per zone)."""
    z = cfg.zones
    rows = []
    for st in cfg.start_states or ():
        soils = (np.asarray(st.zone_soils, dtype=np.float64).reshape(-1) if st.zone_soils is not None
                 else np.zeros(4 * z))
        rows.append(np.concatenate([[st.hour_of_year % HOURS_PER_YEAR, st.crop_day, st.root_mm,
                                     float(st.zone_soils is not None)], st.theta, soils]))
    return np.asarray(rows, dtype=np.float32)


def start_rows(cfg: TwinConfig, backend: Backend, keys: Array, episode: Array) -> Array | None:
    """Each instance's start state for this episode (a row of :func:`start_table`), drawn
    uniformly from its own counter stream; None without ``cfg.start_states``."""
    if not cfg.start_states:
        return None
    xp = backend.xp
    n = len(cfg.start_states)
    u = backend.uniform(keys, episode, _S_START, 1)[:, 0]
    pick = xp.clip(xp.astype(xp.floor(u * n), backend.int), 0, n - 1)
    return backend.take_rows(backend.asarray(start_table(cfg)), pick)


def sample_params(cfg: TwinConfig, backend: Backend, keys: Array, instance_ids: Array, episode: Array,
                  n_years: int, spot_mean_eur_mwh: float = 0.0) -> TwinParams:
    """Draw one episode's parameters for each given instance (arrays of shape [N]).

    ``spot_mean_eur_mwh`` is the price library's mean spot price: ``price_scale`` brings it to
    each scenario's drawn price-year mean (0: a tariff, not scaled)."""
    xp = backend.xp
    f = backend.float
    z = cfg.zones
    table = np.array([[s.field_capacity, s.wilting_point, s.saturation, s.hourly_retention]
                      for s in SOIL_TYPES], dtype=np.float32)

    # Soil class per zone: categorical with cfg.soil_mix, or the registered soils.
    if cfg.fixed_soils is not None:
        from twin.config import SOIL_INDEX

        ids = np.array([SOIL_INDEX[s] for s in cfg.fixed_soils], dtype=np.int64)
        soil = xp.broadcast_to(backend.asarray(ids)[None, :], (keys.shape[0], z))
        soil = soil + 0  # own the memory
    else:
        u = backend.uniform(keys, episode, _S_SOIL, z)
        cum = np.cumsum(cfg.soil_mix)[:-1]
        soil = sum((xp.astype(u >= float(c), backend.int) for c in cum),
                   start=xp.zeros_like(xp.astype(u, backend.int)))
    props = backend.take_rows(backend.asarray(table), soil)  # [N, Z, 4]
    if cfg.zone_soils is not None:  # calibrated: every instance the greenhouse's own fitted zones
        fitted = np.asarray(cfg.zone_soils, dtype=np.float32)[None, :, :]
        props = backend.asarray(np.broadcast_to(fitted, (int(keys.shape[0]), z, 4)).copy())
    start = start_rows(cfg, backend, keys, episode)
    if start is not None:  # a logged start of a greenhouse with its own calibrated soils
        own = start[:, _C_THETA + z:].reshape(-1, z, 4)
        props = xp.where(start[:, _C_HAS_SOILS, None, None] > 0.5, own, props)
    jit = backend.uniform(keys, episode, _S_SOIL_JITTER, 3 * z).reshape(-1, 3, z)
    fc = props[..., 0] * (0.92 + 0.16 * jit[:, 0])   # field capacity: +-8 %
    wp = props[..., 1] * (0.92 + 0.16 * jit[:, 1])   # wilting point: +-8 %
    sat = props[..., 2] * (0.95 + 0.10 * jit[:, 2])  # saturation: +-5 %
    retention = props[..., 3]
    drain_frac = 1.0 - retention ** cfg.dt_h         # FAO-style exponential drainage over one step
    p = cfg.crop.depletion_fraction
    inv_span = 1.0 / ((1.0 - p) * (fc - wp))
    site = backend.uniform(keys, episode, _S_SITE, 6)
    r_lo, r_hi = cfg.crop.root_depth_m
    root_mm = (r_lo + (r_hi - r_lo) * site[:, 0]) * 1000.0  # root depth: U(range) m
    if start is not None:
        root_mm = xp.where(start[:, _C_ROOT] > 0.0, start[:, _C_ROOT], root_mm)
    root_mm = xp.broadcast_to(root_mm[:, None], fc.shape) + 0.0
    band_low = fc - cfg.reward.band_low_depletion * (fc - wp)
    band_high = fc

    uv = backend.uniform(keys, episode, _S_VALVE, 2 * z).reshape(-1, 2, z)
    d_lo, d_hi = cfg.hydraulics.valve_delay_s
    t_lo, t_hi = cfg.hydraulics.valve_tau_s
    valve_delay = d_lo + (d_hi - d_lo) * uv[:, 0]    # opening delay: U(0.8, 1.2) s
    valve_tau = t_lo + (t_hi - t_lo) * uv[:, 1]      # flow rise tau: U(0.5, 2.0) s

    up = backend.uniform(keys, episode, _S_PUMP, 2)
    hyd = cfg.hydraulics
    qmax = hyd.pump_runout_flow_l_s * (0.9 + 0.2 * up[:, 0])   # pump curve run-out: +-10 %
    net_k = hyd.network_resistance * (0.85 + 0.3 * up[:, 1])  # pipe network: +-15 %

    tr_lo, tr_hi = cfg.climate.cover_transmissivity
    transmissivity = tr_lo + (tr_hi - tr_lo) * site[:, 1]     # cover: U(0.55, 0.75)
    year = xp.astype(xp.floor(site[:, 2] * n_years), backend.int)                  # weather year: uniform
    start_day = xp.floor(site[:, 3] * 365.0)                                        # start day: uniform
    start_hour = xp.astype(start_day * 24.0 % HOURS_PER_YEAR, f)
    season = sum(cfg.crop.stage_days)
    crop_day0 = site[:, 4] * max(season - cfg.episode_days, 0.0)  # crop age: U(0, season - episode)
    if start is not None:  # the logged moment's local time of year and crop age
        start_hour = start[:, _C_HOUR] + 0.0
        crop_day0 = start[:, _C_CROP] + 0.0

    uf = backend.uniform(keys, episode, _S_FORECAST, 4)
    bias_t = cfg.weather.forecast_error_c * _normal(backend, uf[:, 0], uf[:, 1])     # N(0, 1.5) degC
    bias_r = cfg.weather.forecast_error_frac * _normal(backend, uf[:, 2], uf[:, 3])  # N(0, 0.15) relative

    econ = cfg.economics
    ue = backend.uniform(keys, episode, _S_ECON, 6)
    uc = backend.uniform(keys, episode, _S_CLIMATE_PRICES, 2)

    def draw(span: tuple[float, float], u: Array) -> Array:
        return span[0] + (span[1] - span[0]) * u

    fc_cfg = cfg.faults
    faulty = xp.astype(site[:, 5] < fc_cfg.instance_fraction, f)

    def per_step(rate_per_h: float) -> Array:
        return faulty * (1.0 - math.exp(-rate_per_h * cfg.dt_h))

    return TwinParams(
        instance_id=instance_ids, key=keys, soil_type=soil, field_capacity=fc, wilting_point=wp,
        saturation=sat, drain_frac=xp.astype(drain_frac, f), inv_stress_span=inv_span, root_mm=root_mm,
        band_low=band_low, band_high=band_high, valve_delay_s=valve_delay, valve_tau_s=valve_tau,
        pump_qmax=qmax, network_k=net_k,
        transmissivity=transmissivity, year=year, start_hour=start_hour, crop_day0=crop_day0,
        forecast_bias_temp=bias_t, forecast_bias_solar=bias_r,
        fruit_price=draw(econ.fruit_price_eur_kg, ue[:, 0]),
        water_price=draw(econ.water_price_eur_m3, ue[:, 1]),
        drain_price=draw(econ.drain_price_eur_m3, ue[:, 2]),
        price_adder=draw(econ.price_adder_eur_mwh, ue[:, 3]),
        price_scale=(draw(econ.price_mean_eur_mwh, ue[:, 4]) * (1.0 / spot_mean_eur_mwh)
                     if spot_mean_eur_mwh > 0 else xp.ones_like(ue[:, 4])),
        lamps_ours=xp.astype(ue[:, 5] < econ.lamps_ours, f),
        heat_price=draw(econ.heat_price_eur_kwh, uc[:, 0]), co2_price=draw(econ.co2_price_eur_kg, uc[:, 1]),
        p_drift=per_step(fc_cfg.sensor_drift), p_comm_loss=per_step(fc_cfg.comm_loss),
        p_offline=per_step(fc_cfg.sensor_offline), p_valve_stuck=per_step(fc_cfg.valve_stuck),
        p_pump_wear=per_step(fc_cfg.pump_degradation),
    )


def initial_state(cfg: TwinConfig, backend: Backend, params: TwinParams, episode: Array,
                  outside_temp: Array, outside_vapour_kpa: Array) -> TwinState:
    """Start-of-episode state: moisture between the refill point and field capacity, air at outside
    conditions (heated to the night setpoint at least), all actuators off, no faults active."""
    xp = backend.xp
    n = params.key.shape[0]
    z, pr = cfg.zones, cfg.probes_per_zone
    u = backend.uniform(params.key, episode, _S_INIT, z)
    fc, wp = params.field_capacity, params.wilting_point
    theta = wp + (fc - wp) * (0.3 + 0.7 * u)   # initial moisture: U(30 %, 100 %) of available water
    start = start_rows(cfg, backend, params.key, episode)
    if start is not None:  # the logged estimate, inside what this instance's soil can hold
        theta = xp.minimum(xp.maximum(start[:, _C_THETA:_C_THETA + z], 0.01), params.saturation)
    zeros_z = backend.zeros((n, z))
    zeros_b = backend.zeros((n,))
    zeros_p = backend.zeros((n, z, pr))
    dim = ObservationSpec(z).dim
    air_temp = xp.maximum(outside_temp, cfg.climate.heating_night_c)
    crop = initial_crop(xp, cfg.crop_growth, params.crop_day0, air_temp, season_days=sum(cfg.crop.stage_days))
    return TwinState(
        theta=theta, valve_pos=zeros_z, valve_cmd=zeros_z + 0.0, valve_failed=zeros_z + 0.0,
        irrigation_24h=zeros_z + 0.0,
        saturated_s=zeros_z + 0.0, aer_days=zeros_z + 0.0, air_temp=air_temp,
        vapour_kpa=outside_vapour_kpa, co2=backend.full((n,), 420.0), co2_uptake=zeros_b + 0.0, pump=zeros_b,
        lights=zeros_b + 0.0,
        pump_current=zeros_b + 0.0, dead_head_s=zeros_b + 0.0, wear=zeros_b + 0.0, wear_rate=zeros_b + 0.0,
        drift_bias=zeros_p, drift_rate=zeros_p + 0.0, offline_steps=zeros_p + 0.0,
        valve_fault=backend.zeros((n, z), dtype=backend.int), dli_today=zeros_b + 0.0,
        lamp_h_today=zeros_b + 0.0,
        **crop._asdict(),
        last_obs=backend.zeros((n, dim)),
        **{f"est_{k}": v
           for k, v in _initial_estimate(backend, params, pr, theta, start is not None).items()},
        step=backend.zeros((n,), dtype=backend.int), episode=episode + 0,
    )


def _initial_estimate(backend: Backend, params: TwinParams, probes: int, theta: Array,
                      logged: bool) -> dict[str, Array]:
    """The Kalman filter's first state: its broad prior, centred on the start moisture when the
    start is a logged one (the service had that estimate at that moment)."""
    est = initial_kalman(backend, params, probes).__dict__
    if logged:
        est = {**est, "theta": theta + 0.0}
    return est
