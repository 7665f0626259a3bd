"""What a forecast starts from: one greenhouse as its controller knows it now, and the choices to try.

:func:`scene_of` copies the few numbers a forecast needs out of a controller (moisture estimate, crop,
today's totals, settings) and the site's outlook, on the event loop between two decisions; the copy is
a plain frozen value, so the forecast can run in another process while the controller goes on
deciding. A :class:`Variant` is one way to run the next 24 hours: as set, with the lamps as the site's
rule would run them, or with a band or lamp budget the operator is about to set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal

import numpy as np

from app.retraining.window import hour_of_year
from control.controller import GreenhouseController
from control.outlook import Outlook
from control.setup import GreenhouseSetup, effective_limits
from safety import SafetyLimits

LampChoice = Literal["policy", "rule"]
"""Who runs the lamps in a variant: the served policy, or the site's price-blind schedule."""


@dataclass(frozen=True)
class Variant:
    """One way to run the next 24 h; None fields keep the greenhouse's own setting."""

    name: str
    lamps: LampChoice | None = None
    bands: tuple[tuple[float, float] | None, ...] = ()
    """Per zone a (low, high) band [m3/m3] to try, None: the zone's own."""
    lamp_hours_per_day: float | None = None

    def band_of(self, zone: int, own: tuple[float, float]) -> tuple[float, float]:
        band = self.bands[zone] if zone < len(self.bands) else None
        return own if band is None else band


@dataclass(frozen=True)
class Scene:
    """A greenhouse at the moment its forecast starts (numbers only: it crosses a process boundary)."""

    greenhouse_id: str
    start: datetime
    """The greenhouse's own clock (its last telemetry), aware."""
    local_hour_of_year: float
    """Site-local hours since 1 January 00:00 at ``start`` (the twin's hours are local)."""
    setup: GreenhouseSetup
    site_limits: SafetyLimits
    """The safety limits file's (each variant clips with them under its own settings)."""
    moisture: tuple[float, ...]
    crop_day: float
    crop_pools: dict[str, float] | None
    dli_today: float
    lamp_hours_today: float
    water_today_l: tuple[float, ...]
    irrigation_24h_mm: tuple[float, ...]
    air_temp_c: float
    air_rh_pct: float
    co2_ppm: float
    outlook: Outlook
    fruit_price_eur_kg: float
    water_price_eur_m3: float
    price_adder_eur_mwh: float
    transmissivity: float
    threshold: float
    """The vote's disagreement threshold (above it the served expert decides, as in the service)."""
    policy_version: str
    variants: tuple[Variant, ...] = field(default=())

    @property
    def zones(self) -> int:
        return len(self.setup.zones)

    def with_variants(self, *variants: Variant) -> Scene:
        return replace(self, variants=tuple(variants))

    def setup_of(self, variant: Variant) -> GreenhouseSetup:
        """The settings a variant runs under: the greenhouse's, with what it tries in their place."""
        zones = tuple(replace(z, target_low=lo, target_high=hi) for z, (lo, hi) in
                      ((z, variant.band_of(i, (z.target_low, z.target_high)))
                       for i, z in enumerate(self.setup.zones)))
        lamps = self.setup.lamps_ours if variant.lamps is None else variant.lamps == "policy"
        hours = self.setup.lamp_hours_per_day if variant.lamp_hours_per_day is None \
            else variant.lamp_hours_per_day
        return replace(self.setup, zones=zones, lamps_ours=lamps, lamp_hours_per_day=hours)

    def limits_of(self, variant: Variant) -> SafetyLimits:
        """What the clipper enforces under the variant's settings (:func:`effective_limits`)."""
        return effective_limits(self.site_limits, self.setup_of(variant))


def default_variants(setup: GreenhouseSetup) -> tuple[Variant, Variant]:
    """The forecast as set, and beside it the lamps the other way: as the site's rule would run them
    (or, where the site's rule runs them now, as the policy would)."""
    other: LampChoice = "rule" if setup.lamps_ours else "policy"
    return Variant("forecast"), Variant(f"lamps_{other}", lamps=other)


def _finite(value: float | None, default: float) -> float:
    return float(value) if value is not None and math.isfinite(value) else default


def scene_of(ctl: GreenhouseController, outlook: Outlook, site_limits: SafetyLimits, *,
             water_price_eur_m3: float) -> Scene | None:
    """The controller's greenhouse now, with the default variants; None before its first telemetry.
    Call it where decisions are made (the event loop) so no decision is half way through."""
    if ctl.last_ts is None:
        return None
    held = ctl.obs_builder.held
    pools = ctl.crop_twin.state
    return Scene(
        greenhouse_id=ctl.gh, start=ctl.last_ts, local_hour_of_year=hour_of_year(ctl.last_ts, ctl.site_tz),
        setup=ctl.setup, site_limits=site_limits,
        moisture=tuple(float(v) for v in np.asarray(ctl.estimator.state["theta"], dtype=float)),
        crop_day=float(ctl.crop_twin.day),
        crop_pools=None if pools is None else {k: float(v[0]) for k, v in pools._asdict().items()},
        dli_today=float(ctl.crop_twin.dli_today), lamp_hours_today=float(ctl.lights_hours_today),
        water_today_l=tuple(float(v) for v in ctl.water_today_l),
        irrigation_24h_mm=tuple(float(v) for v in ctl.obs_builder.irrigation_24h_mm),
        air_temp_c=_finite(held.get("air_temp"), 20.0), air_rh_pct=_finite(held.get("air_rh"), 70.0),
        co2_ppm=_finite(held.get("co2"), 420.0),
        outlook=outlook.at(ctl.last_ts.astimezone(UTC).replace(minute=0, second=0, microsecond=0)),
        fruit_price_eur_kg=float(ctl.obs_builder.fruit_price_eur_kg),
        water_price_eur_m3=float(water_price_eur_m3),
        price_adder_eur_mwh=float(ctl.obs_builder.tariff.adder_eur_mwh),
        transmissivity=float(ctl.obs_builder.transmissivity), threshold=float(ctl.threshold),
        policy_version=str(ctl.proposer.policy_version), variants=default_variants(ctl.setup))
