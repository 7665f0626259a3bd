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
from twin.spec import FORECAST_HOURS

HOURS_PER_YEAR = 8760
FIELDS = ("temp_c", "rh_pct", "solar_w_m2", "wind_m_s", "rain_mm_h")
TEMP, RH, SOLAR, WIND, RAIN = range(len(FIELDS))


def _svp_kpa(t_c: np.ndarray) -> np.ndarray:
    return 0.6108 * np.exp(17.27 * t_c / (t_c + 237.3))


def clear_sky_w_m2(latitude_deg: float) -> np.ndarray:
    """Hourly clear-sky global radiation (365, 24) [W/m2] at the hour's midpoint, local solar time:
    solar elevation from declination and hour angle, irradiance by the Haurwitz model."""
    days = np.arange(365)
    hours = np.arange(24)
    phi = np.radians(latitude_deg)
    decl = 0.409 * np.sin(2 * np.pi * (days + 1) / 365 - 1.39)
    omega = np.pi / 12 * (hours + 0.5 - 12)
    sin_alt = np.sin(phi) * np.sin(decl)[:, None] + np.cos(phi) * np.cos(decl)[:, None] * np.cos(omega)[None, :]
    sin_alt = np.clip(sin_alt, 1e-3, 1.0)
    return np.where(sin_alt > 0.01, 1098.0 * sin_alt * np.exp(-0.057 / sin_alt), 0.0)  # type: ignore[no-any-return]


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


def generate_year(rng: np.random.Generator, latitude_deg: float, cfg: WeatherConfig | None = None) -> np.ndarray:
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
    rh = np.clip(100.0 * _svp_kpa(dew)[:, None] / _svp_kpa(temp), 15.0, 100.0)

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


@dataclass(frozen=True)
class WeatherLibrary:
    """All weather years as one table of rows (year * 8760 + hour) on the twin's backend.

    Two derived tables, copies of its values laid out for the step, turn each per-step lookup
    into a single row gather: ``pairs`` holds every hour's row beside the next one (the two
    rows an interpolation needs), ``outlook`` the temperature and solar columns of the next
    :data:`~twin.spec.FORECAST_HOURS` hours (the forecast features).
    """

    table: Array
    latitudes_deg: np.ndarray
    n_years: int
    pairs: Array
    """[n_years * 8760, 10]: row h, then row h + 1 of the same year (wrapping to its first hour)."""
    outlook: Array
    """[n_years * 8760, 2 * FORECAST_HOURS]: temperature at hours h + 1 .. h + H, then solar."""

    @classmethod
    def build(cls, cfg: WeatherConfig, seed: int, backend: Backend) -> WeatherLibrary:
        rng = np.random.default_rng([seed, 0x57EA7E2])
        lats = rng.uniform(*cfg.latitude_deg, cfg.n_years)
        years = np.stack([generate_year(rng, float(lat), cfg) for lat in lats])  # [years, 8760, 5]
        ahead = np.stack([np.roll(years, -k, axis=1) for k in range(1, FORECAST_HOURS + 1)], axis=2)
        outlook = np.concatenate([ahead[..., TEMP], ahead[..., SOLAR]], axis=2)
        pairs = np.concatenate([years, ahead[:, :, 0]], axis=2)
        rows = cfg.n_years * HOURS_PER_YEAR
        return cls(table=backend.asarray(years.reshape(rows, len(FIELDS))), latitudes_deg=lats, n_years=cfg.n_years,
                   pairs=backend.asarray(pairs.reshape(rows, -1)), outlook=backend.asarray(outlook.reshape(rows, -1)))

    def at(self, backend: Backend, year: Array, hour: Array) -> Array:
        """Weather at fractional hour-of-year ``hour`` (B,) of year index ``year`` (B,), linearly
        interpolated between hourly rows: shape (B, 5)."""
        xp = backend.xp
        base = xp.floor(hour)
        frac = (hour - base)[:, None]
        both = backend.take_rows(self.pairs, year * HOURS_PER_YEAR + xp.astype(base, backend.int) % HOURS_PER_YEAR)
        r0, r1 = both[:, : len(FIELDS)], both[:, len(FIELDS):]
        return r0 + (r1 - r0) * frac

    def forecast(self, backend: Backend, year: Array, hour: Array) -> tuple[Array, Array]:
        """Outside temperature and solar radiation for the next FORECAST_HOURS whole hours after
        ``hour``: two arrays of shape (B, FORECAST_HOURS)."""
        xp = backend.xp
        rows = backend.take_rows(self.outlook, year * HOURS_PER_YEAR + xp.astype(xp.floor(hour), backend.int) % HOURS_PER_YEAR)
        return rows[:, :FORECAST_HOURS], rows[:, FORECAST_HOURS:]

    def ahead(self, backend: Backend, year: Array, hour: Array, hours: int) -> Array:
        """Hourly rows for the next ``hours`` whole hours after ``hour``: shape (B, hours, 5)."""
        xp = backend.xp
        i0 = xp.astype(xp.floor(hour), backend.int)
        steps = backend.arange(hours) + 1
        rows = year[:, None] * HOURS_PER_YEAR + (i0[:, None] + steps[None, :]) % HOURS_PER_YEAR
        return backend.take_rows(self.table, rows)
