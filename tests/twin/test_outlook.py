"""Observation v4: the 24-h outlook's error, the light so far today, the lamps' owner and the layout check."""

from __future__ import annotations

import numpy as np
import pytest

from twin import GreenhouseTwin
from twin.backend import make_backend
from twin.config import EconomicsConfig, LightingConfig, WeatherConfig, in_window
from twin.spec import FORECAST_HOURS, OBS_VERSION, ObservationSpec
from twin.weather import WeatherLibrary, split_outlook

LIGHTS_ON = np.array([0, 0, 0, 0, 0, 0, 0, 100.0], dtype=np.float32)


def _errors(seed: int) -> tuple[np.ndarray, np.ndarray]:
    lib = WeatherLibrary.build(WeatherConfig(n_years=2), seed=seed, backend=make_backend("numpy"))
    fc_t, fc_s, _, _ = split_outlook(lib.outlook)
    tr_t, tr_s, _, _ = split_outlook(lib.truth)
    day = tr_s > 50.0  # solar error is relative: judge it where the sun is up
    log_ratio = np.where(day, np.log(np.maximum(fc_s, 1e-3) / np.maximum(tr_s, 1e-3)), np.nan)
    return fc_t - tr_t, log_ratio


def test_forecast_error_grows_with_lead_and_is_reproducible_per_seed() -> None:
    temp_err, solar_err = _errors(7)
    t_std = temp_err.std(axis=0)
    s_std = np.nanstd(solar_err, axis=0)
    # Spread grows as sqrt(lead): +24 h is about sqrt(24) = 4.9 times +1 h, and never shrinks by much.
    assert t_std[-1] > 3.5 * t_std[0] and s_std[-1] > 3.5 * s_std[0]
    assert np.all(np.diff(t_std) > -0.05) and np.all(np.diff(s_std) > -0.02)
    assert 1.5 < t_std[-1] < 2.2 and 0.35 < s_std[-1] < 0.55  # the configured +24 h spreads (1.8 degC, 0.45)
    assert abs(temp_err.mean()) < 0.05  # unbiased
    again_t, again_s = _errors(7)
    assert (np.array_equal(temp_err, again_t)
            and np.array_equal(np.nan_to_num(solar_err), np.nan_to_num(again_s)))
    other_t, _ = _errors(8)
    assert not np.allclose(temp_err, other_t)


def test_observation_carries_the_forecast_and_only_true_outlook_the_truth() -> None:
    twin = GreenhouseTwin(16, seed=3)
    obs = twin.reset()
    for _ in range(40):
        obs, *_ = twin.step(np.zeros((16, 8), dtype=np.float32))
    sl = twin.observation_spec.slices
    truth = twin.true_outlook()
    assert truth["forecast_temp"].shape == (16, FORECAST_HOURS)
    hour = twin.params.start_hour + twin.state.step * twin.config.dt_h
    rows = twin.model.weather.forecast(twin.backend, twin.params.year, hour, truth=True)
    assert np.array_equal(truth["forecast_temp"], split_outlook(rows)[0])
    # The observed forecast is not the truth, but close to it at +1 h and further off at +24 h.
    gap = np.abs(obs[:, sl["forecast_temp"]] - truth["forecast_temp"])
    assert gap.max() > 0.1 and gap[:, 0].mean() < gap[:, -1].mean()
    for name in ("dli_natural_rest_today", "dli_natural_tomorrow"):
        assert np.all(truth[name] >= 0.0) and np.all(obs[:, sl[name]] >= 0.0)


