"""The dashboard's live view of a greenhouse, read from the runtime's memory (no database, no I/O).

Built on the event loop between decisions, so it sees each controller between two decisions,
never half of one. ``commanded`` is the last decision's action after the safety clip;
``confirmed`` is what the edge box reported in its latest telemetry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np

from app.api.edge_status import EdgeStatus
from app.api.schemas import (
    ActuatorsLive,
    ClimateLive,
    CropLive,
    EconomicsToday,
    GreenhouseLive,
    GreenhouseSummary,
    Outlook,
    OutlookLive,
    ZoneLive,
)
from app.runtime import Runtime
from audit.labels import band_label, zone_label
from control import GreenhouseController
from control.setup import per_zone

EdgeLookup = Callable[[str], EdgeStatus]


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def summary(runtime: Runtime, gh: str, edge: EdgeLookup, *, in_band_pct: float | None, unacked: int,
            now: datetime | None = None, economics: EconomicsToday | None = None) -> GreenhouseSummary:
    """One overview row."""
    return GreenhouseSummary(**_summary_fields(runtime, gh, edge, in_band_pct, unacked,
                                               now or datetime.now(UTC)),
                             economics=economics)


def _summary_fields(runtime: Runtime, gh: str, edge: EdgeLookup, in_band_pct: float | None, unacked: int,
                    now: datetime) -> dict[str, Any]:
    ctl = runtime.controllers[gh]
    tel = runtime.last_telemetry.get(gh)
    status = edge(gh)
    return {"id": gh, "name": ctl.setup.name or gh, "mode": ctl.mode, "estop_latched": ctl.estop_latched,
            "edge": status.state, "edge_since": status.since,
            "last_telemetry_at": tel.ts if tel is not None else None,
            "telemetry_age_s": max(0.0, (now - tel.ts).total_seconds()) if tel is not None else None,
            "water_today_l": float(ctl.water_today_l.sum()),
            "water_cap_l": float(caps_in_force(ctl).sum()),
            "time_in_band_pct": in_band_pct, "alarms_unacknowledged": unacked,
            "policy_version": ctl.proposer.policy_version}


def caps_in_force(ctl: GreenhouseController) -> np.ndarray:
    """Each zone's daily water cap as the clipper enforces it: the lower of the setting and the limit."""
    return np.minimum([z.daily_water_cap_l for z in ctl.zones],
                      per_zone(ctl.limits.zone_daily_water_cap_l, ctl.z))


def _zone(ctl: GreenhouseController, i: int, tel: Any, estimate: dict[str, Any] | None,
          commanded: dict[str, Any] | None) -> ZoneLive:
    setup = ctl.zones[i]
    theta = _finite(estimate["theta"][i]) if estimate else None
    std = _finite(estimate["std"][i]) if estimate else None
    status = list(estimate["probe_status"][i]) if estimate else []
    return ZoneLive(
        index=i, label=setup.name or zone_label(i), soil=setup.soil_type, moisture_vwc=theta,
        moisture_std=std, band_low_vwc=setup.target_low, band_high_vwc=setup.target_high,
        band_label=band_label(setup.target_low, setup.target_high),
        in_band=None if theta is None else setup.target_low <= theta <= setup.target_high,
        probes_vwc=list(tel.soil_vwc[i]) if tel is not None else [], probe_status=status,
        valve_commanded=int(commanded["valves"][i]) if commanded else None,
        valve_confirmed=int(tel.valve_open[i]) if tel is not None else None,
        valve_failed=bool(ctl.valve_failed[i] >= 0.5), water_today_l=float(ctl.water_today_l[i]),
        water_cap_l=float(caps_in_force(ctl)[i]))


def live(runtime: Runtime, gh: str, edge: EdgeLookup, *, in_band_pct: float | None, unacked: int,
         now: datetime | None = None, economics: EconomicsToday | None = None,
         decision_outlook: Outlook | None = None) -> GreenhouseLive:
    """The greenhouse page's live state."""
    now = now or datetime.now(UTC)
    ctl = runtime.controllers[gh]
    tel = runtime.last_telemetry.get(gh)
    last = runtime.last_decision.get(gh)
    estimate = last.get("estimate") if last else None
    commanded = last.get("clipped") if last else None
    manual = None
    if ctl.mode == "manual":
        manual = [float(v) for v in ctl.manual_action.tolist()]
    return GreenhouseLive(
        **_summary_fields(runtime, gh, edge, in_band_pct, unacked, now), economics=economics,
        decision_outlook=decision_outlook, server_time=now,
        confidence=_finite(last["confidence"]) if last else None,
        last_decision_seq=int(last["seq"]) if last else None,
        last_decision_at=datetime.fromisoformat(last["ts"]) if last else None,
        manual_action=manual,
        zones=[_zone(ctl, i, tel, estimate, commanded) for i in range(ctl.z)],
        climate=ClimateLive(
            air_temp_c=tel.air_temp_c if tel else None, air_rh_pct=tel.air_rh_pct if tel else None,
            par_umol_m2_s=tel.par_umol_m2_s if tel else None, co2_ppm=tel.co2_ppm if tel else None,
            leaf_temp_c=tel.leaf_temp_c if tel else None),
        actuators=ActuatorsLive(
            pump_commanded_pct=_finite(commanded["pump_pct"]) if commanded else None,
            pump_confirmed_pct=tel.pump_pct if tel else None, flow_l_min=tel.flow_l_min if tel else None,
            pump_current_a=tel.pump_current_a if tel else None,
            light_commanded_pct=_finite(commanded["light_pct"]) if commanded else None,
            light_confirmed_pct=tel.light_pct if tel else None,
            lights_hours_today=float(ctl.lights_hours_today)),
        crop=CropLive(**ctl.crop_estimates()), outlook=_outlook(runtime, ctl))


def _outlook(runtime: Runtime, ctl: GreenhouseController) -> OutlookLive:
    """The site outlook as this greenhouse's next decision will see it (its adder on the prices)."""
    out = runtime.outlook.current
    v = out.view()
    return OutlookLive(issued=out.issued, weather_source=out.weather_source, weather_age_s=out.weather_age_s,
                       price_source=out.price_source, price_age_s=out.price_age_s, alarms=list(out.alarms),
                       forecast_temp_c=v["forecast_temp_c"], forecast_solar_w_m2=v["forecast_solar_w_m2"],
                       price_eur_mwh=[round(p + ctl.obs_builder.tariff.adder_eur_mwh, 2)
                                      for p in v["price_eur_mwh"]],
                       price_published=v["price_published"])


def change_key(runtime: Runtime, gh: str) -> tuple[Any, ...]:
    """Cheap fingerprint of what the live view shows: the stream sends only when it changes."""
    ctl = runtime.controllers[gh]
    tel = runtime.last_telemetry.get(gh)
    last = runtime.last_decision.get(gh)
    return (ctl.seq, ctl.mode, ctl.estop_latched, tel.seq if tel is not None else None,
            tel.boot_id if tel is not None else None, last["seq"] if last else None)
