"""The twin's view ahead: the latest forecast of a greenhouse, its tracked error, and what-ifs.

``GET /api/greenhouses/{gh}/forecast`` reads what the forecast worker last computed (never computes
on the request). ``POST /api/greenhouses/{gh}/forecast/what-if`` runs the forecast beside a choice the
operator is about to make (the lamps as the site's rule would run them or as the policy would, a
zone's band, a lamp budget), checked against the safety limits as a settings change is: a refused
value is a 422 naming the field, and nothing is applied.
"""

from __future__ import annotations

import threading
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import RuntimeDep, get_current_user
from app.api.instants import Instant
from app.forecast.scene import Variant
from app.forecast.summary import Forecast
from app.forecast.worker import ForecastWorker
from app.settings_check import SettingsRefused, check_setup, edited

router = APIRouter(prefix="/api/greenhouses", tags=["forecast"], dependencies=[Depends(get_current_user)])
_one_at_a_time = threading.Semaphore(1)


class VariantPublic(BaseModel):
    name: str
    lamps: Literal["policy", "rule"] = Field(description="who runs the lamps: the policy or the "
                                                         "site's schedule")
    bands: list[list[float]] = Field(description="per zone [low, high] moisture band [m3/m3]")
    lamp_hours_cap: float
    moisture_vwc: list[list[float]] = Field(description="per zone, at the start and the end of "
                                                        "every hour [m3/m3]")
    irrigation_l: list[list[float]] = Field(description="per zone, water per hour [L]")
    lamp_hours: list[float] = Field(description="lamp hours in each hour")
    totals: dict[str, Any] = Field(description="the 24 h: water, lamp hours, energy, costs, fruit, "
                                               "hours dry/wet")


class ForecastPublic(BaseModel):
    greenhouse_id: str
    issued: Instant = Field(description="the greenhouse's clock at the start (its last telemetry)")
    policy_version: str
    hours: int
    times: list[Instant]
    variants: list[VariantPublic]
    compute_s: float


class ForecastState(BaseModel):
    greenhouse_id: str
    state: Literal["ok", "waiting", "off"]
    why: str = ""
    every_s: float
    forecast: ForecastPublic | None
    tracking: dict[str, Any] = Field(description="how far earlier forecasts were from what then happened")


class ZoneBand(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    index: Annotated[int, Field(ge=0, le=63, description="the zone's index (0 is 'Zone 1')")]
    target_low_vwc: float
    target_high_vwc: float


class WhatIf(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    lamps: Literal["policy", "rule"] | None = Field(None, description="policy: greentwin runs the lamps; "
                                                                      "rule: the site's schedule does")
    lamp_hours_per_day: float | None = Field(None, description="lamp budget to try [h]")
    zones: list[ZoneBand] = Field(default_factory=list, max_length=64)


def _public(f: Forecast) -> ForecastPublic:
    return ForecastPublic(greenhouse_id=f.greenhouse_id, issued=f.issued, policy_version=f.policy_version,
                          hours=f.hours, times=f.times, compute_s=f.compute_s,
                          variants=[VariantPublic(**v.__dict__) for v in f.variants])


def _worker(request: Request, runtime: RuntimeDep, gh: str) -> ForecastWorker:
    worker: ForecastWorker | None = getattr(request.app.state, "forecast", None)
    if worker is None:
        raise HTTPException(status_code=503, detail="service is starting")
    if gh not in runtime.controllers:
        raise HTTPException(status_code=404, detail=f"unknown greenhouse {gh!r}")
    return worker


@router.get("/{gh}/forecast")
def get_forecast(gh: str, request: Request, runtime: RuntimeDep) -> ForecastState:
    """The latest 24 h forecast (the greenhouse as set, and beside it the lamps the other way) and its
    tracked error."""
    worker = _worker(request, runtime, gh)
    latest = worker.latest.get(gh)
    status = worker.status.get(gh)
    if not worker.enabled:
        state, why = "off", "forecasts are switched off (GREENTWIN_FORECAST_EVERY_S=0)"
    elif status is None:
        state, why = "waiting", "the first forecast round has not run yet"
    else:
        state, why = status.state, status.why  # type: ignore[assignment]
    return ForecastState(greenhouse_id=gh, state=state, why=why, every_s=worker.every_s,  # type: ignore[arg-type]
                         forecast=None if latest is None else _public(latest),
                         tracking=worker.tracker.summary(gh))


@router.post("/{gh}/forecast/what-if")
def what_if(gh: str, body: WhatIf, request: Request, runtime: RuntimeDep) -> ForecastPublic:
    """The forecast as set beside the greenhouse with ``body`` tried; nothing is applied."""
    worker = _worker(request, runtime, gh)
    if not worker.enabled:
        raise HTTPException(status_code=503,
                            detail="forecasts are switched off (GREENTWIN_FORECAST_EVERY_S=0)")
    if body.lamps is None and body.lamp_hours_per_day is None and not body.zones:
        raise HTTPException(status_code=422, detail="nothing to try: give lamps, lamp_hours_per_day or zones")
    zones = {z.index: {"target_low_vwc": z.target_low_vwc, "target_high_vwc": z.target_high_vwc}
             for z in body.zones}
    if len(zones) != len(body.zones):
        raise HTTPException(status_code=422, detail="zones: each zone index at most once")
    before = runtime.controllers[gh].setup
    given = {} if body.lamp_hours_per_day is None else {"lamp_hours_per_day": body.lamp_hours_per_day}
    try:
        after, _ = edited(before, given, zones)
        check_setup(after, runtime.limits, before)
    except SettingsRefused as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    bands = tuple((z.target_low, z.target_high) if i in zones else None for i, z in enumerate(after.zones))
    variant = Variant("what_if", lamps=body.lamps, bands=bands, lamp_hours_per_day=body.lamp_hours_per_day)
    if not _one_at_a_time.acquire(blocking=False):
        raise HTTPException(status_code=429, detail="another what-if is running; try again in a few seconds",
                            headers={"Retry-After": "5"})
    try:
        return _public(worker.what_if(gh, variant))
    except LookupError as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from None
    except ValueError as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from None
    finally:
        _one_at_a_time.release()
