"""What a decision knows of the next day: the site's weather forecast and electricity prices.

One :class:`Outlook` per site refresh is shared by every greenhouse's decision; it carries the
arrays the observation needs (in the twin's leads and slots) and where they came from, so the
decision record can say on what outlook it was made.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from twin.spec import FORECAST_HOURS, PRICE_SLOTS

SOLAR_LEADS = 2 * FORECAST_HOURS - 1
"""Solar leads +1..+47 h: tomorrow's light, seen from 00:xx, ends 47 h ahead."""


@dataclass(frozen=True)
class Outlook:
    """The next day as one decision sees it (arrays are read-only)."""

    issued: datetime
    """The clock hour the arrays start from (UTC): forecast lead +1 h is the hour after it."""
    forecast_temp_c: np.ndarray
    """(24,) outside temperature, leads +1..+24 h."""
    forecast_solar_w_m2: np.ndarray
    """(47,) outside global radiation, leads +1..+47 h (the observation shows the first 24)."""
    price_eur_mwh: np.ndarray
    """(24,) spot price of clock hours +0..+23, the grower's adder not included."""
    price_published: np.ndarray
    """(24,) 1 where that hour's price is published, 0 where it is the same hour a day earlier."""
    weather_source: str = "none"
    weather_age_s: float | None = None
    price_source: str = "none"
    price_age_s: float | None = None
    alarms: tuple[str, ...] = ()
    """``outlook_weather:*`` / ``outlook_prices:*`` when a configured source fell back or went stale."""

    def __post_init__(self) -> None:
        for name, n in (("forecast_temp_c", FORECAST_HOURS), ("forecast_solar_w_m2", SOLAR_LEADS),
                        ("price_eur_mwh", PRICE_SLOTS), ("price_published", PRICE_SLOTS)):
            arr = np.array(getattr(self, name), dtype=np.float64)
            if arr.shape != (n,):
                raise ValueError(f"{name} needs shape ({n},), got {arr.shape}")
            arr.flags.writeable = False
            object.__setattr__(self, name, arr)

    def record(self) -> dict[str, Any]:
        """Where this outlook came from, for the decision's record and audit trail."""
        def age(v: float | None) -> float | None:
            return None if v is None else round(v, 1)
        return {"issued": self.issued.isoformat(),
                "weather": {"source": self.weather_source, "age_s": age(self.weather_age_s)},
                "prices": {"source": self.price_source, "age_s": age(self.price_age_s),
                           "published_hours": int(self.price_published.sum())}, "alarms": list(self.alarms)}

    def at(self, hour: datetime) -> Outlook:
        """This outlook as seen from the clock hour ``hour`` (UTC) when that is up to a day after it was
        issued (a decision just past the hour, before the next refresh): leads and slots move on, the
        end is padded with the last value, the padded price slots unpublished."""
        k = int((hour - self.issued).total_seconds() // 3600)
        if k <= 0 or k >= PRICE_SLOTS:
            return self

        def move(a: np.ndarray, pad: float) -> np.ndarray:
            return np.concatenate([a[k:], np.full(k, pad)])

        return replace(self, issued=self.issued + timedelta(hours=k),
                       forecast_temp_c=move(self.forecast_temp_c, self.forecast_temp_c[-1]),
                       forecast_solar_w_m2=move(self.forecast_solar_w_m2, self.forecast_solar_w_m2[-1]),
                       price_eur_mwh=move(self.price_eur_mwh, self.price_eur_mwh[-1]),
                       price_published=move(self.price_published, 0.0))

    def view(self) -> dict[str, Any]:
        """The arrays too, rounded, for the live-state API."""
        return {**self.record(), "forecast_temp_c": np.round(self.forecast_temp_c, 1).tolist(),
                "forecast_solar_w_m2": np.round(self.forecast_solar_w_m2[:FORECAST_HOURS], 0).tolist(),
                "price_eur_mwh": np.round(self.price_eur_mwh, 2).tolist(),
                "price_published": self.price_published.astype(int).tolist()}


def unknown_outlook(issued: datetime, air_temp_c: float, tariff_eur_mwh: np.ndarray) -> Outlook:
    """No outlook at all (a controller driven without a site, as in tests and benchmarks): a flat
    temperature, no sun, and the tariff as an unpublished guess."""
    return Outlook(issued, np.full(FORECAST_HOURS, air_temp_c), np.zeros(SOLAR_LEADS), tariff_eur_mwh,
                   np.zeros(PRICE_SLOTS))
