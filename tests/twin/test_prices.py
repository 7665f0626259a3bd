"""The price library against the calibration facts of the design notes (CROP_ECONOMICS.md §2).

Targets: DE-LU day-ahead 2023 (FfE: base 95.2 EUR/MWh, > 300 negative hours; 2024 about 460),
summer daily spreads above winter's (trading notes), the solar trough (midday price falls with
midday sun), the SDAC floor of -500 EUR/MWh and publication of day D at 13:00 on D-1.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from twin.backend import make_backend
from twin.config import PriceConfig, TwinConfig, WeatherConfig
from twin.prices import PUBLICATION_HOUR, PriceLibrary, weekend_days
from twin.weather import HOURS_PER_YEAR, SOLAR, WIND, WeatherLibrary

NP = make_backend("numpy")
SEEDS = (0, 1, 2)
YEARS = 3
SUMMER = np.arange(152, 244)                      # June - August
WINTER = np.r_[0:59, 334:365]                     # December - February


def _weather(seed: int) -> WeatherLibrary:
    return WeatherLibrary.build(WeatherConfig(n_years=YEARS), seed, NP)


@pytest.fixture(scope="module")
def libraries() -> list[tuple[WeatherLibrary, PriceLibrary]]:
    out = []
    for seed in SEEDS:
        wx = _weather(seed)
        out.append((wx, PriceLibrary.build(PriceConfig(), seed, wx, NP)))
    return out


def _years(libraries):
    """(weather rows [8760, 5], prices [8760] float64) of every seeded year."""
    for wx, pl in libraries:
        rows = NP.to_numpy(wx.table).reshape(pl.n_years, HOURS_PER_YEAR, -1)
        for y in range(pl.n_years):
            yield rows[y], pl.hourly[y].astype(np.float64)


def test_annual_mean_negative_hours_and_floor(libraries) -> None:
    for _, price in _years(libraries):
        assert abs(price.mean() - 95.0) <= 0.02 * 95.0
        assert 150 <= int((price < 0).sum()) <= 450
        assert price.min() >= -500.0 and price.max() <= 4000.0


def test_summer_spread_exceeds_winter_and_midday_sun_lowers_price(libraries) -> None:
    for weather, price in _years(libraries):
        days = price.reshape(365, 24)
        spread = days.max(axis=1) - days.min(axis=1)
        assert spread[SUMMER].mean() > spread[WINTER].mean()
        noon_sun = weather[:, SOLAR].reshape(365, 24)[:, 12]
        assert np.corrcoef(days[:, 12], noon_sun)[0, 1] < -0.3


def test_dark_windless_days_are_dearer_than_bright_windy_ones(libraries) -> None:
    for weather, price in _years(libraries):
        sun = weather[:, SOLAR].reshape(365, 24).mean(axis=1)
        wind = weather[:, WIND].reshape(365, 24).mean(axis=1)
        daily = price.reshape(365, 24).mean(axis=1)
        dark_calm = (sun < np.median(sun)) & (wind < np.median(wind))
        bright_windy = (sun >= np.median(sun)) & (wind >= np.median(wind))
        assert daily[dark_calm].mean() > daily[bright_windy].mean() + 10.0


def test_the_floor_holds_and_the_mean_is_kept_when_negative_hours_run_deep() -> None:
    cfg = PriceConfig(negative_median_eur_mwh=400.0, mean_eur_mwh=60.0)
    pl = PriceLibrary.build(cfg, 4, _weather(4), NP)
    prices = pl.hourly.astype(np.float64)
    assert prices.min() == -500.0 and (prices == -500.0).sum() > 10  # the deep tail is clipped, not dropped
    assert np.allclose(prices.mean(axis=1), 60.0, rtol=1e-4)


def test_same_seed_same_table_bit_for_bit_and_another_seed_differs() -> None:
    wx = _weather(7)
    a = PriceLibrary.build(PriceConfig(), 7, wx, NP)
    b = PriceLibrary.build(PriceConfig(), 7, _weather(7), NP)
    c = PriceLibrary.build(PriceConfig(), 8, wx, NP)
    assert a.hourly.tobytes() == b.hourly.tobytes()
    assert np.array_equal(a.first_weekday, b.first_weekday)
    assert not np.array_equal(a.hourly, c.hourly)


def test_at_reads_the_clock_hour_and_wraps_within_the_year(libraries) -> None:
    _, pl = libraries[0]
    year = np.array([0, 1, 2, 1, 2])
    hour = np.array([0.0, 17.99, HOURS_PER_YEAR - 0.5, HOURS_PER_YEAR + 3.25, 2 * HOURS_PER_YEAR - 2.1],
                    dtype=np.float32)
    want = pl.hourly[year, np.floor(hour).astype(np.int64) % HOURS_PER_YEAR]
    assert np.array_equal(pl.at(NP, year, hour), want)
    assert np.allclose(pl.all_in(NP, year, hour), want + 30.0)


def _outlook_at(pl: PriceLibrary, year: int, hour: float) -> tuple[np.ndarray, np.ndarray]:
    prices, mask = pl.outlook(NP, np.array([year]), np.array([hour], dtype=np.float32))
    return prices[0], mask[0]


def test_tomorrow_is_published_at_13_00_not_at_12_59(libraries) -> None:
    _, pl = libraries[1]
    day, year = 100, 2
    truth = pl.hourly[year]
    before_p, before_m = _outlook_at(pl, year, day * 24 + 12 + 59 / 60)
    # 12:59: today's hours 12..23 known, tomorrow's 00..11 not yet.
    assert np.array_equal(before_m, np.r_[np.ones(12), np.zeros(12)])
    hours = day * 24 + 12 + np.arange(24)
    assert np.array_equal(before_p[:12], truth[hours[:12]])
    # An unpublished slot holds yesterday's price for that hour, never tomorrow's own.
    assert np.array_equal(before_p[12:], truth[hours[12:] - 24])
    assert not np.array_equal(before_p[12:], truth[hours[12:]])

    after_p, after_m = _outlook_at(pl, year, day * 24 + PUBLICATION_HOUR)
    assert after_m.tolist() == [1.0] * 24
    assert np.array_equal(after_p, truth[day * 24 + 13 + np.arange(24)])


def test_outlook_just_after_midnight_and_across_the_year_end(libraries) -> None:
    _, pl = libraries[2]
    truth = pl.hourly[0]
    # 00:30: all 24 slots are today's, published yesterday at 13:00.
    p, m = _outlook_at(pl, 0, 40 * 24 + 0.5)
    assert m.tolist() == [1.0] * 24 and np.array_equal(p, truth[40 * 24 + np.arange(24)])
    # 20:00 on 31 December: the slots run into 1 January of the same weather year.
    start = HOURS_PER_YEAR - 4
    p, m = _outlook_at(pl, 0, float(start))
    assert m.tolist() == [1.0] * 24
    assert np.array_equal(p, truth[(start + np.arange(24)) % HOURS_PER_YEAR])
    # 08:00 on 31 December, as an episode that started in the same year sees it (hour past 8760).
    p_wrapped, _ = _outlook_at(pl, 0, HOURS_PER_YEAR + 8.0)
    p_plain, m = _outlook_at(pl, 0, 8.0)
    assert np.array_equal(p_wrapped, p_plain) and m.sum() == 16


def test_outlook_horizon_is_checked(libraries) -> None:
    _, pl = libraries[0]
    with pytest.raises(ValueError, match="horizon"):
        pl.outlook(NP, np.array([0]), np.array([5.0], dtype=np.float32), horizon=25)
    p, m = pl.outlook(NP, np.array([0]), np.array([5.0], dtype=np.float32), horizon=6)
    assert p.shape == m.shape == (1, 6)


def test_time_of_use_periods() -> None:
    pl = PriceLibrary.build(PriceConfig(source="tou"), 3, _weather(3), NP)
    for y in range(pl.n_years):
        days = pl.hourly[y].reshape(365, 24)
        weekend = weekend_days(int(pl.first_weekday[y]))
        assert weekend.sum() in (104, 105)
        assert np.all(days[weekend] == 50.0)
        weekday = days[~weekend]
        assert (np.all(weekday[:, 7:23] == 110.0) and np.all(weekday[:, :7] == 50.0)
                and np.all(weekday[:, 23] == 50.0))
    # All-in with the default adder: the Dutch normaal/dal figures 0.14 and 0.08 EUR/kWh.
    assert {round(float(v), 3) for v in np.unique(pl.hourly + pl.adder_eur_mwh) / 1000.0} == {0.08, 0.14}
    # A tariff is known in advance: every slot is published and true, even before 13:00.
    hour = np.array([30 * 24 + 9.5], dtype=np.float32)
    p, m = pl.outlook(NP, np.array([1]), hour)
    assert m.tolist() == [[1.0] * 24] and np.array_equal(p[0], pl.hourly[1][30 * 24 + 9 + np.arange(24)])


def test_the_spot_and_tariff_calendars_agree() -> None:
    wx = _weather(5)
    spot = PriceLibrary.build(PriceConfig(), 5, wx, NP)
    tou = PriceLibrary.build(PriceConfig(source="tou"), 5, wx, NP)
    assert np.array_equal(spot.first_weekday, tou.first_weekday)
    for y in range(spot.n_years):  # weekends are cheaper on the spot market too
        days = spot.hourly[y].reshape(365, 24).mean(axis=1)
        weekend = weekend_days(int(spot.first_weekday[y]))
        assert days[weekend].mean() < days[~weekend].mean()


@pytest.mark.parametrize("source", ["spot", "tou"])
def test_numpy_and_torch_agree(source: str) -> None:
    tb = make_backend("torch")
    cfg = PriceConfig(source=source)
    pn = PriceLibrary.build(cfg, 9, WeatherLibrary.build(WeatherConfig(n_years=2), 9, NP), NP)
    pt = PriceLibrary.build(cfg, 9, WeatherLibrary.build(WeatherConfig(n_years=2), 9, tb), tb)
    rng = np.random.default_rng(0)
    year = rng.integers(0, 2, 257)
    hour = (rng.random(257) * 2 * HOURS_PER_YEAR).astype(np.float32)
    hour[:4] = [12 + 59 / 60, 13.0, 23.5, HOURS_PER_YEAR - 0.25]
    assert np.array_equal(pn.at(NP, year, hour),
                          tb.to_numpy(pt.at(tb, torch.from_numpy(year), torch.from_numpy(hour))))
    on, mn = pn.outlook(NP, year, hour)
    ot, mt = pt.outlook(tb, torch.from_numpy(year), torch.from_numpy(hour))
    assert np.array_equal(on, tb.to_numpy(ot)) and np.array_equal(mn, tb.to_numpy(mt))


@pytest.mark.parametrize("bad", [
    {"source": "fixed"}, {"mean_eur_mwh": -600.0}, {"adder_eur_mwh": -1.0}, {"level_persistence": 1.0},
    {"negative_prob_sunny": 0.8}, {"tou_peak_hours": (23, 7)}, {"level_std": -0.1},
])
def test_bad_price_config_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        PriceConfig(**bad)


def test_price_config_is_a_twin_config_section() -> None:
    cfg = TwinConfig.from_overrides(prices={"source": "tou", "adder_eur_mwh": 10.0})
    assert cfg.prices == dataclasses.replace(PriceConfig(), source="tou", adder_eur_mwh=10.0)
    assert cfg.config_hash() != TwinConfig().config_hash()
