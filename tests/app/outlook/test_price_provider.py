"""PriceProvider against a real HTTP server on 127.0.0.1: live, cache, the publication rule, every
fallback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from app.outlook.price_provider import PriceProvider
from twin.config import PriceConfig
from twin.price_data import PriceDataError, parse_day_ahead, published_mask
from twin.prices import tou_price

DAY0 = datetime(2026, 12, 1, tzinfo=UTC)  # a Tuesday; the served prices run from here for three days
TARIFF = PriceConfig()


def price_of(hour_index: int) -> float:
    """A distinct, plausible price for every hour after DAY0."""
    return round(40.0 + 3.0 * hour_index + 0.5 * (hour_index % 7), 2)


def payload(hours: int = 72) -> dict[str, Any]:
    return {"unit": "EUR/MWh", "prices": [{"start": (DAY0 + timedelta(hours=h)).isoformat(),
                                           "eur_mwh": price_of(h)}
                                          for h in range(hours)]}


class FakePrices:
    """Serves ``body`` (bytes or JSON) after ``delay_s``; counts requests."""

    def __init__(self) -> None:
        self.body: bytes | dict[str, Any] = payload()
        self.status = 200
        self.delay_s = 0.0
        self.paths: list[str] = []
        self.stop = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.paths.append(self.path)
                if fake.delay_s and fake.stop.wait(fake.delay_s):
                    return
                body = fake.body if isinstance(fake.body, bytes) else json.dumps(fake.body).encode()
                try:
                    self.send_response(fake.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    return

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = False
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05})


@pytest.fixture
def server() -> Iterator[FakePrices]:
    fake = FakePrices()
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.stop.set()
        fake.httpd.shutdown()
        fake.httpd.server_close()
        fake.thread.join(5)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0
        self.now = DAY0 + timedelta(days=1, hours=9, minutes=30)

    def __call__(self) -> float:
        return self.t


def make(url: str, clock: Clock, **kw: Any) -> PriceProvider:
    kw.setdefault("retries", 0)
    return PriceProvider(url, TARIFF, clock=clock, utc_now=lambda: clock.now, **kw)


def tariff_from(start: datetime) -> np.ndarray:
    hours = [start + timedelta(hours=k) for k in range(24)]
    return tou_price(TARIFF, np.array([h.weekday() for h in hours]), np.array([h.hour for h in hours]))


def test_live_before_publication_holds_yesterdays_prices_for_tomorrow(server: FakePrices) -> None:
    clock = Clock()  # 2 December 09:30 UTC: 2 December's prices are known, 3 December's are not yet
    with make(server.url, clock) as pp:
        out = pp.outlook()
    assert server.paths == ["/v1/day-ahead"] and out.source == "live" and out.age_s == 0.0 \
        and out.reason == ""
    first = 24 + 9  # hour index of 2 December 09:00
    today = 24 - 9  # slots 09:00 .. 23:00 of 2 December
    assert out.start == DAY0 + timedelta(hours=first)
    np.testing.assert_array_equal(out.published, [1.0] * today + [0.0] * (24 - today))
    np.testing.assert_array_equal(out.eur_mwh[:today], [price_of(first + k) for k in range(today)])
    # Served though they are, tomorrow's hours are never read: each holds the same hour a day earlier.
    np.testing.assert_array_equal(out.eur_mwh[today:], [price_of(first + k - 24) for k in range(today, 24)])


@pytest.mark.parametrize(("minute", "published"), [(59, 0.0), (60, 1.0)])
def test_publication_at_1300_local(server: FakePrices, minute: int, published: float) -> None:
    clock = Clock()
    clock.now = DAY0 + timedelta(days=1, hours=12, minutes=minute)  # 12:59, then 13:00 UTC
    with make(server.url, clock) as pp:
        out = pp.outlook()
    today = 24 - out.start.hour
    assert out.published[:today].tolist() == [1.0] * today
    assert out.published[today:].tolist() == [published] * (24 - today)
    first = 24 + out.start.hour
    expect_tomorrow = [price_of(first + k - (0 if published else 24)) for k in range(today, 24)]
    np.testing.assert_array_equal(out.eur_mwh[today:], expect_tomorrow)


def test_publication_hour_is_local_time() -> None:
    # 12:30 UTC is 13:30 in Amsterdam (winter, UTC+1): tomorrow's prices are out there, not in UTC.
    now = datetime(2026, 12, 2, 12, 30, tzinfo=UTC)
    assert published_mask(now, ZoneInfo("Europe/Amsterdam")).all()
    assert not published_mask(now, ZoneInfo("UTC")).all()


def test_cache_serves_within_ttl_then_refetches(server: FakePrices) -> None:
    clock = Clock()
    with make(server.url, clock, cache_ttl_s=600.0) as pp:
        pp.outlook()
        clock.t += 300.0
        cached = pp.outlook()
        clock.t += 400.0
        fresh = pp.outlook()
    assert len(server.paths) == 2
    assert cached.source == "cache" and cached.age_s == 300.0
    assert fresh.source == "live" and fresh.age_s == 0.0


def test_timeout_falls_back_to_the_tariff_unpublished(server: FakePrices) -> None:
    server.delay_s = 2.0
    clock = Clock()
    with make(server.url, clock, timeout_s=0.2) as pp:
        out = pp.outlook()
    assert out.source == "fallback" and out.reason.startswith("timeout") and out.age_s is None
    np.testing.assert_array_equal(out.eur_mwh, tariff_from(out.start))
    assert not out.published.any()


@pytest.mark.parametrize("body", [b"not json", {"prices": []},
                                  {"prices": [{"start": "2026-12-02T09:00", "eur_mwh": None}]},
                                  {"unit": "EUR/kWh",
                                   "prices": [{"start": "2026-12-02T09:00", "eur_mwh": 0.1}]},
                                  {"prices": [{"start": "2026-12-02T09:30", "eur_mwh": 50}]},
                                  {"prices": [{"start": "2026-12-02T09:00", "eur_mwh": 1e9}]}])
def test_malformed_data_falls_back(server: FakePrices, body: bytes | dict[str, Any]) -> None:
    server.body = body
    clock = Clock()
    with make(server.url, clock) as pp:
        out = pp.outlook()
    assert out.source == "fallback" and out.reason.startswith("bad_data")
    np.testing.assert_array_equal(out.eur_mwh, tariff_from(out.start))


def test_failure_after_a_good_fetch_serves_the_cache_with_its_age(server: FakePrices) -> None:
    clock = Clock()
    with make(server.url, clock, cache_ttl_s=60.0) as pp:
        good = pp.outlook()
        server.status = 503
        clock.t += 3600.0
        clock.now += timedelta(hours=1)
        stale = pp.outlook()
    assert stale.source == "cache" and stale.age_s == 3600.0 and stale.reason.startswith("http_5xx")
    np.testing.assert_array_equal(stale.eur_mwh[:-1], good.eur_mwh[1:][:23])


def test_no_url_is_the_contract_tariff_all_published() -> None:
    clock = Clock()
    with make("", clock) as pp:
        out = pp.outlook()
    assert out.source == "tariff" and out.published.all()
    np.testing.assert_array_equal(out.eur_mwh, tariff_from(out.start))


def test_parse_rejects_duplicate_hours() -> None:
    with pytest.raises(PriceDataError, match="two prices"):
        parse_day_ahead({"prices": [{"start": "2026-12-02T09:00", "eur_mwh": 1.0},
                                    {"start": "2026-12-02T10:00+01:00", "eur_mwh": 2.0}]})
