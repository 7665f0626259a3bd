"""What the clipper knows about the greenhouse at one step, and how odd values are read.

:class:`ClipContext` is what callers fill in. :func:`resolve` turns it into clean arrays
for the rules. It never raises: a field that is missing, mis-shaped, non-numeric or holds
impossible values is replaced by its *conservative* reading (the one that can only make
the clipper stricter) and a ``context.invalid`` note says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from safety.action import action_size
from safety.limits import SafetyLimits
from safety.report import Note
from safety.rules import CONTEXT_INVALID


@dataclass(frozen=True, eq=False, kw_only=True)
class ClipContext:
    """Plant state for one clipping step; per-zone arrays have one entry per zone.

    ``prev_action`` is the previous *safe* output (what the actuators were last told).
    ``valve_state_age_s`` is how long each valve has held its ``prev_action`` state.
    ``moisture_vwc`` may hold NaN (no estimate). ``saturation_vwc`` may only tighten the
    limit file's value (the lower of the two is used). ``natural_par_umol`` NaN means unknown.
    ``fallback_valves`` is the schedule's valve state this step for zones whose sensor
    failed; ``None`` keeps them closed.
    """

    dt_s: float
    prev_action: ArrayLike
    valve_state_age_s: ArrayLike
    zone_water_today_l: ArrayLike
    moisture_vwc: ArrayLike
    sensor_ok: ArrayLike
    saturation_vwc: ArrayLike | None = None
    natural_par_umol: float = math.nan
    lights_on_hours_today: float = 0.0
    local_hour: float = math.nan
    """Local clock hour [0, 24) of the step (dark period); NaN: unknown, read as dark."""
    fallback_valves: ArrayLike | None = None
    valve_failed: ArrayLike | None = None
    """Valves latched failed (:func:`twin.hydraulics.valve_failure_latch`); None: none known.
    The service leaves it out in manual mode, so an operator can test a failed valve."""
    valves_without_flow: ArrayLike | None = None
    """Valves the edge box held open while its pump ran and no water flowed: a dead-head under way in
    the last telemetry (a valve stuck shut) or a flow meter that reads nothing. The pump rests rather
    than feed only these; nothing is latched. None: no such telemetry."""


@dataclass(frozen=True, eq=False)
class ResolvedContext:
    """Clean, correctly shaped context: NaN only where it means "unknown"."""

    dt_s: float
    prev_valves: np.ndarray
    prev_pump: float
    prev_lights: float
    age_s: np.ndarray
    water_today_l: np.ndarray
    moisture_vwc: np.ndarray
    saturation_vwc: np.ndarray
    sensor_ok: np.ndarray
    fallback_valves: np.ndarray
    valve_failed: np.ndarray
    without_flow: np.ndarray
    natural_par_umol: float
    lights_on_hours_today: float
    local_hour: float
    notes: tuple[Note, ...]

    @property
    def prev_safe_vector(self) -> np.ndarray:
        """The previous action after cleaning: what a non-finite entry falls back to."""
        return np.concatenate([self.prev_valves.astype(np.float64), [self.prev_pump, self.prev_lights]])


def _vector(raw: Any, n: int) -> np.ndarray | None:
    """``raw`` as a float vector of length ``n``, or None when it cannot be one."""
    try:
        arr = np.asarray(raw)
        if arr.dtype.kind not in "biuf" or arr.shape != (n,):
            return None
        return arr.astype(np.float64)
    except Exception:  # foreign objects may raise anything from __array__; totality wins
        return None


def _field(ctx: object, name: str) -> Any:
    """``ctx.name``, or None when absent (or when reading it fails: ``ctx`` may be anything)."""
    try:
        return getattr(ctx, name, None)
    except Exception:  # a foreign object's __getattr__ may raise anything; totality wins
        return None


def _scalar(raw: Any) -> float:
    """``raw`` as a float, NaN when it is not a real number."""
    try:
        arr = np.asarray(raw)
        if arr.dtype.kind not in "biuf" or arr.shape != ():
            return math.nan
        return float(arr)
    except Exception:  # same reason as in _vector
        return math.nan


class _Reader:
    """Reads context fields, collecting a note for each one it had to replace."""

    def __init__(self, ctx: object, zones: int) -> None:
        self.ctx = ctx
        self.zones = zones
        self.notes: list[Note] = []
        self.noted: set[str] = set()

    def note(self, name: str, detail: str) -> None:
        """One note per field: the first problem found is the one reported."""
        if name not in self.noted:
            self.noted.add(name)
            self.notes.append(Note(CONTEXT_INVALID, name, detail))

    def vector(self, name: str, fill: float, n: int | None = None) -> np.ndarray:
        raw = _field(self.ctx, name)
        length = self.zones if n is None else n
        arr = _vector(raw, length)
        if arr is None:
            self.note(name, f"expected {length} numbers; using {fill} for every entry")
            return np.full(length, fill, dtype=np.float64)
        return arr

    def flags(self, name: str, *, optional: bool) -> np.ndarray:
        """Boolean per zone; NaN and unreadable values read as False (the safe side)."""
        raw = _field(self.ctx, name)
        if raw is None and optional:
            return np.zeros(self.zones, dtype=bool)
        arr = self.vector(name, 0.0)
        return arr >= 0.5


def resolve(ctx: object, limits: SafetyLimits) -> ResolvedContext:
    """Clean ``ctx`` for ``limits.zones`` zones; never raises.

    Conservative readings: unknown previous action -> everything off; unknown valve age ->
    0 s (no dwell has elapsed); unknown or negative water used -> NaN (treated as capped);
    non-finite moisture -> NaN (no estimate); unknown sensor flag -> failed; unknown dt ->
    0 s (no ramping); unknown lit hours -> NaN (treated as capped); unknown PAR -> NaN.
    """
    z = limits.zones
    r = _Reader(ctx, z)

    prev = r.vector("prev_action", 0.0, action_size(z))
    if not np.isfinite(prev).all():
        r.note("prev_action", "non-finite entries read as off")
    prev_valves = prev[:z] >= 0.5
    prev_pump = float(np.clip(prev[-2], 0.0, limits.pump_max_pct)) if math.isfinite(prev[-2]) else 0.0
    prev_lights = float(np.clip(prev[-1], 0.0, 100.0)) if math.isfinite(prev[-1]) else 0.0

    age = r.vector("valve_state_age_s", 0.0)
    bad_age = np.isnan(age) | (age < 0.0)
    if bad_age.any():
        r.note("valve_state_age_s", "NaN or negative ages read as 0 s")
        age = np.where(bad_age, 0.0, age)

    water = r.vector("zone_water_today_l", math.nan)
    bad_water = np.isnan(water) | (water < 0.0)
    if bad_water.any():
        r.note("zone_water_today_l", "NaN or negative totals read as unknown (zone treated as capped)")
        water = np.where(bad_water, math.nan, water)

    moisture = r.vector("moisture_vwc", math.nan)
    moisture = np.where(np.isfinite(moisture), moisture, math.nan)

    sat = limits.saturation_per_zone()
    if _field(ctx, "saturation_vwc") is not None:
        ctx_sat = r.vector("saturation_vwc", math.nan)
        sat = np.fmin(sat, np.where(np.isfinite(ctx_sat), ctx_sat, math.nan))

    dt = _scalar(_field(ctx, "dt_s"))
    if math.isnan(dt) or dt < 0.0:
        r.note("dt_s", "NaN, negative or missing dt read as 0 s (no ramping)")
        dt = 0.0

    par = _scalar(_field(ctx, "natural_par_umol"))
    if not math.isnan(par) and not 0.0 <= par < math.inf:
        r.note("natural_par_umol", "infinite or negative PAR read as unknown")
        par = math.nan

    hours = _scalar(_field(ctx, "lights_on_hours_today"))
    if math.isnan(hours) or hours < 0.0:
        r.note("lights_on_hours_today", "NaN or negative lit hours read as unknown (cap reached)")
        hours = math.nan

    hour = _scalar(_field(ctx, "local_hour"))
    if not math.isnan(hour) and not 0.0 <= hour < 24.0:
        r.note("local_hour", "a local hour outside [0, 24) read as unknown (dark period)")
        hour = math.nan

    return ResolvedContext(
        dt_s=dt,
        prev_valves=prev_valves,
        prev_pump=prev_pump,
        prev_lights=prev_lights,
        age_s=age,
        water_today_l=water,
        moisture_vwc=moisture,
        saturation_vwc=sat,
        sensor_ok=r.flags("sensor_ok", optional=False),
        fallback_valves=r.flags("fallback_valves", optional=True),
        valve_failed=r.flags("valve_failed", optional=True),
        without_flow=r.flags("valves_without_flow", optional=True),
        natural_par_umol=par,
        lights_on_hours_today=hours,
        local_hour=hour,
        notes=tuple(r.notes),
    )