def test_dli_and_lamp_hours_count_since_local_midnight() -> None:
    twin = GreenhouseTwin(3, seed=5)
    twin.reset()
    sl = twin.observation_spec.slices
    steps_per_day = round(24 / twin.config.dt_h)
    assert np.all(twin.params.start_hour % 24 == 0)  # episodes start at midnight
    par, lamp = np.zeros(3), np.zeros(3)
    for i in range(steps_per_day + 30):
        lights = 50.0 if i % 3 == 0 else 0.0
        obs, _, _, _, info = twin.step(np.tile(LIGHTS_ON * (lights / 100.0), (3, 1)))
        par += info["par_mol_m2"]
        lamp += lights / 100.0 * twin.config.dt_h
        if i == steps_per_day - 1:  # the step ending at midnight: the new day starts at zero
            assert par.min() > 1.0 and lamp.min() > 1.0
            par, lamp = np.zeros(3), np.zeros(3)
        np.testing.assert_allclose(obs[:, sl["dli_today"]][:, 0], par, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(obs[:, sl["lamp_hours_today"]][:, 0], lamp, rtol=1e-4, atol=1e-5)


def test_fixed_lamp_schedule_ignores_the_action_and_keeps_the_dark_period() -> None:
    twin = GreenhouseTwin(8, seed=9, economics=EconomicsConfig(lamps_ours=0.0))
    obs = twin.reset()
    sl = twin.observation_spec.slices
    assert np.all(obs[:, sl["lamps_ours"]] == 0.0)
    cfg = twin.config.lighting
    lit = []
    for _ in range(2 * 144):
        hour = float((twin.params.start_hour[0] + twin.state.step[0] * twin.config.dt_h) % 24)
        obs, _, _, _, info = twin.step(np.tile(LIGHTS_ON, (8, 1)))  # asks for full light all day
        on = twin.state.lights
        assert np.all(np.isin(on, (0.0, 1.0)))
        if in_window(hour, cfg.dark_start_h, cfg.dark_end_h) or not in_window(hour, cfg.schedule_on_h,
                                                                             cfg.schedule_off_h):
            assert np.all(on == 0.0), hour
        lit.append(on)
        natural = info["par_mol_m2"] / (twin.config.dt_s * 1e-6) - on * twin.config.climate.lamp_par_umol_m2_s
        assert np.all(on[natural >= cfg.schedule_par_umol + 1.0] == 0.0)
    assert 0.1 < np.mean(lit) < 0.7  # on in dull daytime hours only
    ours = GreenhouseTwin(8, seed=9)
    ours.reset()
    ours.step(np.tile(LIGHTS_ON, (8, 1)))
    # greentwin's lamps do what they are told (the interlock keeps the dark)
    assert np.all(ours.state.lights == 1.0)


def test_scenario_economics_are_drawn_within_their_ranges_and_observed() -> None:
    econ = EconomicsConfig(fruit_price_eur_kg=(0.8, 1.2), lamps_ours=0.5)
    twin = GreenhouseTwin(400, seed=1, economics=econ)
    obs = twin.reset()
    p = twin.params
    assert p.fruit_price.min() >= 0.8 and p.fruit_price.max() <= 1.2 and p.fruit_price.std() > 0.05
    np.testing.assert_array_equal(obs[:, twin.observation_spec.slices["fruit_price"]][:, 0], p.fruit_price)
    assert 0.4 < p.lamps_ours.mean() < 0.6
    for name, (lo, hi) in (("water_price", econ.water_price_eur_m3), ("drain_price", econ.drain_price_eur_m3),
                           ("price_adder", econ.price_adder_eur_mwh)):
        values = getattr(p, name)
        assert values.min() >= lo and values.max() <= hi


def test_dark_period_under_six_hours_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 6 h"):
        LightingConfig(dark_start_h=0.0, dark_end_h=5.5)
    with pytest.raises(ValueError, match="clock hour"):
        LightingConfig(dark_start_h=24.0)
    assert LightingConfig(dark_start_h=22.0, dark_end_h=4.0).dark_start_h == 22.0
    assert in_window(23.5, 23.0, 5.0) and in_window(0.0, 23.0, 5.0) and not in_window(5.0, 23.0, 5.0)


def test_old_layouts_are_refused_with_a_clear_error() -> None:
    spec = ObservationSpec(6)
    stored = spec.to_dict()
    assert stored["version"] == OBS_VERSION == "5"
    old = dict(stored, version="3",
               names=[n for n in stored["names"] if "[+" not in n or "forecast" not in n])
    with pytest.raises(ValueError, match="mismatch in 'version'"):
        spec.check_compatible(old)
    same_version = dict(stored, names=stored["names"][:-1] + ["something_else"])
    with pytest.raises(ValueError, match="differs at index"):
        spec.check_compatible(same_version)
    assert "price[+0h]" in spec.names and "price[+23h]" in spec.names and "forecast_solar[+24h]" in spec.names
    spec.check_compatible(stored)


def test_price_slots_are_the_scenarios_all_in_prices_and_only_hindsight_sees_unpublished_ones() -> None:
    twin = GreenhouseTwin(8, seed=6)
    twin.reset()
    sl = twin.observation_spec.slices
    p = twin.params
    seen_unpublished = False
    for _ in range(78):  # midnight to 13:00: the next day's prices appear at 13:00
        obs, _, _, _, info = twin.step(np.zeros((8, 8), dtype=np.float32))
        hour = p.start_hour + twin.state.step * twin.config.dt_h
        spot, published = twin.model.prices.outlook(twin.backend, p.year, hour)
        want = spot * p.price_scale[:, None] + p.price_adder[:, None]
        np.testing.assert_allclose(obs[:, sl["price"]], want, rtol=1e-6, atol=1e-3)
        np.testing.assert_array_equal(obs[:, sl["price_published"]], published)
        truth = twin.true_outlook()["price"]
        np.testing.assert_allclose(truth[published == 1], obs[:, sl["price"]][published == 1],
                                   rtol=1e-6, atol=1e-3)
        if (published == 0).any():
            seen_unpublished = True
            assert not np.allclose(truth[published == 0], obs[:, sl["price"]][published == 0])
        hod = float(hour[0] % 24)
        assert (published.min() == 1.0) == (hod >= 13.0 or hod < 1.0), hod  # 00:xx: all 24 slots are today
    assert seen_unpublished
    # The step's price is its clock hour's, scaled to the scenario's price year, plus its adder.
    assert p.price_scale.std() > 0.05 and p.price_adder.std() > 1.0


def test_forecast_error_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="lead_correlation"):
        WeatherConfig(forecast_lead_correlation=1.0)
    with pytest.raises(ValueError, match="spreads"):
        WeatherConfig(forecast_temp_std_24h_c=-1.0)
