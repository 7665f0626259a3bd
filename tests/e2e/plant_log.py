"""The plant simulator's own log of what ran, step by step, and the safety limits checked against it.

The service's decisions say what it meant to do; this log says what the plant did: a valve stuck
where it was, a command held over a lost link, an e-stop's all-off. Every limit of
``safety/default_limits.toml`` that an actuator can break is checked on every step:

* the pump turns at 0 or within [pump_min_pct, pump_max_pct], never with every commanded valve shut,
  and never dead-heads (pump on, no open path) longer than the twin's ``dead_head_limit_s`` under a
  command decided on telemetry that already showed that long a dead-head (the service rests the pump
  at its second look at a path that runs dry, its first when the valves read closed, so an on-time
  service keeps a dead-head within the limit; at the plant's speed here a decision a few hundred
  milliseconds late is several plant minutes, which a real plant would not see); the twin never
  ended an episode for over-current or the relief valve, nor for dead-heading under such a command;
* no more than ``max_open_valves`` valves commanded open, and the pump at most
  ``pump_single_valve_max_pct`` on a single one;
* lamps off in the dark period, except the tail of a command decided before the dark period began,
  held at most its TTL (of wall time: the plant runs faster than the clock, the edge box does not);
* each zone's water per site-local day within ``zone_daily_water_cap_l``: water past the cap only
  under a command decided before the service could have seen the cap crossed (two steps: the step
  that crosses it and the decision's round trip) and held at most its TTL, give or take two steps
  of the zone's largest flow (the service books water from the flow meter, the plant from its pipes);
  water of steps whose telemetry the service never decided on (the broker or the service away while a
  command was held) is not water it could count, so the cap is judged on the water it saw.

Commands held over a lost link are where an accelerated plant differs from a real one: the edge
box holds the last command for its TTL of wall time, which here is hundreds of plant minutes. What
the plant ran under a held command is judged by what the service knew when it decided.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import numpy as np

from safety.action import LIGHTS, PUMP
from safety.limits import SafetyLimits
from twin.config import HydraulicsConfig, in_window
from wire.topics import Command

TERMINATIONS = {1: "pump over-current", 2: "dead-heading past the pump's limit", 3: "relief valve opened"}
"""The twin's ``termination_reason`` codes that are a safety failure (0: none)."""
DEAD_HEADING = 2
_EPS = 1e-6


@dataclass(frozen=True)
class PlantStep:
    """One greenhouse over one plant step: what really ran, and the command in force."""

    start: datetime
    """Plant clock at the start of the step (the telemetry of the step is stamped ``start + dt``)."""
    wall: float
    """Wall clock when the step ran."""
    commanded: np.ndarray
    """The set-points the edge box held ``[valves.., pump %, light %]`` (all off in e-stop or fail-safe)."""
    ran: np.ndarray
    """What the plant ran: the set-points with stuck valves where they stuck."""
    water_l: np.ndarray
    """Water each zone received in the step [L]."""
    dead_heading: bool
    termination: int
    in_force: Command | None
    """The last command the edge box applied before this step, and when (wall clock)."""
    applied_at: float | None
    seen: bool = True
    """The service decided on this step's telemetry: it booked the step's water. Over a lost link (the
    broker or the service away) it did not, so it cannot have counted that water against the cap."""


def hour_of(ts: datetime, tz: ZoneInfo) -> float:
    local = ts.astimezone(tz)
    return local.hour + local.minute / 60.0 + local.second / 3600.0


