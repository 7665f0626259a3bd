"""Hourly day-ahead electricity prices for the site that never stall the control loop.

:class:`PriceProvider` asks an HTTP JSON endpoint, ``GET {base_url}/v1/day-ahead``, whose body is::

    {"unit": "EUR/MWh",
     "prices": [{"start": "2026-12-02T00:00:00+01:00", "eur_mwh": 84.2}, ...]}

one entry per clock hour (``start`` ISO-8601; without an offset it is UTC), spot prices without the
grower's adder. It keeps what it learnt for ``cache_ttl_s`` and serves the next 24 clock hours in
the twin's layout (:meth:`twin.prices.PriceLibrary.outlook`): the hours of local day D count as
published only from 13:00 local on D-1 (:data:`twin.prices.PUBLICATION_HOUR`), whatever the
endpoint already returns, and an unpublished hour holds the naive forecast, the same hour one day
earlier. When the endpoint fails (timeout, transport, 5xx, malformed data, after ``retries``
retries) it degrades instead of raising: the prices it already knows (each slot the hour itself or
its naive forecast), and for any hour they do not cover the configured time-of-use tariff, marked
unpublished (a guess, not the contract); with nothing known at all the whole outlook is that tariff.

With no ``base_url`` the tariff *is* the contract: every slot published, as the twin's ``tou`` source.
Every answer says where it came from (live, cache, fallback, tariff) and how old its data is.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

import httpx
import numpy as np

from twin.config import PriceConfig
from twin.http_source import SourceDataError, error_kind, get_json, retrying
from twin.prices import PUBLICATION_HOUR, tou_at

logger = logging.getLogger(__name__)

PriceSource = Literal["live", "cache", "fallback", "tariff"]
SLOTS = 24
PRICE_RANGE = (-1000.0, 6000.0)
"""The price bounds of the European day-ahead auction (EUR/MWh, harmonised min and max clearing
price, rounded out): a value outside them is corrupt data."""
_KEEP_S = 3 * 86400


class PriceDataError(SourceDataError):
    """A price payload is malformed or implausible; callers fall back rather than trust it."""


@dataclasses.dataclass(frozen=True)
class PriceOutlook:
    """Spot prices [EUR/MWh, adder not included] of the clock hours +0..+23 and their published mask."""

    start: datetime
    """The first slot's clock hour (UTC)."""
    eur_mwh: np.ndarray
    published: np.ndarray
    source: PriceSource
    age_s: float | None
    """Seconds since the data was fetched from the endpoint (None: never; the tariff needs none)."""
    reason: str = ""
    """Why the live answer was not used ('' when it was)."""


