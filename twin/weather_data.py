"""Hourly site weather as the twin reads it: the validated value, an Open-Meteo body parsed into it,
and the fallbacks that need no network (a fixed climatology, yesterday's hours replayed with noise).

Fetching it is the service's (:mod:`app.outlook.weather_provider`): this module does no I/O, so the
emulator's forecast server and the service's client agree on one parser and one set of units.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import numpy as np

from twin.source_data import SourceDataError

Source = Literal["live", "cache", "fallback"]
FIELDS = ("temperature_c", "relative_humidity_pct", "shortwave_radiation_w_m2", "wind_speed_m_s",
          "precipitation_mm")
RANGES = {"temperature_c": (-90.0, 60.0), "relative_humidity_pct": (0.0, 100.0),
          "shortwave_radiation_w_m2": (0.0, 1500.0), "wind_speed_m_s": (0.0, 75.0),
          "precipitation_mm": (0.0, 500.0)}
"""Physically possible (not merely likely) hourly values; anything outside is corrupt data."""
NOISE_STD = {"temperature_c": 1.0, "relative_humidity_pct": 5.0, "shortwave_radiation_w_m2": 0.10,
             "wind_speed_m_s": 0.3, "precipitation_mm": 0.20}
"""Fallback noise: additive std in field units, except radiation and precipitation, whose std is
relative (10 %, 20 %) so that night stays dark and dry hours stay dry. Results are clipped to RANGES."""
_RELATIVE = ("shortwave_radiation_w_m2", "precipitation_mm")
WIND_10M_TO_2M = 4.87 / math.log(67.8 * 10.0 - 5.42)
"""FAO-56 eq. 47 (about 0.748): the ET and canopy models expect wind at 2 m, the API reports 10 m."""
API_KEYS = {"temperature_c": "temperature_2m", "relative_humidity_pct": "relative_humidity_2m",
            "shortwave_radiation_w_m2": "shortwave_radiation", "wind_speed_m_s": "wind_speed_10m",
            "precipitation_mm": "precipitation"}
"""The Open-Meteo hourly variable behind each field (the request names them, the parser reads them)."""
_WIND_UNITS = {"m/s": 1.0, "km/h": 1.0 / 3.6, "mp/h": 0.44704, "kn": 1852.0 / 3600.0}
HOUR = np.timedelta64(3600, "s")
DAY = np.timedelta64(86400, "s")
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
                raise ValueError(f"{name} has shape {arr.shape} but times has {times.shape}; "
                                 "lengths must match")
            if not np.isfinite(arr).all():
                raise ValueError(f"{name} contains NaN or infinite values")
            lo, hi = RANGES[name]
            bad = (arr < lo) | (arr > hi)
            if bad.any():
                raise ValueError(f"{name} value {arr[bad][0]:g} "
                                 f"is outside the physical range [{lo:g}, {hi:g}]")
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
        if sel.shape[0] != hours or (sel != start + np.arange(hours) * HOUR).any():
            return None
        return HourlyWeather.of(sel, (getattr(self, f)[i:i + hours] for f in FIELDS), source=source)


def parse_open_meteo(payload: Any) -> HourlyWeather:
    """Turn a decoded Open-Meteo forecast body into validated 2 m weather; every defect is a
    WeatherDataError."""
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
    for name, key in API_KEYS.items():
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
    return np.stack([18.0 + 6.0 * phase, 70.0 - 15.0 * phase, sun, np.full_like(phase, 2.0),
                     np.zeros_like(phase)])


def utc_hour(moment: datetime) -> np.datetime64:
    """Floor an aware datetime to its UTC hour; naive ones are refused because their zone is a guess."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"datetime must be timezone-aware, got {moment!r}")
    return np.datetime64(moment.astimezone(UTC).replace(tzinfo=None), "h").astype("datetime64[s]")


def observation_row(time: datetime, values: Sequence[float]) -> tuple[int, np.ndarray]:
    """(UTC hour in epoch s, checked row in FIELDS order) of one measured weather sample (wind at 2 m);
    out-of-range or non-finite values raise ValueError like any other weather."""
    hour = utc_hour(time)
    checked = HourlyWeather.of(np.array([hour]), ([v] for v in values))  # validates ranges and finiteness
    return int(hour.astype(np.int64)), np.array([getattr(checked, f)[0] for f in FIELDS])


def fallback_weather(times: np.ndarray, longitude: float, observed: Sequence[np.ndarray | None],
                     noise: np.ndarray) -> HourlyWeather:
    """Weather for ``times`` when no forecast can be had: each hour's ``observed`` mean row (the same hour
    yesterday) plus ``noise`` (standard normal, shape (len(FIELDS), n)) scaled by :data:`NOISE_STD`, and
    :func:`climatology` for the hours nothing was observed."""
    values = climatology(times, longitude)
    for j, mean in enumerate(observed):
        if mean is not None:
            for i, name in enumerate(FIELDS):
                scale = mean[i] if name in _RELATIVE else 1.0
                values[i, j] = np.clip(mean[i] + NOISE_STD[name] * scale * noise[i, j], *RANGES[name])
    return HourlyWeather.of(times, values, source="fallback")
