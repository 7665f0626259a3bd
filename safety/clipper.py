"""The last gate before the actuators: force any proposed action within the hard limits.

:func:`clip` is pure and total. Whatever it is given (NaN, inf, wrong shape, odd context)
it returns an action that satisfies every rule at once, and a report naming each change.

Rule order. Each step sees the previous step's output and cannot break what an earlier
step guaranteed: after step 5 valves are only closed, except by dwell, which never reopens
a blocked zone; the pump only moves within {0} U [min, max]; lights only go to 0.

1. ``input.shape``: not a numeric vector of length Z+2 -> the safe state is proposed.
2. ``input.non_finite``: a NaN/inf entry -> the previous safe value of that entry.
3. ``valves.binary`` (threshold 0.5), ``pump.range`` (clip to [0, max]), ``lights.range``.
4. ``zone.sensor_failed``: zones without a trustworthy reading (sensor flag down or no
   moisture estimate) follow the fallback schedule instead of the policy.
5. ``zone.daily_water_cap``, ``zone.saturation_margin`` and ``valve.failed`` close blocked
   zones. They come after 4 so a fallback schedule can never water a capped or (known)
   saturated zone, nor count a valve that failed to open as a path.
6. ``valve.min_dwell`` undoes valve changes made before the minimum on/off time. It runs
   after the hard valve rules and never reopens a blocked zone: hard limits beat dwell.
   An opening is never forced, so every opening respects the minimum off time.
7. ``valves.max_open`` runs after dwell because dwell can reopen valves. It keeps, in
   order: valves dwell-locked open (younger than the minimum on time; closing them is the
   chatter dwell forbids), valves already open (no new switching), the driest zones
   (largest margin below saturation, unknown moisture last), lower zone index. Longest-open
   valves are not favoured: they have had their minimum run and may close legally. It only
   closes, and closes a dwell-locked valve only if more than ``max_open`` of them exist.
8. ``pump.needs_open_valve``: after every valve rule, so a pump never dead-heads: it stops with no
   valve open, and rests while every open valve is one the box held open as the pump ran and no
   water flowed (a dead-head under way, the context's ``valves_without_flow``).
9. ``pump.range`` dead band: a command in (0, min) becomes min (a valve is open, else 8
   stopped it).
10. ``pump.ramp_rate``: speed changes at most ``ramp * dt``; stopping is always allowed, and
    a stopped pump may start at ``pump_min`` (it cannot run slower), then ramps from there.
    The result stays within [min, max], so 8 and 9 still hold.
11. ``pump.single_valve_cap``: with exactly one valve open the pump runs at most
    ``pump_single_valve_max_pct`` (one valve at full speed passes the relief valve's setting).
    After the ramp, because a hard limit beats it; the cap is at least ``pump_min``, so 8-10 hold.
12. ``lights.daily_hours_cap``, ``lights.strong_sun``, ``lights.dark_period`` (the crop's daily
    dark window; an unknown local hour counts as dark): lights only ever go to 0.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from safety.action import action_size, safe_state, valve_name
from safety.context import ClipContext, ResolvedContext, resolve
from safety.limits import SafetyLimits
from safety.report import Note, RuleFiring, SafetyReport
from safety.rules import RuleId
from twin.config import in_window

__all__ = ["CLIP_ORDER", "ClipContext", "clip", "safe_state"]

CLIP_ORDER: tuple[RuleId, ...] = (
    RuleId.INPUT_SHAPE,
    RuleId.INPUT_NON_FINITE,
    RuleId.VALVES_BINARY,
    RuleId.PUMP_RANGE,
    RuleId.LIGHTS_RANGE,
    RuleId.ZONE_SENSOR_FAILED,
    RuleId.ZONE_DAILY_WATER_CAP,
    RuleId.ZONE_SATURATION_MARGIN,
    RuleId.VALVE_FAILED,
    RuleId.VALVE_MIN_DWELL,
    RuleId.VALVES_MAX_OPEN,
    RuleId.PUMP_NEEDS_OPEN_VALVE,
    RuleId.PUMP_RAMP_RATE,
    RuleId.PUMP_SINGLE_VALVE_CAP,
    RuleId.LIGHTS_DAILY_HOURS_CAP,
    RuleId.LIGHTS_STRONG_SUN,
    RuleId.LIGHTS_DARK_PERIOD,
)
"""Order in which rules first apply (``pump.range`` also runs its dead band after step 8)."""


class _Plan:
    """Working copy of the action; every change goes through a setter that records it."""

    def __init__(self, valves: np.ndarray, pump: float, lights: float, firings: list[RuleFiring]) -> None:
        self.valves = valves.astype(bool, copy=True)
        self.pump = pump
        self.lights = lights
        self.firings = firings

    def set_valve(self, zone: int, is_open: bool, rule: RuleId, detail: str) -> None:
        if bool(self.valves[zone]) == is_open:
            return
        self.firings.append(
            RuleFiring(rule.value, valve_name(zone), float(self.valves[zone]), float(is_open), detail)
        )
        self.valves[zone] = is_open

    def set_pump(self, value: float, rule: RuleId, detail: str) -> None:
        self.firings.append(RuleFiring(rule.value, "pump", self.pump, value, detail))
        self.pump = value

    def set_lights(self, value: float, rule: RuleId, detail: str) -> None:
        self.firings.append(RuleFiring(rule.value, "lights", self.lights, value, detail))
        self.lights = value

    def vector(self) -> np.ndarray:
        return np.concatenate([self.valves.astype(np.float64), [self.pump, self.lights]])


def _actuator(index: int, zones: int) -> str:
    if index < zones:
        return valve_name(index)
    return "pump" if index == zones else "lights"


def _parse(action: object, zones: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(the input as recorded, the proposal as a float (Z+2,) vector or None if unusable)."""
    try:
        arr = np.asarray(action)
        if arr.dtype.kind not in "biuf":
            return np.zeros(0), None
        recorded = arr.astype(np.float64)
    except Exception:  # foreign objects may raise anything from __array__; totality wins
        return np.zeros(0), None
    if recorded.shape != (action_size(zones),):
        return recorded, None
    return recorded, recorded.copy()


