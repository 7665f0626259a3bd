"""Pump, pipe network and valves, integrated exactly over one control step.

Valves open after a delay d and their flow fraction then rises as 1 - exp(-t/tau); the
time-average of that curve over the step is computed in closed form, so a 600 s step and
six 100 s steps deliver the same water. The pump curve H = H0 s^2 (1 - (Q/Qmax)^2) meets
the system curve H = H0 k' (Q/n)^2 of n open valves; both scale with s^2, so the
operating point is Q = s * Qmax * q(n) with q(n) = n / sqrt(n^2 + k' Qmax^2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twin.backend import Array
from twin.config import HydraulicsConfig
from twin.types import TwinParams

DEAD_HEAD_OPEN_THRESHOLD = 0.05
"""Fewer open valve-equivalents than this counts as running against closed valves."""
PUMP_RUNNING_THRESHOLD = 0.05


@dataclass(frozen=True)
class HydraulicsOut:
    valve_avg: Array
    """[B, Z] time-averaged flow fraction per valve during the step."""
    valve_end: Array
    """[B, Z] flow fraction at the end of the step."""
    zone_water_l: Array
    """[B, Z] water delivered per zone [L]."""
    flow_l_s: Array
    """[B] average total flow [L/s]."""
    pressure_frac: Array
    """[B] line pressure as a fraction of the shut-off head at full speed."""
    current_frac: Array
    """[B] pump current as a fraction of its rating."""
    power_kw: Array
    """[B] pump electrical power [kW]."""
    dead_heading: Array
    """[B] bool: pump running with no open path."""


def valve_failure_latch(xp: Any, failed: Array, commanded_open: Array, seen_open: Array) -> Array:
    """Which valves count as failed [B, Z] (or [Z]), 1.0 or 0.0.

    A valve commanded open that reads closed afterwards is failed until it is seen open again
    (an operator tests it in manual mode): controllers leave its zone alone rather than pump at
    a path that may be dead, and never pair two untried valves after a retry. The twin and the
    service's controller both keep it with this function, so the policy learns on the signal it
    is served.
    """
    return xp.where(seen_open, 0.0, xp.where(commanded_open, 1.0, failed))


def step_hydraulics(xp: Any, cfg: HydraulicsConfig, params: TwinParams, prev_cmd: Array, valve_pos: Array,
                    cmd: Array, pump: Array, wear: Array, dt_s: float) -> HydraulicsOut:
    """Advance valves and pump over one step of ``dt_s`` seconds.

    ``cmd`` [B, Z] holds the effective valve commands (0/1, faults already applied), ``pump``
    [B] the pump speed fraction.
    """
    x = xp  # array namespace
    # Opening delay applies only when a closed valve is told to open.
    delay = params.valve_delay_s * cmd * (1.0 - prev_cmd)
    rise_time = x.maximum(dt_s - delay, 0.0)
    tau = params.valve_tau_s
    decay = x.exp_decay(-rise_time / tau)  # mostly underflows: the step is minutes, valves take seconds
    gap = valve_pos - cmd
    held = x.minimum(delay, dt_s)
    valve_avg = (valve_pos * held + cmd * rise_time + gap * tau * (1.0 - decay)) * (1.0 / dt_s)
    valve_end = cmd + gap * decay

    n_open = x.sum(valve_avg, axis=1)
    qmax = params.pump_qmax * (1.0 - 0.5 * wear)
    q_frac = n_open / x.sqrt(n_open * n_open + params.network_k * qmax * qmax)
    flow = pump * qmax * q_frac
    share = valve_avg / x.maximum(n_open, 1e-6)[:, None]
    zone_water = share * (flow * dt_s)[:, None]
    pressure = pump * pump * (1.0 - q_frac * q_frac)
    power_frac = pump * pump * pump * (0.45 + 0.55 * q_frac)
    current = power_frac * (1.0 + wear)
    dead = (pump > PUMP_RUNNING_THRESHOLD) & (n_open < DEAD_HEAD_OPEN_THRESHOLD)
    return HydraulicsOut(valve_avg=valve_avg, valve_end=valve_end, zone_water_l=zone_water, flow_l_s=flow,
                         pressure_frac=pressure, current_frac=current,
                         power_kw=power_frac * cfg.pump_rated_power_kw, dead_heading=dead)
