"""Hourly site weather for the decisions, fetched so that it never stalls the control loop.

:class:`WeatherProvider` asks an Open-Meteo style ``/v1/forecast`` endpoint and keeps the last good
answer for ``cache_ttl_s``; when the network or the data fails it degrades instead of raising: stale
cache, else yesterday's observations plus seeded noise, else a climatology
(:func:`twin.weather_data.fallback_weather`). What the weather is and how a body parses are the
twin's (:mod:`twin.weather_data`); this module owns the HTTP client, its retries and its cache.

Time of one ``forecast()``: ``retries + 1`` attempts plus backoff waits of 0.05, 0.1, 0.2 ... s (max
0.5 s). httpx limits each connect, send and read step to ``timeout_s`` and an attempt is abandoned at the
first body chunk after ``timeout_s``, so an unreachable or silent server costs ``timeout_s`` per attempt:
3 x 3 s + 0.15 s, about 9.2 s, with defaults; a refused connection fails in milliseconds. A server
stalling just under the limit in two steps (connect, then first byte) can double an attempt (about
18.2 s with defaults); only one dribbling its headers byte by byte could exceed that. DNS lookups are
outside httpx's timeouts, so prefer an IP address in ``base_url``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import httpx
import numpy as np

from app.outlook.http_source import error_kind, get_json, retrying
from twin.weather_data import (
    API_KEYS,
    DAY,
    FIELDS,
    HOUR,
    MAX_HOURS,
    HourlyWeather,
    Source,
    WeatherDataError,
    fallback_weather,
    observation_row,
    parse_open_meteo,
    utc_hour,
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class WeatherStats:
    """Answers by source, HTTP attempts, and failed attempts by kind (timeout, transport, http_5xx,
    bad_data...)."""

    live: int = 0
    cache: int = 0
    fallback: int = 0
    requests: int = 0
    errors: dict[str, int] = dataclasses.field(default_factory=dict)


class WeatherProvider:
    """Forecast client that answers within a bounded time and degrades instead of raising (see module doc)."""

    def __init__(self, base_url: str, latitude: float, longitude: float, *, timeout_s: float = 3.0,
                 retries: int = 2, cache_ttl_s: float = 900.0, seed: int = 0,
                 clock: Callable[[], float] = time.monotonic, transport: httpx.BaseTransport | None = None,
                 utc_now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        if not (-90.0 <= latitude <= 90.0 and -180.0 <= longitude <= 180.0):
            raise ValueError(f"latitude/longitude out of range: {latitude}, {longitude}")
        if not (timeout_s > 0 and retries >= 0 and cache_ttl_s >= 0):
            raise ValueError("need timeout_s > 0, retries >= 0 and cache_ttl_s >= 0")
        self.timeout_s, self.retries, self.cache_ttl_s = float(timeout_s), int(retries), float(cache_ttl_s)
        self.configured = bool(base_url.strip())
        """False for an empty ``base_url``: no request is made, every answer is the fallback."""
        self._url = base_url.rstrip("/") + "/v1/forecast"
        self._params = {"latitude": latitude, "longitude": longitude, "hourly": ",".join(API_KEYS.values()),
                        "wind_speed_unit": "ms", "timezone": "UTC", "forecast_days": 3}
        self._longitude, self._clock, self._utc_now = longitude, clock, utc_now
        self._client = httpx.Client(timeout=httpx.Timeout(self.timeout_s), transport=transport)
        self._lock = threading.Lock()  # guards cache, observations, rng and stats
        self._fetch_lock = threading.Lock()  # one forecast at a time, so concurrent callers share a fetch
        self._cache: HourlyWeather | None = None
        self._cached_at = 0.0
        self._obs: dict[int, tuple[np.ndarray, int]] = {}  # UTC hour (epoch s) -> (sum of rows, count)
        self._rng = np.random.default_rng(seed)
        self._stats = WeatherStats()

    @property
    def stats(self) -> WeatherStats:
        """A snapshot of the counters, safe to keep."""
        with self._lock:
            return dataclasses.replace(self._stats, errors=dict(self._stats.errors))

    @property
    def age_s(self) -> float | None:
        """Seconds since the last live forecast was fetched (None: never)."""
        with self._lock:
            return None if self._cache is None else self._clock() - self._cached_at

    def close(self) -> None:
        """Release the HTTP connection pool."""
        self._client.close()

    def __enter__(self) -> WeatherProvider:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def record_observation(self, time: datetime, temperature_c: float, relative_humidity_pct: float,
                           shortwave_radiation_w_m2: float, wind_speed_m_s: float,
                           precipitation_mm: float) -> None:
        """Remember measured weather (wind at 2 m) so tomorrow's fallback can replay it; hourly means, 48 h
        kept."""
        key, row = observation_row(time, (temperature_c, relative_humidity_pct, shortwave_radiation_w_m2,
                                          wind_speed_m_s, precipitation_mm))
        with self._lock:
            total, count = self._obs.get(key, (np.zeros(len(FIELDS)), 0))
            self._obs[key] = (total + row, count + 1)
            newest = max(self._obs)
            for old in [k for k in self._obs if k < newest - 2 * 86400]:
                del self._obs[old]

    def forecast(self, hours: int = 6) -> HourlyWeather:
        """Weather for the ``hours`` hours from the current UTC hour; never raises for network or data
        trouble."""
        if not 1 <= hours <= MAX_HOURS:
            raise ValueError(f"hours must be between 1 and {MAX_HOURS}, got {hours}")
        start = utc_hour(self._utc_now())
        with self._fetch_lock:
            with self._lock:
                cached, age = self._cache, self._clock() - self._cached_at
            hit = cached.window(start, hours, "cache") if cached is not None and age <= self.cache_ttl_s \
                else None
            if hit is not None:
                return self._count("cache", hit)
            if not self.configured:
                return self._degrade(start, hours, None)
            try:
                full, live = retrying(self.retries)(self._attempt, start, hours)
            except Exception as exc:  # degrade, never crash the control loop
                return self._degrade(start, hours, exc)
            with self._lock:
                self._cache, self._cached_at = full, self._clock()
            return self._count("live", live)

    def _count(self, source: Source, weather: HourlyWeather) -> HourlyWeather:
        with self._lock:
            setattr(self._stats, source, getattr(self._stats, source) + 1)
        return weather

    def _attempt(self, start: np.datetime64, hours: int) -> tuple[HourlyWeather, HourlyWeather]:
        """One GET with a total deadline; returns the whole forecast (for the cache) and the asked window."""
        with self._lock:
            self._stats.requests += 1
        try:
            payload = get_json(self._client, self._url, self.timeout_s, WeatherDataError, self._params)
            full = parse_open_meteo(payload)
            live = full.window(start, hours, "live")
            if live is None:
                raise WeatherDataError(f"forecast does not cover {hours} h from {start} UTC")
            return full, live
        except Exception as exc:
            kind = error_kind(exc)
            with self._lock:
                self._stats.errors[kind] = self._stats.errors.get(kind, 0) + 1
            logger.debug("weather attempt failed (%s): %s", kind, exc, exc_info=kind == "unexpected")
            raise

    def _degrade(self, start: np.datetime64, hours: int, exc: Exception | None) -> HourlyWeather:
        """Stale cache if it still covers the window, else yesterday's observations, else climatology
        (``exc`` None: no forecast is configured, which is a choice, not a failure worth a warning)."""
        kind = "unconfigured" if exc is None else error_kind(exc)
        reason, trace = f"{kind}: {exc}", kind == "unexpected"
        with self._lock:
            cached = self._cache
        stale = cached.window(start, hours, "cache") if cached is not None else None
        if stale is not None:
            logger.warning("weather fetch failed (%s); serving the last good forecast", reason,
                           exc_info=trace)
            return self._count("cache", stale)
        times = start + np.arange(hours) * HOUR
        with self._lock:
            noise = self._rng.standard_normal((len(FIELDS), hours))  # always drawn: the sequence is
                                                                     # call-determined
            rows = [self._obs.get(int((t - DAY).astype(np.int64))) for t in times]
        weather = fallback_weather(times, self._longitude, [None if r is None else r[0] / r[1] for r in rows],
                                   noise)
        used = sum(r is not None for r in rows)
        logger.log(logging.DEBUG if exc is None else logging.WARNING,
                   "weather fetch failed (%s); fallback from %d/%d observed hours, rest climatology",
                   reason, used, hours, exc_info=trace)
        return self._count("fallback", weather)
