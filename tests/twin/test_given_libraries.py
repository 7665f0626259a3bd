"""A twin driven by given weather and prices (a site's outlook) and started from a state put together
by its caller: :meth:`WeatherLibrary.from_years`, :meth:`PriceLibrary.from_hourly`,
:meth:`TwinModel.start`."""

from __future__ import annotations

import numpy as np
import pytest

from twin.backend import make_backend
from twin.config import TwinConfig
from twin.dynamics import TwinModel
from twin.prices import PriceLibrary
from twin.spec import ObservationSpec
from twin.weather import FIELDS, HOURS_PER_YEAR, SOLAR, TEMP, WeatherLibrary, split_outlook

B = make_backend("numpy")


def _year() -> np.ndarray:
    h = np.arange(HOURS_PER_YEAR)
    year = np.zeros((1, HOURS_PER_YEAR, len(FIELDS)))
    year[0, :, TEMP] = 10.0 + (h % 24)
    year[0, :, SOLAR] = np.where((h % 24 >= 6) & (h % 24 < 18), 400.0, 0.0)
    year[0, :, 1], year[0, :, 3] = 70.0, 2.0
    return year


def test_given_weather_is_read_back_and_forecast_exactly() -> None:
    lib = WeatherLibrary.from_years(_year(), B)
    zero = np.zeros(1, dtype=np.int64)
    assert lib.at(B, zero, np.array([100.0]))[0, TEMP] == pytest.approx(10.0 + 100 % 24)
    assert lib.at(B, zero, np.array([100.5]))[0, TEMP] == pytest.approx(10.5 + 100 % 24)  # between the hours
    temp, solar, _, _ = split_outlook(lib.forecast(B, zero, np.array([100.0])))
    assert np.allclose(temp[0], 10.0 + (np.arange(101, 101 + temp.shape[1]) % 24))
    assert np.array_equal(lib.outlook, lib.truth), "a given weather is its own forecast"
    with pytest.raises(ValueError, match="weather years need shape"):
        WeatherLibrary.from_years(np.zeros((1, 24, len(FIELDS))), B)


def test_given_prices_are_the_clock_hours_prices() -> None:
    cfg = TwinConfig().prices
    hourly = (np.arange(HOURS_PER_YEAR) % 24 * 10.0)[None]
    lib = PriceLibrary.from_hourly(cfg, hourly, np.zeros(1, dtype=np.int64), B)
    zero = np.zeros(1, dtype=np.int64)
    assert lib.at(B, zero, np.array([30.7]))[0] == pytest.approx(60.0)
    spot, _ = lib.outlook(B, zero, np.array([30.0]), 24)
    assert spot[0, 0] == pytest.approx(60.0) and spot[0, 1] == pytest.approx(70.0)
    with pytest.raises(ValueError, match="hourly prices need shape"):
        PriceLibrary.from_hourly(cfg, hourly[:, :100], np.zeros(1), B)


def test_start_observes_a_state_at_its_own_step() -> None:
    """A state carried forward and observed afresh reads the clock of its step, and the weather given."""
    cfg = TwinConfig(zones=2, sensor_noise=0.0)
    model = TwinModel(cfg, B, 0, weather=WeatherLibrary.from_years(_year(), B))
    params, state, _ = model.reset(B.arange(2), B.zeros((2,), dtype=B.int))
    for _ in range(6):
        state, _ = model.step(params, state, np.zeros((2, cfg.zones + 2), dtype=np.float32))
    state2, obs = model.start(params, state)
    sl = ObservationSpec(cfg.zones).slices
    hour = (np.asarray(params.start_hour) + 6 * cfg.dt_h) % 24.0
    assert np.allclose(obs[:, sl["hour_sin"].start], np.sin(hour * 2 * np.pi / 24.0), atol=1e-5)
    # the site's bias at +1 h
    lead1 = 10.0 + (np.floor(hour) + 1) % 24 + np.asarray(params.forecast_bias_temp) / 24.0
    assert np.allclose(obs[:, sl["forecast_temp"].start], lead1, atol=1e-4)
    assert np.array_equal(state2.last_obs, obs) and np.array_equal(state2.theta, state.theta)
