"""The batched twin's transition: ``reset`` and the pure ``step(params, state, action)``.

:class:`TwinModel` holds only what never changes during a run (config, backend, the weather
library and the noise table); params and state are passed in and returned, never mutated.
"""

from __future__ import annotations

import math
from typing import Any

from twin.backend import Array, Backend
from twin.climate import (
    PAR_PER_W_M2,
    crop_kc,
    psychrometric_constant,
    reference_et0,
    season_stage,
    step_air,
)
from twin.config import LightingConfig, TwinConfig, in_window
from twin.crop import CropGrowthConfig, CropState, observed_crop, step_crop_uptake, water_stress_factor
from twin.et0 import saturation_vapour_kpa
from twin.hydraulics import step_hydraulics, valve_failure_latch
from twin.kalman import KalmanState, kalman_step
from twin.prices import PriceLibrary
from twin.randomize import initial_state, sample_params
from twin.reward import reward_terms
from twin.sensors import CLIMATE_SENSORS, N_UNIFORM, NoiseTable, advance_faults, fuse_probes, read_sensors
from twin.soil import aeration_stress, step_soil, waterlogged_days
from twin.spec import CROP_STATE, FEATURES, FORECAST_HOURS, PRICE_SLOTS, ActionSpec, ObservationSpec
from twin.types import StepOut, TwinParams, TwinState
from twin.weather import RH, SOLAR, TEMP, WeatherLibrary, split_outlook

TERMINATION_REASONS = ("none", "pump_overcurrent", "dead_heading", "safety_valve")
"""Codes in ``info['termination_reason']``: index into this tuple."""
SATURATION_WARNING_S = 1800.0
"""Soft limit: a zone near saturation longer than this raises a warning (no termination)."""
NEAR_SATURATION_VWC = 0.02
MOL_PER_WH_PAR = PAR_PER_W_M2 * 3600.0 * 1e-6
"""mol/m2 of PAR per Wh/m2 of global radiation."""


def fixed_schedule(xp: Any, cfg: LightingConfig, hour_of_day: Array, natural_par: Array) -> Array:
    """The site's price-blind lamp schedule as a 0/1 fraction: on in its window while natural PAR
    at the canopy is low, never in the dark period."""
    on = (in_window(hour_of_day, cfg.schedule_on_h, cfg.schedule_off_h)
          & ~in_window(hour_of_day, cfg.dark_start_h, cfg.dark_end_h) & (natural_par < cfg.schedule_par_umol))
    return xp.astype(on, natural_par.dtype)


def check_crop_fits_layout(cfg: CropGrowthConfig) -> None:
    """Raise ValueError when the crop's caps or its state at planting lie outside the observation's
    crop-state bounds: the observation is clipped, so a pool beyond them would read as the bound."""
    bounds = {f.name: (f.low, f.high) for f in FEATURES}
    reach = {"lai": cfg.lai_max, "fruit_load": max(cfg.c_fruit_max, cfg.c_fruit_initial_max) / 1000.0,
             "carb_buffer": max(cfg.c_buf_max, cfg.c_buf_initial) / 1000.0,
             "temp_sum": -20.0 * cfg.generative_onset_days}
    for name, value in reach.items():
        low, high = bounds[name]
        if not low <= value <= high:
            raise ValueError(f"the crop reaches {name}={value:g}, "
                             f"outside its observation bounds [{low:g}, {high:g}]")


def crop_of(state: TwinState) -> CropState:
    """The crop pools of a twin state."""
    return CropState(state.c_buf, state.c_leaf, state.c_stem, state.c_fruit, state.t_can24, state.t_sum,
                     state.fruit_dm_cum)


