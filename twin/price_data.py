"""Hourly day-ahead electricity prices as the twin reads them: the 24-slot outlook a decision sees,
a day-ahead body parsed into hours, and the publication rule that decides which hours are known.

Fetching them is the service's (:mod:`app.outlook.price_provider`); this module does no I/O. The
body it parses, ``GET {base_url}/v1/day-ahead``, is::

    {"unit": "EUR/MWh",
     "prices": [{"start": "2026-12-02T00:00:00+01:00", "eur_mwh": 84.2}, ...]}

one entry per clock hour (``start`` ISO-8601; without an offset it is UTC), spot prices without the
grower's adder. The outlook is the twin's layout (:meth:`twin.prices.PriceLibrary.outlook`): the hours
of local day D count as published only from 13:00 local on D-1 (:data:`twin.prices.PUBLICATION_HOUR`),
whatever the endpoint already returns, and an unpublished hour holds the naive forecast, the same hour
one day earlier; an hour the known prices do not cover holds the time-of-use tariff, unpublished.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

import numpy as np

from twin.config import PriceConfig
from twin.prices import PUBLICATION_HOUR, tou_at
from twin.source_data import SourceDataError

PriceSource = Literal["live", "cache", "fallback", "tariff"]
SLOTS = 24
PRICE_RANGE = (-1000.0, 6000.0)
"""The price bounds of the European day-ahead auction (EUR/MWh, harmonised min and max clearing
price, rounded out): a value outside them is corrupt data."""


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
    if (not isinstance(payload, Mapping) or not isinstance(payload.get("prices"), list)
            or not payload["prices"]):
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


def tariff_prices(tariff: PriceConfig, start: datetime, tz: ZoneInfo) -> np.ndarray:
    """The time-of-use tariff of the 24 local clock hours from ``start`` [EUR/MWh, spot part]."""
    return tou_at(tariff, [start + timedelta(hours=k) for k in range(SLOTS)], tz)


def outlook_from_known(start: datetime, known: Mapping[int, float], mask: np.ndarray,
                       tariff_eur_mwh: np.ndarray, live: bool, age_s: float | None,
                       reason: str) -> PriceOutlook:
    """The 24 slots from ``start`` out of the ``known`` prices {hour start (UTC epoch s): EUR/MWh}.

    ``mask`` is :func:`published_mask` at the moment asked; ``tariff_eur_mwh`` the tariff of the same
    slots; ``live`` whether ``known`` was refreshed just now, ``reason`` why not ('' when it was not due).
    With no slot from the data the whole outlook is the tariff, marked ``fallback``.
    """
    hours = [int((start + timedelta(hours=k)).timestamp()) for k in range(SLOTS)]
    prices, published = np.array(tariff_eur_mwh, dtype=np.float64), np.zeros(SLOTS)
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
        return PriceOutlook(start, prices, np.zeros(SLOTS), "fallback", age_s, why)
    source: PriceSource = "live" if live and not reason else "cache"
    return PriceOutlook(start, prices, published, source, age_s, reason)
