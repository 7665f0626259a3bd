"""What a forecast says, per variant: hourly moisture against the band, irrigation and lamp hours, and
the day's water, energy, money and fruit; :class:`Forecast` is what the API and the page read.

Money is the twin's own accounting (:func:`twin.reward.reward_terms`: energy at each hour's all-in
price, water at the site's water price, fruit at the fruit price the policy sees), per square metre
there and for the whole greenhouse here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from app.forecast import drive
from app.forecast.scene import Scene

_MONEY = ("energy_cost_eur_m2", "water_cost_eur_m2", "revenue_eur_m2", "fruit_kg_m2")


@dataclass
class Tally:
    """Per-step sums of a batch of variants [B, ...]."""

    moisture: np.ndarray
    """(B, Z, T + 1) the zones' moisture at the start and after every step [m3/m3]."""
    water_l: np.ndarray
    """(B, Z, T) water applied per step [L]."""
    lamp_h: np.ndarray
    """(B, T) lamp hours per step (dimmed lamps count their share)."""
    energy_kwh: np.ndarray
    money: dict[str, np.ndarray]
    """(B, T) per key of :data:`_MONEY`, per m2."""

    @classmethod
    def zeros(cls, n: int, zones: int, steps: int) -> Tally:
        return cls(np.zeros((n, zones, steps + 1)), np.zeros((n, zones, steps)), np.zeros((n, steps)),
                   np.zeros((n, steps)), {k: np.zeros((n, steps)) for k in _MONEY})

    def add(self, t: int, theta: np.ndarray, info: dict[str, Any], lamp_h: np.ndarray) -> None:
        self.moisture[:, :, t + 1] = theta
        self.water_l[:, :, t] = np.asarray(info["water_l"])
        self.lamp_h[:, t] = lamp_h
        self.energy_kwh[:, t] = np.asarray(info["energy_kwh"])
        for key in _MONEY:
            self.money[key][:, t] = np.asarray(info[key])


@dataclass(frozen=True)
class VariantForecast:
    """One variant's next 24 hours."""

    name: str
    lamps: str
    """``policy`` or ``rule``: who runs the lamps in this variant."""
    bands: list[list[float]]
    """Per zone [low, high] m3/m3."""
    lamp_hours_cap: float
    moisture_vwc: list[list[float]]
    """Per zone, at the start and at the end of every hour [m3/m3]."""
    irrigation_l: list[list[float]]
    """Per zone, per hour [L]."""
    lamp_hours: list[float]
    """Per hour."""
    totals: dict[str, Any]


@dataclass(frozen=True)
class Forecast:
    """A batch of variants run forward from one scene."""

    greenhouse_id: str
    issued: datetime
    """The greenhouse's clock at the start (its last telemetry)."""
    policy_version: str
    hours: int
    times: list[datetime]
    """The start and the end of every hour."""
    variants: list[VariantForecast]
    compute_s: float = 0.0
    pid: int = 0
    """The process that computed it (never the one that decides)."""

    def variant(self, name: str) -> VariantForecast:
        return next(v for v in self.variants if v.name == name)

    def moisture_at(self, when: datetime, variant: int = 0) -> np.ndarray | None:
        """The first variant's predicted moisture per zone at ``when`` (linear between hours); None
        outside the forecast."""
        h = (when - self.issued).total_seconds() / 3600.0
        if not 0.0 <= h <= self.hours:
            return None
        m = np.asarray(self.variants[variant].moisture_vwc)
        return np.array([np.interp(h, np.arange(m.shape[1]), row) for row in m])

    def water_until(self, when: datetime, variant: int = 0) -> float | None:
        """Water the first variant applies from the start to ``when`` [L]; None outside the forecast."""
        h = (when - self.issued).total_seconds() / 3600.0
        if not 0.0 <= h <= self.hours:
            return None
        per_hour = np.asarray(self.variants[variant].irrigation_l).sum(axis=0)
        whole = int(h)
        part = per_hour[whole] * (h - whole) if whole < per_hour.size else 0.0
        return float(per_hour[:whole].sum() + part)


def _hourly(a: np.ndarray, per_hour: int) -> np.ndarray:
    """Sum (..., T) into (..., T / per_hour)."""
    return a.reshape(*a.shape[:-1], -1, per_hour).sum(axis=-1)


def summarise(scene: Scene, tally: Tally, area_m2: float) -> Forecast:
    """Hourly series and the day's totals of every variant."""
    per_hour = round(3600.0 / drive.DT_S)
    hours = tally.lamp_h.shape[1] // per_hour
    out = []
    for i, variant in enumerate(scene.variants):
        setup = scene.setup_of(variant)
        low = np.array([zone.target_low for zone in setup.zones])
        high = np.array([zone.target_high for zone in setup.zones])
        steps = tally.moisture[i, :, 1:]
        step_h = drive.DT_S / 3600.0
        dry = ((steps < low[:, None]).sum(axis=1) * step_h)
        wet = ((steps > high[:, None]).sum(axis=1) * step_h)
        money = {k: float(v[i].sum() * area_m2) for k, v in tally.money.items()}
        water = tally.water_l[i].sum(axis=1)
        totals = {"water_l": round(float(water.sum()), 1),
                  "water_l_per_zone": [round(float(w), 1) for w in water],
                  "lamp_hours": round(float(tally.lamp_h[i].sum()), 2),
                  "energy_kwh": round(float(tally.energy_kwh[i].sum()), 2),
                  "energy_cost_eur": round(money["energy_cost_eur_m2"], 2),
                  "water_cost_eur": round(money["water_cost_eur_m2"], 2),
                  "fruit_kg": round(money["fruit_kg_m2"], 3),
                  "revenue_eur": round(money["revenue_eur_m2"], 2),
                  "profit_eur": round(money["revenue_eur_m2"] - money["energy_cost_eur_m2"]
                                      - money["water_cost_eur_m2"], 2),
                  "hours_dry": [round(float(h), 2) for h in dry],
                  "hours_wet": [round(float(h), 2) for h in wet]}
        out.append(VariantForecast(
            name=variant.name, lamps="policy" if setup.lamps_ours else "rule",
            bands=[[round(float(lo), 4), round(float(hi), 4)] for lo, hi in zip(low, high, strict=True)],
            lamp_hours_cap=float(scene.limits_of(variant).lights_daily_hours_cap),
            moisture_vwc=np.round(tally.moisture[i, :, ::per_hour], 4).tolist(),
            irrigation_l=np.round(_hourly(tally.water_l[i], per_hour), 2).tolist(),
            lamp_hours=np.round(_hourly(tally.lamp_h[i], per_hour), 3).tolist(), totals=totals))
    times = [scene.start + timedelta(hours=k) for k in range(hours + 1)]
    return Forecast(scene.greenhouse_id, scene.start, scene.policy_version, hours, times, out)
