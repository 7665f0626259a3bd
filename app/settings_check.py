"""Operator settings checked against the safety limits before anything is written.

A band must lie inside what the clipper lets a zone reach (above 0, below the zone's saturation less
the limits' margin, where irrigation stops), low below high; a zone's daily water cap and the lamp
budget may not exceed the limits' caps. Each refusal names the field (``zones[1].target_high_vwc``)
and the limit it hit. A value an edit leaves as it was is not held to the caps again: the clipper
takes the lower of setting and limit anyway (:func:`control.setup.effective_limits`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from app.services.greenhouses import SOIL_DEFAULTS
from audit.labels import zone_label
from control.records import ZoneSetup
from control.setup import GreenhouseSetup, per_zone
from safety import SafetyLimits

GREENHOUSE_FIELDS = ("name", "lamps_ours", "lamp_hours_per_day")
ZONE_FIELDS = ("name", "soil", "target_low_vwc", "target_high_vwc", "daily_water_cap_l")
_ZONE_ATTR = {"name": "name", "soil": "soil_type", "target_low_vwc": "target_low",
              "target_high_vwc": "target_high", "daily_water_cap_l": "daily_water_cap_l"}


class SettingsRefused(ValueError):
    """A setting the safety limits (or plain sense) do not allow; ``field`` names it as the request did."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


def edited(before: GreenhouseSetup, greenhouse: dict[str, Any], zones: dict[int, dict[str, Any]]
           ) -> tuple[GreenhouseSetup, dict[str, list[Any]]]:
    """``before`` with the given fields replaced, and what differs (``{field: [before, after]}``).

    A zone whose soil changes without a band in the same edit takes the new soil's default band (a
    loam band on sand would keep the zone "dry" for ever); its saturation is always the soil's."""
    changed: dict[str, list[Any]] = {}
    for key, value in greenhouse.items():
        if key not in GREENHOUSE_FIELDS:
            raise SettingsRefused(key, "not a greenhouse setting")
        if getattr(before, key) != value:
            changed[key] = [getattr(before, key), value]
    out = list(before.zones)
    for index, fields in sorted(zones.items()):
        if not 0 <= index < len(out):
            raise SettingsRefused(f"zones[{index}]",
                                  f"no such zone: {before.name} has zones 0-{len(out) - 1}")
        zone = out[index]
        new = {_ZONE_ATTR[k]: (None if k == "name" and v == "" else v)
               for k, v in fields.items() if k in _ZONE_ATTR}
        soil = new.get("soil_type", zone.soil_type)
        if soil != zone.soil_type:
            if soil not in SOIL_DEFAULTS:
                raise SettingsRefused(f"zones[{index}].soil",
                                      f"unknown soil {soil!r}: one of {', '.join(SOIL_DEFAULTS)}")
            d = SOIL_DEFAULTS[soil]
            new["saturation"] = d.saturation_vwc
            if "target_low" not in new and "target_high" not in new:
                new.update(target_low=d.target_low_vwc, target_high=d.target_high_vwc)
        out[index] = replace(zone, **new)
        for key, attr in _ZONE_ATTR.items():
            if getattr(zone, attr) != getattr(out[index], attr):
                changed[f"zones[{index}].{key}"] = [getattr(zone, attr), getattr(out[index], attr)]
    after = GreenhouseSetup(greenhouse.get("name", before.name), tuple(out),
                            greenhouse.get("lamps_ours", before.lamps_ours),
                            greenhouse.get("lamp_hours_per_day", before.lamp_hours_per_day), before.version)
    return after, changed


def check_setup(after: GreenhouseSetup, site: SafetyLimits, before: GreenhouseSetup | None = None) -> None:
    """Raise :class:`SettingsRefused` for the first setting of ``after`` the limits do not allow."""
    if not after.name.strip():
        raise SettingsRefused("name", "a greenhouse needs a name")
    z = len(after.zones)
    caps = per_zone(site.zone_daily_water_cap_l, z)
    sats = per_zone(site.saturation_vwc, z)
    for i, zone in enumerate(after.zones):
        old = before.zones[i] if before is not None and i < len(before.zones) else None
        _check_zone(i, zone, old, float(caps[i]), min(float(sats[i]), zone.saturation),
                    site.saturation_margin_vwc)
    hours = after.lamp_hours_per_day
    if hours is not None and (before is None or hours != before.lamp_hours_per_day):
        if not math.isfinite(hours) or not 0.0 <= hours <= site.lights_daily_hours_cap:
            raise SettingsRefused("lamp_hours_per_day",
                                  f"{hours:g} h is outside 0-{site.lights_daily_hours_cap:g} h, "
                                  "the lamp hours a day the safety limits allow")


def _check_zone(i: int, zone: ZoneSetup, old: ZoneSetup | None, cap_max: float, saturation: float,
                margin: float) -> None:
    where = f"zones[{i}]"
    label = zone_label(i)
    for key, value in (("target_low_vwc", zone.target_low), ("target_high_vwc", zone.target_high),
                       ("daily_water_cap_l", zone.daily_water_cap_l)):
        if not math.isfinite(value):
            raise SettingsRefused(f"{where}.{key}", f"{label}: must be a finite number")
    if zone.soil_type not in SOIL_DEFAULTS:
        raise SettingsRefused(f"{where}.soil",
                              f"unknown soil {zone.soil_type!r}: one of {', '.join(SOIL_DEFAULTS)}")
    band = (zone.target_low, zone.target_high, zone.saturation)
    if old is None or band != (old.target_low, old.target_high, old.saturation):
        if not zone.target_low > 0.0:
            raise SettingsRefused(f"{where}.target_low_vwc",
                                  f"{label}: {zone.target_low:g} m3/m3 must be above 0")
        if not zone.target_low < zone.target_high:
            raise SettingsRefused(f"{where}.target_low_vwc", f"{label}: {zone.target_low:g} m3/m3 must be "
                                  f"below target_high_vwc {zone.target_high:g}")
        wettest = saturation - margin
        if zone.target_high > wettest:
            raise SettingsRefused(f"{where}.target_high_vwc", (
                f"{label}: {zone.target_high:g} m3/m3 is above {wettest:.3g}, the wettest the safety limits "
                f"let a zone be irrigated to (saturation {saturation:g} less the {margin:g} margin)"))
    if old is None or zone.daily_water_cap_l != old.daily_water_cap_l:
        if not zone.daily_water_cap_l > 0.0:
            raise SettingsRefused(f"{where}.daily_water_cap_l", f"{label}: must be above 0 L")
        if zone.daily_water_cap_l > cap_max:
            raise SettingsRefused(f"{where}.daily_water_cap_l", (
                f"{label}: {zone.daily_water_cap_l:g} L is above the hard maximum of {cap_max:g} L a day "
                "(the safety limits)"))
