"""plant-sim serves its twin's weather and prices over HTTP; the service's providers read a live,
non-flat outlook from it that matches the simulated plant's own weather."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import numpy as np
import pytest

from app.outlook.feed import OutlookFeed
from app.outlook.price_provider import PriceProvider
from app.outlook.weather_provider import WeatherProvider
from plantsim.outlook import OutlookServer, forecast_payload
from plantsim.sim import PlantSim
from twin.config import PriceConfig
from twin.price_data import parse_day_ahead
from twin.weather import SOLAR
from twin.weather_data import parse_open_meteo

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
    assert len(prices) == 72 \
        and min(prices) == int((START.replace(hour=0, minute=0) - timedelta(days=1)).timestamp())
    assert httpx.get(server.url + "/nope").status_code == 404
    # The forecast's sun is the plant's own: the twin's weather at the same simulated hour.
    b = sim.twin.backend
    hour = float(sim.twin.params.start_hour[0] + sim.twin.state.step[0] * sim.twin.config.dt_h)
    k = int((START.replace(minute=0) - START.replace(hour=0, minute=0)).total_seconds() // 3600) + 1
    then = hour + (START.replace(minute=0) + timedelta(hours=1) - START).total_seconds() / 3600.0
    own = float(b.to_numpy(sim.twin.model.weather.at(b, sim.twin.params.year[:1],
                                                     np.array([then])))[0, SOLAR])
    assert weather.shortwave_radiation_w_m2[k] == pytest.approx(min(max(own, 0.0), 1500.0), abs=0.1)


def test_the_service_feed_reads_a_live_non_flat_outlook(served: tuple[PlantSim, OutlookServer]) -> None:
    sim, server = served
    for _ in range(12):  # two simulated hours: the clock moves, the outlook follows it
        sim.step_once()
    clock = lambda: sim.sim_time  # noqa: E731
    feed = OutlookFeed(WeatherProvider(server.url, 52.0, 5.0, retries=0, utc_now=clock),
                       PriceProvider(server.url, PriceConfig(source="tou"), retries=0, utc_now=clock),
                       utc_now=clock)
    out = feed.refresh()
    feed.close()
    assert (out.weather_source, out.price_source, out.alarms) == ("live", "live", ())
    assert out.issued == sim.sim_time.replace(minute=0, second=0, microsecond=0)
    assert np.ptp(out.forecast_solar_w_m2) > 20.0 and np.ptp(out.forecast_temp_c) > 0.5  # day and night
    assert np.ptp(out.price_eur_mwh) > 1.0 and 0 < out.price_published.sum() <= 24


def _off_the_clock_h(sim: PlantSim, local_hour: float) -> np.ndarray:
    """How far each twin instance's hour of day is from ``local_hour``, the short way round [h]."""
    b = sim.twin.backend
    hour = b.to_numpy(sim.twin.params.start_hour) + b.to_numpy(sim.twin.state.step) * sim.twin.config.dt_h
    return np.abs((np.asarray(hour, dtype=np.float64) - local_hour + 12.0) % 24.0 - 12.0)


def test_telemetry_twin_and_outlook_share_the_sites_local_clock() -> None:
    """Amsterdam in June is UTC+2: the plant's sun, its twin's hour and the served forecast all read
    10:00Z as local noon and 22:00Z as local midnight."""
    start = datetime(2026, 6, 1, 9, 50, tzinfo=UTC)
    sim = PlantSim("mqtt://127.0.0.1:1", ["gh1", "gh2"], zones=3, dt_s=600.0, seed=2, start_time=start,
                   site_timezone="Europe/Amsterdam")
    noon = sim.step_once()
    assert all(t.ts == datetime(2026, 6, 1, 10, tzinfo=UTC) for t in noon.values())
    assert _off_the_clock_h(sim, 12.0).max() < 1e-3
    assert all((t.par_umol_m2_s or 0.0) > 20.0 and t.light_pct == 0.0 for t in noon.values())  # sun, no lamps
    forecast = forecast_payload(sim)
    hours = forecast["hourly"]["time"]
    solar = forecast["hourly"]["shortwave_radiation"]
    assert hours[0] == "2026-06-01T00:00"  # 02:00 local
    assert solar[hours.index("2026-06-01T10:00")] > 20.0  # local noon
    assert solar[hours.index("2026-06-01T22:00")] == 0.0  # local midnight
    for _ in range(72):  # twelve hours on
        night = sim.step_once()
    assert all(t.ts == datetime(2026, 6, 1, 22, tzinfo=UTC) for t in night.values())
    assert _off_the_clock_h(sim, 0.0).max() < 1e-3
    assert all((t.par_umol_m2_s or 0.0) < 1.0 for t in night.values())
    # The forecast's hour 0 is the plant's own weather now: the twin's solar at its current hour.
    b = sim.twin.backend
    now_hour = float(b.to_numpy(sim.twin.params.start_hour)[0]
                     + float(sim.twin.state.step[0]) * sim.twin.config.dt_h)
    own = float(b.to_numpy(sim.twin.model.weather.at(b, sim.twin.params.year[:1],
                                                     np.array([now_hour])))[0, SOLAR])
    forecast = forecast_payload(sim)
    assert forecast["hourly"]["shortwave_radiation"][forecast["hourly"]["time"].index("2026-06-01T22:00")] \
        == pytest.approx(min(max(own, 0.0), 1500.0), abs=0.1) == 0.0


def test_a_new_episode_keeps_the_sites_clock() -> None:
    """An instance whose episode restarts (its start hour drawn afresh) is put back on the site's hour."""
    sim = PlantSim("mqtt://127.0.0.1:1", ["gh1"], zones=3, dt_s=600.0, seed=2,
                   start_time=datetime(2026, 1, 10, 6, 0, tzinfo=UTC), site_timezone="America/New_York")
    sim.twin.reset_instances(np.array([0]))  # as an episode's end does inside the twin's step
    sim.step_once()
    assert _off_the_clock_h(sim, 1.0 + 10.0 / 60.0).max() < 1e-3  # 06:10Z = 01:10 EST


def test_plant_sim_refuses_an_unknown_site_time_zone() -> None:
    from app.cli.plant_sim import run_plant_sim

    args = argparse.Namespace(mqtt_url="mqtt://127.0.0.1:1", site_timezone="Nowhere/Atlantis",
                              greenhouses="gh1", speed=1.0, dt_s=60.0, seed=0, zones=3, outlook_port=None)
    assert run_plant_sim(args) == 2
