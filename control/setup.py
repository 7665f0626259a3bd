"""A greenhouse's operator settings as one value, and the limits a controller clips with under them.

Settings may only tighten the safety limits: a zone's daily water cap and the greenhouse's lamp
budget are each the lower of the setting and the limit, so no edit can loosen what the clipper
enforces (the API refuses a looser value besides, :mod:`app.settings_check`). No I/O here: the
controller takes a new :class:`GreenhouseSetup` between two decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from control.records import ZoneSetup
from safety import SafetyLimits


@dataclass(frozen=True)
class GreenhouseSetup:
    """What an operator may change about a greenhouse, at one settings version."""

    name: str
    zones: tuple[ZoneSetup, ...]
    lamps_ours: bool = True
    """Whether greentwin commands the lamps; else the site's climate computer runs them."""
    lamp_hours_per_day: float | None = None
    """The greenhouse's own lamp budget [h]; None: the safety limits' cap."""
    version: int = 1


@dataclass(frozen=True)
class SetupChange:
    """Who changed the settings, why, and what (``{field: [before, after]}``): the first decision on
    the new version carries it."""

    version: int
    actor: str
    reason: str
    changed: dict[str, list[Any]]

    def record(self) -> dict[str, Any]:
        return {"version": self.version, "actor": self.actor, "reason": self.reason, "changed": self.changed}


def per_zone(value: float | tuple[float, ...], zones: int) -> np.ndarray:
    """A limit per zone for ``zones`` zones; a per-zone list of another length counts as its strictest
    entry everywhere (a limits file written for other zones must not loosen any of these)."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        return np.full(zones, float(arr))
    if arr.shape == (zones,):
        return arr.copy()
    return np.full(zones, float(arr.min()))


def effective_limits(site: SafetyLimits, setup: GreenhouseSetup) -> SafetyLimits:
    """``site`` for this greenhouse: its zone count, and each cap the lower of the limit and the setting."""
    z = len(setup.zones)
    caps = np.minimum(per_zone(site.zone_daily_water_cap_l, z),
                      [zone.daily_water_cap_l for zone in setup.zones])
    hours = site.lights_daily_hours_cap
    if setup.lamp_hours_per_day is not None:
        hours = min(hours, setup.lamp_hours_per_day)
    saturation = site.saturation_vwc
    if isinstance(saturation, tuple) and len(saturation) != z:
        saturation = float(min(saturation))
    return SafetyLimits.model_validate({**site.model_dump(), "zones": z, "saturation_vwc": saturation,
                                        "zone_daily_water_cap_l": tuple(float(c) for c in caps),
                                        "lights_daily_hours_cap": float(hours)})


def setup_record(setup: GreenhouseSetup) -> dict[str, Any]:
    """The settings as the audit trail and the API state them (JSON)."""
    return {"version": setup.version, "name": setup.name, "lamps_ours": setup.lamps_ours,
            "lamp_hours_per_day": setup.lamp_hours_per_day,
            "zones": [{"index": i, "name": z.name, "soil": z.soil_type, "target_low_vwc": z.target_low,
                       "target_high_vwc": z.target_high, "daily_water_cap_l": z.daily_water_cap_l}
                      for i, z in enumerate(setup.zones)]}