def violations(gh: str, steps: list[PlantStep], dt_s: float, limits: SafetyLimits | None = None,
               tz: ZoneInfo | None = None, dead_head_limit_s: float | None = None) -> list[str]:
    """Every moment ``gh``'s actuators ran outside the safety limits (empty when none did)."""
    limits = limits or SafetyLimits.default()
    tz = tz or ZoneInfo("UTC")
    dead_limit = HydraulicsConfig().dead_head_limit_s if dead_head_limit_s is None else dead_head_limit_s
    dark = (limits.dark_start_h, limits.dark_end_h)
    out: list[str] = []
    dead_s = 0.0
    dead_since = steps[0].start if steps else datetime.min
    zones = len(steps[0].water_l) if steps else 0
    water: dict[date, np.ndarray] = defaultdict(lambda: np.zeros(zones))
    seen: dict[date, np.ndarray] = defaultdict(lambda: np.zeros(zones))
    blamed: dict[date, np.ndarray] = defaultdict(lambda: np.zeros(zones))
    crossed: dict[tuple[date, int], datetime] = {}
    largest = np.zeros(zones)
    cap = limits.water_cap_per_zone()
    for s in steps:
        at = f"{gh} at {s.start.isoformat(timespec='minutes')}"
        pump, light, valves = float(s.commanded[PUMP]), float(s.commanded[LIGHTS]), s.commanded[:PUMP]
        if s.dead_heading:
            dead_since = s.start if dead_s == 0.0 else dead_since
            dead_s += dt_s
        else:
            dead_s = 0.0
        unseen_dead_head = dead_s > dead_limit and not _knew_of(s, dead_since + timedelta(seconds=dead_limit))
        if s.termination in TERMINATIONS and not (s.termination == DEAD_HEADING and unseen_dead_head):
            out.append(f"{at}: the plant stopped on {TERMINATIONS[s.termination]}")
        if pump > _EPS and not (limits.pump_min_pct - _EPS <= pump <= limits.pump_max_pct + _EPS):
            out.append(f"{at}: pump at {pump:g} %, "
                       f"outside [{limits.pump_min_pct:g}, {limits.pump_max_pct:g}]")
        if pump > _EPS and not np.any(valves >= 0.5):
            out.append(f"{at}: pump at {pump:g} % with every valve commanded shut")
        if int(np.sum(valves >= 0.5)) == 1 and pump > limits.pump_single_valve_max_pct + _EPS:
            out.append(f"{at}: pump at {pump:g} % on one valve > {limits.pump_single_valve_max_pct:g}")
        if int(np.sum(valves >= 0.5)) > limits.max_open_valves:
            out.append(f"{at}: {int(np.sum(valves >= 0.5))} valves open > {limits.max_open_valves}")
        if dead_s > dead_limit and not unseen_dead_head:
            decided = "no command" if s.in_force is None else \
                f"a command decided on telemetry of {s.in_force.ts.isoformat(timespec='minutes')}"
            out.append(f"{at}: pump dead-heading for {dead_s:g} s > {dead_limit:g} s under {decided}")
        if float(s.ran[LIGHTS]) > _EPS and in_window(hour_of(s.start, tz), *dark):
            cmd = s.in_force
            held = None if s.applied_at is None else s.wall - s.applied_at
            decided_in_dark = cmd is not None and in_window(hour_of(cmd.ts, tz), *dark)
            if cmd is None or decided_in_dark or held is None or held > cmd.ttl_s:
                why = "decided in it" if decided_in_dark else "held past its command's TTL"
                out.append(f"{at}: lamps at {light:g} % in the dark period ({why})")
        # The service books a step's water on the day of its telemetry, stamped at the step's end.
        end = s.start + timedelta(seconds=dt_s)
        day = end.astimezone(tz).date()
        water[day] += s.water_l
        if s.seen:
            seen[day] += s.water_l
        largest = np.maximum(largest, s.water_l)
        for z in np.nonzero(s.water_l > 0.0)[0]:
            if seen[day][z] <= cap[z]:  # the service could not have known the cap crossed
                continue
            since = crossed.setdefault((day, int(z)), end)
            # decided strictly after the two steps the service needed to see the crossing
            if _knew_of(s, since + timedelta(seconds=2 * dt_s, microseconds=1)):
                blamed[day][z] += s.water_l[z]
    for day, litres in sorted(blamed.items()):
        over = np.nonzero(litres > 2.0 * largest + _EPS)[0]
        out += [f"{gh} on {day}: zone {z} got {water[day][z]:.0f} L > cap {cap[z]:g} L, "
                f"{litres[z]:.0f} L of it "
                "under commands decided after the cap was crossed" for z in over]
    return out


def _knew_of(s: PlantStep, evidence_at: datetime) -> bool:
    """Whether the command ``s`` ran under answers telemetry from ``evidence_at`` on, or should no longer
    be in force (held past its TTL, or none held at all): a step under an older command, still within
    its TTL, ran on what the service could not yet have seen."""
    cmd = s.in_force
    held = None if s.applied_at is None else s.wall - s.applied_at
    return cmd is None or held is None or held > cmd.ttl_s or cmd.ts >= evidence_at
