"""Electricity prices: a seeded hourly day-ahead library row-aligned with the weather years.

One price table per weather year is built on the host at start (from the year's own solar
radiation and wind, so sunny hours are cheap and dark windless days dear, a correlation a
price-blind controller cannot use) and then lives on the twin's backend like the weather table.
Instances index it with the weather's (year, hour of year): stepping costs one row gather.

Day-ahead prices for day D are published at 13:00 local on D-1 (SDAC results ~12:45 CET), so
the known horizon is 11-35 h. :meth:`PriceLibrary.outlook` gives the next 24 clock hours with a
published mask; an unpublished slot holds the naive forecast "same hour one day earlier",
never the true future. A time-of-use tariff (:attr:`PriceConfig.source` ``"tou"``) sits behind
the same interface, every slot published (a contract is known in advance).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo

import numpy as np

from twin.backend import Array, Backend
from twin.config import PriceConfig
from twin.weather import HOURS_PER_YEAR, SOLAR, WIND, WeatherLibrary

__all__ = ["PUBLICATION_HOUR", "PriceConfig", "PriceLibrary", "generate_prices", "tou_price", "tou_prices"]

DAYS = HOURS_PER_YEAR // 24
PUBLICATION_HOUR = 13.0
"""Local clock hour from which the next day's day-ahead prices are known."""
OUTLOOK_HOURS = 24
_STREAM = 0x9A1CE5
"""Fixed stream id: the price generator's draws never share a sequence with the weather's."""


def _bump(hours: np.ndarray, centre: float, width: float) -> np.ndarray:
    """Gaussian bump on the 24-h clock (circular distance), height 1."""
    d = (hours - centre + 12.0) % 24.0 - 12.0
    return np.exp(-0.5 * (d / width) ** 2)


def _ar1(rng: np.random.Generator, n: int, phi: float, std: float) -> np.ndarray:
    """Stationary AR(1) series of length n with lag-1 autocorrelation phi and std ``std``."""
    from scipy.signal import lfilter  # lazily, as in the weather generator (scipy.signal is slow to import)

    e = rng.normal(0.0, std * np.sqrt(1.0 - phi * phi), n)
    e[0] = rng.normal(0.0, std)  # start in the stationary distribution
    return lfilter([1.0], [1.0, -phi], e)


def weekend_days(first_weekday: int) -> np.ndarray:
    """[365] True on Saturdays and Sundays of a year whose 1 January is ``first_weekday`` (0 = Monday)."""
    return (first_weekday + np.arange(DAYS)) % 7 >= 5


def generate_prices(rng: np.random.Generator, cfg: PriceConfig, year: np.ndarray,
                    first_weekday: int) -> np.ndarray:
    """One year of hourly spot prices [EUR/MWh], shape (8760,), from the weather ``year`` (8760, 5).

    The design notes' generator: daily level (season, AR(1) regime, wind, weekend) times a
    two-peak hourly shape, less a solar discount, plus AR(1) hourly noise and evening-biased
    scarcity spikes; sunny middays and windy nights go negative; clipped to [floor, cap], then
    shifted so the year's mean is the configured one.
    """
    days = np.arange(DAYS)
    hod = np.arange(24, dtype=float)
    weekend = weekend_days(first_weekday)
    solar = year[:, SOLAR].astype(float).reshape(DAYS, 24)
    wind_day = year[:, WIND].astype(float).reshape(DAYS, 24).mean(axis=1)

    winter = np.cos(2 * np.pi * (days - 15) / 365)  # +1 mid-January, -1 mid-July
    log_wind = np.log(wind_day)
    wind_z = (log_wind - log_wind.mean()) / max(float(log_wind.std()), 1e-9)
    z = _ar1(rng, DAYS, cfg.level_persistence, cfg.level_std)
    level = (cfg.mean_eur_mwh * (1.0 + cfg.seasonal_amplitude * winter) * np.exp(z - 0.5 * cfg.level_std ** 2)
             * np.exp(-cfg.wind_sensitivity * wind_z) * np.where(weekend, cfg.weekend_factor, 1.0))
    shape = (1.0 + cfg.morning_peak * _bump(hod, 8.0, 1.5) + cfg.evening_peak * _bump(hod, 19.0, 2.0)
             + cfg.night_dip * _bump(hod, 3.0, 2.5))
    shape = shape / shape.mean()
    kappa = cfg.solar_discount_eur_mwh * (1.0 + (cfg.solar_discount_summer - 1.0) * 0.5 * (1.0 - winter))
    price = level[:, None] * shape[None, :] - kappa[:, None] * solar / 1000.0
    price = price + _ar1(rng, HOURS_PER_YEAR, cfg.hourly_persistence,
                         cfg.hourly_std_eur_mwh).reshape(DAYS, 24)

    spike_weight = 1.0 + 3.0 * _bump(hod, 19.0, 2.0)
    spike_weight = spike_weight / spike_weight.mean()
    spikes = rng.random((DAYS, 24)) < cfg.spike_prob * spike_weight[None, :]
    price = price + spikes * rng.lognormal(np.log(cfg.spike_median_eur_mwh), 0.6, (DAYS, 24))

    # Negative hours: one uniform per day against an hourly probability, so a day's sunniest
    # hours go negative together (a midday block), as solar surpluses do; weekends doubled.
    day_factor = np.where(weekend, 2.0, 1.0)[:, None]
    sunny = np.clip((solar - 300.0) / 500.0, 0.0, 1.0)
    windy = wind_day >= np.quantile(wind_day, 0.75)
    night = (hod < 6.0)[None, :] & windy[:, None]
    p_negative = np.maximum(cfg.negative_prob_sunny * sunny,
                            cfg.negative_prob_windy_night * night) * day_factor
    negative = rng.random(DAYS)[:, None] < p_negative
    depth = rng.lognormal(np.log(cfg.negative_median_eur_mwh), 0.8, (DAYS, 24))
    price = np.where(negative, np.minimum(price, 0.0) - depth, price)

    price = np.clip(price.reshape(-1), cfg.floor_eur_mwh, cfg.cap_eur_mwh)
    return _shift_to_mean(price, negative.reshape(-1), cfg)


