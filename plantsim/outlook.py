"""The simulated site's outlook over HTTP: its twin's weather and prices, as a weather service and a
power exchange would serve them, on 127.0.0.1 only.

* ``GET /v1/forecast`` answers in Open-Meteo's JSON shape (hourly from 00:00 UTC of the simulated
  day, ``forecast_days`` days, default 3): what the service's weather provider asks for;
* ``GET /v1/day-ahead`` answers ``{"unit": "EUR/MWh", "prices": [{"start": ISO, "eur_mwh": x}]}``
  from 00:00 UTC yesterday to 00:00 UTC the day after tomorrow (spot, no adder): all of it, the
  provider applies the 13:00 publication rule itself.

The hours are the simulation's: sim time T maps to the twin's hour of year of the site's first
greenhouse (the site's weather and market), so the forecast's sun is the sun its plants get; that
hour's time of day is the site-local hour of T (:class:`plantsim.sim.PlantSim` keeps its twins on
the site's clock), so it is also the hour the service's time-of-day features read.
The forecast is the twin's weather itself (no forecast error).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

from plantsim.http import LocalJsonServer
from twin.weather import RAIN, RH, SOLAR, TEMP, WIND
from twin.weather_data import WIND_10M_TO_2M

if TYPE_CHECKING:
    from plantsim.sim import PlantSim

log = logging.getLogger(__name__)


def _twin_hours(sim: PlantSim, times: list[datetime]) -> tuple[np.ndarray, np.ndarray]:
    """(year index, twin hour of year) of the site's first greenhouse at each simulated time."""
    with sim._lock:
        params, state = sim.twin.params, sim.twin.state
        now_hour = float(params.start_hour[0] + state.step[0] * sim.twin.config.dt_h)
        year, sim_now = int(params.year[0]), sim.sim_time
    hours = np.array([now_hour + (t - sim_now).total_seconds() / 3600.0 for t in times])
    return np.full(len(times), year), hours


def forecast_payload(sim: PlantSim, days: int = 3) -> dict[str, Any]:
    """Open-Meteo shaped hourly forecast from 00:00 UTC of the simulated day."""
    day0 = sim.sim_time.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    times = [day0 + timedelta(hours=h) for h in range(24 * days)]
    b = sim.twin.backend
    year, hours = _twin_hours(sim, times)
    rows = np.asarray(b.to_numpy(sim.twin.model.weather.at(b, b.asarray(year), b.asarray(hours))),
                      dtype=np.float64)
    wind_10m = np.clip(rows[:, WIND], 0.0, 50.0) / WIND_10M_TO_2M
    return {"latitude": 0.0, "longitude": 0.0, "utc_offset_seconds": 0, "timezone": "UTC",
            "hourly_units": {"time": "iso8601", "temperature_2m": "°C", "relative_humidity_2m": "%",
                             "shortwave_radiation": "W/m²", "wind_speed_10m": "m/s", "precipitation": "mm"},
            "hourly": {"time": [t.strftime("%Y-%m-%dT%H:%M") for t in times],
                       "temperature_2m": np.round(rows[:, TEMP], 2).tolist(),
                       "relative_humidity_2m": np.round(np.clip(rows[:, RH], 0.0, 100.0), 1).tolist(),
                       "shortwave_radiation": np.round(np.clip(rows[:, SOLAR], 0.0, 1500.0), 1).tolist(),
                       "wind_speed_10m": np.round(wind_10m, 2).tolist(),
                       "precipitation": np.round(np.clip(rows[:, RAIN], 0.0, 500.0), 2).tolist()}}


def prices_payload(sim: PlantSim) -> dict[str, Any]:
    """Spot prices of every clock hour from 00:00 UTC yesterday to 00:00 UTC the day after tomorrow."""
    day0 = sim.sim_time.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    times = [day0 + timedelta(hours=h) for h in range(-24, 48)]
    b = sim.twin.backend
    year, hours = _twin_hours(sim, times)
    spot = np.asarray(b.to_numpy(sim.twin.model.prices.at(b, b.asarray(year), b.asarray(hours))),
                      dtype=np.float64)
    spot = spot * float(sim.twin.params.price_scale[0])
    clipped = np.clip(spot, -1000.0, 6000.0)
    return {"unit": "EUR/MWh", "prices": [{"start": t.isoformat(), "eur_mwh": round(float(p), 2)}
                                          for t, p in zip(times, clipped, strict=True)]}


class OutlookServer(LocalJsonServer):
    """The two endpoints above on 127.0.0.1:``port`` (0: any free port; see :attr:`url`)."""

    def __init__(self, sim: PlantSim, port: int = 0) -> None:
        self.sim = sim

        def answer(method: str, path: str, raw: bytes) -> tuple[int, dict[str, Any]]:
            url = urlsplit(path)
            if method != "GET":
                return 405, {"error": "GET /v1/forecast or /v1/day-ahead"}
            if url.path == "/v1/forecast":
                days = int(parse_qs(url.query).get("forecast_days", ["3"])[0])
                return 200, forecast_payload(self.sim, min(max(days, 1), 7))
            if url.path == "/v1/day-ahead":
                return 200, prices_payload(self.sim)
            return 404, {"error": "not found"}

        super().__init__(answer, "plant-sim-outlook", port)
