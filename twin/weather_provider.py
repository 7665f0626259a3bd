"""Hourly site weather for the twin that never stalls the control loop.

:class:`WeatherProvider` asks an Open-Meteo style ``/v1/forecast`` endpoint and keeps the last good
answer for ``cache_ttl_s``; when the network or the data fails it degrades instead of raising: stale
cache, else yesterday's observations plus seeded noise (:data:`NOISE_STD`), else :func:`climatology`.

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
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import httpx
import numpy as np

from twin.http_source import SourceDataError, error_kind, get_json, retrying

logger = logging.getLogger(__name__)

Source = Literal["live", "cache", "fallback"]
FIELDS = ("temperature_c", "relative_humidity_pct", "shortwave_radiation_w_m2", "wind_speed_m_s", "precipitation_mm")
RANGES = {"temperature_c": (-90.0, 60.0), "relative_humidity_pct": (0.0, 100.0),
          "shortwave_radiation_w_m2": (0.0, 1500.0), "wind_speed_m_s": (0.0, 75.0), "precipitation_mm": (0.0, 500.0)}
"""Physically possible (not merely likely) hourly values; anything outside is corrupt data."""
NOISE_STD = {"temperature_c": 1.0, "relative_humidity_pct": 5.0, "shortwave_radiation_w_m2": 0.10,
             "wind_speed_m_s": 0.3, "precipitation_mm": 0.20}
"""Fallback noise: additive std in field units, except radiation and precipitation, whose std is
relative (10 %, 20 %) so that night stays dark and dry hours stay dry. Results are clipped to RANGES."""
_RELATIVE = ("shortwave_radiation_w_m2", "precipitation_mm")
WIND_10M_TO_2M = 4.87 / math.log(67.8 * 10.0 - 5.42)
"""FAO-56 eq. 47 (about 0.748): the ET and canopy models expect wind at 2 m, the API reports 10 m."""
_API_KEYS = {"temperature_c": "temperature_2m", "relative_humidity_pct": "relative_humidity_2m",
             "shortwave_radiation_w_m2": "shortwave_radiation", "wind_speed_m_s": "wind_speed_10m",
             "precipitation_mm": "precipitation"}
_WIND_UNITS = {"m/s": 1.0, "km/h": 1.0 / 3.6, "mp/h": 0.44704, "kn": 1852.0 / 3600.0}
_HOUR, _DAY = np.timedelta64(3600, "s"), np.timedelta64(86400, "s")
MAX_HOURS = 48
"""forecast_days=3 starts at today 00:00 UTC, so 48 h ahead is always covered (tomorrow's light needs
up to +47 h)."""


class WeatherDataError(SourceDataError):
    """A weather payload is malformed or physically implausible; callers fall back rather than trust it."""


def _readonly(values: Any, dtype: str | type) -> np.ndarray:
    arr = np.array(values, dtype=dtype)
    arr.flags.writeable = False
    return arr


@dataclasses.dataclass(frozen=True, eq=False)
class HourlyWeather:
    """Hourly weather at 2 m; ``times`` is a strictly increasing numpy ``datetime64[s]`` array in UTC.

    Numpy datetimes carry no zone, so UTC is the contract. Arrays are copied and made read-only so a
    cached forecast cannot be altered through a returned one.
    """

    times: np.ndarray
    temperature_c: np.ndarray
    relative_humidity_pct: np.ndarray
    shortwave_radiation_w_m2: np.ndarray
    wind_speed_m_s: np.ndarray
    precipitation_mm: np.ndarray
    source: Source = "live"

    def __post_init__(self) -> None:
        if self.source not in ("live", "cache", "fallback"):
            raise ValueError(f"source must be 'live', 'cache' or 'fallback', not {self.source!r}")
        if not isinstance(self.times, np.ndarray) or self.times.dtype.kind != "M" or self.times.ndim != 1:
            raise ValueError("times must be a 1-D numpy datetime64 array (UTC)")
        times = _readonly(self.times, "datetime64[s]")
        if np.isnat(times).any() or (np.diff(times) <= np.timedelta64(0, "s")).any():
            raise ValueError("times must be free of NaT and strictly increasing")
        object.__setattr__(self, "times", times)
        for name in FIELDS:
            try:
                arr = _readonly(getattr(self, name), np.float64)
            except (TypeError, ValueError, OverflowError) as exc:
                raise ValueError(f"{name} is not numeric: {exc}") from exc
            if arr.shape != times.shape:
                raise ValueError(f"{name} has shape {arr.shape} but times has {times.shape}; lengths must match")
            if not np.isfinite(arr).all():
                raise ValueError(f"{name} contains NaN or infinite values")
            lo, hi = RANGES[name]
            bad = (arr < lo) | (arr > hi)
            if bad.any():
                raise ValueError(f"{name} value {arr[bad][0]:g} is outside the physical range [{lo:g}, {hi:g}]")
            object.__setattr__(self, name, arr)

    @classmethod
    def of(cls, times: np.ndarray, columns: Iterable[Any], source: Source = "live") -> HourlyWeather:
        """From the hourly columns in ``FIELDS`` order (checked like any other)."""
        values = list(columns)
        if len(values) != len(FIELDS):
            raise ValueError(f"{len(values)} weather columns, expected {len(FIELDS)} ({', '.join(FIELDS)})")
        return cls(times, **dict(zip(FIELDS, values, strict=True)), source=source)

    def window(self, start: np.datetime64, hours: int, source: Source) -> HourlyWeather | None:
        """The ``hours`` consecutive hours from ``start``, or None when not all of them are present."""
        i = int(np.searchsorted(self.times, start))
        sel = self.times[i:i + hours]
        if sel.shape[0] != hours or (sel != start + np.arange(hours) * _HOUR).any():
            return None
        return HourlyWeather.of(sel, (getattr(self, f)[i:i + hours] for f in FIELDS), source=source)


def parse_open_meteo(payload: Any) -> HourlyWeather:
    """Turn a decoded Open-Meteo forecast body into validated 2 m weather; every defect is a WeatherDataError."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("hourly"), Mapping):
        raise WeatherDataError("payload must be a JSON object with an 'hourly' object")
    hourly, units = payload["hourly"], payload.get("hourly_units", {})
    if not isinstance(units, Mapping):
        raise WeatherDataError("'hourly_units' must be an object")
    wind_unit = units.get("wind_speed_10m", "m/s")  # we request m/s, so that is the default
    if not isinstance(wind_unit, str) or wind_unit not in _WIND_UNITS:
        raise WeatherDataError(f"unsupported wind speed unit {wind_unit!r}")
    for key, unit in (("temperature_2m", "°C"), ("precipitation", "mm")):
        if units.get(key, unit) != unit:
            raise WeatherDataError(f"hourly_units.{key} is {units[key]!r}, expected {unit!r}")
    offset = payload.get("utc_offset_seconds", 0)
    raw_times = hourly.get("time")
    if type(offset) is not int or abs(offset) > 86400 or not isinstance(raw_times, list) or not raw_times:
        raise WeatherDataError("'hourly.time' must be a non-empty list and 'utc_offset_seconds' an integer")
    try:
        stamps = [datetime.fromisoformat(t) for t in raw_times]
    except (TypeError, ValueError) as exc:
        raise WeatherDataError(f"bad timestamp in hourly.time: {exc}") from exc
    naive_utc = [s.astimezone(UTC).replace(tzinfo=None) if s.tzinfo else s - timedelta(seconds=offset)
                 for s in stamps]
    columns = []
    for name, key in _API_KEYS.items():
        col = hourly.get(key)
        if not isinstance(col, list):
            raise WeatherDataError(f"hourly.{key} is missing or not a list")
        if len(col) != len(raw_times):
            raise WeatherDataError(f"hourly.{key} has {len(col)} values for {len(raw_times)} times")
        if any(isinstance(v, bool) or not isinstance(v, int | float) for v in col):
            raise WeatherDataError(f"hourly.{key} contains null or non-numeric values")
        try:
            arr = np.array(col, dtype=np.float64)
        except OverflowError as exc:
            raise WeatherDataError(f"hourly.{key} has a value too large for a float") from exc
        columns.append(arr * (_WIND_UNITS[wind_unit] * WIND_10M_TO_2M) if name == "wind_speed_m_s" else arr)
    try:
        return HourlyWeather.of(np.array(naive_utc, dtype="datetime64[s]"), columns, source="live")
    except ValueError as exc:
        raise WeatherDataError(f"implausible forecast: {exc}") from exc


