"""The pump interlock for one decision, in numpy: what the service applies after the ensemble vote.

The same rule as :func:`policy.residual.interlock` (torch, batched, used in training rollouts
and by each ensemble member), written for a single action so the decision path needs no torch
(the expert-only service never loads it). ``tests/safety/test_interlock.py`` holds the two equal.
"""

from __future__ import annotations

import numpy as np

from safety.limits import PUMP_MIN_RUNNING_PCT, SINGLE_VALVE_PUMP_CAP
from twin.config import LightingConfig, in_window
from twin.spec import observation_spec

__all__ = ["DARK_PERIOD_H", "PUMP_MIN_RUNNING_PCT", "SINGLE_VALVE_PUMP_CAP", "hour_from_phase",
           "interlock_one"]

DARK_PERIOD_H = (LightingConfig().dark_start_h, LightingConfig().dark_end_h)
"""Local clock window [start, end) in which the lamps are off: the crop's dark period (the twin's
:class:`~twin.config.LightingConfig` and the clipper's ``lights.dark_period`` rule hold the same)."""


def hour_from_phase(hour_sin: np.ndarray, hour_cos: np.ndarray) -> np.ndarray:
    """Local clock hour from the observation's hour_sin/hour_cos, rounded to the minute so float32
    noise cannot move a step that starts on a window's edge to the other side of it."""
    hour = np.arctan2(hour_sin, hour_cos) * (12.0 / np.pi) % 24.0
    return np.floor(hour * 60.0 + 0.5) / 60.0 % 24.0


def interlock_one(action: np.ndarray, obs: np.ndarray, zones: int,
                  single_valve_cap: float = SINGLE_VALVE_PUMP_CAP,
                  min_running: float = PUMP_MIN_RUNNING_PCT,
                  dark: tuple[float, float] = DARK_PERIOD_H) -> np.ndarray:
    """Action (zones + 2,) -> a copy with failed valves closed, a second valve opened when the pump
    would run on one, no pump without a valve, a running pump at least ``min_running``, a
    capped pump on a single valve and the lamps off in the ``dark`` local window."""
    sl = observation_spec(zones).slices
    out = np.array(action, dtype=np.float64)
    hour = hour_from_phase(obs[sl["hour_sin"].start], obs[sl["hour_cos"].start])
    if in_window(hour, *dark):
        out[zones + 1] = 0.0
    failed = obs[sl["valve_failed"]] >= 0.5
    valves = (out[:zones] >= 0.5) & ~failed
    if zones >= 2 and out[zones] > 0.0 and valves.sum() == 1:
        low, high = obs[sl["target_low"]], obs[sl["target_high"]]
        level = (obs[sl["moisture"]] - low) / np.maximum(high - low, 1e-3)
        level = np.where(valves | failed, np.inf, level)
        second = int(np.argmin(level))
        if np.isfinite(level[second]):
            valves[second] = True
    out[:zones] = valves
    n_open = int(valves.sum())
    if n_open == 0:
        out[zones] = 0.0
    else:
        if 0.0 < out[zones] < min_running:
            out[zones] = min_running
        if n_open == 1:
            out[zones] = min(out[zones], single_valve_cap)
    return out
