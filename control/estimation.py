"""Stages 1-3 of a decision: accounting, estimation and the policy's observation.

:func:`begin` books the water and light since the last message (from the measured flow, not the
command) and checks the valve feedback; :func:`estimate` computes every greenhouse's crop water
demand and runs one Kalman update over all their zones; :func:`grow_crops` steps all their crop
twins in one call of the crop model; :func:`observe` latches an e-stop the
telemetry reports and builds the observation the policy sees.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC
from typing import TYPE_CHECKING, Any

import numpy as np

from control.crop_twin import grow_many
from control.state import ControllerState
from control.step import Pending, Step
from twin.climate import PAR_PER_W_M2, crop_coefficient, reference_et0, saturation_vapour_kpa
from twin.config import SOIL_INDEX, SOIL_TYPES, CropConfig
from twin.estimator import PROBE_STATUS, ZoneSoilModel, update_many
from twin.hydraulics import valve_failure_latch
from wire.topics import Telemetry

NO_FLOW_L_MIN = 0.05
"""A flow reading below this (L/min) with the pump running is no flow: a path is shut or stuck."""

if TYPE_CHECKING:
    from control.records import ZoneSetup


def soil_models(zones: list[ZoneSetup], dt_s: float, crop: CropConfig) -> list[ZoneSoilModel]:
    """Estimator process models for registered zones, from the soil class table."""
    out = []
    for z in zones:
        soil = SOIL_TYPES[SOIL_INDEX[z.soil_type]]
        fc, wp = soil.field_capacity, soil.wilting_point
        out.append(ZoneSoilModel(field_capacity=fc, wilting_point=wp,
                                 saturation=min(soil.saturation, z.saturation),
                                 drain_frac=1.0 - soil.hourly_retention ** (dt_s / 3600.0),
                                 inv_stress_span=1.0 / ((1.0 - crop.depletion_fraction) * (fc - wp)),
                                 root_mm=z.root_mm, dt_s=dt_s))
    return out


# ---- 1. accounting ------------------------------------------------------------------------------


def begin(item: Pending, state: ControllerState) -> tuple[ControllerState, Step]:
    """Time step, day roll-over, water and light accounting: everything before the estimate. The
    controller's ``state`` in, the state with this step booked out (the caller keeps it)."""
    setup, memory, tel = item.setup, item.memory, item.tel
    alarms: list[str] = []
    ts = tel.ts
    dt_s = (setup.step_s if state.last_ts is None
            else min(max((ts - state.last_ts).total_seconds(), 1.0), 3600.0))
    state, zone_water, without_flow = account(state.rolled(setup.site_day(ts)), tel, dt_s, alarms)
    state = state.booked(zone_water, tel.light_pct / 100.0 * dt_s / 3600.0)
    memory.crop_twin.account(ts.astimezone(setup.site_tz), dt_s, tel.par_umol_m2_s)
    memory.obs_builder.add_irrigation(zone_water, dt_s)
    return state, Step(item, dt_s, alarms, zone_water, memory.crop_twin.day, without_flow=without_flow)


def account(state: ControllerState, tel: Telemetry, dt_s: float,
            alarms: list[str]) -> tuple[ControllerState, np.ndarray, np.ndarray]:
    """Water per zone from the measured flow (not the command), with feedback checks; the state with
    the valve evidence and the failed-valve latch moved on; and the valves the box held open while its
    pump ran and nothing flowed: a dead-head under way, seen at once when they all read closed, or once
    the pump and they have been held long enough when the feedback only echoes the command (a broken
    meter looks the same: the pump rests a step either way, nothing is latched)."""
    z = state.zones
    valve_fb = np.asarray(tel.valve_open, dtype=np.float64)
    litres = tel.flow_l_min * dt_s / 60.0
    n_open = valve_fb.sum()
    prev_valves = state.prev_action[:z] >= 0.5
    if litres > 0.5 and n_open == 0:
        alarms.append("flow_without_open_valve")
    if prev_valves.any() and state.prev_action[z] > 0 and n_open > 0 and tel.flow_l_min < NO_FLOW_L_MIN:
        alarms.append("valve_open_no_flow")
    seen_open = valve_fb >= 0.5
    evidence, held_open, judged, pump_judged = state.valve_evidence.observe(tel.cmd_seq, tel.ts, z)
    mismatch = np.flatnonzero(judged & (held_open != seen_open))
    if mismatch.size:
        alarms.append("valve_feedback_mismatch:" + ",".join(str(i) for i in mismatch))
    state = replace(state, valve_evidence=evidence,
                    valve_failed=valve_failure_latch(np, state.valve_failed, judged & held_open, seen_open))
    failed = np.flatnonzero(state.valve_failed >= 0.5)
    if failed.size:
        alarms.append("valve_failed:" + ",".join(str(i) for i in failed))
    no_flow = tel.pump_pct > 0.0 and tel.flow_l_min < NO_FLOW_L_MIN and bool(held_open.any())
    seen_shut = not (held_open & seen_open).any()
    ran_dry = pump_judged and bool(judged[held_open].all())
    without_flow = held_open if no_flow and (seen_shut or ran_dry) else np.zeros(z, dtype=bool)
    return state, valve_fb * (litres / n_open) if n_open > 0 else np.zeros(z), without_flow


# ---- 2. estimation ------------------------------------------------------------------------------


