"""WeatherProvider against a real HTTP server on 127.0.0.1: live, cache, retries and every degraded path."""

from __future__ import annotations

import json
import logging
import math
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from app.outlook.weather_provider import WeatherProvider
from twin.weather_data import (
    NOISE_STD,
    RANGES,
    WIND_10M_TO_2M,
    HourlyWeather,
    WeatherDataError,
    climatology,
    parse_open_meteo,
)

NOW = datetime(2026, 7, 1, 5, 30, tzinfo=UTC)  # forecast window starts at 05:00, index 5 of the payload
START = 5
LAT, LON = 52.0, 5.0


def payload(wind_unit: str = "m/s", n: int = 48) -> dict[str, Any]:
    """An Open-Meteo shaped body for 2026-07-01T00:00 .. +n h with distinct, plausible values."""
    t0 = datetime(2026, 7, 1)
    return {
        "latitude": LAT, "longitude": LON, "utc_offset_seconds": 0,
        "hourly_units": {"time": "iso8601", "temperature_2m": "°C", "relative_humidity_2m": "%",
                         "shortwave_radiation": "W/m²", "wind_speed_10m": wind_unit, "precipitation": "mm"},
        "hourly": {
            "time": [(t0 + timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M") for h in range(n)],
            "temperature_2m": [round(15.0 + 0.25 * h, 2) for h in range(n)],
            "relative_humidity_2m": [40 + h for h in range(n)],
            "shortwave_radiation": [10.0 * h for h in range(n)],
            "wind_speed_10m": [1.0 + 0.5 * h for h in range(n)],
            "precipitation": [0.1 * (h % 3) for h in range(n)],
        },
    }


@dataclass
class Reply:
    status: int = 200
    body: bytes | dict[str, Any] = b""
    delay_s: float = 0.0
    trickle_s: float = 0.0  # pause between 10 body pieces


class FakeOpenMeteo:
    """A switchable local server: ``replies`` are served in order, the last one repeats."""

    def __init__(self) -> None:
        self.replies: list[Reply] = [Reply(body=payload())]
        self.queries: list[dict[str, list[str]]] = []
        self.paths: list[str] = []
        self.stop = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                fake.paths.append(url.path)
                fake.queries.append(parse_qs(url.query))
                reply = fake.replies.pop(0) if len(fake.replies) > 1 else fake.replies[0]
                if reply.delay_s and fake.stop.wait(reply.delay_s):
                    return
                body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    step = max(1, len(body) // 10) if reply.trickle_s else len(body) or 1
                    for i in range(0, len(body), step):
                        self.wfile.write(body[i:i + step])
                        self.wfile.flush()
                        if reply.trickle_s and fake.stop.wait(reply.trickle_s):
                            return
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client gave up (timeout tests)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the tests read replies, not the server's log."""

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = False  # so server_close() joins handler threads
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05})

    @property
    def requests(self) -> int:
        return len(self.queries)


@pytest.fixture
def server() -> Iterator[FakeOpenMeteo]:
    fake = FakeOpenMeteo()
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.stop.set()
        fake.httpd.shutdown()
        fake.httpd.server_close()
        fake.thread.join(5)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(url: str, **kw: Any) -> WeatherProvider:
    kw.setdefault("utc_now", lambda: NOW)
    return WeatherProvider(url, LAT, LON, **kw)


@pytest.fixture
def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_live_response_parsed_and_request_shaped(server: FakeOpenMeteo) -> None:
    with make(server.url + "/") as wp:
        w = wp.forecast(hours=6)
    src = payload()["hourly"]
    sl = slice(START, START + 6)
    assert w.source == "live" and len(w.times) == 6
    assert w.times[0] == np.datetime64("2026-07-01T05:00:00") and w.times.dtype == np.dtype("datetime64[s]")
    np.testing.assert_array_equal(w.temperature_c, src["temperature_2m"][sl])
    np.testing.assert_array_equal(w.relative_humidity_pct, src["relative_humidity_2m"][sl])
    np.testing.assert_array_equal(w.shortwave_radiation_w_m2, src["shortwave_radiation"][sl])
    np.testing.assert_array_equal(w.precipitation_mm, src["precipitation"][sl])
    np.testing.assert_allclose(w.wind_speed_m_s, np.array(src["wind_speed_10m"][sl]) * WIND_10M_TO_2M)
    assert server.paths == ["/v1/forecast"]
    q = {k: v[0] for k, v in server.queries[0].items()}
    assert q == {"latitude": "52.0", "longitude": "5.0", "wind_speed_unit": "ms", "timezone": "UTC",
                 "forecast_days": "3",
                 "hourly": "temperature_2m,relative_humidity_2m,shortwave_radiation,"
                           "wind_speed_10m,precipitation"}
    assert wp.stats.live == 1 and wp.stats.errors == {}


def test_fao56_factor_and_kmh_wind(server: FakeOpenMeteo) -> None:
    assert WIND_10M_TO_2M == pytest.approx(4.87 / math.log(672.58)) \
        and WIND_10M_TO_2M == pytest.approx(0.748, abs=1e-3)
    server.replies = [Reply(body=payload(wind_unit="km/h"))]
    with make(server.url) as wp:
        w = wp.forecast(hours=3)
    kmh = np.array(payload()["hourly"]["wind_speed_10m"][START:START + 3])
    np.testing.assert_allclose(w.wind_speed_m_s, kmh / 3.6 * WIND_10M_TO_2M)
    assert w.source == "live"


def test_second_call_within_ttl_is_cached(server: FakeOpenMeteo) -> None:
    clock = FakeClock()
    with make(server.url, clock=clock) as wp:
        first = wp.forecast(hours=6)
        clock.t += 899.0
        second = wp.forecast(hours=6)
        assert server.requests == 1 and (first.source, second.source) == ("live", "cache")
        np.testing.assert_array_equal(first.temperature_c, second.temperature_c)
        clock.t += 2.0  # past the TTL: fetch again
        assert wp.forecast(hours=6).source == "live" and server.requests == 2
        assert (wp.stats.live, wp.stats.cache, wp.stats.requests) == (2, 1, 2)


def test_default_timeout_and_slow_server_falls_back_in_bounded_time(server: FakeOpenMeteo) -> None:
    with make(server.url) as default:
        assert default.timeout_s == 3.0 and default.retries == 2 and default.cache_ttl_s == 900.0
    server.replies = [Reply(body=payload(), delay_s=5.0)]
    with make(server.url, timeout_s=0.3) as wp:
        t0 = time.monotonic()
        w = wp.forecast()
        elapsed = time.monotonic() - t0
    assert w.source == "fallback"
    assert elapsed < 3 * 0.3 + 0.15 + 1.0  # three attempts, two backoff waits, slack for a loaded CI box
    assert wp.stats.errors == {"timeout": 3} and server.requests == 3


def test_trickling_body_is_cut_at_the_attempt_deadline(server: FakeOpenMeteo) -> None:
    server.replies = [Reply(body=payload(),
                            trickle_s=0.2)]  # each piece beats the read timeout; all 10 take 2 s
    with make(server.url, timeout_s=0.3, retries=0) as wp:
        t0 = time.monotonic()
        w = wp.forecast()
        elapsed = time.monotonic() - t0
    assert w.source == "fallback" and wp.stats.errors == {"timeout": 1}
    assert elapsed < 1.2


def test_server_down_falls_back_without_raising(closed_port_url: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="app.outlook.weather_provider"), make(closed_port_url) as wp:
        w = wp.forecast(hours=4)
    assert w.source == "fallback" and len(w.times) == 4
    assert wp.stats.errors == {"transport": 3} and wp.stats.fallback == 1
    assert any("transport" in r.getMessage() for r in caplog.records)


def _broken(mutate: Any) -> dict[str, Any]:
    body = payload()
    mutate(body)
    return body


GARBAGE: dict[str, Any] = {
    "missing_hourly": lambda b: b.pop("hourly"),
    "hourly_is_list": lambda b: b.update(hourly=[1, 2]),
    "missing_field": lambda b: b["hourly"].pop("precipitation"),
    "missing_time": lambda b: b["hourly"].pop("time"),
    "null_value": lambda b: b["hourly"]["temperature_2m"].__setitem__(7, None),
    "string_value": lambda b: b["hourly"]["relative_humidity_2m"].__setitem__(7, "wet"),
    "nan_value": lambda b: b["hourly"]["shortwave_radiation"].__setitem__(7, float("nan")),
    "short_column": lambda b: b["hourly"]["wind_speed_10m"].pop(),
    "absurd_temperature": lambda b: b["hourly"]["temperature_2m"].__setitem__(7, 900.0),
    "negative_rain": lambda b: b["hourly"]["precipitation"].__setitem__(7, -1.0),
    "humidity_over_100": lambda b: b["hourly"]["relative_humidity_2m"].__setitem__(7, 140),
    "bad_timestamp": lambda b: b["hourly"]["time"].__setitem__(3, "yesterday"),
    "unsorted_times": lambda b: b["hourly"]["time"].reverse(),
    "unknown_wind_unit": lambda b: b["hourly_units"].update(wind_speed_10m="furlong/fortnight"),
    "fahrenheit": lambda b: b["hourly_units"].update(temperature_2m="°F"),
}
GARBAGE_BODIES: dict[str, bytes] = {
    "not_json": b"<html>rate limited</html>",
    "empty": b"",
    "json_list": b"[1, 2, 3]",
    **{k: json.dumps(_broken(m)).encode() for k, m in GARBAGE.items()},
}


@pytest.mark.parametrize("name", sorted(GARBAGE_BODIES))
def test_garbage_falls_back_and_counts(server: FakeOpenMeteo, name: str) -> None:
    server.replies = [Reply(body=GARBAGE_BODIES[name])]
    with make(server.url, retries=0) as wp:
        w = wp.forecast()
    assert w.source == "fallback" and wp.stats.errors == {"bad_data": 1}


@pytest.mark.parametrize("name", ["not_json", "null_value", "nan_value", "absurd_temperature"])
def test_garbage_after_expired_cache_serves_stale_cache(server: FakeOpenMeteo, name: str) -> None:
    clock = FakeClock()
    with make(server.url, clock=clock, retries=0) as wp:
        live = wp.forecast()
        clock.t += 10_000.0
        server.replies = [Reply(body=GARBAGE_BODIES[name])]
        stale = wp.forecast()
    assert (live.source, stale.source) == ("live", "cache") and server.requests == 2
    np.testing.assert_array_equal(live.temperature_c, stale.temperature_c)
    assert wp.stats.errors == {"bad_data": 1} and wp.stats.cache == 1


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_parsing_garbage_raises_weather_data_error(name: str) -> None:
    with pytest.raises(WeatherDataError):
        parse_open_meteo(_broken(GARBAGE[name]))


@pytest.mark.parametrize("raw", [None, [1, 2], "x", 3, {"hourly": None}, {"hourly": {"time": []}},
                                 {"hourly": {"time": [1]}}, {**payload(), "utc_offset_seconds": "0"}])
def test_parsing_odd_shapes_raises_weather_data_error(raw: Any) -> None:
    with pytest.raises(WeatherDataError):
        parse_open_meteo(raw)
    assert issubclass(WeatherDataError, ValueError)


def test_parse_applies_utc_offset_for_local_times() -> None:
    body = {**payload(), "utc_offset_seconds": 7200}
    assert parse_open_meteo(body).times[0] == np.datetime64("2026-06-30T22:00:00")


def test_500_then_200_is_retried_to_live(server: FakeOpenMeteo) -> None:
    server.replies = [Reply(status=500, body=b"oops"), Reply(body=payload())]
    with make(server.url) as wp:
        w = wp.forecast()
    assert w.source == "live" and server.requests == 2
    assert wp.stats.errors == {"http_5xx": 1} and wp.stats.live == 1


def test_404_is_not_retried(server: FakeOpenMeteo) -> None:
    server.replies = [Reply(status=404, body=b"{}")]
    with make(server.url) as wp:
        assert wp.forecast().source == "fallback"
    assert server.requests == 1 and wp.stats.errors == {"http_4xx": 1}


def _observed(h: int) -> tuple[float, float, float, float, float]:
    return 20.0 + h, 60.0 - h, 100.0 * h, 1.5, 2.0 if h == 2 else 0.0


def _record_yesterday(wp: WeatherProvider, hours: int) -> None:
    for h in range(hours):
        at = NOW.replace(minute=0) - timedelta(days=1) + timedelta(hours=h)
        wp.record_observation(at + timedelta(minutes=10), *_observed(h))
        wp.record_observation(at + timedelta(minutes=40), *_observed(h))  # same hour: averaged


def test_fallback_replays_yesterdays_observations_with_bounded_noise(closed_port_url: str) -> None:
    with make(closed_port_url, retries=0, seed=7) as wp:
        _record_yesterday(wp, 6)
        w = wp.forecast(hours=6)
    assert w.source == "fallback"
    np.testing.assert_array_equal(w.times, np.datetime64("2026-07-01T05:00:00")
                                  + np.arange(6) * np.timedelta64(1, "h"))
    obs = np.array([_observed(h) for h in range(6)]).T
    fields = [w.temperature_c, w.relative_humidity_pct, w.shortwave_radiation_w_m2, w.wind_speed_m_s,
              w.precipitation_mm]
    stds = [NOISE_STD["temperature_c"], NOISE_STD["relative_humidity_pct"],
            NOISE_STD["shortwave_radiation_w_m2"] * obs[2], NOISE_STD["wind_speed_m_s"],
            NOISE_STD["precipitation_mm"] * obs[4]]
    for got, want, std in zip(fields, obs, stds, strict=True):
        assert np.all(np.abs(got - want) <= 5 * np.asarray(std) + 1e-12)
    assert not np.array_equal(w.temperature_c, obs[0])  # noise was added
    assert w.shortwave_radiation_w_m2[0] == 0.0 \
        and w.precipitation_mm[0] == 0.0  # dark stays dark, dry stays dry


def _fallback_run(url: str, seed: int) -> list[np.ndarray]:
    with make(url, retries=0, seed=seed) as wp:
        _record_yesterday(wp, 6)
        return [wp.forecast(hours=6).temperature_c, wp.forecast(hours=3).relative_humidity_pct]


def test_fallback_is_deterministic_per_seed(closed_port_url: str) -> None:
    a, b, c = (_fallback_run(closed_port_url, s) for s in (3, 3, 4))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    assert not np.array_equal(a[0][:3], a[1][:3])  # the generator advances between calls


def test_fallback_without_observations_uses_climatology(closed_port_url: str) -> None:
    with make(closed_port_url, retries=0) as wp:
        _record_yesterday(wp, 2)  # only hours 0-1 of the 4 asked have yesterday's data
        w = wp.forecast(hours=4)
    clim = climatology(w.times, LON)
    np.testing.assert_array_equal(w.temperature_c[2:], clim[0, 2:])
    assert np.all(np.abs(w.temperature_c[:2] - [20.0, 21.0]) <= 5 * NOISE_STD["temperature_c"])
    with make(closed_port_url, retries=0) as empty:
        w = empty.forecast(hours=24)
    assert w.source == "fallback"
    night = (w.times.astype(np.int64) % 86400 // 3600 + LON / 15) % 24 < 5
    assert np.all(w.shortwave_radiation_w_m2[night] == 0.0) and w.shortwave_radiation_w_m2.max() > 500


def test_record_observation_rejects_bad_input(closed_port_url: str) -> None:
    with make(closed_port_url) as wp:
        with pytest.raises(ValueError, match="timezone-aware"):
            wp.record_observation(datetime(2026, 7, 1), 20, 50, 100, 1, 0)
        with pytest.raises(ValueError, match="temperature_c"):
            wp.record_observation(NOW, 900, 50, 100, 1, 0)
        with pytest.raises(ValueError, match="NaN"):
            wp.record_observation(NOW, 20, float("nan"), 100, 1, 0)
        with pytest.raises(ValueError, match="hours"):
            wp.forecast(hours=0)


def _weather(n: int = 3, **override: Any) -> HourlyWeather:
    cols = {"temperature_c": [20.0] * n, "relative_humidity_pct": [50.0] * n,
            "shortwave_radiation_w_m2": [0.0] * n, "wind_speed_m_s": [1.0] * n, "precipitation_mm": [0.0] * n}
    times = np.datetime64("2026-07-01T00:00:00") + np.arange(n) * np.timedelta64(1, "h")
    return HourlyWeather(**{"times": times, **cols, **override})


def test_hourly_weather_validation() -> None:
    w = _weather()
    with pytest.raises(ValueError, match="read-only"):
        w.temperature_c[0] = 1.0
    with pytest.raises(ValueError, match="lengths must match"):
        _weather(wind_speed_m_s=[1.0, 2.0])
    with pytest.raises(ValueError, match="NaN"):
        _weather(temperature_c=[20.0, float("nan"), 20.0])
    with pytest.raises(ValueError, match="physical range"):
        _weather(relative_humidity_pct=[50.0, 101.0, 50.0])
    with pytest.raises(ValueError, match="increasing"):
        _weather(times=np.array(["2026-07-01T01", "2026-07-01T00", "2026-07-01T02"], dtype="datetime64[s]"))
    with pytest.raises(ValueError, match="datetime64"):
        _weather(times=[0, 1, 2])
    with pytest.raises(ValueError, match="source"):
        _weather(source="guess")
    assert set(RANGES) == {"temperature_c", "relative_humidity_pct", "shortwave_radiation_w_m2",
                           "wind_speed_m_s", "precipitation_mm"}


def test_concurrent_forecasts_share_one_fetch(server: FakeOpenMeteo) -> None:
    server.replies = [Reply(body=payload(), delay_s=0.1)]
    with make(server.url) as wp:
        threads = [threading.Thread(target=wp.forecast) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(5)
    assert server.requests == 1 and (wp.stats.live, wp.stats.cache) == (1, 3)


def test_no_base_url_asks_nothing_and_serves_the_fallback_quietly(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), make("") as wp:
        w = wp.forecast(hours=48)
        assert not wp.configured and w.source == "fallback" and len(w.times) == 48
        assert wp.stats.requests == 0 and wp.stats.fallback == 1 and wp.age_s is None
    assert not [r for r in caplog.records if r.name == "app.outlook.weather_provider"]