def _well_formed(
    proposal: np.ndarray, rc: ResolvedContext, limits: SafetyLimits, firings: list[RuleFiring]
) -> _Plan:
    """Steps 2-3: finite values, binary valves, pump and lights inside their ranges."""
    z = limits.zones
    prev = rc.prev_safe_vector
    for i in np.flatnonzero(~np.isfinite(proposal)).tolist():
        firings.append(
            RuleFiring(
                RuleId.INPUT_NON_FINITE.value,
                _actuator(i, z),
                float(proposal[i]),
                float(prev[i]),
                "non-finite value replaced by the previous safe value",
            )
        )
        proposal[i] = prev[i]
    valves = proposal[:z] >= 0.5
    for i in np.flatnonzero((proposal[:z] != 0.0) & (proposal[:z] != 1.0)).tolist():
        firings.append(
            RuleFiring(
                RuleId.VALVES_BINARY.value,
                valve_name(i),
                float(proposal[i]),
                float(valves[i]),
                "valve command thresholded at 0.5",
            )
        )
    plan = _Plan(valves, float(proposal[z]), float(proposal[z + 1]), firings)
    pump = min(max(plan.pump, 0.0), limits.pump_max_pct)
    if pump != plan.pump:
        plan.set_pump(pump, RuleId.PUMP_RANGE, f"clipped to [0, {limits.pump_max_pct:g}] %")
    lights = min(max(plan.lights, 0.0), 100.0)
    if lights != plan.lights:
        plan.set_lights(lights, RuleId.LIGHTS_RANGE, "clipped to [0, 100] %")
    return plan


