"""How far the forecasts were from what then happened, kept in memory per greenhouse.

Each forecast is kept for its 24 hours. Every time the worker looks at a greenhouse (on the
greenhouse's own clock) each kept forecast that covers that moment is compared with what the service
then knew: the zones' moisture estimate against the moisture the forecast predicted for that moment,
and the water metered since the forecast was issued against the water it planned. The errors are
summed by how far ahead the forecast looked, so the page can say how much to trust the next one.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from app.forecast.summary import Forecast

LEAD_BUCKETS_H = ((0.0, 1.0), (1.0, 6.0), (6.0, 12.0), (12.0, 24.0))
KEEP_FORECASTS = 96
KEEP_SAMPLES = 4000


@dataclass
class _Kept:
    forecast: Forecast
    water_at_issue_l: float
    """The greenhouse's metered water total when the forecast was issued."""


@dataclass
class _Greenhouse:
    forecasts: deque[_Kept] = field(default_factory=lambda: deque(maxlen=KEEP_FORECASTS))
    samples: deque[tuple[float, float, float]] = field(default_factory=lambda: deque(maxlen=KEEP_SAMPLES))
    """(lead h, mean absolute moisture error, mean signed error actual - predicted) [m3/m3]."""
    water_total_l: float = 0.0
    water_today_l: float | None = None
    water: dict[str, Any] | None = None
    """The latest water comparison: the oldest forecast still running, predicted vs metered."""


class ForecastTracker:
    """Forecast errors per greenhouse (thread-safe: the worker writes, the API reads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ghs: dict[str, _Greenhouse] = {}

    def _gh(self, gh: str) -> _Greenhouse:
        return self._ghs.setdefault(gh, _Greenhouse())

    def meter(self, gh: str, water_today_l: float) -> float:
        """Book the greenhouse's water today [L] (it starts again at local midnight); its running total."""
        with self._lock:
            g = self._gh(gh)
            last = g.water_today_l
            g.water_total_l += water_today_l if last is None or water_today_l < last else water_today_l - last
            if last is None:
                g.water_total_l = 0.0  # the first look starts the count
            g.water_today_l = water_today_l
            return g.water_total_l

    def add(self, forecast: Forecast) -> None:
        """A new forecast to hold to account."""
        with self._lock:
            g = self._gh(forecast.greenhouse_id)
            g.forecasts.append(_Kept(forecast, g.water_total_l))

    def observe(self, gh: str, when: datetime, moisture: np.ndarray) -> None:
        """What the greenhouse knows at ``when`` (its clock): compared with every forecast covering it."""
        with self._lock:
            g = self._gh(gh)
            actual = np.asarray(moisture, dtype=float)
            for kept in list(g.forecasts):
                f = kept.forecast
                lead = (when - f.issued).total_seconds() / 3600.0
                if lead > f.hours:
                    g.forecasts.remove(kept)
                    continue
                predicted = f.moisture_at(when)
                if lead <= 0.0 or predicted is None or predicted.shape != actual.shape:
                    continue
                ok = np.isfinite(actual)
                if ok.any():
                    diff = actual[ok] - predicted[ok]
                    g.samples.append((lead, float(np.abs(diff).mean()), float(diff.mean())))
            oldest = next((k for k in g.forecasts if (when - k.forecast.issued).total_seconds() > 0), None)
            if oldest is not None:
                planned = oldest.forecast.water_until(when)
                g.water = {"issued": oldest.forecast.issued.astimezone(UTC), "until": when.astimezone(UTC),
                           "predicted_l": None if planned is None else round(planned, 1),
                           "metered_l": round(g.water_total_l - oldest.water_at_issue_l, 1)}

    def summary(self, gh: str) -> dict[str, Any]:
        """Mean absolute moisture error overall and by lead [% VWC], its bias, and the water comparison."""
        with self._lock:
            g = self._ghs.get(gh)
            samples = np.array(g.samples) if g is not None and g.samples else np.zeros((0, 3))
            water = None if g is None else g.water
        pct = 100.0

        def mae(rows: np.ndarray) -> float | None:
            return round(float(rows[:, 1].mean()) * pct, 2) if rows.size else None

        by_lead = [{"from_h": lo, "to_h": hi, "samples": int(rows.shape[0]), "mae_pct_vwc": mae(rows)}
                   for lo, hi in LEAD_BUCKETS_H
                   for rows in [samples[(samples[:, 0] > lo) & (samples[:, 0] <= hi)]
                                if samples.size else samples]]
        return {"samples": int(samples.shape[0]), "mae_pct_vwc": mae(samples),
                "bias_pct_vwc": round(float(samples[:, 2].mean()) * pct, 2) if samples.size else None,
                "by_lead": by_lead, "water": water}
