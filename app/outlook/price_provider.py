"""Hourly day-ahead electricity prices for the site, fetched so that they never stall the control loop.

:class:`PriceProvider` asks an HTTP JSON endpoint, ``GET {base_url}/v1/day-ahead`` (its body and the
publication rule: :mod:`twin.price_data`), keeps what it learnt for ``cache_ttl_s`` and serves the
next 24 clock hours in the twin's layout. When the endpoint fails (timeout, transport, 5xx, malformed
data, after ``retries`` retries) it degrades instead of raising: the prices it already knows (each
slot the hour itself or its naive forecast), and for any hour they do not cover the configured
time-of-use tariff, marked unpublished (a guess, not the contract); with nothing known at all the
whole outlook is that tariff.

With no ``base_url`` the tariff *is* the contract: every slot published, as the twin's ``tou`` source.
Every answer says where it came from (live, cache, fallback, tariff) and how old its data is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import httpx
import numpy as np

from app.outlook.http_source import error_kind, get_json, retrying
from twin.config import PriceConfig
from twin.price_data import (
    SLOTS,
    PriceDataError,
    PriceOutlook,
    outlook_from_known,
    parse_day_ahead,
    published_mask,
    tariff_prices,
)

logger = logging.getLogger(__name__)

_KEEP_S = 3 * 86400


class PriceProvider:
    """Day-ahead price client that answers within a bounded time and degrades instead of raising."""

    def __init__(self, base_url: str, tariff: PriceConfig, *, site_timezone: str = "UTC",
                 timeout_s: float = 3.0, retries: int = 2, cache_ttl_s: float = 900.0,
                 clock: Callable[[], float] = time.monotonic,
                 utc_now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 transport: httpx.BaseTransport | None = None) -> None:
        if not (timeout_s > 0 and retries >= 0 and cache_ttl_s >= 0):
            raise ValueError("need timeout_s > 0, retries >= 0 and cache_ttl_s >= 0")
        self.tariff, self.tz = tariff, ZoneInfo(site_timezone)
        self.timeout_s, self.retries, self.cache_ttl_s = float(timeout_s), int(retries), float(cache_ttl_s)
        self.configured = bool(base_url.strip())
        self._url = base_url.rstrip("/") + "/v1/day-ahead"
        self._clock, self._utc_now = clock, utc_now
        self._client = httpx.Client(timeout=httpx.Timeout(self.timeout_s), transport=transport)
        self._lock = threading.Lock()
        self._known: dict[int, float] = {}  # hour start (UTC epoch s) -> spot price, kept _KEEP_S
        self._fetched_at: float | None = None

    def close(self) -> None:
        """Release the HTTP connection pool."""
        self._client.close()

    def __enter__(self) -> PriceProvider:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def outlook(self) -> PriceOutlook:
        """The next 24 clock hours from now; never raises for network or data trouble."""
        now = self._utc_now()
        start = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        first_hour = int(start.timestamp())
        if not self.configured:
            return PriceOutlook(start, self.tariff_prices(start), np.ones(SLOTS), "tariff", None)
        mask = published_mask(now, self.tz)
        with self._lock:
            fresh = self._fetched_at is not None and self._clock() - self._fetched_at <= self.cache_ttl_s
        live, reason = False, ""
        if not fresh:
            try:
                got = retrying(self.retries)(self._attempt)
                with self._lock:
                    self._known.update(got)
                    self._fetched_at = self._clock()
                    for old in [h for h in self._known if h < first_hour - _KEEP_S]:
                        del self._known[old]
                live = True
            except Exception as exc:  # degrade, never crash the control loop
                reason = f"{error_kind(exc)}: {exc}"
                logger.warning("day-ahead price fetch failed (%s)", reason,
                               exc_info=error_kind(exc) == "unexpected")
        with self._lock:
            known, fetched = dict(self._known), self._fetched_at
        age = None if fetched is None else self._clock() - fetched
        return outlook_from_known(start, known, mask, self.tariff_prices(start), live, age, reason)

    def tariff_prices(self, start: datetime) -> np.ndarray:
        """The time-of-use tariff of the 24 local clock hours from ``start`` [EUR/MWh, spot part]."""
        return tariff_prices(self.tariff, start, self.tz)

    def _attempt(self) -> dict[int, float]:
        """One GET with a total deadline; the hours it lists."""
        try:
            payload = get_json(self._client, self._url, self.timeout_s, PriceDataError)
            return parse_day_ahead(payload)
        except Exception as exc:
            logger.debug("price attempt failed (%s): %s", error_kind(exc), exc)
            raise