def parse_day_ahead(payload: Any) -> dict[int, float]:
    """A decoded body as {hour start (UTC epoch s): EUR/MWh}; every defect is a PriceDataError."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("prices"), list) or not payload["prices"]:
        raise PriceDataError("payload must be a JSON object with a non-empty 'prices' list")
    unit = payload.get("unit", "EUR/MWh")
    if unit != "EUR/MWh":
        raise PriceDataError(f"unsupported price unit {unit!r}, expected 'EUR/MWh'")
    out: dict[int, float] = {}
    for entry in payload["prices"]:
        if not isinstance(entry, Mapping):
            raise PriceDataError("each price must be an object with 'start' and 'eur_mwh'")
        value, start = entry.get("eur_mwh"), entry.get("start")
        if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
            raise PriceDataError(f"price at {start!r} is not a finite number: {value!r}")
        if not PRICE_RANGE[0] <= value <= PRICE_RANGE[1]:
            raise PriceDataError(f"price {value:g} at {start!r} is outside {PRICE_RANGE}")
        try:
            when = datetime.fromisoformat(start)  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise PriceDataError(f"bad price start {start!r}: {exc}") from exc
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when
        epoch = when.timestamp()
        if epoch % 3600:
            raise PriceDataError(f"price start {start!r} is not on a whole hour")
        if int(epoch) in out:
            raise PriceDataError(f"two prices for the hour starting {start!r}")
        out[int(epoch)] = float(value)
    return out


def published_mask(now: datetime, tz: ZoneInfo, hours: int = SLOTS) -> np.ndarray:
    """1.0 for each clock hour now+0..+hours-1 already published at ``now``: hours of today (local), and
    tomorrow's once the local clock has reached 13:00; the twin's rule (:meth:`PriceLibrary.outlook`)."""
    local = now.astimezone(tz)
    start = local.replace(minute=0, second=0, microsecond=0)
    today = local.date()
    late = local.hour + local.minute / 60.0 >= PUBLICATION_HOUR
    days = [((start + timedelta(hours=k)).astimezone(tz).date() - today).days for k in range(hours)]
    return np.array([1.0 if d <= 0 or (d == 1 and late) else 0.0 for d in days])


class PriceProvider:
    """Day-ahead price client that answers within a bounded time and degrades instead of raising."""

    def __init__(self, base_url: str, tariff: PriceConfig, *, site_timezone: str = "UTC", timeout_s: float = 3.0,
                 retries: int = 2, cache_ttl_s: float = 900.0, clock: Callable[[], float] = time.monotonic,
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
        hours = [int((start + timedelta(hours=k)).timestamp()) for k in range(SLOTS)]
        mask = published_mask(now, self.tz)
        if not self.configured:
            return PriceOutlook(start, self.tariff_prices(start), np.ones(SLOTS), "tariff", None)
        with self._lock:
            fresh = self._fetched_at is not None and self._clock() - self._fetched_at <= self.cache_ttl_s
        source: PriceSource = "cache"
        reason = ""
        if not fresh:
            try:
                got = retrying(self.retries)(self._attempt)
                with self._lock:
                    self._known.update(got)
                    self._fetched_at = self._clock()
                    for old in [h for h in self._known if h < hours[0] - _KEEP_S]:
                        del self._known[old]
                source = "live"
            except Exception as exc:  # degrade, never crash the control loop
                reason = f"{error_kind(exc)}: {exc}"
                logger.warning("day-ahead price fetch failed (%s)", reason, exc_info=error_kind(exc) == "unexpected")
        with self._lock:
            known, fetched = dict(self._known), self._fetched_at
        age = None if fetched is None else self._clock() - fetched
        prices, published = self.tariff_prices(start), np.zeros(SLOTS)
        from_data = 0
        for k, h in enumerate(hours):
            # An unpublished hour is never read from the data even when the endpoint has it: the
            # twin's policy never saw the future either. Its naive forecast is the same hour yesterday;
            # a published hour the data lacks (the auction is late) gets the naive forecast too.
            if mask[k] and h in known:
                prices[k], published[k] = known[h], 1.0
            elif h - 86400 in known:
                prices[k] = known[h - 86400]
            else:  # neither: the tariff's guess for that hour
                continue
            from_data += 1
        if from_data == 0:
            why = reason or "the endpoint's data does not cover the next 24 hours"
            return PriceOutlook(start, prices, np.zeros(SLOTS), "fallback", age, why)
        if reason:
            source = "cache"
        return PriceOutlook(start, prices, published, source, age, reason)

    def tariff_prices(self, start: datetime) -> np.ndarray:
        """The time-of-use tariff of the 24 local clock hours from ``start`` [EUR/MWh, spot part]."""
        return tou_at(self.tariff, [start + timedelta(hours=k) for k in range(SLOTS)], self.tz)

    def _attempt(self) -> dict[int, float]:
        """One GET with a total deadline; the hours it lists."""
        try:
            payload = get_json(self._client, self._url, self.timeout_s, PriceDataError)
            return parse_day_ahead(payload)
        except Exception as exc:
            logger.debug("price attempt failed (%s): %s", error_kind(exc), exc)
            raise
