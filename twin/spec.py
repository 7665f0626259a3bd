"""The observation and action layouts, declared once.

Every consumer (policy networks, checkpoints, the runtime's observation builder, the
explanations) reads indices from here, never from literals. Adding a feature means adding
a :class:`Feature` and bumping :data:`OBS_VERSION`; a checkpoint records the layout it was
trained on and loading compares them, so a shifted index can never pass silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

import numpy as np

OBS_VERSION = "5"
"""5: the crop's state after ``growth_stage`` (LAI, fruit load, carbohydrate buffer, temperature sum,
24-h canopy temperature), so a critic can value a lamp hour by the crop it feeds;
4: a 24-h weather outlook with lead-growing error, the light so far today and forecast for the rest
of today and tomorrow, 24 hourly electricity prices with their publication mask, the fruit price and
whether greentwin controls the lamps; 3: adds ``valve_failed``; 2: moisture is the per-zone Kalman
estimate (twin.kalman), as the service observes it; 1 was the probe mean."""
FORECAST_HOURS = 24
CROP_STATE = ("lai", "fruit_load", "carb_buffer", "temp_sum", "t_can24")
"""The crop-state features, adjacent in this order (:func:`twin.crop.observed_crop` fills them)."""
PRICE_SLOTS = 24
"""Hourly price slots in the observation: clock hours +0..+23, the current hour first."""


@dataclass(frozen=True)
class Feature:
    """One named block of the observation vector."""

    name: str
    unit: str
    low: float
    high: float
    per: str = ""
    """'' for a scalar, 'zone' for one value per zone, 'hour' for one per forecast hour (+1..+24 h),
    'slot' for one per price slot (+0..+23 h)."""
    doc: str = ""


FEATURES: tuple[Feature, ...] = (
    Feature("moisture", "m3/m3", 0.0, 0.6, "zone",
            "root-zone volumetric water content, Kalman estimate from the probes"),
    Feature("target_low", "m3/m3", 0.0, 0.6, "zone", "lower edge of the zone's target band (refill point)"),
    Feature("target_high", "m3/m3", 0.0, 0.6, "zone", "upper edge of the zone's target band"),
    Feature("irrigation_24h", "mm", 0.0, 200.0, "zone", "water applied, exponentially weighted over 24 h"),
    Feature("valve_open", "1", 0.0, 1.0, "zone", "valve position feedback (0 closed, 1 open)"),
    Feature("valve_failed", "1", 0.0, 1.0, "zone",
            "1 once a valve told to open stayed closed, until it is seen open again"),
    Feature("air_temp", "degC", -10.0, 50.0, "", "inside air temperature"),
    Feature("air_rh", "%", 0.0, 100.0, "", "inside relative humidity"),
    Feature("par", "umol/m2/s", 0.0, 2500.0, "", "photosynthetically active radiation at canopy"),
    Feature("co2", "ppm", 150.0, 2000.0, "", "inside CO2 concentration"),
    Feature("leaf_temp", "degC", -10.0, 55.0, "", "canopy leaf temperature"),
    Feature("forecast_temp", "degC", -30.0, 50.0, "hour", "outside temperature forecast, hours +1..+24"),
    Feature("forecast_solar", "W/m2", 0.0, 1200.0, "hour",
            "outside global radiation forecast, hours +1..+24"),
    Feature("hour_sin", "1", -1.0, 1.0, "", "sin(2 pi hour/24)"),
    Feature("hour_cos", "1", -1.0, 1.0, "", "cos(2 pi hour/24)"),
    Feature("growth_stage", "1", 0.0, 1.0, "", "fraction of the crop season elapsed"),
    Feature("lai", "m2/m2", 0.0, 5.0, "",
            "leaf area index, leaf area per floor area: how much of a lamp's light the canopy catches; "
            "pruned at CropGrowthConfig.lai_max (3 by default)"),
    Feature("fruit_load", "g CH2O/m2", 0.0, 400.0, "",
            "fruit on the plants, the sink that turns assimilates into yield; harvested above "
            "CropGrowthConfig.c_fruit_max (300 g by default)"),
    Feature("carb_buffer", "g CH2O/m2", 0.0, 60.0, "",
            "assimilates not yet allocated to organs; inflow fades above c_buf_max (20 g), so a season of "
            "full light adds at most about 20 g more"),
    Feature("temp_sum", "degC d", -1000.0, 8000.0, "",
            "temperature sum since first fruit set: -20 x 40 d at planting, "
            "about 7,000 for a year-round crop"),
    Feature("t_can24", "degC", -10.0, 55.0, "",
            "24-h mean canopy temperature, which drives the organs' growth"),
    Feature("pump", "%", 0.0, 100.0, "", "pump speed"),
    Feature("lights", "%", 0.0, 100.0, "", "supplemental lights"),
    Feature("pump_current", "1", 0.0, 2.0, "", "pump current as a fraction of its rating"),
    Feature("dli_today", "mol/m2", 0.0, 100.0, "",
            "PAR at the canopy since local midnight, natural plus lamps"),
    Feature("lamp_hours_today", "h", 0.0, 24.0, "",
            "lamp-on hours since local midnight (dimmed count fractionally)"),
    Feature("dli_natural_rest_today", "mol/m2", 0.0, 100.0, "",
            "forecast natural PAR at the canopy over the clock hours left today after the current one"),
    Feature("dli_natural_tomorrow", "mol/m2", 0.0, 100.0, "", "forecast natural PAR at the canopy tomorrow"),
    Feature("price", "EUR/MWh", -1000.0, 6000.0, "slot",
            "all-in electricity price (spot plus adder) for clock hours +0..+23"),
    Feature("price_published", "1", 0.0, 1.0, "slot",
            "1 when that hour's day-ahead price is published; "
            "else the slot holds the same hour a day earlier"),
    Feature("fruit_price", "EUR/kg", 0.0, 10.0, "", "the scenario's price of fresh fruit"),
    Feature("lamps_ours", "1", 0.0, 1.0, "",
            "1 when greentwin controls the lamps, 0 on the site's fixed schedule"),
)


@dataclass(frozen=True)
class ObservationSpec:
    """The observation layout for a given zone count."""

    zones: int

    def _count(self, f: Feature) -> int:
        return {"": 1, "zone": self.zones, "hour": FORECAST_HOURS, "slot": PRICE_SLOTS}[f.per]

    @cached_property
    def slices(self) -> dict[str, slice]:
        out: dict[str, slice] = {}
        i = 0
        for f in FEATURES:
            n = self._count(f)
            out[f.name] = slice(i, i + n)
            i += n
        return out

    @property
    def dim(self) -> int:
        return sum(self._count(f) for f in FEATURES)

    @cached_property
    def names(self) -> tuple[str, ...]:
        """One name per observation index, e.g. 'moisture[3]', 'forecast_temp[+2h]' or 'price[+0h]'."""
        out: list[str] = []
        for f in FEATURES:
            if f.per == "zone":
                out += [f"{f.name}[{z}]" for z in range(self.zones)]
            elif f.per == "hour":
                out += [f"{f.name}[+{h + 1}h]" for h in range(FORECAST_HOURS)]
            elif f.per == "slot":
                out += [f"{f.name}[+{h}h]" for h in range(PRICE_SLOTS)]
            else:
                out.append(f.name)
        return tuple(out)

    @cached_property
    def units(self) -> tuple[str, ...]:
        return tuple(f.unit for f in FEATURES for _ in range(self._count(f)))

    @cached_property
    def low(self) -> np.ndarray:
        return np.array([f.low for f in FEATURES for _ in range(self._count(f))], dtype=np.float32)

    @cached_property
    def high(self) -> np.ndarray:
        return np.array([f.high for f in FEATURES for _ in range(self._count(f))], dtype=np.float32)

    def to_dict(self) -> dict[str, Any]:
        """What a checkpoint stores to prove which layout it was trained on."""
        return {"version": OBS_VERSION, "zones": self.zones, "names": list(self.names),
                "units": list(self.units), "low": self.low.tolist(), "high": self.high.tolist()}

    def check_compatible(self, stored: dict[str, Any]) -> None:
        """Raise ValueError naming the first difference between a stored layout and this one."""
        mine = self.to_dict()
        if stored.get("version") != OBS_VERSION:
            raise ValueError(f"observation layout mismatch in 'version': checkpoint has layout version "
                             f"{stored.get('version')!r}, twin has layout version {OBS_VERSION!r}; "
                             f"a policy must be trained on the layout it observes")
        for key in ("zones", "names", "units"):
            if stored.get(key) != mine[key]:
                if key == "names" and isinstance(stored.get(key), list):
                    for i, (a, b) in enumerate(zip(stored[key], mine[key], strict=False)):
                        if a != b:
                            raise ValueError(f"observation layout differs at index {i}: "
                                             f"checkpoint has {a!r}, "
                                             f"twin has {b!r} (twin obs version {OBS_VERSION})")
                raise ValueError(f"observation layout mismatch in {key!r}: "
                                 f"checkpoint has {stored.get(key)!r}, "
                                 f"twin has {mine[key]!r}")



@cache
def observation_spec(zones: int) -> ObservationSpec:
    """The layout for ``zones`` zones, built once: controllers and interlocks read its slices on
    every call, and a fresh spec would rebuild them each time."""
    return ObservationSpec(zones)

@dataclass(frozen=True)
class ActionSpec:
    """Action layout: one valve command per zone in {0, 1}, then pump % and lights %."""

    zones: int

    @property
    def dim(self) -> int:
        return self.zones + 2

    @property
    def pump_index(self) -> int:
        return self.zones

    @property
    def lights_index(self) -> int:
        return self.zones + 1

    @cached_property
    def low(self) -> np.ndarray:
        return np.zeros(self.dim, dtype=np.float32)

    @cached_property
    def high(self) -> np.ndarray:
        return np.array([1.0] * self.zones + [100.0, 100.0], dtype=np.float32)

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple([f"valve[{z}]" for z in range(self.zones)] + ["pump_pct", "light_pct"])

    def to_dict(self) -> dict[str, Any]:
        return {"zones": self.zones, "names": list(self.names), "low": self.low.tolist(),
                "high": self.high.tolist(), "valve_threshold": 0.5}