class TwinModel:
    """Constants of a twin run plus the pure reset/step functions over batched arrays."""

    def __init__(self, cfg: TwinConfig, backend: Backend, seed: int, *, weather: WeatherLibrary | None = None,
                 prices: PriceLibrary | None = None) -> None:
        """``weather`` and ``prices``, when given, replace the libraries drawn from ``seed`` (a twin
        driven by a site's own forecast and day-ahead prices)."""
        self.cfg = cfg
        self.backend = backend
        self.seed = int(seed)
        self.obs_spec = ObservationSpec(cfg.zones)
        self.action_spec = ActionSpec(cfg.zones)
        self.weather = (weather if weather is not None
                        else WeatherLibrary.build(cfg.weather, self.seed, backend))
        self.prices = (prices if prices is not None
                       else PriceLibrary.build(cfg.prices, self.seed, self.weather, backend))
        # A contract tariff is not scaled to a scenario's price year; a spot series is.
        self._spot_mean = cfg.prices.mean_eur_mwh if cfg.prices.source == "spot" else 0.0
        self.noise = NoiseTable.build(cfg, self.seed, backend)
        self._low = backend.asarray(self.obs_spec.low)
        self._high = backend.asarray(self.obs_spec.high)
        self._faults = cfg.faults.any_enabled
        self._gamma = psychrometric_constant(cfg.climate)
        self._decay_24h = math.exp(-cfg.dt_s / 86400.0)
        area = cfg.zones * cfg.hydraulics.zone_area_m2
        self._lamp_kw = cfg.climate.lamp_power_w_m2 * area / 1000.0
        self._area = area
        self._lead = backend.asarray([(h + 1) / FORECAST_HOURS for h in range(FORECAST_HOURS)])
        sl = self.obs_spec.slices
        self._climate = slice(sl["air_temp"].start, sl["leaf_temp"].stop)
        if list(self.obs_spec.names[self._climate]) != ["air_temp", "air_rh", "par", "co2", "leaf_temp"]:
            raise AssertionError("the climate features must stay adjacent, in sensor order")
        self._crop_state = slice(sl[CROP_STATE[0]].start, sl[CROP_STATE[-1]].stop)
        if list(self.obs_spec.names[self._crop_state]) != list(CROP_STATE):
            raise AssertionError("the crop-state features must stay adjacent, in CROP_STATE order")
        check_crop_fits_layout(cfg.crop_growth)

    # ---- reset -------------------------------------------------------------------------
    def reset(self, instance_ids: Array, episode: Array) -> tuple[TwinParams, TwinState, Array]:
        """Fresh params, state and first observation for the given instances."""
        b = self.backend
        xp = b.xp
        keys = b.instance_keys(self.seed, instance_ids)
        params = sample_params(self.cfg, b, keys, instance_ids, episode, self.weather.n_years,
                               self._spot_mean)
        w = self.weather.at(b, params.year, params.start_hour)
        e_out = w[:, RH] * 0.01 * saturation_vapour_kpa(xp, w[:, TEMP])
        state = initial_state(self.cfg, b, params, episode, w[:, TEMP], e_out)
        state, obs = self.start(params, state)
        return params, state, obs

    def start(self, params: TwinParams, state: TwinState) -> tuple[TwinState, Array]:
        """The first readings, estimate and observation of a state at its step: what :meth:`reset`
        ends with, for a state a caller put together itself (a greenhouse's own, to run forward)."""
        b = self.backend
        xp = b.xp
        w = self.weather.at(b, params.year,
                            params.start_hour + xp.astype(state.step, b.float) * self.cfg.dt_h)
        rs_nat = params.transmissivity * w[:, SOLAR]
        es = saturation_vapour_kpa(xp, state.air_temp)
        climate = {"air_temp_c": state.air_temp, "air_rh_pct": 100.0 * xp.minimum(state.vapour_kpa / es, 1.0),
                   "par_umol_m2_s": PAR_PER_W_M2 * rs_nat, "co2_ppm": state.co2,
                   "leaf_temp_c": state.air_temp}
        row = self.noise.draw(b, params, state)
        readings = read_sensors(b, self.cfg, params, state.theta, state.drift_bias, state.offline_steps,
                                climate, state.pump, state.pump_current, row, comm_loss=False)
        no_input = b.zeros(state.theta.shape)
        state = state.replace(**self._estimate(params, state, readings["soil_vwc"], no_input, no_input))
        obs = self._observe(params, state, readings, state.irrigation_24h, state.valve_pos,
                            state.valve_failed, state.step)
        return state.replace(last_obs=obs), obs

    # ---- step --------------------------------------------------------------------------
    def step(self, params: TwinParams, state: TwinState, action: Array) -> tuple[TwinState, StepOut]:
        """Advance every instance by one control step. Pure: inputs are not modified."""
        b, cfg = self.backend, self.cfg
        xp = b.xp
        f = b.float
        z = cfg.zones
        dt, dt_h = cfg.dt_s, cfg.dt_h
        hyd_cfg = cfg.hydraulics

        act = xp.where(action == action, action, 0.0)
        requested = act[:, :z] >= 0.5
        cmd = xp.astype(requested, f)
        pump = xp.clip(act[:, z] * 0.01, 0.0, 1.0)
        lights = xp.clip(act[:, z + 1] * 0.01, 0.0, 1.0)
        if self._faults:
            cmd = xp.where(state.valve_fault == 1, 0.0, xp.where(state.valve_fault == 2, 1.0, cmd))

        hyd = step_hydraulics(xp, hyd_cfg, params, state.valve_cmd, state.valve_pos, cmd, pump, state.wear,
                              dt)

        t_mid = xp.astype(state.step, f) + 0.5
        w = self.weather.at(b, params.year, params.start_hour + t_mid * dt_h)
        rs_nat = params.transmissivity * w[:, SOLAR]
        hour0 = params.start_hour + xp.astype(state.step, f) * dt_h
        schedule = fixed_schedule(xp, cfg.lighting, hour0 % 24.0, PAR_PER_W_M2 * rs_nat)
        lights = xp.where(params.lamps_ours > 0.5, lights, schedule)
        rs_lamp = lights * cfg.climate.lamp_radiant_w_m2
        demand = reference_et0(xp, cfg.climate, self._gamma, state.air_temp, state.vapour_kpa, rs_nat,
                               rs_lamp)
        kc = crop_kc(xp, cfg.crop, params.crop_day0 + t_mid * (dt / 86400.0))
        etc_mm = (demand.et0_mm_h * kc * dt_h)[:, None]
        crop_cfg = cfg.crop
        ks_aer = aeration_stress(xp, params, state.theta, state.aer_days, crop_cfg.aeration_vol_pct,
                                 crop_cfg.aeration_lag_days)
        aer_days = waterlogged_days(xp, params, state.theta, state.aer_days, crop_cfg.aeration_vol_pct,
                                    crop_cfg.aeration_lag_days, dt / 86400.0)
        soil = step_soil(xp, params, state.theta, hyd.zone_water_l, hyd_cfg.zone_area_m2, etc_mm, ks_aer)

        transpiration = xp.mean(soil.uptake_mm, axis=1) * (1.0 / dt_h)
        e_out = w[:, RH] * 0.01 * saturation_vapour_kpa(xp, w[:, TEMP])
        air = step_air(xp, cfg.climate, dt, state.air_temp, state.vapour_kpa, state.co2, w[:, TEMP], e_out,
                       rs_nat, lights, transpiration, xp.mean(soil.ks * ks_aer, axis=1), state.co2_uptake)
        lamp_kwh = lights * (self._lamp_kw * dt_h)
        energy_kwh = hyd.power_kw * dt_h + lamp_kwh
        par_mol = air.par * (dt * 1e-6)
        dli_today, lamp_h_today = self._today(hour0, state, par_mol, lights * dt_h)
        crop = crop_of(state)
        # Stomata close as the roots run dry: water stress cuts CO2 uptake like transpiration.
        f_w = water_stress_factor(xp, soil.uptake_mm, etc_mm)
        crop, fruit_kg, co2_uptake = step_crop_uptake(xp, cfg.crop_growth, crop, air.par, air.co2,
                                                      air.leaf_temp, f_w, dt)
        heat_kwh_m2 = air.heat_w_m2 * (dt / 3.6e6)
        co2_kg_m2 = air.co2_dose_mg_m2_s * (dt * 1e-6)

        dead_s = xp.where(hyd.dead_heading, state.dead_head_s + dt, 0.0)
        over = hyd.current_frac > hyd_cfg.overcurrent_frac
        dead = dead_s > hyd_cfg.dead_head_limit_s
        relief = hyd.pressure_frac > hyd_cfg.relief_pressure_frac
        terminated = over | dead | relief
        reason = xp.where(over, 1, xp.where(dead, 2, xp.where(relief, 3, 0)))
        price = self._price(params, hour0)
        reward, terms, money = reward_terms(xp, cfg, params, soil.theta, fruit_kg, soil.irrigation_mm,
                                            soil.drainage_mm, energy_kwh, price, terminated, heat_kwh_m2,
                                            co2_kg_m2)
        saturated_s = xp.where(soil.theta >= params.saturation - NEAR_SATURATION_VWC, state.saturated_s + dt,
                               0.0)
        irrigation_24h = state.irrigation_24h * self._decay_24h + soil.irrigation_mm

        # Without faults the row's uniforms are never read: gather the normals only.
        row = self.noise.draw(b, params, state, uniforms=self._faults)
        faults: dict[str, Array] = {}
        if self._faults:
            faults = advance_faults(b, cfg, params, state, row[:, -N_UNIFORM:])
        drift_bias = faults.get("drift_bias", state.drift_bias)
        offline_steps = faults.get("offline_steps", state.offline_steps)
        climate = {"air_temp_c": air.air_temp, "air_rh_pct": air.rh_pct, "par_umol_m2_s": air.par,
                   "co2_ppm": air.co2, "leaf_temp_c": air.leaf_temp}
        readings = read_sensors(b, cfg, params, soil.theta, drift_bias, offline_steps, climate, hyd.flow_l_s,
                                hyd.current_frac, row, comm_loss=self._faults)
        estimate = self._estimate(params, state, readings["soil_vwc"], soil.irrigation_mm, etc_mm)
        step = state.step + 1
        moisture = estimate.get("est_theta")
        failed = valve_failure_latch(xp, state.valve_failed, requested, hyd.valve_end >= 0.5)
        obs = self._observe(params, state, readings, irrigation_24h, hyd.valve_end, failed, step, pump,
                            lights, moisture, (dli_today, lamp_h_today), crop)
        # One record for the new state (building it field by field costs a dataclass copy each time).
        new = state.replace(theta=soil.theta, valve_pos=hyd.valve_end, valve_cmd=cmd, valve_failed=failed,
                            irrigation_24h=irrigation_24h,
                            saturated_s=saturated_s, aer_days=aer_days, air_temp=air.air_temp,
                            vapour_kpa=air.vapour_kpa, co2=air.co2, co2_uptake=co2_uptake,
                            pump=pump, lights=lights, pump_current=hyd.current_frac, dead_head_s=dead_s,
                            dli_today=dli_today, lamp_h_today=lamp_h_today, **crop._asdict(), step=step,
                            last_obs=obs, **faults,
                            **estimate)
        truncated = step >= cfg.horizon_steps
        probe_sum = xp.sum(readings["soil_vwc"], axis=(1, 2))

        info: dict[str, Any] = {
            "reward_terms": terms,
            "termination_reason": reason,
            "warnings": {"saturated_30min": saturated_s > SATURATION_WARNING_S,
                         "dead_heading": hyd.dead_heading,
                         # Readings are finite or NaN, so their sum is NaN exactly when one is missing.
                         "missing_readings": probe_sum != probe_sum},
            "water_l": hyd.zone_water_l,
            "irrigation_mm": soil.irrigation_mm,
            "drainage_mm": soil.drainage_mm,
            "uptake_mm": soil.uptake_mm,
            "energy_kwh": energy_kwh,
            "ks": soil.ks,
            "ks_aer": ks_aer,
            "readings": readings,
            "pressure_frac": hyd.pressure_frac,
            "et0_mm_h": demand.et0_mm_h,
            # The lamp level the plant ran at, [0, 1]: the controller's, or the site's schedule where
            # the lamps are not the controller's (an edge box reports it either way).
            "lights": lights,
            "lamp_kwh_m2": lamp_kwh * (1.0 / self._area),
            "par_mol_m2": par_mol,
            "fruit_kg_m2": fruit_kg,
            "revenue_eur_m2": money.revenue,
            "energy_cost_eur_m2": money.energy_cost,
            "water_cost_eur_m2": money.water_cost,
            "damage_eur_m2": money.damage,
            "heat_cost_eur_m2": money.heat_cost,
            "co2_cost_eur_m2": money.co2_cost,
            "heat_kwh_m2": heat_kwh_m2,
            "co2_kg_m2": co2_kg_m2,
            "vent_m3_m2_s": air.vent_m3_m2_s,
            "price_eur_mwh": price,
            "water_stress": f_w,
        }
        return new, StepOut(obs=obs, reward=reward, terminated=terminated, truncated=truncated, info=info)

    def _price(self, params: TwinParams, hour: Array) -> Array:
        """All-in electricity price [EUR/MWh] of the clock hour containing ``hour``: the library's
        price scaled to the scenario's price year, plus its adder."""
        return self.prices.at(self.backend, params.year, hour) * params.price_scale + params.price_adder

    def _today(self, hour0: Array, state: TwinState, par_mol: Array, lamp_h: Array) -> tuple[Array, Array]:
        """Light and lamp hours since local midnight at the end of a step starting at ``hour0``.

        A step that crosses midnight keeps only its share after midnight (all of the twin's
        steps end on it, so the new day starts at zero)."""
        xp = self.backend.xp
        hour1 = hour0 + self.cfg.dt_h
        midnight = xp.floor(hour1 * (1.0 / 24.0) + 1e-6) * 24.0
        crossed = hour0 < midnight - 1e-4
        after = xp.clip((hour1 - midnight) * (1.0 / self.cfg.dt_h), 0.0, 1.0)
        dli = xp.where(crossed, par_mol * after, state.dli_today + par_mol)
        hours = xp.where(crossed, lamp_h * after, state.lamp_h_today + lamp_h)
        return dli, hours

    def true_outlook(self, params: TwinParams, state: TwinState) -> dict[str, Array]:
        """What the forecast features would be with perfect foresight, for the hindsight controller
        only (the observation never carries it): outside temperature and solar for hours +1..+24,
        natural DLI at the canopy for the rest of today and tomorrow, and the all-in price of clock
        hours +0..+23 (published or not)."""
        b = self.backend
        hour = params.start_hour + b.xp.astype(state.step, b.float) * self.cfg.dt_h
        temp, solar, rest_wh, tomorrow_wh = split_outlook(
            self.weather.forecast(b, params.year, hour, truth=True))
        scale = params.transmissivity * MOL_PER_WH_PAR
        ahead = b.xp.floor(hour)[:, None] + b.xp.astype(b.arange(PRICE_SLOTS), b.float)[None, :]
        n = hour.shape[0]
        years = b.xp.broadcast_to(params.year[:, None], (n, PRICE_SLOTS)).reshape(-1)
        spot = self.prices.at(b, years, ahead.reshape(-1)).reshape(n, PRICE_SLOTS)
        return {"forecast_temp": temp, "forecast_solar": solar, "dli_natural_rest_today": rest_wh * scale,
                "dli_natural_tomorrow": tomorrow_wh * scale,
                "price": spot * params.price_scale[:, None] + params.price_adder[:, None]}

    # ---- observation -------------------------------------------------------------------
    def _estimate(self, params: TwinParams, state: TwinState, probes: Array, irrigation_mm: Array,
                  etc_mm: Array) -> dict[str, Array]:
        """The state's new ``est_*`` fields: the per-zone Kalman estimate advanced with this step's
        probes and inputs (none when the twin observes the probe mean).

        The filter gets what the service gets: the irrigation applied per zone and the crop's
        unstressed demand (the service derives both from the flow meter and the climate
        readings; here they come without the reading noise, which the filter's process noise covers).
        """
        if not self.cfg.moisture_estimate:
            return {}
        prior = KalmanState(theta=state.est_theta, var=state.est_var, ewma=state.est_ewma,
                            drifting=state.est_drifting, streak=state.est_streak)
        post = kalman_step(self.backend.xp, self.cfg.estimator, params, prior, probes, irrigation_mm, etc_mm,
                           self.cfg.dt_h)
        return {"est_theta": post.theta, "est_var": post.var, "est_ewma": post.ewma,
                "est_drifting": post.drifting, "est_streak": post.streak}

    def _observe(self, params: TwinParams, state: TwinState, readings: dict[str, Array],
                 irrigation_24h: Array, valve_pos: Array, valve_failed: Array, step: Array,
                 pump: Array | None = None, lights: Array | None = None,
                 moisture: Array | None = None, today: tuple[Array, Array] | None = None,
                 crop: CropState | None = None) -> Array:
        """Observation vector from readings; a missing reading holds the last observed value.

        ``state`` gives the last observation; ``pump``, ``lights``, ``moisture`` (the Kalman
        estimate), ``today`` (DLI and lamp hours so far) and ``crop`` (the pools after this step's
        growth) default to its own fields.
        """
        b, cfg = self.backend, self.cfg
        xp = b.xp
        sl = self.obs_spec.slices
        last = state.last_obs
        if cfg.moisture_estimate:
            moisture = state.est_theta if moisture is None else moisture
        else:
            fused, valid = fuse_probes(xp, readings["soil_vwc"])
            moisture = xp.where(valid, fused, last[:, sl["moisture"]])
        pump = state.pump if pump is None else pump
        lights = state.lights if lights is None else lights

        # The five climate features sit side by side: hold the missing ones in one operation.
        climate = xp.stack([readings[key] for key in CLIMATE_SENSORS], axis=1)
        held = xp.where(climate == climate, climate, last[:, self._climate])

        hour = params.start_hour + xp.astype(step, b.float) * cfg.dt_h
        dli, lamp_h = (state.dli_today, state.lamp_h_today) if today is None else today
        ahead_temp, ahead_solar, rest_wh, tomorrow_wh = split_outlook(
            self.weather.forecast(b, params.year, hour))
        fc_temp = ahead_temp + params.forecast_bias_temp[:, None] * self._lead[None, :]
        fc_solar = ahead_solar * (1.0 + params.forecast_bias_solar[:, None] * self._lead[None, :])
        dli_scale = params.transmissivity * (1.0 + params.forecast_bias_solar) * MOL_PER_WH_PAR
        spot, published = self.prices.outlook(b, params.year, hour, PRICE_SLOTS)
        price = spot * params.price_scale[:, None] + params.price_adder[:, None]
        phase = (hour % 24.0) * (2.0 * math.pi / 24.0)
        stage = season_stage(xp, cfg.crop, params.crop_day0 + xp.astype(step, b.float) * (cfg.dt_s / 86400.0))
        pools = xp.stack(observed_crop(xp, cfg.crop_growth, crop_of(state) if crop is None else crop), axis=1)
        parts = [
            moisture, params.band_low, params.band_high, irrigation_24h, valve_pos,
            valve_failed, held,
            fc_temp, fc_solar, xp.sin(phase)[:, None], xp.cos(phase)[:, None], stage[:, None], pools,
            (pump * 100.0)[:, None], (lights * 100.0)[:, None], readings["pump_current_frac"][:, None],
            dli[:, None], lamp_h[:, None], (rest_wh * dli_scale)[:, None], (tomorrow_wh * dli_scale)[:, None],
            price, published, params.fruit_price[:, None], params.lamps_ours[:, None],
        ]
        obs = xp.concat(parts, axis=1)
        return xp.clip(obs, self._low, self._high)