def _shift_to_mean(price: np.ndarray, negative: np.ndarray, cfg: PriceConfig) -> np.ndarray:
    """Shift the free hours (not negative events, not at the floor or cap) so the mean is the target.

    Negative events keep their sign and the bounds hold; a few rounds settle the hours the shift
    pushes onto a bound.
    """
    target = cfg.mean_eur_mwh * price.size
    for _ in range(4):
        free = ~negative & (price > cfg.floor_eur_mwh) & (price < cfg.cap_eur_mwh)
        gap = target - price.sum()
        if abs(gap) < 1e-6 * price.size or not free.any():
            break
        price = np.clip(np.where(free, price + gap / free.sum(), price), cfg.floor_eur_mwh, cfg.cap_eur_mwh)
    return price


def tou_price(cfg: PriceConfig, weekday: np.ndarray, hour_of_day: np.ndarray) -> np.ndarray:
    """The two-period tariff [EUR/MWh, spot part] for clock hours given by weekday (0 = Monday) and
    hour of day: peak on weekdays inside ``tou_peak_hours``, off-peak otherwise."""
    start, end = cfg.tou_peak_hours
    peak = (weekday < 5) & (hour_of_day >= start) & (hour_of_day < end)
    return np.where(peak, cfg.tou_peak_eur_mwh, cfg.tou_offpeak_eur_mwh)


def tou_at(cfg: PriceConfig, instants: Sequence[datetime], tz: tzinfo | None = None) -> np.ndarray:
    """The tariff [EUR/MWh, spot part] of the local clock hour holding each instant: in the site's
    zone ``tz``, or in each instant's own offset when None. The service's slots, the price provider's
    fallback and the dashboard's costs all read the tariff through here."""
    local = [t if tz is None else t.astimezone(tz) for t in instants]
    weekday = np.array([t.weekday() for t in local], dtype=np.int64)
    hour = np.array([t.hour for t in local], dtype=np.int64)
    return np.asarray(tou_price(cfg, weekday, hour), dtype=np.float64)


def tou_prices(cfg: PriceConfig, first_weekday: int) -> np.ndarray:
    """A year of the two-period tariff [EUR/MWh], shape (8760,): peak on weekdays in the peak hours."""
    weekday = (first_weekday + np.arange(DAYS)) % 7
    return tou_price(cfg, weekday[:, None], np.arange(24)[None, :]).reshape(-1)


