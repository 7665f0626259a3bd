"""Synthetic outside weather: a seeded library of hourly weather years, shared by all instances.

Each year is generated once at construction (seasonal and daily cycles, Markov cloudy spells,
autocorrelated temperature anomalies, rain on cloudy days) and stored as one float32 table.
Instances only hold an index into it (year, start hour), so stepping costs two row gathers and
memory per instance stays tiny however long the episode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from twin.backend import Array, Backend
from twin.config import WeatherConfig
from twin.et0 import saturation_vapour_kpa
from twin.spec import FORECAST_HOURS

HOURS_PER_YEAR = 8760
FIELDS = ("temp_c", "rh_pct", "solar_w_m2", "wind_m_s", "rain_mm_h")
TEMP, RH, SOLAR, WIND, RAIN = range(len(FIELDS))


def clear_sky_w_m2(latitude_deg: float) -> np.ndarray:
    """Hourly clear-sky global radiation (365, 24) [W/m2] at the hour's midpoint, local solar time:
    solar elevation from declination and hour angle, irradiance by the Haurwitz model."""
    days = np.arange(365)
    hours = np.arange(24)
    phi = np.radians(latitude_deg)
    decl = 0.409 * np.sin(2 * np.pi * (days + 1) / 365 - 1.39)
    omega = np.pi / 12 * (hours + 0.5 - 12)
    sin_alt = (np.sin(phi) * np.sin(decl)[:, None]
               + np.cos(phi) * np.cos(decl)[:, None] * np.cos(omega)[None, :])
    sin_alt = np.clip(sin_alt, 1e-3, 1.0)
    return np.where(sin_alt > 0.01, 1098.0 * sin_alt * np.exp(-0.057 / sin_alt), 0.0)


def _overcast_days(rng: np.random.Generator, cfg: WeatherConfig) -> np.ndarray:
    """Overcast (True) or clear day, a two-state Markov chain whose stationary share of overcast
    days follows the season (more in winter) and whose lag-1 autocorrelation is the persistence."""
    days = np.arange(365)
    share = cfg.cloudy_fraction + cfg.cloudy_fraction_winter * np.cos(2 * np.pi * (days - 15) / 365)
    r = cfg.cloud_persistence
    stay_cloudy = share + r * (1.0 - share)
    turn_cloudy = share * (1.0 - r)
    cloudy = np.zeros(365, dtype=bool)
    u = rng.random(365)
    cloudy[0] = u[0] < share[0]
    for d in range(1, 365):
        cloudy[d] = u[d] < (stay_cloudy[d] if cloudy[d - 1] else turn_cloudy[d])
    return cloudy


def generate_year(rng: np.random.Generator, latitude_deg: float,
                  cfg: WeatherConfig | None = None) -> np.ndarray:
    """One hourly weather year, shape (8760, 5) float32, columns as :data:`FIELDS`.

    ``cfg`` gives the site's cloud and temperature climate (default: the Dutch-like site).
    """
    from scipy.signal import lfilter  # here, not at import: scipy.signal costs the service 1.6 s to start

    cfg = cfg or WeatherConfig()
    days = np.arange(365)
    hours = np.arange(24)
    clear_sky = clear_sky_w_m2(latitude_deg)

    cloudy = _overcast_days(rng, cfg)
    cover_day = np.where(cloudy, rng.uniform(*cfg.cloudy_cover, 365), rng.uniform(*cfg.clear_cover, 365))
    hourly_jitter = lfilter([1.0], [1.0, -0.8], rng.normal(0, 0.08, 365 * 24)).reshape(365, 24)
    cover = np.clip(cover_day[:, None] + hourly_jitter, 0.0, 1.0)
    solar = clear_sky * (1.0 - 0.75 * cover**3.4)  # Kasten-Czeplak cloud attenuation

    # Temperature: seasonal cycle, AR(1) daily anomaly, cooler under cloud, diurnal cycle peaking ~15 h.
    mean_c = 28.0 - 0.4 * latitude_deg if cfg.mean_temp_c is None else cfg.mean_temp_c
    amplitude = 0.25 * latitude_deg - 2.0 if cfg.temp_amplitude_c is None else cfg.temp_amplitude_c
    t_annual = mean_c + rng.normal(0, 1.0)
    season = t_annual - amplitude * np.cos(2 * np.pi * (days - 15) / 365)
    anomaly = lfilter([1.0], [1.0, -0.8], rng.normal(0, 1.8, 365))
    # Cloud cools relative to the year's own mean cover, so the annual mean stays the configured one.
    t_mean = season + anomaly - 1.0 * (cover_day - cover_day.mean())
    diurnal_range = 12.0 * (1.0 - 0.6 * cover_day)
    temp = t_mean[:, None] + 0.5 * diurnal_range[:, None] * np.cos(2 * np.pi * (hours[None, :] - 15) / 24)

    # Humidity from a dew point near the daily minimum (moister on cloudy days).
    dew = (t_mean - 0.5 * diurnal_range) - 2.0 + 3.0 * cover_day
    rh = np.clip(100.0 * saturation_vapour_kpa(np, dew)[:, None] / saturation_vapour_kpa(np, temp),
                 15.0, 100.0)

    # Wind at 2 m: log-normal daily mean with persistence, stronger in the afternoon.
    wind_day = np.exp(np.log(2.5) + lfilter([1.0], [1.0, -0.6], rng.normal(0, 0.3, 365)))
    wind = np.clip(wind_day[:, None] * (1 + 0.3 * np.sin(2 * np.pi * (hours[None, :] - 9) / 24)), 0.2, 15.0)

    # Rain on half of the cloudy days, spread over a random block of hours.
    rain = np.zeros((365, 24))
    wet = cloudy & (rng.random(365) < 0.5)
    amount = rng.exponential(5.0, 365)
    start = rng.integers(0, 18, 365)
    length = rng.integers(2, 7, 365)
    mask = (hours[None, :] >= start[:, None]) & (hours[None, :] < (start + length)[:, None]) & wet[:, None]
    rain[mask] = np.repeat(amount / length, 24).reshape(365, 24)[mask]

    table = np.stack([temp, rh, solar, wind, rain], axis=-1).reshape(HOURS_PER_YEAR, len(FIELDS))
    return table.astype(np.float32)


OUTLOOK_LEADS = 2 * FORECAST_HOURS
"""Leads a forecast is drawn for: the +1..+24 h features, and up to +48 h for tomorrow's light."""
REST_TODAY, TOMORROW = 2 * FORECAST_HOURS, 2 * FORECAST_HOURS + 1
"""Outlook columns after the hourly ones: forecast solar over the clock hours left today after the
issue hour, and over tomorrow [Wh/m2]."""


