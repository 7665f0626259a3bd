"""Registering a greenhouse and its zones: what ``greentwin greenhouse add`` and ``POST /api/greenhouses`` do.

Plain functions returning values (never printing), so the command line and the API each word the
outcome their own way, and tests call them directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import IntegrityError

from app.access_seal import commit_sealed
from app.core.config import get_settings
from app.core.db import migrated_session
from app.models import SOIL_TYPES, Greenhouse, Zone
from twin.config import DEFAULT_ZONES
from wire.topics import validate_gh_id

if TYPE_CHECKING:
    from app.access_seal import SealChange


@dataclass(frozen=True)
class SoilDefaults:
    """Per-soil zone defaults: irrigate between ``target_low`` and field capacity, never toward saturation."""

    target_low_vwc: float
    target_high_vwc: float
    saturation_vwc: float


# Mirrors twin.config.SOIL_TYPES (field capacity as the upper target, low target halfway down to
# the wilting point, FAO-56's 50 % depletion), without importing the numerical twin.
SOIL_DEFAULTS: dict[str, SoilDefaults] = {
    "sand": SoilDefaults(target_low_vwc=0.085, target_high_vwc=0.12, saturation_vwc=0.38),
    "loam": SoilDefaults(target_low_vwc=0.195, target_high_vwc=0.27, saturation_vwc=0.45),
    "clay": SoilDefaults(target_low_vwc=0.29, target_high_vwc=0.36, saturation_vwc=0.50),
}
DEFAULT_DAILY_WATER_CAP_L = 250.0  # safety/default_limits.toml zone_daily_water_cap_l


class GreenhouseExists(ValueError):
    """A registration for an id that is already registered."""


def add_greenhouse(
    url: str | None,
    gh_id: str,
    zones: int = DEFAULT_ZONES,
    soil: str = "loam",
    name: str | None = None,
    daily_water_cap_l: float = DEFAULT_DAILY_WATER_CAP_L,
    seal: SealChange | None = None,
) -> Greenhouse:
    """Register a greenhouse with ``zones`` identical zones; refuses an out-of-date schema or a taken id.

    ``url`` None is ``GREENTWIN_DATABASE_URL`` (the settings default). Given ``seal``
    (:mod:`app.access_seal`), the registration commits together with its record
    (:func:`registration_payload`) in the access chain, or not at all."""
    validate_gh_id(gh_id)
    if soil not in SOIL_TYPES:
        raise ValueError(f"soil must be one of {', '.join(SOIL_TYPES)}, got {soil!r}")
    if not 1 <= zones <= 64:
        raise ValueError(f"zones must be in 1..64, got {zones}")
    if not daily_water_cap_l > 0:
        raise ValueError(f"daily_water_cap_l must be > 0, got {daily_water_cap_l}")
    d = SOIL_DEFAULTS[soil]
    with migrated_session(url if url is not None else get_settings().database_url) as session:
        gh = Greenhouse(id=gh_id, name=name or gh_id, zones=zones, lamps_ours=True, settings_version=1)
        gh.zone_rows = [
            Zone(
                index=i,
                soil_type=soil,
                target_low_vwc=d.target_low_vwc,
                target_high_vwc=d.target_high_vwc,
                saturation_vwc=d.saturation_vwc,
                daily_water_cap_l=daily_water_cap_l,
            )
            for i in range(zones)
        ]
        session.add(gh)
        try:
            session.flush()
        except IntegrityError as exc:
            raise GreenhouseExists(f"greenhouse {gh_id!r} already exists") from exc
        commit_sealed(session, seal, registration_payload(gh, soil, daily_water_cap_l))
        return gh


def registration_payload(gh: Greenhouse, soil: str, daily_water_cap_l: float) -> dict[str, Any]:
    """What the access chain records of a registration (the same from the CLI and the API): with the
    settings it starts with, spelled as :func:`control.setup.setup_record` spells them (not imported:
    the command line stays light), so ``audit verify`` can hold the rows to them."""
    zones = [{"index": z.index, "name": z.name, "soil": z.soil_type, "target_low_vwc": z.target_low_vwc,
              "target_high_vwc": z.target_high_vwc, "daily_water_cap_l": z.daily_water_cap_l}
             for z in sorted(gh.zone_rows, key=lambda z: z.index)]
    settings = {"version": gh.settings_version, "name": gh.name, "lamps_ours": gh.lamps_ours,
                "lamp_hours_per_day": gh.lamp_hours_per_day, "zones": zones}
    return {"greenhouse_id": gh.id, "name": gh.name, "zones": gh.zones, "soil": soil,
            "daily_water_cap_l": daily_water_cap_l, "settings": settings}
