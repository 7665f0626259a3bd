"""The controllers growers run today, as batched functions of the observation.

* :class:`ThresholdExpert`: open a zone's valve when its moisture falls below a refill point
  and keep it open until a stop point (hysteresis from the valve feedback); the classical
  baseline and the behaviour-cloning teacher. Refill and stop are positions inside each
  zone's target band (0 = lower edge, 1 = upper edge), so one setting fits every soil.
* :class:`TimerSchedule`: fixed daily irrigation windows, whatever the soil says.
* :class:`RandomController`: uniform random actions from a seeded generator.

All take observations of shape (B, obs_dim) on numpy or torch and return actions (B, Z + 2)
on the same library.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.config import DEFAULT_ZONES
from twin.spec import ActionSpec, ObservationSpec, observation_spec

Array = Any


def _xp(obs: Array) -> Any:
    import array_api_compat

    return array_api_compat.array_namespace(obs)


def hour_of_day(xp: Any, obs: Array, spec: ObservationSpec) -> Array:
    s = obs[:, spec.slices["hour_sin"].start]
    c = obs[:, spec.slices["hour_cos"].start]
    return (xp.atan2(s, c) * (24.0 / (2.0 * math.pi))) % 24.0


def _lights(xp: Any, obs: Array, spec: ObservationSpec, photoperiod: tuple[float, float], dark_par: float) -> Array:
    """Supplemental light during the photoperiod when natural light is poor (PAR below ``dark_par``)."""
    hour = hour_of_day(xp, obs, spec)
    par = obs[:, spec.slices["par"].start] - obs[:, spec.slices["lights"].start] * 2.5
    on = (hour >= photoperiod[0]) & (hour < photoperiod[1]) & (par < dark_par)
    return xp.where(on, 100.0, 0.0)


def _assemble(xp: Any, valves: Array, pump: Array, lights: Array) -> Array:
    return xp.concat([xp.astype(valves, pump.dtype), pump[:, None], lights[:, None]], axis=1)


@dataclass(frozen=True)
class ThresholdExpert:
    """Refill/stop hysteresis per zone; pump speed fixed while any valve is open."""

    zones: int = DEFAULT_ZONES
    refill: float = 0.2
    """Open below low + refill * (high - low)."""
    stop: float = 0.9
    """Close above low + stop * (high - low)."""
    pump_pct: float = 70.0
    max_open: int = 4
    """The pump feeds at most this many valves; the driest zones go first."""
    lights: bool = True
    photoperiod: tuple[float, float] = (5.0, 21.0)
    dark_par: float = 120.0

    def __call__(self, obs: Array) -> Array:
        xp = _xp(obs)
        spec = observation_spec(self.zones)
        sl = spec.slices
        theta = obs[:, sl["moisture"]]
        low, high = obs[:, sl["target_low"]], obs[:, sl["target_high"]]
        span = xp.maximum(high - low, 1e-3)
        level = (theta - low) / span
        was_open = obs[:, sl["valve_open"]] >= 0.5
        # A zone whose valve failed to open is left alone until the valve is seen open (twin.hydraulics).
        healthy = obs[:, sl["valve_failed"]] < 0.5
        want = ((level < self.refill) | (was_open & (level < self.stop))) & healthy
        if self.max_open < self.zones:
            # Keep the `max_open` driest of the zones that want water.
            score = xp.where(want, level, 1e9)
            order = xp.argsort(xp.argsort(score, axis=1), axis=1)
            want = want & (order < self.max_open)
        pump = xp.where(xp.any(want, axis=1), self.pump_pct, 0.0)
        pump = xp.astype(pump, obs.dtype)
        lights = _lights(xp, obs, spec, self.photoperiod, self.dark_par) if self.lights else xp.zeros_like(pump)
        return _assemble(xp, want, pump, xp.astype(lights, obs.dtype))


@dataclass(frozen=True)
class TimerSchedule:
    """Every zone irrigated in fixed daily windows (hours of day, start inclusive)."""

    zones: int = DEFAULT_ZONES
    windows: tuple[tuple[float, float], ...] = ((6.0, 6.5), (16.0, 16.5))
    pump_pct: float = 70.0
    lights: bool = True
    photoperiod: tuple[float, float] = (5.0, 21.0)
    dark_par: float = 120.0

    def __call__(self, obs: Array) -> Array:
        xp = _xp(obs)
        spec = observation_spec(self.zones)
        hour = hour_of_day(xp, obs, spec)
        on = xp.zeros(hour.shape, dtype=xp.bool)
        for start, end in self.windows:
            on = on | ((hour >= start - 1e-3) & (hour < end - 1e-3))
        valves = xp.broadcast_to(on[:, None], (obs.shape[0], self.zones))
        pump = xp.astype(xp.where(on, self.pump_pct, 0.0), obs.dtype)
        lights = _lights(xp, obs, spec, self.photoperiod, self.dark_par) if self.lights else xp.zeros_like(pump)
        return _assemble(xp, valves, pump, xp.astype(lights, obs.dtype))


class RandomController:
    """Uniform random valves, pump and lights from a seeded numpy generator."""

    def __init__(self, zones: int = DEFAULT_ZONES, seed: int | Sequence[int] = 0) -> None:
        self.spec = ActionSpec(zones)
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def for_scenario(self, scenario_seed: int) -> RandomController:
        """A fresh controller whose draws depend on this one's seed and the scenario's alone, so an
        evaluation scores the same whichever scenarios ran before and in whichever process."""
        own = list(self.seed) if isinstance(self.seed, Sequence) else [self.seed]
        return RandomController(self.spec.zones, seed=[*own, scenario_seed])

    def __call__(self, obs: Array) -> Array:
        b = obs.shape[0]
        a = self.rng.uniform(self.spec.low, self.spec.high, size=(b, self.spec.dim)).astype(np.float32)
        a[:, : self.spec.zones] = np.round(a[:, : self.spec.zones])
        if isinstance(obs, np.ndarray):
            return a
        import torch

        return torch.as_tensor(a, device=obs.device)
