"""The pump interlock for one decision, in numpy: what the service applies after the ensemble vote.

The same rule as :func:`policy.residual.interlock` (torch, batched, used in training rollouts
and by each ensemble member), written for a single action so the decision path needs no torch
(the expert-only service never loads it). ``tests/safety/test_interlock.py`` holds the two equal.
"""

from __future__ import annotations

import numpy as np

from safety.limits import PUMP_MIN_RUNNING_PCT
from twin.spec import observation_spec

__all__ = ["PUMP_MIN_RUNNING_PCT", "SINGLE_VALVE_PUMP_CAP", "interlock_one"]

SINGLE_VALVE_PUMP_CAP = 85.0
"""Pump % allowed with exactly one valve open: one valve at full speed leaves ~91 % of shut-off
head (relief at 90 %), so the cap keeps a margin for pump wear and valve lag."""


def interlock_one(action: np.ndarray, obs: np.ndarray, zones: int,
                  single_valve_cap: float = SINGLE_VALVE_PUMP_CAP,
                  min_running: float = PUMP_MIN_RUNNING_PCT) -> np.ndarray:
    """Action (zones + 2,) -> a copy with failed valves closed, a second valve opened when the pump
    would run on one, no pump without a valve, a running pump at least ``min_running`` and a
    capped pump on a single valve."""
    sl = observation_spec(zones).slices
    out = np.array(action, dtype=np.float64)
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