def climatology(times: np.ndarray, longitude: float) -> np.ndarray:
    """Fixed mild-summer day used when nothing better exists, rows in FIELDS order, shape (5, n).

    In local solar time h: temperature 18 + 6 cos(2 pi (h - 15) / 24) degC, humidity
    70 - 15 cos(...) %, radiation 700 sin(pi (h - 6) / 12) W/m2 by day and 0 at night, wind 2 m/s, no rain.
    """
    seconds = times.astype("datetime64[s]").astype(np.int64)
    solar_h = ((seconds % 86400) / 3600.0 + longitude / 15.0) % 24.0
    phase = np.cos(2.0 * np.pi * (solar_h - 15.0) / 24.0)
    sun = 700.0 * np.clip(np.sin(np.pi * (solar_h - 6.0) / 12.0), 0.0, None)
    return np.stack([18.0 + 6.0 * phase, 70.0 - 15.0 * phase, sun, np.full_like(phase, 2.0), np.zeros_like(phase)])


@dataclasses.dataclass
class WeatherStats:
    """Answers by source, HTTP attempts, and failed attempts by kind (timeout, transport, http_5xx, bad_data...)."""

    live: int = 0
    cache: int = 0
    fallback: int = 0
    requests: int = 0
    errors: dict[str, int] = dataclasses.field(default_factory=dict)