def _zone_limits(plan: _Plan, rc: ResolvedContext, limits: SafetyLimits) -> np.ndarray:
    """Steps 4-5; returns the zones no rule lets be open (hard-blocked) this step."""
    unobserved = ~rc.sensor_ok | np.isnan(rc.moisture_vwc)
    for zone in np.flatnonzero(unobserved).tolist():
        why = "sensor reports failure" if not rc.sensor_ok[zone] else "no moisture estimate"
        plan.set_valve(
            zone,
            bool(rc.fallback_valves[zone]),
            RuleId.ZONE_SENSOR_FAILED,
            f"{why}; following the fallback schedule",
        )

    cap = limits.water_cap_per_zone()
    capped = ~(rc.water_today_l < cap)  # NaN (unknown use) counts as capped
    for zone in np.flatnonzero(capped).tolist():
        used = rc.water_today_l[zone]
        why = "water used today unknown" if math.isnan(used) else f"{used:.1f} L used today"
        plan.set_valve(zone, False, RuleId.ZONE_DAILY_WATER_CAP, f"{why}; cap {cap[zone]:.1f} L")

    wet_above = rc.saturation_vwc - limits.saturation_margin_vwc
    wet = rc.moisture_vwc >= wet_above  # NaN (unknown) is not wet
    for zone in np.flatnonzero(wet).tolist():
        plan.set_valve(
            zone,
            False,
            RuleId.ZONE_SATURATION_MARGIN,
            f"moisture {rc.moisture_vwc[zone]:.3f} >= {wet_above[zone]:.3f} m3/m3",
        )
    for zone in np.flatnonzero(rc.valve_failed).tolist():
        plan.set_valve(zone, False, RuleId.VALVE_FAILED,
                       "stayed closed when told to open; closed until seen open")
    return capped | wet | rc.valve_failed | (unobserved & ~rc.fallback_valves)


def _dwell(plan: _Plan, rc: ResolvedContext, limits: SafetyLimits, blocked: np.ndarray) -> None:
    """Step 6: undo early changes, except closes a hard rule requires."""
    for zone in np.flatnonzero(plan.valves != rc.prev_valves).tolist():
        was_open = bool(rc.prev_valves[zone])
        need = limits.min_valve_on_s if was_open else limits.min_valve_off_s
        age = float(rc.age_s[zone])
        if age >= need or (was_open and blocked[zone]):
            continue
        state = "open" if was_open else "closed"
        plan.set_valve(
            zone, was_open, RuleId.VALVE_MIN_DWELL, f"{state} for {age:.0f} s < {need:.0f} s minimum"
        )


def _max_open(plan: _Plan, rc: ResolvedContext, limits: SafetyLimits) -> None:
    """Step 7: keep at most ``max_open_valves`` open, by the priority in the module doc."""
    open_zones = np.flatnonzero(plan.valves).tolist()
    if len(open_zones) <= limits.max_open_valves:
        return
    locked = rc.prev_valves & (rc.age_s < limits.min_valve_on_s)
    dryness = rc.saturation_vwc - rc.moisture_vwc

    def priority(zone: int) -> tuple[bool, bool, float, int]:
        dry = float(dryness[zone])
        return (not locked[zone], not rc.prev_valves[zone], -dry if math.isfinite(dry) else math.inf, zone)

    ranked = sorted(open_zones, key=priority)
    kept = ranked[: limits.max_open_valves]
    for zone in ranked[limits.max_open_valves :]:
        plan.set_valve(
            zone,
            False,
            RuleId.VALVES_MAX_OPEN,
            f"{len(open_zones)} open > {limits.max_open_valves} the pump can feed; kept {kept}",
        )


