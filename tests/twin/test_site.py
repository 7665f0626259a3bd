"""The default site: a Dutch-like glasshouse at 52 N (radiation, temperature) with a heated house.

Sources: clear-sky radiation by FAO-56 eq. 21 (extraterrestrial Ra) and eq. 37 (Rso = 0.75 Ra
near sea level); the KNMI De Bilt normals (1991-2020) give about 3,500-3,700 MJ/m2 of global
radiation a year (record years near 4,100), a mean air temperature of 10.6 degC, January about
3.5 and July about 18.5 degC, and a monthly Rs/Rso of about 0.4 in winter and 0.6 in summer.
Heating setpoints 19 degC by day, 17 by night: Vanthoor's Dutch tomato scenario (thesis table 6.3).
"""

from __future__ import annotations

import numpy as np
import pytest

from twin import GreenhouseTwin
from twin.backend import make_backend
from twin.climate import heating_setpoint, step_air
from twin.config import ClimateConfig, WeatherConfig
from twin.weather import HOURS_PER_YEAR, SOLAR, TEMP, WeatherLibrary

NP = make_backend("numpy")
MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
MONTH_EDGES = np.cumsum((0,) + MONTH_DAYS)


def fao56_rso_monthly_mj(latitude_deg: float) -> np.ndarray:
    """[12] clear-sky radiation per month [MJ/m2]: FAO-56 eq. 21 for Ra, eq. 37 for Rso at sea level."""
    j = np.arange(1, 366)
    phi = np.radians(latitude_deg)
    dr = 1 + 0.033 * np.cos(2 * np.pi * j / 365)                       # eq. 23
    decl = 0.409 * np.sin(2 * np.pi * j / 365 - 1.39)                   # eq. 24
    ws = np.arccos(-np.tan(phi) * np.tan(decl))                         # eq. 25
    ra = 24 * 60 / np.pi * 0.0820 * dr * (ws * np.sin(phi) * np.sin(decl)
                                          + np.cos(phi) * np.cos(decl) * np.sin(ws))
    return np.add.reduceat(0.75 * ra, MONTH_EDGES[:-1])


def _years(cfg: WeatherConfig, seed: int) -> np.ndarray:
    return NP.to_numpy(WeatherLibrary.build(cfg, seed, NP).table).reshape(cfg.n_years, HOURS_PER_YEAR, -1)


@pytest.fixture(scope="module")
def dutch_years() -> np.ndarray:
    return np.concatenate([_years(WeatherConfig(n_years=8), seed) for seed in (0, 1)])


def test_annual_radiation_matches_de_bilt(dutch_years) -> None:
    annual = dutch_years[:, :, SOLAR].sum(axis=1) * 0.0036  # W/m2 over an hour -> MJ/m2
    assert 3400.0 <= annual.mean() <= 3800.0
    # Single years scatter as De Bilt's do (about +-150 MJ/m2), within its recorded extremes.
    assert np.all((annual > 3200.0) & (annual < 4100.0)) and annual.std() > 50.0


def test_monthly_radiation_stays_under_fao56_clear_sky_with_a_dutch_shape(dutch_years) -> None:
    rso = fao56_rso_monthly_mj(52.0)
    daily = dutch_years[:, :, SOLAR].reshape(len(dutch_years), 365, 24).sum(axis=2) * 0.0036
    monthly = np.add.reduceat(daily, MONTH_EDGES[:-1], axis=1)
    ratio = monthly / rso
    assert np.all(ratio < 0.9) and np.all(ratio > 0.25)  # every month of every year below clear sky
    mean_ratio = ratio.mean(axis=0)
    assert np.all((mean_ratio > 0.33) & (mean_ratio < 0.72))
    # Winter is cloudier (and its low sun dimmer) than summer, as De Bilt's ~0.4 vs ~0.6.
    assert mean_ratio[[10, 11, 0]].mean() + 0.1 < mean_ratio[[4, 5, 6]].mean()
    assert np.argmax(monthly.mean(axis=0)) in (4, 5, 6)


def test_temperature_is_maritime(dutch_years) -> None:
    temp = dutch_years[:, :, TEMP].reshape(len(dutch_years), 365, 24).mean(axis=2)
    assert 9.5 <= temp.mean() <= 11.5
    assert 1.0 <= temp[:, :31].mean() <= 6.0 and 16.0 <= temp[:, 181:212].mean() <= 21.0


def test_another_site_is_configurable() -> None:
    sunny = WeatherConfig(n_years=2, latitude_deg=(36.8, 36.8), mean_temp_c=None, temp_amplitude_c=None,
                          cloudy_fraction=0.3, cloudy_fraction_winter=0.1, cloudy_cover=(0.6, 1.0))
    years = _years(sunny, 0)
    annual = years[:, :, SOLAR].sum(axis=1) * 0.0036
    assert np.all(annual > 5500.0)  # Almeria-like: about 6,500 MJ/m2
    assert abs(years[:, :, TEMP].mean() - (28.0 - 0.4 * 36.8)) < 2.0


@pytest.mark.parametrize("bad", [
    {"cloudy_fraction": 0.95, "cloudy_fraction_winter": 0.1}, {"cloud_persistence": 1.0},
    {"latitude_deg": (52.0, 40.0)}, {"cloudy_cover": (0.9, 0.8)}, {"n_years": 0},
])
def test_bad_weather_config_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        WeatherConfig(**bad)


def test_heating_setpoint_follows_the_light_period() -> None:
    cfg = ClimateConfig()
    sun = np.array([0.0, 0.0, 50.0, 400.0], dtype=np.float32)
    lamps = np.array([0.0, 1.0, 0.0, 0.0], dtype=np.float32)
    night, day = cfg.heating_night_c, cfg.heating_day_c
    assert heating_setpoint(np, cfg, sun, lamps).tolist() == [night, day, day, day]
    # A cold dark night settles at the night setpoint; a warm sunny day stays above the day one.
    n = 2
    outside = np.array([-5.0, 24.0], dtype=np.float32)
    air, vapour, co2 = (np.full(n, 10.0, np.float32), np.full(n, 0.8, np.float32),
                        np.full(n, 420.0, np.float32))
    rs = np.array([0.0, 500.0], dtype=np.float32)
    for _ in range(30):
        out = step_air(np, cfg, 600.0, air, vapour, co2, outside, np.full(n, 0.3, np.float32), rs,
                       np.zeros(n, np.float32), np.zeros(n, np.float32), np.ones(n, np.float32),
                       np.zeros(n, np.float32))
        air, vapour, co2 = out.air_temp, out.vapour_kpa, out.co2
    # The cold night is held at its setpoint by the boiler; the warm sunny day ventilates above the
    # outside air.
    assert abs(air[0] - night) < 0.01 and out.heat_w_m2[0] > 0.0
    assert air[1] > 24.0 and out.heat_w_m2[1] == 0.0 and out.vent_m3_m2_s[1] == cfg.vent_max_m3_m2_s
    with pytest.raises(ValueError, match="heating"):
        ClimateConfig(heating_day_c=16.0, heating_night_c=18.0)


def test_twin_air_never_falls_below_the_night_setpoint() -> None:
    twin = GreenhouseTwin(64, seed=3)
    twin.reset()
    action = np.zeros((64, twin.action_spec.dim), dtype=np.float32)
    temps = []
    for _ in range(3 * 144):  # three days from wherever each episode starts in the year
        twin.step(action)
        temps.append(twin.state.air_temp.copy())
    temps = np.array(temps)[6:]  # after the first hour (the start relaxes from the outside air)
    assert temps.min() > twin.config.climate.heating_night_c - 0.05
