"""A greenhouse's operator settings: read them (any user), change them (agronomist or admin).

``PATCH /api/greenhouses/{gh}/settings`` takes only the fields to change and a required ``reason``.
Each value is checked against the safety limits (:mod:`app.settings_check`; a refusal is a 422 that
names the field, and nothing changes), written with the next settings version and sealed in the
``_access`` chain with the caller and the reason in one transaction (503 without an audit trail, as
registrations), then staged on the greenhouse's controller here: the next decision uses it and its
record says so. Other replicas take it within ``GREENTWIN_SETTINGS_POLL_S``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.access_seal import AccessSealer, ChangeNotSealed
from app.api.deps import RuntimeDep, get_current_user, require_role
from app.auth.service import Principal
from app.greenhouse_settings import (
    SETTINGS_KIND,
    SettingsEdit,
    UnknownGreenhouse,
    change_settings,
    read_setups,
)
from app.settings_check import SettingsRefused
from audit.labels import zone_label
from control.setup import GreenhouseSetup, effective_limits, per_zone
from wire.fields import NAME_MAX_LEN, Name, Reason, check_db_text

router = APIRouter(prefix="/api/greenhouses", tags=["settings"], dependencies=[Depends(get_current_user)])
SettingsEditor = Annotated[Principal, Depends(require_role("agronomist", "admin"))]
ZoneName = Annotated[str, Field(max_length=NAME_MAX_LEN, description="display name; empty: 'Zone N' again"),
                     AfterValidator(check_db_text)]


class _Patch(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class ZonePatch(_Patch):
    index: Annotated[int, Field(ge=0, le=63, description="the zone's index (0 is 'Zone 1')")]
    name: ZoneName | None = None
    soil: Literal["sand", "loam", "clay"] | None = Field(None, description=(
        "soil class; without a band in the same request the zone takes the soil's default band"))
    target_low_vwc: float | None = Field(None, description="dry end of the moisture band [m3/m3]")
    target_high_vwc: float | None = Field(None, description=(
        "wet end of the band [m3/m3]; at most the zone's saturation less the safety margin"))
    daily_water_cap_l: float | None = Field(None, description=(
        "water per day [L]; at most the safety limits' cap"))


class SettingsPatch(_Patch):
    reason: Reason
    name: Name | None = None
    lamps_ours: bool | None = Field(None, description="whether greentwin commands the lamps (else lamps "
                                                      "stay off in its commands: the site's climate "
                                                      "computer runs them)")
    lamp_hours_per_day: float | None = Field(None, description=(
        "daily lamp budget [h]; at most the safety limits' cap"))
    zones: list[ZonePatch] = Field(default_factory=list, max_length=64)


class ZoneSettings(BaseModel):
    index: int
    label: str = Field(description="the zone's name, else 'Zone N' counted from 1")
    name: str | None
    soil: str
    target_low_vwc: float
    target_high_vwc: float
    daily_water_cap_l: float
    band_high_max_vwc: float = Field(description="the wettest band end the safety limits allow here")
    water_cap_max_l: float = Field(description="the safety limits' daily cap: the most a setting may be")
    water_cap_in_force_l: float = Field(description="what the clipper enforces: the lower of setting "
                                                    "and limit")


class GreenhouseSettings(BaseModel):
    id: str
    name: str
    version: int
    lamps_ours: bool
    lamp_hours_per_day: float | None = Field(description="null: the safety limits' cap")
    lamp_hours_max: float = Field(description="the safety limits' cap on lamp hours a day")
    lamp_hours_in_force: float
    zones: list[ZoneSettings]
    changed: dict[str, list[Any]] = Field(default_factory=dict,
                                          description="what this request changed: [before, after]")


def _public(runtime: RuntimeDep, gh: str, setup: GreenhouseSetup,
            changed: dict[str, list[Any]] | None = None) -> GreenhouseSettings:
    site = runtime.limits
    force = effective_limits(site, setup)
    sat = force.saturation_per_zone()
    zones = [ZoneSettings(index=i, label=z.name or zone_label(i), name=z.name, soil=z.soil_type,
                          target_low_vwc=z.target_low, target_high_vwc=z.target_high,
                          daily_water_cap_l=z.daily_water_cap_l,
                          band_high_max_vwc=round(min(float(sat[i]), z.saturation)
                                                  - site.saturation_margin_vwc, 6),
                          water_cap_max_l=float(cap), water_cap_in_force_l=float(now))
             for i, (z, cap, now) in enumerate(zip(setup.zones,
                                                   per_zone(site.zone_daily_water_cap_l, len(setup.zones)),
                                                   force.water_cap_per_zone(), strict=True))]
    return GreenhouseSettings(id=gh, name=setup.name, version=setup.version, lamps_ours=setup.lamps_ours,
                              lamp_hours_per_day=setup.lamp_hours_per_day,
                              lamp_hours_max=site.lights_daily_hours_cap,
                              lamp_hours_in_force=force.lights_daily_hours_cap, zones=zones,
                              changed=changed or {})


def _read(runtime: RuntimeDep, gh: str) -> GreenhouseSetup:
    with runtime.sessions() as s:
        setup = read_setups(s, gh).get(gh)
    if setup is None:
        raise HTTPException(status_code=404, detail=f"unknown greenhouse {gh!r}")
    return setup


@router.get("/{gh}/settings")
def get_settings(gh: str, runtime: RuntimeDep) -> GreenhouseSettings:
    """The greenhouse's settings as stored, with the limits each may reach and what is in force."""
    return _public(runtime, gh, _read(runtime, gh))


@router.patch("/{gh}/settings")
def patch_settings(gh: str, body: SettingsPatch, runtime: RuntimeDep,
                   user: SettingsEditor) -> GreenhouseSettings:
    """Change settings (only the fields given), sealed with the caller and the reason; the next decision
    uses them."""
    if runtime.audit is None:  # refused before anything changes: a settings change must be sealed
        raise HTTPException(status_code=503,
                            detail="no audit trail configured: settings changes must be sealed")
    role = "agronomist" if "agronomist" in user.roles else "admin"
    actor = f"{role}:{user.username}"
    edit = SettingsEdit(body.reason, _given(body, ("name", "lamps_ours", "lamp_hours_per_day")),
                        {z.index: _given(z, ("name", "soil", "target_low_vwc", "target_high_vwc",
                                             "daily_water_cap_l"))
                         for z in body.zones})
    if len(edit.zones) != len(body.zones):
        raise HTTPException(status_code=422, detail="zones: each zone index at most once")
    seal = AccessSealer(runtime.audit.store, actor).sealing(SETTINGS_KIND)
    try:
        setup, change = change_settings(runtime.sessions, gh, edit, runtime.limits, actor, seal)
    except UnknownGreenhouse:
        raise HTTPException(status_code=404, detail=f"unknown greenhouse {gh!r}") from None
    except SettingsRefused as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    except ChangeNotSealed as exc:
        raise HTTPException(status_code=503, detail=str(exc)) from exc
    except RuntimeError as exc:  # another edit won the race for this version
        raise HTTPException(status_code=409, detail=str(exc)) from exc
    if change is not None:
        runtime.settings_watch.install(gh, setup, change)
    return _public(runtime, gh, setup, None if change is None else change.changed)


def _given(model: BaseModel, fields: tuple[str, ...]) -> dict[str, Any]:
    """The fields the request named with a value (null and absent both mean: leave as it is)."""
    return {f: getattr(model, f) for f in fields
            if f in model.model_fields_set and getattr(model, f) is not None}