def _outlook(years: np.ndarray, temp_err: np.ndarray, solar_factor: np.ndarray) -> np.ndarray:
    """Rows (year * 8760 + issue hour) of forecast temperature and solar for leads +1..+24 h, then
    the forecast solar sums for the rest of today and for tomorrow; errors are [years, 8760, leads]."""
    hours = np.arange(HOURS_PER_YEAR)
    leads = np.arange(1, OUTLOOK_LEADS + 1)
    idx = (hours[:, None] + leads[None, :]) % HOURS_PER_YEAR
    temp = years[:, idx, TEMP] + temp_err
    solar = years[:, idx, SOLAR] * solar_factor
    left = (23 - hours % 24)[:, None]  # whole clock hours left today after the issue hour
    rest_today = np.sum(solar * (leads[None, :] <= left), axis=2)
    tomorrow = np.sum(solar * ((leads[None, :] > left) & (leads[None, :] <= left + 24)), axis=2)
    h = FORECAST_HOURS
    out = np.concatenate([temp[..., :h], solar[..., :h], rest_today[..., None], tomorrow[..., None]], axis=2)
    return out.reshape(-1, out.shape[2]).astype(np.float32)


def forecast_errors(cfg: WeatherConfig, rng: np.random.Generator, shape: tuple[int, int]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Temperature error [degC] and solar factor for each (issue row, lead +1..+48 h).

    The spread grows as the square root of the lead (a random walk of forecast skill), errors
    are correlated across neighbouring leads (one forecast run, not independent guesses), and
    solar's error is multiplicative and larger (cloud cover is the hard part); the factor is
    log-normal with mean 1, so forecasts are unbiased on average.
    """
    from scipy.signal import lfilter

    rows, n = shape
    scale = np.sqrt(np.arange(1, n + 1) / FORECAST_HOURS)[None, :]
    phi = cfg.forecast_lead_correlation
    norm = np.sqrt(1.0 - phi * phi)
    first = np.ones(n)
    first[0] = 1.0 / norm  # a stationary AR(1) chain: unit variance from the first lead on
    eps_t = lfilter([norm], [1.0, -phi], rng.standard_normal((rows, n)) * first, axis=1)
    eps_s = lfilter([norm], [1.0, -phi], rng.standard_normal((rows, n)) * first, axis=1)
    sigma_s = cfg.forecast_solar_log_std_24h * scale
    return cfg.forecast_temp_std_24h_c * scale * eps_t, np.exp(sigma_s * eps_s - 0.5 * sigma_s**2)


@dataclass(frozen=True)
class WeatherLibrary:
    """All weather years as one table of rows (year * 8760 + hour) on the twin's backend.

    Derived tables, laid out for the step, turn each per-step lookup into a single row gather:
    ``pairs`` holds every hour's row beside the next one (the two rows an interpolation needs),
    ``outlook`` the forecast issued at each hour (temperature and solar for the next
    :data:`~twin.spec.FORECAST_HOURS` hours, then the solar sums for the rest of today and
    tomorrow), with an error that grows with lead. ``truth`` holds the same layout without
    error: only hindsight reads it (:meth:`twin.dynamics.TwinModel.true_outlook`).
    """

    table: Array
    latitudes_deg: np.ndarray
    n_years: int
    pairs: Array
    """[n_years * 8760, 10]: row h, then row h + 1 of the same year (wrapping to its first hour)."""
    outlook: Array
    """[n_years * 8760, 2 * FORECAST_HOURS + 2]: forecast temperature at hours h + 1 .. h + H, then
    solar, then forecast solar [Wh/m2] over the rest of today and over tomorrow."""
    truth: Array
    """The same layout as ``outlook``, without forecast error."""

    @classmethod
    def build(cls, cfg: WeatherConfig, seed: int, backend: Backend) -> WeatherLibrary:
        rng = np.random.default_rng([seed, 0x57EA7E2])
        lats = rng.uniform(*cfg.latitude_deg, cfg.n_years)
        years = np.stack([generate_year(rng, float(lat), cfg) for lat in lats])  # [years, 8760, 5]
        pairs = np.concatenate([years, np.roll(years, -1, axis=1)], axis=2)
        rows = cfg.n_years * HOURS_PER_YEAR
        # A separate stream: the years stay what they were for a given seed.
        temp_err, solar_factor = forecast_errors(cfg, np.random.default_rng([seed, 0xF0CA57]),
                                                 (rows, OUTLOOK_LEADS))
        shape = (cfg.n_years, HOURS_PER_YEAR, OUTLOOK_LEADS)
        outlook = _outlook(years, temp_err.reshape(shape), solar_factor.reshape(shape))
        truth = _outlook(years, np.zeros(shape), np.ones(shape))
        return cls(table=backend.asarray(years.reshape(rows, len(FIELDS))), latitudes_deg=lats,
                   n_years=cfg.n_years, pairs=backend.asarray(pairs.reshape(rows, -1)),
                   outlook=backend.asarray(outlook), truth=backend.asarray(truth))

    @classmethod
    def from_years(cls, years: np.ndarray, backend: Backend, latitude_deg: float = 52.0) -> WeatherLibrary:
        """A library of given weather ``years`` [n, 8760, 5] (:data:`FIELDS`) whose forecasts are exact:
        the twin driven by a weather someone else forecast (a site's outlook), not one drawn from a seed."""
        years = np.asarray(years, dtype=np.float32)
        if years.ndim != 3 or years.shape[1:] != (HOURS_PER_YEAR, len(FIELDS)):
            raise ValueError(f"weather years need shape (n, {HOURS_PER_YEAR}, {len(FIELDS)}), "
                             f"got {years.shape}")
        n, rows = years.shape[0], years.shape[0] * HOURS_PER_YEAR
        pairs = np.concatenate([years, np.roll(years, -1, axis=1)], axis=2)
        truth = _outlook(years, np.zeros((n, HOURS_PER_YEAR, OUTLOOK_LEADS)),
                         np.ones((n, HOURS_PER_YEAR, OUTLOOK_LEADS)))
        return cls(table=backend.asarray(years.reshape(rows, len(FIELDS))),
                   latitudes_deg=np.full(n, latitude_deg), n_years=n,
                   pairs=backend.asarray(pairs.reshape(rows, -1)), outlook=backend.asarray(truth),
                   truth=backend.asarray(truth))

    def at(self, backend: Backend, year: Array, hour: Array) -> Array:
        """Weather at fractional hour-of-year ``hour`` (B,) of year index ``year`` (B,), linearly
        interpolated between hourly rows: shape (B, 5)."""
        xp = backend.xp
        base = xp.floor(hour)
        frac = (hour - base)[:, None]
        both = backend.take_rows(self.pairs,
                                 year * HOURS_PER_YEAR + xp.astype(base, backend.int) % HOURS_PER_YEAR)
        r0, r1 = both[:, : len(FIELDS)], both[:, len(FIELDS):]
        return r0 + (r1 - r0) * frac

    def forecast(self, backend: Backend, year: Array, hour: Array, truth: bool = False) -> Array:
        """The forecast issued at the whole hour of ``hour`` (B,): rows of ``outlook`` (or of
        ``truth``), shape (B, 2 * FORECAST_HOURS + 2); split them with :func:`split_outlook`."""
        xp = backend.xp
        table = self.truth if truth else self.outlook
        return backend.take_rows(
            table, year * HOURS_PER_YEAR + xp.astype(xp.floor(hour), backend.int) % HOURS_PER_YEAR)

    def ahead(self, backend: Backend, year: Array, hour: Array, hours: int) -> Array:
        """Hourly rows for the next ``hours`` whole hours after ``hour``: shape (B, hours, 5)."""
        xp = backend.xp
        i0 = xp.astype(xp.floor(hour), backend.int)
        steps = backend.arange(hours) + 1
        rows = year[:, None] * HOURS_PER_YEAR + (i0[:, None] + steps[None, :]) % HOURS_PER_YEAR
        return backend.take_rows(self.table, rows)


def split_outlook(rows: Array) -> tuple[Array, Array, Array, Array]:
    """(temperature [B, H], solar [B, H], solar Wh/m2 rest of today [B], tomorrow [B]) of outlook rows."""
    h = FORECAST_HOURS
    return rows[:, :h], rows[:, h: 2 * h], rows[:, REST_TODAY], rows[:, TOMORROW]