def _pump(plan: _Plan, rc: ResolvedContext, limits: SafetyLimits) -> None:
    """Steps 8-11: no dead-heading, no running below min, rate-limited changes, the single-valve cap."""
    if plan.pump > 0.0 and not plan.valves.any():
        plan.set_pump(0.0, RuleId.PUMP_NEEDS_OPEN_VALVE, "no valve open: the pump would dead-head")
    elif plan.pump > 0.0 and not (plan.valves & ~rc.without_flow).any():
        plan.set_pump(0.0, RuleId.PUMP_NEEDS_OPEN_VALVE,
                      "the open valves were held open while the pump ran and nothing flowed: "
                      "it is dead-heading (or the flow meter reads nothing)")
    if 0.0 < plan.pump < limits.pump_min_pct:
        plan.set_pump(
            limits.pump_min_pct,
            RuleId.PUMP_RANGE,
            f"raised to the minimum running speed {limits.pump_min_pct:g} %",
        )
    if plan.pump == 0.0:
        return
    step = limits.pump_ramp_pct_per_s * rc.dt_s
    base = rc.prev_pump
    if plan.pump > base:
        ceiling = max(base, limits.pump_min_pct) + step
        if plan.pump > ceiling:
            plan.set_pump(ceiling, RuleId.PUMP_RAMP_RATE, f"rise limited to {step:g} % in {rc.dt_s:g} s")
    else:
        floor = base - step
        if plan.pump < floor:
            plan.set_pump(floor, RuleId.PUMP_RAMP_RATE, f"fall limited to {step:g} % in {rc.dt_s:g} s")
    cap = limits.pump_single_valve_max_pct
    if int(plan.valves.sum()) == 1 and plan.pump > cap:
        plan.set_pump(cap, RuleId.PUMP_SINGLE_VALVE_CAP,
                      f"one valve open: at most {cap:g} % (more passes the relief valve's setting)")


def _lights(plan: _Plan, rc: ResolvedContext, limits: SafetyLimits) -> tuple[Note, ...]:
    """Step 12: daily hours cap, strong sun and dark period; notes when the sun cannot be judged."""
    hours = rc.lights_on_hours_today
    if plan.lights > 0.0 and not hours < limits.lights_daily_hours_cap:
        why = "lit hours today unknown" if math.isnan(hours) else f"{hours:.2f} h lit today"
        plan.set_lights(0.0, RuleId.LIGHTS_DAILY_HOURS_CAP, f"{why}; cap {limits.lights_daily_hours_cap:g} h")
    if plan.lights == 0.0:
        return ()
    notes: tuple[Note, ...] = ()
    par = rc.natural_par_umol
    if math.isnan(par):
        notes = (Note(RuleId.LIGHTS_STRONG_SUN.value, "lights",
                      "natural PAR unknown; strong-sun rule not applied"),)
    elif par >= limits.strong_sun_par_umol:
        plan.set_lights(
            0.0,
            RuleId.LIGHTS_STRONG_SUN,
            f"natural PAR {par:.0f} >= {limits.strong_sun_par_umol:g} umol/m2/s",
        )
        return ()
    hour = rc.local_hour
    if math.isnan(hour) or in_window(hour, limits.dark_start_h, limits.dark_end_h):
        why = "local hour unknown" if math.isnan(hour) else f"{hour:.2f} h is in the dark period"
        plan.set_lights(0.0, RuleId.LIGHTS_DARK_PERIOD,
                        f"{why} {limits.dark_start_h:g}-{limits.dark_end_h:g} h")
    return notes


def clip(action: ArrayLike, ctx: ClipContext, limits: SafetyLimits) -> tuple[np.ndarray, SafetyReport]:
    """Return the safe version of ``action`` and a report of every rule that changed it.

    Never raises on odd ``action`` or ``ctx``; ``limits`` are trusted (validated on load).
    The returned array is read-only and is the report's ``action_out``.
    """
    with np.errstate(all="ignore"):
        rc = resolve(ctx, limits)
        recorded, proposal = _parse(action, limits.zones)
        firings: list[RuleFiring] = []
        if proposal is None:
            firings.append(
                RuleFiring(
                    RuleId.INPUT_SHAPE.value,
                    "action",
                    math.nan,
                    0.0,
                    f"expected {action_size(limits.zones)} numbers, got shape {recorded.shape}; "
                    "safe state proposed",
                )
            )
            proposal = safe_state(limits.zones)
        plan = _well_formed(proposal, rc, limits, firings)
        blocked = _zone_limits(plan, rc, limits)
        _dwell(plan, rc, limits, blocked)
        _max_open(plan, rc, limits)
        _pump(plan, rc, limits)
        notes = _lights(plan, rc, limits)
        report = SafetyReport(recorded, plan.vector(), tuple(plan.firings), rc.notes + notes)
    return report.action_out, report
