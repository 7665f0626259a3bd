"""The site outlook in the service: providers against real local HTTP servers, alarms on a failed or
stale source, the outlook in every decision's record, and decisions that follow the price outlook."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.outlook.feed import OutlookFeed
from app.outlook.price_provider import PriceProvider
from app.outlook.weather_provider import WeatherProvider
from control import ExpertProposer, GreenhouseController, ZoneSetup
from control.outlook import SOLAR_LEADS, Outlook
from policy.tuning import served_expert
from safety import SafetyLimits
from twin.config import PriceConfig
from wire.topics import Telemetry

NOW = datetime(2026, 12, 2, 14, 20, tzinfo=UTC)  # after 13:00: tomorrow's prices are published
DAY0 = datetime(2026, 12, 2, tzinfo=UTC)
ZONES = [ZoneSetup("loam", 0.21, 0.27, 0.45, 400.0) for _ in range(6)]


def weather_body() -> dict[str, Any]:
    n = 72
    return {"utc_offset_seconds": 0, "hourly_units": {"temperature_2m": "°C", "wind_speed_10m": "m/s"},
            "hourly": {"time": [(DAY0 + timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M") for h in range(n)],
                       "temperature_2m": [5.0 + 0.1 * h for h in range(n)],
                       "relative_humidity_2m": [80.0] * n,
                       "shortwave_radiation": [max(0.0, 400.0 * np.sin(np.pi * ((h % 24) - 8) / 8))
                                               for h in range(n)],
                       "wind_speed_10m": [3.0] * n, "precipitation": [0.0] * n}}


def price_body(level: float = 80.0) -> dict[str, Any]:
    return {"unit": "EUR/MWh", "prices": [{"start": (DAY0 + timedelta(hours=h)).isoformat(),
                                           "eur_mwh": level + h}
                                          for h in range(-24, 48)]}


class Site:
    """One local server answering both APIs; ``status`` per path switches a source to failing."""

    def __init__(self) -> None:
        self.bodies: dict[str, Any] = {"/v1/forecast": weather_body(), "/v1/day-ahead": price_body()}
        self.status: dict[str, int] = {}
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                body = json.dumps(site.bodies.get(path, {})).encode()
                self.send_response(site.status.get(path, 200 if path in site.bodies else 404))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = False
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05})


@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    s.thread.start()
    try:
        yield s
    finally:
        s.httpd.shutdown()
        s.httpd.server_close()
        s.thread.join(5)


def feed(weather_url: str, price_url: str, now: datetime = NOW) -> OutlookFeed:
    clock = lambda: now  # noqa: E731
    tariff = PriceConfig(source="tou", adder_eur_mwh=30.0)
    return OutlookFeed(WeatherProvider(weather_url, 52.0, 5.0, retries=0, timeout_s=1.0, utc_now=clock),
                       PriceProvider(price_url, tariff, retries=0, timeout_s=1.0, utc_now=clock),
                       utc_now=clock)


def telemetry(ts: datetime, par: float = 5.0) -> Telemetry:
    return Telemetry(ts=ts, boot_id="b1", seq=1, soil_vwc=[[0.24, 0.24]] * 6, air_temp_c=20.0,
                     air_rh_pct=70.0, par_umol_m2_s=par, co2_ppm=420.0, leaf_temp_c=20.0, flow_l_min=0.0,
                     pump_current_a=0.0, valve_open=[0] * 6, pump_pct=0.0, light_pct=0.0, estop=False)


def test_live_outlook_from_both_sources(site: Site) -> None:
    f = feed(site.url, site.url)
    out = f.refresh()
    f.close()
    assert (out.weather_source, out.price_source, out.alarms) == ("live", "live", ())
    assert out.issued == datetime(2026, 12, 2, 14, tzinfo=UTC)
    np.testing.assert_allclose(out.forecast_temp_c, [5.0 + 0.1 * h for h in range(15, 39)])
    assert out.forecast_solar_w_m2.shape == (SOLAR_LEADS,) and out.forecast_solar_w_m2.max() > 300.0
    np.testing.assert_array_equal(out.price_eur_mwh, [80.0 + h for h in range(14, 38)])
    assert out.price_published.all()  # 14:20 UTC: tomorrow's auction is out
    rec = out.record()
    assert rec["weather"] == {"source": "live", "age_s": 0.0} and rec["prices"]["published_hours"] == 24


def test_failed_price_source_alarms_and_the_decision_records_it(site: Site) -> None:
    site.status["/v1/day-ahead"] = 503
    f = feed(site.url, site.url)
    out = f.refresh()
    f.close()
    assert out.price_source == "fallback" and out.alarms == ("outlook_prices:fallback",)
    ctl = GreenhouseController("gh1", ZONES, ExpertProposer(served_expert(6)), SafetyLimits.default())
    d = ctl.on_telemetry(telemetry(NOW), out)
    assert "outlook_prices:fallback" in d.alarms
    rec = d.record()
    assert rec["estimate"]["outlook"]["prices"]["source"] == "fallback"
    assert rec["estimate"]["outlook"]["weather"]["source"] == "live"
    assert "outlook_prices:fallback" in rec["explanation"]["alarms"]


def test_unreachable_weather_falls_back_with_an_alarm_and_unconfigured_sources_do_not(site: Site) -> None:
    site.httpd.shutdown()
    f = feed(site.url, "")
    out = f.refresh()
    f.close()
    assert out.weather_source == "fallback" and out.alarms == ("outlook_weather:fallback",)
    assert out.price_source == "tariff" and out.price_published.all()
    quiet = feed("", "")
    out = quiet.refresh()
    quiet.close()
    assert out.alarms == () and out.weather_source == "fallback" and out.forecast_solar_w_m2.max() > 0.0


def test_stale_source_raises_an_alarm(site: Site) -> None:
    f = feed(site.url, site.url)
    f.refresh()
    f.stale_s = 1e-9  # any age is too old now
    site.status["/v1/day-ahead"] = 500
    f.prices.cache_ttl_s = 0.0
    out = f.refresh()
    f.close()
    assert out.price_source == "cache" and "outlook_prices:stale" in out.alarms


def test_outlook_moves_on_with_the_decision_hour() -> None:
    issued = datetime(2026, 12, 2, 10, tzinfo=UTC)
    out = Outlook(issued, np.arange(24.0), np.arange(47.0), np.arange(24.0) + 50, np.ones(24))
    later = out.at(issued + timedelta(hours=2))
    assert later.issued == issued + timedelta(hours=2)
    assert later.forecast_temp_c[0] == 2.0 and later.forecast_temp_c[-1] == 23.0
    assert later.price_eur_mwh[0] == 52.0 and later.price_published.tolist() == [1.0] * 22 + [0.0] * 2
    assert out.at(issued) is out and out.at(issued - timedelta(hours=1)) is out


def prices_at(level: float) -> Outlook:
    issued = datetime(2026, 12, 2, 19, tzinfo=UTC)
    return Outlook(issued, np.full(24, 5.0), np.zeros(SOLAR_LEADS), np.full(24, level), np.ones(24), "live",
                   0.0, "live", 0.0)


@pytest.mark.parametrize("proposer", ["expert", "shipped"])
def test_a_served_decision_follows_the_price_outlook(proposer: str) -> None:
    """A dark winter evening, no lamp hours yet: cheap power lights the lamps, dear power does not."""
    if proposer == "expert":
        make = lambda: ExpertProposer(served_expert(6))  # noqa: E731
    else:
        pytest.importorskip("torch")
        from control import load_proposer
        shipped = load_proposer(Path(__file__).resolve().parents[3] / "policy" / "shipped", 6)
        make = lambda: shipped  # noqa: E731
    ts = datetime(2026, 12, 2, 19, 5, tzinfo=UTC)
    lights, named = {}, set()
    for level in (-50.0, 900.0):
        ctl = GreenhouseController("gh1", ZONES, make(), SafetyLimits.default())
        d = ctl.on_telemetry(telemetry(ts), prices_at(level))
        lights[level] = d.command.light_pct
        named |= {f["feature"].split("[")[0] for f in (d.explanation or {}).get("top", [])}
    assert lights[-50.0] > lights[900.0], lights
    if proposer == "shipped":  # the ensemble's explanation names the outlook that decided it
        assert "price" in named, named


def test_runtime_decides_on_the_feeds_outlook(site: Site, tmp_path: Path) -> None:
    from app.cli import db as db_cli
    from app.core.config import Settings
    from app.core.db import make_engine, make_session_factory
    from app.runtime import Runtime
    from app.services.greenhouses import add_greenhouse

    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh-outlook", zones=6, soil="loam")
    settings = Settings(database_url=url, policy_dir=tmp_path / "no-policy", max_age_s=3600.0)
    f = feed(site.url, site.url)
    f.refresh()
    rt = Runtime(settings, make_session_factory(make_engine(url)), state_dir=tmp_path / "state",
                 proposer=ExpertProposer(served_expert(6)), outlook=f)
    rt.load_greenhouses()
    emitted = []
    rt.intake.emit = lambda decisions, arrived: emitted.extend(decisions)

    async def decide() -> None:
        rt.intake.put("gh-outlook", telemetry(NOW + timedelta(minutes=1)))
        await asyncio.sleep(0.05)
        await rt.intake.drained()

    asyncio.run(decide())
    f.close()
    assert len(emitted) == 1
    d = emitted[0]
    assert d.record()["estimate"]["outlook"]["prices"]["source"] == "live"
    price = np.asarray(d.observation)[rt.controllers["gh-outlook"].obs_builder.spec.slices["price"]]
    np.testing.assert_allclose(price, np.arange(14, 38) + 80.0 + 30.0, rtol=1e-5)  # the feed's tariff adder


def test_an_outlook_nobody_refreshes_raises_its_own_alarm() -> None:
    now = [NOW]
    f = feed("", "", now=NOW)
    f._utc_now = lambda: now[0]  # the feed's clock moves on; no refresh runs
    assert f.for_decisions(None).alarms == ()
    now[0] = NOW + timedelta(hours=5)
    assert f.for_decisions(None).alarms == ("outlook:not_refreshed",)
    f.close()