def etc_inputs(step: Step) -> tuple[float, float, float, float]:
    """(air temperature, actual vapour pressure, natural and lamp radiation) for the step's ET0."""
    setup, tel = step.setup, step.item.tel
    held = step.memory.obs_builder.held
    temp = tel.air_temp_c if tel.air_temp_c is not None else held["air_temp"]
    rh = tel.air_rh_pct if tel.air_rh_pct is not None else held["air_rh"]
    par = tel.par_umol_m2_s if tel.par_umol_m2_s is not None else 0.0
    lamp_par = setup.climate.lamp_par_umol_m2_s * tel.light_pct / 100.0
    es = float(saturation_vapour_kpa(np, np.float64(temp)))
    return (temp, rh / 100.0 * es, max(par - lamp_par, 0.0) / PAR_PER_W_M2,
            setup.climate.lamp_radiant_w_m2 * tel.light_pct / 100)


def estimate(steps: list[Step]) -> None:
    """ET demand per greenhouse (vectorised per climate), then every zone's Kalman update at once."""
    groups: dict[tuple[Any, ...], list[Step]] = {}
    for step in steps:
        c = step.setup
        groups.setdefault((c.climate, c.crop, c.gamma), []).append(step)
    for (climate, crop, gamma), group in groups.items():
        temp, vapour, rs_nat, rs_lamp = (np.array(v, dtype=np.float64)
                                         for v in zip(*(etc_inputs(s) for s in group), strict=True))
        demand = reference_et0(np, climate, gamma, temp, vapour, rs_nat, rs_lamp)
        kc, _ = crop_coefficient(np, crop, np.array([s.day for s in group]))
        etc = demand.et0_mm_h * kc * np.array([s.dt_s for s in group]) / 3600.0
        for step, e in zip(group, etc.tolist(), strict=True):
            step.etc_mm = e
    soils = [np.array([[np.nan if v is None else v for v in zone] for zone in s.item.tel.soil_vwc],
                      dtype=np.float64) for s in steps]
    estimates = update_many([s.memory.estimator for s in steps], soils,
                            [s.zone_water / s.memory.obs_builder.zone_area_m2 for s in steps],
                            [s.etc_mm for s in steps])
    for step, est in zip(steps, estimates, strict=True):
        step.estimate = est


def grow_crops(steps: list[Step]) -> None:
    """Every greenhouse's crop twin one step on, in one call of the crop model: the measured canopy
    climate (a missing reading holds its last value) and the root zone's stress factor, dry side and
    wet side as the twin's crop feels them."""
    par, co2, leaf, stress, waterlogged = [], [], [], [], []
    for step in steps:
        tel, held, est = step.item.tel, step.memory.obs_builder.held, step.estimate
        assert est is not None
        par.append(_reading(tel.par_umol_m2_s, held["par"]))
        co2.append(_reading(tel.co2_ppm, held["co2"]))
        leaf.append(_reading(tel.leaf_temp_c, held["leaf_temp"]))
        factor, days = step.memory.crop_twin.root_zone_stress(np.asarray(est.theta, dtype=np.float64),
                                                              step.memory.estimator.soils, step.dt_s)
        stress.append(factor)
        waterlogged.append(days)
    grow_many([s.memory.crop_twin for s in steps], [s.dt_s for s in steps], par, co2, leaf, stress)
    for step, days in zip(steps, waterlogged, strict=True):  # kept only once the crop step has run
        step.memory.crop_twin.aer_days = days


# ---- 3. observation -----------------------------------------------------------------------------


def observe(step: Step) -> None:
    """Estimate -> e-stop latch from telemetry -> the policy's observation.

    Runs after :func:`grow_crops`, so the crop-state features are the pools after this step's growth,
    as the twin observes its pools after its step."""
    setup, memory, item = step.setup, step.memory, step.item
    tel, est = item.tel, step.estimate
    assert est is not None
    step.moisture = est.theta
    step.sensor_ok = ~est.filled | (est.status == PROBE_STATUS.index("ok")).any(axis=1)
    if tel.estop and not memory.state.estop_latched:  # a mode change, on the state as it stands now
        memory.state, event = memory.state.moved(setup.gh, "estop", "edge:estop",
                                                 "telemetry reports the e-stop pressed", tel.ts,
                                                 estop_latched=True)
        step.events.append(event)
    if item.outlook is not None:
        step.outlook = item.outlook.at(tel.ts.astimezone(UTC).replace(minute=0, second=0, microsecond=0))
        step.alarms += list(step.outlook.alarms)
    # A crop twin not grown yet starts from the initial pools for its age, its 24-h canopy temperature
    # the held leaf temperature (the last reading, 20 degC before any): what its first growth starts from.
    crop_twin, builder, state = memory.crop_twin, memory.obs_builder, memory.state
    pools = crop_twin.pools(builder.held["leaf_temp"])
    step.obs, held = builder.build(
        ts=tel.ts.astimezone(setup.site_tz), moisture=step.moisture, readings=tel.model_dump(),
        valve_open=np.asarray(tel.valve_open, float), pump_pct=tel.pump_pct, light_pct=tel.light_pct,
        pump_current_a=tel.pump_current_a, outlook=step.outlook, valve_failed=state.valve_failed,
        dli_today=crop_twin.dli_today, lamp_hours_today=state.lights_hours_today,
        crop_day=crop_twin.day, crop_pools=pools)
    step.alarms += [f"held:{name}" for name in held]


def _reading(value: float | None, held: float) -> float:
    return held if value is None or not math.isfinite(value) else float(value)
