"""The controllers growers run today, as batched functions of the observation.

* :class:`ThresholdExpert`: open a zone's valve when its moisture falls below a refill point
  and keep it open until a stop point (hysteresis from the valve feedback); the classical
  baseline and the behaviour-cloning teacher. Refill and stop are positions inside each
  zone's target band (0 = lower edge, 1 = upper edge), so one setting fits every soil.
  Lighting is the growers' price-blind rule, or with ``c0`` set the break-even rule of
  CROP_ECONOMICS 4.4 (:func:`break_even_lights`): lamps on in an hour whose all-in price is
  below ``c0 x fruit_price x (1 - PAR_nat/PAR_sat)``, at most ``h_max`` lamp hours a day.
* :class:`TimerSchedule`: fixed daily irrigation windows, whatever the soil says, and the
  growers' price-blind supplemental light.
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

from twin.config import DEFAULT_ZONES, LightingConfig, in_window
from twin.spec import ActionSpec, ObservationSpec, observation_spec

Array = Any


def _xp(obs: Array) -> Any:
    import array_api_compat

    return array_api_compat.array_namespace(obs)


def hour_of_day(xp: Any, obs: Array, spec: ObservationSpec) -> Array:
    s = obs[:, spec.slices["hour_sin"].start]
    c = obs[:, spec.slices["hour_cos"].start]
    return (xp.atan2(s, c) * (24.0 / (2.0 * math.pi))) % 24.0


DARK_WINDOW = (LightingConfig().dark_start_h, LightingConfig().dark_end_h)
"""Local hours (start, end) the crop needs dark, as the twin's default: tomato leaves are injured by
near-continuous light, and the twin's interlock forces lamps off there whatever a controller says."""
LAMP_PAR_PER_PCT = 2.5
"""umol/m2/s of canopy PAR per % of lamp power (100 W/m2 at 2.5 umol/J): removed from the measured
PAR to get the natural light a rule reacts to."""


def natural_par(obs: Array, spec: ObservationSpec) -> Array:
    """PAR at the canopy without our lamps' share: the light the crop gets for free."""
    return obs[:, spec.slices["par"].start] - obs[:, spec.slices["lights"].start] * LAMP_PAR_PER_PCT


def _lights(xp: Any, obs: Array, spec: ObservationSpec, photoperiod: tuple[float, float], dark_par: float,
            dark_window: tuple[float, float] = DARK_WINDOW) -> Array:
    """Supplemental light during the photoperiod when natural light is poor (PAR below ``dark_par``),
    never in the dark window."""
    hour = hour_of_day(xp, obs, spec)
    on = in_window(hour, *photoperiod) & (natural_par(obs, spec) < dark_par) & ~in_window(hour, *dark_window)
    return xp.where(on, 100.0, 0.0)


def break_even_price(xp: Any, obs: Array, spec: ObservationSpec, c0: float, par_sat: float) -> Array:
    """The all-in price [EUR/MWh] below which a lamp hour pays now:
    ``c0 x fruit_price x (1 - PAR_nat/PAR_sat)``."""
    share = xp.clip(natural_par(obs, spec) / par_sat, 0.0, 1.0)
    return c0 * obs[:, spec.slices["fruit_price"].start] * (1.0 - share)


def break_even_lights(xp: Any, obs: Array, spec: ObservationSpec, c0: float, par_sat: float, h_max: float,
                      step_h: float, dark_window: tuple[float, float] = DARK_WINDOW) -> Array:
    """Lamps at 100 % when this hour's all-in price is below the break-even ``c0 x fruit_price x
    (1 - PAR_nat/PAR_sat)`` [EUR/MWh], the day's lamp hours leave room for one more step under
    ``h_max``, and the hour lies outside the dark window; 0 otherwise.

    ``c0`` [kg/MWh] is the fruit a lamp MWh grows in the dark: a lamp photon is worth less the more
    natural light the canopy already has (it saturates at ``par_sat``), so the price a lamp may cost
    falls as the sun rises. Reads only the observation (OBS_VERSION 4 price, fruit price, lamp hours).
    """
    sl = spec.slices
    hour = hour_of_day(xp, obs, spec)
    price = obs[:, sl["price"].start]  # the current hour's all-in price comes first
    room = obs[:, sl["lamp_hours_today"].start] + step_h <= h_max + 1e-6
    on = (price < break_even_price(xp, obs, spec, c0, par_sat)) & room & ~in_window(hour, *dark_window)
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
    c0: float | None = None
    """Break-even coefficient [kg fruit per lamp MWh]; None: the price-blind growers' rule."""
    par_sat: float = 1000.0
    """Natural PAR [umol/m2/s] at which a lamp photon is worth nothing more (break-even rule)."""
    h_max: float = 18.0
    """Most lamp hours per local day (break-even rule)."""
    step_h: float = 1.0 / 6.0
    """The control step [h]: lamps go on only when a whole step still fits under ``h_max``."""
    dark_window: tuple[float, float] = DARK_WINDOW

    def __post_init__(self) -> None:
        if self.c0 is not None and (self.c0 < 0.0 or self.par_sat <= 0.0 or not 0.0 < self.h_max <= 24.0):
            raise ValueError("break-even lighting needs c0 >= 0, par_sat > 0 and 0 < h_max <= 24, got c0 "
                             f"{self.c0}, par_sat {self.par_sat}, h_max {self.h_max}")

    def light_action(self, xp: Any, obs: Array, spec: ObservationSpec) -> Array:
        """Lights % per greenhouse from this expert's lighting rule."""
        if not self.lights:
            return xp.zeros(obs.shape[0], dtype=obs.dtype)
        if self.c0 is None:
            return _lights(xp, obs, spec, self.photoperiod, self.dark_par, self.dark_window)
        return break_even_lights(xp, obs, spec, self.c0, self.par_sat, self.h_max, self.step_h,
                                 self.dark_window)

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
        return _assemble(xp, want, pump, xp.astype(self.light_action(xp, obs, spec), obs.dtype))


@dataclass(frozen=True)
class TimerSchedule:
    """Every zone irrigated in fixed daily windows (hours of day, start inclusive)."""

    zones: int = DEFAULT_ZONES
    windows: tuple[tuple[float, float], ...] = ((6.0, 6.5), (16.0, 16.5))
    pump_pct: float = 70.0
    lights: bool = True
    photoperiod: tuple[float, float] = (5.0, 21.0)
    dark_par: float = 120.0
    dark_window: tuple[float, float] = DARK_WINDOW

    def __call__(self, obs: Array) -> Array:
        xp = _xp(obs)
        spec = observation_spec(self.zones)
        hour = hour_of_day(xp, obs, spec)
        on = xp.zeros(hour.shape, dtype=xp.bool)
        for start, end in self.windows:
            on = on | ((hour >= start - 1e-3) & (hour < end - 1e-3))
        valves = xp.broadcast_to(on[:, None], (obs.shape[0], self.zones))
        pump = xp.astype(xp.where(on, self.pump_pct, 0.0), obs.dtype)
        lights = _lights(xp, obs, spec, self.photoperiod, self.dark_par, self.dark_window) if self.lights \
            else xp.zeros_like(pump)
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
