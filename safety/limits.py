"""Hard safety limits for one greenhouse, loaded once from a reviewed TOML file.

Limits are configuration, not policy output: they are validated strictly at load time
(unknown keys, NaN/inf, inconsistent values all fail loudly) so that the clipper, which
must never fail, can trust them.
"""

from __future__ import annotations

import functools
import os
import tomllib
from pathlib import Path
from typing import Annotated, Final, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from safety.action import DEFAULT_ZONES
from twin.config import MIN_DARK_HOURS, hours_between

PUMP_MIN_RUNNING_PCT: Final = 20.0
"""Slowest a running pump turns [% of full speed]: the clipper's default ``pump_min_pct`` and the
floor of the pump interlock (:mod:`safety.interlock`), so training and evaluation see the speed
the plant will run, not one the clipper would change."""

SINGLE_VALVE_PUMP_CAP: Final = 85.0
"""Pump % allowed with exactly one valve open: one valve at full speed leaves ~91 % of shut-off
head (relief at 90 %), so the cap keeps a margin for pump wear and valve lag. The clipper's default
``pump_single_valve_max_pct`` and the policy's interlock hold the same number."""

DEFAULT_LIMITS_PATH = Path(__file__).with_name("default_limits.toml")

NonNegative = Annotated[float, Field(ge=0.0)]
Vwc = Annotated[float, Field(gt=0.0, le=1.0)]


class SafetyLimits(BaseModel):
    """Every hard limit the clipper enforces; units are in each field's description."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    zones: int = Field(DEFAULT_ZONES, ge=1, le=256, description="irrigation zones [count]")
    pump_min_pct: float = Field(PUMP_MIN_RUNNING_PCT, ge=0.0, le=100.0,
                                description="lowest running pump speed [%]")
    pump_max_pct: float = Field(100.0, gt=0.0, le=100.0, description="highest pump speed [%]")
    pump_single_valve_max_pct: float = Field(
        SINGLE_VALVE_PUMP_CAP, gt=0.0, le=100.0,
        description="highest pump speed with exactly one valve open [%] (the relief valve's setting)")
    max_open_valves: int = Field(4, ge=0, description="valves the pump can feed at once [count]")
    zone_daily_water_cap_l: NonNegative | tuple[NonNegative, ...] = Field(
        250.0, description="water per zone per calendar day [L]; a scalar applies to every zone"
    )
    saturation_vwc: Vwc | tuple[Vwc, ...] = Field(
        0.45, description="substrate saturation [m3/m3]; a scalar applies to every zone"
    )
    saturation_margin_vwc: float = Field(
        0.03, ge=0.0, le=1.0, description="no irrigation within this of saturation [m3/m3]"
    )
    min_valve_on_s: float = Field(120.0, ge=0.0, description="shortest time a valve stays open [s]")
    min_valve_off_s: float = Field(120.0, ge=0.0, description="shortest time a valve stays closed [s]")
    pump_ramp_pct_per_s: float = Field(5.0, gt=0.0, description="largest pump speed change rate [%/s]")
    lights_daily_hours_cap: float = Field(16.0, ge=0.0, le=24.0, description="lit hours per day [h]")
    strong_sun_par_umol: float = Field(
        1000.0, gt=0.0, description="natural PAR above which lights are off [umol/m2/s]"
    )
    dark_start_h: float = Field(23.0, ge=0.0, lt=24.0,
                                description="local hour the crop's dark period starts [h]")
    dark_end_h: float = Field(5.0, ge=0.0, lt=24.0, description="local hour the dark period ends [h]")

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        dark = hours_between(self.dark_start_h, self.dark_end_h)
        if dark < MIN_DARK_HOURS:
            raise ValueError(f"dark period {self.dark_start_h:g}-{self.dark_end_h:g} h lasts {dark:g} h; "
                             f"tomato needs at least {MIN_DARK_HOURS:g} h")
        if self.pump_min_pct > self.pump_max_pct:
            raise ValueError(f"pump_min_pct {self.pump_min_pct} exceeds pump_max_pct {self.pump_max_pct}")
        if self.pump_min_pct > self.pump_single_valve_max_pct:
            raise ValueError(f"pump_min_pct {self.pump_min_pct} exceeds pump_single_valve_max_pct "
                             f"{self.pump_single_valve_max_pct}: one open valve could never run the pump")
        for name in ("zone_daily_water_cap_l", "saturation_vwc"):
            value = getattr(self, name)
            if isinstance(value, tuple) and len(value) != self.zones:
                raise ValueError(f"{name} has {len(value)} entries for {self.zones} zones")
        return self

    def water_cap_per_zone(self) -> np.ndarray:
        """Daily water cap of each zone [L], scalars broadcast; read-only."""
        return self._per_zone(self.zone_daily_water_cap_l)

    def saturation_per_zone(self) -> np.ndarray:
        """Saturation of each zone [m3/m3], scalars broadcast; read-only."""
        return self._per_zone(self.saturation_vwc)

    def _per_zone(self, value: float | tuple[float, ...]) -> np.ndarray:
        arr = np.broadcast_to(np.asarray(value, dtype=np.float64), (self.zones,)).copy()
        arr.setflags(write=False)
        return arr

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> SafetyLimits:
        """Load and validate limits; raises on a missing, malformed or inconsistent file.

        Failing at start-up is deliberate: running with a half-understood limit file is
        worse than not running.
        """
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
        return cls.model_validate(data)

    @classmethod
    def default(cls) -> SafetyLimits:
        """The shipped ``default_limits.toml``, read once and shared (the model is frozen)."""
        return _load_default()


@functools.cache
def _load_default() -> SafetyLimits:
    return SafetyLimits.from_toml(DEFAULT_LIMITS_PATH)
