"""plant-sim serves its twin's weather and prices over HTTP; the service's providers read a live,
non-flat outlook from it that matches the simulated plant's own weather."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import numpy as np
import pytest

from app.outlook_feed import OutlookFeed
from app.plant_sim import PlantSim
from app.plant_sim_outlook import OutlookServer
from twin.config import PriceConfig
from twin.price_provider import PriceProvider, parse_day_ahead
from twin.weather import SOLAR
from twin.weather_provider import WeatherProvider, parse_open_meteo

START = datetime(2026, 6, 1, 4, 30, tzinfo=UTC)


@pytest.fixture
def served() -> Iterator[tuple[PlantSim, OutlookServer]]:
    sim = PlantSim("mqtt://127.0.0.1:1", ["gh1"], zones=3, dt_s=600.0, seed=2, start_time=START)
    server = OutlookServer(sim).start()  # never connected to a broker: only the twin is used
    try:
        yield sim, server
    finally:
        server.close()


def test_both_endpoints_answer_their_documented_shapes(served: tuple[PlantSim, OutlookServer]) -> None:
    sim, server = served
    weather = parse_open_meteo(httpx.get(server.url + "/v1/forecast", params={"forecast_days": 3}).json())
    assert weather.times[0] == np.datetime64("2026-06-01T00:00:00") and len(weather.times) == 72
    prices = parse_day_ahead(httpx.get(server.url + "/v1/day-ahead").json())
    assert len(prices) == 72 and min(prices) == int((START.replace(hour=0, minute=0) - timedelta(days=1)).timestamp())
    assert httpx.get(server.url + "/nope").status_code == 404
    # The forecast's sun is the plant's own: the twin's weather at the same simulated hour.
    b = sim.twin.backend
    hour = float(sim.twin.params.start_hour[0] + sim.twin.state.step[0] * sim.twin.config.dt_h)
    k = int((START.replace(minute=0) - START.replace(hour=0, minute=0)).total_seconds() // 3600) + 1
    then = hour + (START.replace(minute=0) + timedelta(hours=1) - START).total_seconds() / 3600.0
    own = float(b.to_numpy(sim.twin.model.weather.at(b, sim.twin.params.year[:1], np.array([then])))[0, SOLAR])
    assert weather.shortwave_radiation_w_m2[k] == pytest.approx(min(max(own, 0.0), 1500.0), abs=0.1)


def test_the_service_feed_reads_a_live_non_flat_outlook(served: tuple[PlantSim, OutlookServer]) -> None:
    sim, server = served
    for _ in range(12):  # two simulated hours: the clock moves, the outlook follows it
        sim.step_once()
    clock = lambda: sim.sim_time  # noqa: E731
    feed = OutlookFeed(WeatherProvider(server.url, 52.0, 5.0, retries=0, utc_now=clock),
                       PriceProvider(server.url, PriceConfig(source="tou"), retries=0, utc_now=clock), utc_now=clock)
    out = feed.refresh()
    feed.close()
    assert (out.weather_source, out.price_source, out.alarms) == ("live", "live", ())
    assert out.issued == sim.sim_time.replace(minute=0, second=0, microsecond=0)
    assert np.ptp(out.forecast_solar_w_m2) > 20.0 and np.ptp(out.forecast_temp_c) > 0.5  # day and night
    assert np.ptp(out.price_eur_mwh) > 1.0 and 0 < out.price_published.sum() <= 24