def _utc_hour(moment: datetime) -> np.datetime64:
    """Floor an aware datetime to its UTC hour; naive ones are refused because their zone is a guess."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"datetime must be timezone-aware, got {moment!r}")
    return np.datetime64(moment.astimezone(UTC).replace(tzinfo=None), "h").astype("datetime64[s]")


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
        self._params = {"latitude": latitude, "longitude": longitude, "hourly": ",".join(_API_KEYS.values()),
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
                           shortwave_radiation_w_m2: float, wind_speed_m_s: float, precipitation_mm: float) -> None:
        """Remember measured weather (wind at 2 m) so tomorrow's fallback can replay it; hourly means, 48 h kept."""
        hour = _utc_hour(time)
        values = (temperature_c, relative_humidity_pct, shortwave_radiation_w_m2, wind_speed_m_s, precipitation_mm)
        checked = HourlyWeather.of(np.array([hour]), ([v] for v in values))  # validates ranges and finiteness
        row = np.array([getattr(checked, f)[0] for f in FIELDS])
        key = int(hour.astype(np.int64))
        with self._lock:
            total, count = self._obs.get(key, (np.zeros(len(FIELDS)), 0))
            self._obs[key] = (total + row, count + 1)
            newest = max(self._obs)
            for old in [k for k in self._obs if k < newest - 2 * 86400]:
                del self._obs[old]

    def forecast(self, hours: int = 6) -> HourlyWeather:
        """Weather for the ``hours`` hours from the current UTC hour; never raises for network or data trouble."""
        if not 1 <= hours <= MAX_HOURS:
            raise ValueError(f"hours must be between 1 and {MAX_HOURS}, got {hours}")
        start = _utc_hour(self._utc_now())
        with self._fetch_lock:
            with self._lock:
                cached, age = self._cache, self._clock() - self._cached_at
            hit = cached.window(start, hours, "cache") if cached is not None and age <= self.cache_ttl_s else None
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
            logger.warning("weather fetch failed (%s); serving the last good forecast", reason, exc_info=trace)
            return self._count("cache", stale)
        times = start + np.arange(hours) * _HOUR
        values = climatology(times, self._longitude)
        with self._lock:
            noise = self._rng.standard_normal(values.shape)  # always drawn, so the sequence is call-determined
            rows = [self._obs.get(int((t - _DAY).astype(np.int64))) for t in times]
        for j, found in enumerate(rows):
            if found is not None:
                mean = found[0] / found[1]
                for i, name in enumerate(FIELDS):
                    scale = mean[i] if name in _RELATIVE else 1.0
                    values[i, j] = np.clip(mean[i] + NOISE_STD[name] * scale * noise[i, j], *RANGES[name])
        used = sum(r is not None for r in rows)
        logger.log(logging.DEBUG if exc is None else logging.WARNING,
                   "weather fetch failed (%s); fallback from %d/%d observed hours, rest climatology",
                   reason, used, hours, exc_info=trace)
        return self._count("fallback", HourlyWeather.of(times, values, source="fallback"))