@dataclass(frozen=True)
class PriceLibrary:
    """Hourly prices of every weather year, rows (year * 8760 + hour) like the weather table."""

    cfg: PriceConfig
    n_years: int
    hourly: np.ndarray
    """[n_years, 8760] float32 host copy (statistics, reports, tests)."""
    first_weekday: np.ndarray
    """[n_years] weekday of each year's 1 January (0 = Monday), drawn from the seed."""
    table: Array
    """[n_years * 8760, 1] price of each clock hour on the backend."""
    lookahead: Array
    """[n_years * 8760, 48]: prices of hours h .. h + 23, then of hours h - 24 .. h - 1 (the naive
    forecast for each slot), wrapping within the year as the weather does."""

    @property
    def adder_eur_mwh(self) -> float:
        return self.cfg.adder_eur_mwh

    @classmethod
    def build(cls, cfg: PriceConfig, seed: int, weather: WeatherLibrary, backend: Backend) -> PriceLibrary:
        """Generate one price year per weather year (spot) or lay out the tariff (tou)."""
        rng = np.random.default_rng([int(seed), _STREAM])
        n = weather.n_years
        first_weekday = rng.integers(0, 7, n)  # calendars first, so spot and tou share them
        if cfg.source == "tou":
            years = np.stack([tou_prices(cfg, int(w)) for w in first_weekday])
        else:
            wx = backend.to_numpy(weather.table).reshape(n, HOURS_PER_YEAR, -1)
            years = np.stack([generate_prices(rng, cfg, wx[i], int(first_weekday[i])) for i in range(n)])
        return cls.from_hourly(cfg, years, first_weekday, backend)

    @classmethod
    def from_hourly(cls, cfg: PriceConfig, years: np.ndarray, first_weekday: np.ndarray, backend: Backend
                    ) -> PriceLibrary:
        """A library of given hourly prices [n, 8760] (a generated year, or a site's day-ahead prices laid
        on the clock hours they price)."""
        hourly = np.asarray(years, dtype=np.float32)
        if hourly.ndim != 2 or hourly.shape[1] != HOURS_PER_YEAR:
            raise ValueError(f"hourly prices need shape (n, {HOURS_PER_YEAR}), got {hourly.shape}")
        n = hourly.shape[0]
        ahead = np.stack([np.roll(hourly, -k, axis=1) for k in range(OUTLOOK_HOURS)], axis=2)
        naive = np.roll(ahead, 24, axis=1)  # row h holds hours h - 24 + k
        rows = n * HOURS_PER_YEAR
        lookahead = np.concatenate([ahead, naive], axis=2).reshape(rows, 2 * OUTLOOK_HOURS)
        return cls(cfg=cfg, n_years=n, hourly=hourly, first_weekday=np.asarray(first_weekday),
                   table=backend.asarray(hourly.reshape(rows, 1)), lookahead=backend.asarray(lookahead))

    def _rows(self, b: Backend, year: Array, hour: Array) -> Array:
        return year * HOURS_PER_YEAR + b.xp.astype(b.xp.floor(hour), b.int) % HOURS_PER_YEAR

    def at(self, b: Backend, year: Array, hour: Array) -> Array:
        """[B] spot (or tariff) price [EUR/MWh] of the clock hour containing ``hour`` (hour of year,
        local)."""
        return b.take_rows(self.table, self._rows(b, year, hour))[:, 0]

    def all_in(self, b: Backend, year: Array, hour: Array) -> Array:
        """[B] what the grower pays [EUR/MWh]: the price plus the adder."""
        return self.at(b, year, hour) + self.cfg.adder_eur_mwh

    def outlook(self, b: Backend, year: Array, hour: Array,
                horizon: int = OUTLOOK_HOURS) -> tuple[Array, Array]:
        """Prices of clock hours floor(hour) + 0 .. + horizon - 1 and their published mask, both [B, horizon].

        Slot k is published when it falls on today (published yesterday at 13:00) or when the
        clock has passed 13:00 today; an unpublished slot holds the price of the same hour one
        day earlier. The tariff is all published.
        """
        if not 1 <= horizon <= OUTLOOK_HOURS:
            raise ValueError(f"horizon must lie in [1, {OUTLOOK_HOURS}], got {horizon}")
        xp = b.xp
        rows = b.take_rows(self.lookahead, self._rows(b, year, hour))
        true, naive = rows[:, :horizon], rows[:, OUTLOOK_HOURS:OUTLOOK_HOURS + horizon]
        if self.cfg.source == "tou":
            return true, b.full(true.shape, 1.0)
        clock = hour % 24.0
        slot_hod = xp.floor(clock)[:, None] + xp.astype(b.arange(horizon), b.float)[None, :]
        published = (slot_hod < 24.0) | (clock >= PUBLICATION_HOUR)[:, None]
        return xp.where(published, true, naive), xp.astype(published, b.float)
