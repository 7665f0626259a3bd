"""Turn one greenhouse's telemetry and estimate into the policy's observation vector.

The layout is the twin's (:class:`twin.spec.ObservationSpec`), filled from what the edge box
reports instead of from simulated state: moisture from the Kalman estimate, climate from the
readings (a missing reading holds its last value and is reported as held), irrigation from the
flow meter, the weather forecast and the day-ahead prices from the site's :class:`Outlook`
(:mod:`app.outlook.feed`), the crop's age, its pools and today's light from the greenhouse's crop twin.

Without an outlook (a controller driven alone) the forecast is flat and the price slots hold the
configured time-of-use tariff marked unpublished, never a made-up zero that would make every lamp
hour look free. Clock features read ``ts`` in the site's local time, as the twin's hours are local.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from control.crop_twin import initial_pools
from control.outlook import Outlook, unknown_outlook
from twin.climate import PAR_PER_W_M2, crop_coefficient
from twin.config import CropConfig, PriceConfig
from twin.crop import CropGrowthConfig, CropState, observed_crop
from twin.prices import tou_at
from twin.spec import CROP_STATE, FORECAST_HOURS, ObservationSpec

CLIMATE_FIELDS = (("air_temp", "air_temp_c"), ("air_rh", "air_rh_pct"), ("par", "par_umol_m2_s"),
                  ("co2", "co2_ppm"), ("leaf_temp", "leaf_temp_c"))
_DEFAULTS = {"air_temp": 20.0, "air_rh": 70.0, "par": 0.0, "co2": 420.0, "leaf_temp": 20.0}


@dataclass
class ObservationBuilder:
    """Per-greenhouse observation state: held readings and the 24 h irrigation memory."""

    zones: int
    target_low: np.ndarray
    target_high: np.ndarray
    crop_day0: float = 60.0
    """Crop age [days] when the service first saw this greenhouse (growth stage feature)."""
    crop: CropConfig = field(default_factory=CropConfig)
    growth: CropGrowthConfig = field(default_factory=CropGrowthConfig)
    """The crop model's parameters (LAI from leaf mass; the initial pools without a crop twin)."""
    zone_area_m2: float = 50.0
    rated_current_a: float = 4.0
    transmissivity: float = 0.65
    """Share of outside solar the cover lets through (the natural light forecasts)."""
    fruit_price_eur_kg: float = 1.0
    tariff: PriceConfig = field(default_factory=PriceConfig)
    """The grower's adder on the spot price, and the time-of-use tariff used without an outlook."""
    lamps_ours: bool = True
    """Whether greentwin controls this greenhouse's lamps (else its climate computer does)."""
    held: dict[str, float] = field(default_factory=lambda: dict(_DEFAULTS))
    irrigation_24h_mm: np.ndarray = field(init=False)
    first_ts: datetime | None = None

    def __post_init__(self) -> None:
        self.spec = ObservationSpec(self.zones)
        self.irrigation_24h_mm = np.zeros(self.zones)

    def add_irrigation(self, zone_water_l: np.ndarray, dt_s: float) -> None:
        """Exponentially weighted 24 h memory of applied water (same definition as the twin)."""
        self.irrigation_24h_mm = (self.irrigation_24h_mm * math.exp(-dt_s / 86400.0)
                                  + zone_water_l / self.zone_area_m2)

    def build(self, *, ts: datetime, moisture: np.ndarray, readings: dict[str, float | None],
              valve_open: np.ndarray, pump_pct: float, light_pct: float, pump_current_a: float,
              outlook: Outlook | None = None, valve_failed: np.ndarray | None = None, dli_today: float = 0.0,
              lamp_hours_today: float = 0.0, crop_day: float | None = None,
              crop_pools: CropState | None = None) -> tuple[np.ndarray, list[str]]:
        """Observation (D,) float32 and the names of readings that were held from earlier.

        ``ts`` in the site's local time; ``crop_day`` is the crop twin's age of the crop (else the
        builder counts days since it first saw the greenhouse); ``crop_pools`` are the crop twin's
        pools after this step's growth (else the initial pools for the crop's age)."""
        held_names: list[str] = []
        for name, key in CLIMATE_FIELDS:
            value = readings.get(key)
            if value is None or not math.isfinite(value):
                held_names.append(key)
            else:
                self.held[name] = float(value)
        if self.first_ts is None:
            self.first_ts = ts
        if crop_day is None:
            crop_day = self.crop_day0 + (ts - self.first_ts).total_seconds() / 86400.0
        if outlook is None:
            outlook = unknown_outlook(ts, self.held["air_temp"],
                                      tou_at(self.tariff, [ts + timedelta(hours=k) for k in range(24)]))
        _, stage = crop_coefficient(np, self.crop, np.asarray([crop_day]))
        hour = ts.hour + ts.minute / 60.0 + ts.second / 3600.0
        phase = 2.0 * math.pi * hour / 24.0
        sl = self.spec.slices
        obs = np.zeros(self.spec.dim, dtype=np.float64)
        obs[sl["moisture"]] = moisture
        obs[sl["target_low"]] = self.target_low
        obs[sl["target_high"]] = self.target_high
        obs[sl["irrigation_24h"]] = self.irrigation_24h_mm
        obs[sl["valve_open"]] = valve_open
        obs[sl["valve_failed"]] = 0.0 if valve_failed is None else valve_failed
        for name, _ in CLIMATE_FIELDS:
            obs[sl[name]] = self.held[name]
        solar = np.nan_to_num(outlook.forecast_solar_w_m2)
        obs[sl["forecast_temp"]] = outlook.forecast_temp_c
        obs[sl["forecast_solar"]] = solar[:FORECAST_HOURS]
        obs[sl["hour_sin"]] = math.sin(phase)
        obs[sl["hour_cos"]] = math.cos(phase)
        obs[sl["growth_stage"]] = float(stage[0])
        if crop_pools is None:  # no crop twin: planted at this age, its 24-h mean the held leaf temperature
            crop_pools = initial_pools(self.crop, self.growth, crop_day, self.held["leaf_temp"])
        for name, value in zip(CROP_STATE, observed_crop(np, self.growth, crop_pools), strict=True):
            obs[sl[name]] = float(value[0])
        obs[sl["pump"]] = pump_pct
        obs[sl["lights"]] = light_pct
        obs[sl["pump_current"]] = pump_current_a / self.rated_current_a
        obs[sl["dli_today"]] = dli_today
        obs[sl["lamp_hours_today"]] = lamp_hours_today
        left = 23 - ts.hour  # whole clock hours left today after the current one (leads +1..+left)
        mol = self.transmissivity * PAR_PER_W_M2 * 3600.0 * 1e-6
        obs[sl["dli_natural_rest_today"]] = solar[:left].sum() * mol
        obs[sl["dli_natural_tomorrow"]] = solar[left:left + 24].sum() * mol
        obs[sl["price"]] = outlook.price_eur_mwh + self.tariff.adder_eur_mwh
        obs[sl["price_published"]] = outlook.price_published
        obs[sl["fruit_price"]] = self.fruit_price_eur_kg
        obs[sl["lamps_ours"]] = 1.0 if self.lamps_ours else 0.0
        obs = np.nan_to_num(obs, nan=0.0)
        return np.clip(obs, self.spec.low, self.spec.high).astype(np.float32), held_names
