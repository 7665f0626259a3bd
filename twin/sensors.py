"""Sensors, faults and the observation vector.

Per-step noise and fault events come from a shared table of pre-drawn standard normals and
uniforms; each (instance, episode, step) picks one row by a counter-based hash. A row is a
vector of independent draws, so one gather replaces dozens of generator calls per instance,
and the choice of row depends only on (seed, instance id, episode, step).

Faults (each with a per-instance rate): a probe starts drifting (bias growing every step), a
probe goes offline (NaN for hours), a communication loss drops about half the fields of one
message (NaN), a valve sticks closed or open, the pump starts wearing (less flow, more current).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from twin.backend import Array, Backend
from twin.config import TwinConfig
from twin.types import TwinParams, TwinState

NOISE_ROWS = 1 << 14
_S_NOISE_ROW = 7
CLIMATE_SENSORS = ("air_temp_c", "air_rh_pct", "par_umol_m2_s", "co2_ppm", "leaf_temp_c")
(U_DRIFT_ON, U_DRIFT_SEL, U_OFF_ON, U_OFF_SEL, U_OFF_DUR, U_COMM, U_STUCK_ON, U_STUCK_SEL, U_STUCK_KIND,
 U_WEAR_ON) = range(10)
N_UNIFORM = 10
MAX_WEAR = 0.6


@dataclass(frozen=True)
class NoiseTable:
    """Rows of [probe normals (Z*P), climate normals (5), flow, current, uniforms (10)]."""

    table: Array
    n_normal: int
    normals: Array
    """The normal columns alone (contiguous): a twin without faults never reads the uniforms."""

    @classmethod
    def build(cls, cfg: TwinConfig, seed: int, backend: Backend) -> NoiseTable:
        rng = np.random.default_rng([seed, 0x4E015E])
        n_normal = cfg.zones * cfg.probes_per_zone + len(CLIMATE_SENSORS) + 2
        normals = rng.standard_normal((NOISE_ROWS, n_normal))
        uniforms = rng.random((NOISE_ROWS, N_UNIFORM))
        table = np.concatenate([normals, uniforms], axis=1).astype(np.float32)
        return cls(table=backend.asarray(table), n_normal=n_normal,
                   normals=backend.asarray(np.ascontiguousarray(table[:, :n_normal])))

    def draw(self, backend: Backend, params: TwinParams, state: TwinState, uniforms: bool = True) -> Array:
        """One row per instance for its current (episode, step): shape [B, columns] (without the
        uniforms: [B, n_normal], the same values)."""
        counter = state.episode * 1_048_576 + state.step
        row = backend.hash_counter(params.key, counter, _S_NOISE_ROW) & (NOISE_ROWS - 1)
        return backend.take_rows(self.table if uniforms else self.normals, row)


def _one_hot(backend: Backend, index: Array, n: int, active: Array) -> Array:
    return (backend.arange(n)[None, :] == index[:, None]) & active[:, None]


def advance_faults(backend: Backend, cfg: TwinConfig, params: TwinParams, state: TwinState, u: Array
                   ) -> dict[str, Array]:
    """New fault-state arrays after this step's onsets (``u`` holds the row's uniforms)."""
    xp = backend.xp
    b = state.theta.shape[0]
    z, pr = cfg.zones, cfg.probes_per_zone
    n_probe = z * pr
    dt_h = cfg.dt_h
    sel = xp.astype(xp.floor(u[:, U_DRIFT_SEL] * n_probe), backend.int)
    sign = 1.0 - 2.0 * xp.astype(u[:, U_DRIFT_SEL] * n_probe - xp.astype(sel, u.dtype) > 0.5, u.dtype)
    start = _one_hot(backend, sel, n_probe, u[:, U_DRIFT_ON] < params.p_drift).reshape(b, z, pr)
    rate = (cfg.faults.drift_rate_vwc_per_h * dt_h) * sign
    drift_rate = xp.where(start, rate[:, None, None], state.drift_rate)

    sel = xp.astype(xp.floor(u[:, U_OFF_SEL] * n_probe), backend.int)
    start = _one_hot(backend, sel, n_probe, u[:, U_OFF_ON] < params.p_offline).reshape(b, z, pr)
    duration = xp.floor(cfg.faults.offline_hours * (0.5 + u[:, U_OFF_DUR]) / dt_h) + 1.0
    offline = xp.where(start, duration[:, None, None], xp.maximum(state.offline_steps - 1.0, 0.0))

    sel = xp.astype(xp.floor(u[:, U_STUCK_SEL] * z), backend.int)
    start = _one_hot(backend, sel, z, u[:, U_STUCK_ON] < params.p_valve_stuck)
    kind = xp.where(u[:, U_STUCK_KIND] < 0.5, 1, 2)
    valve_fault = xp.where(start & (state.valve_fault == 0), kind[:, None], state.valve_fault)

    wear_rate = xp.where(u[:, U_WEAR_ON] < params.p_pump_wear, cfg.faults.wear_per_h * dt_h, state.wear_rate)
    return {"drift_rate": drift_rate, "drift_bias": state.drift_bias + drift_rate, "offline_steps": offline,
            "valve_fault": valve_fault, "wear_rate": wear_rate,
            "wear": xp.minimum(state.wear + wear_rate, MAX_WEAR)}


def read_sensors(backend: Backend, cfg: TwinConfig, params: TwinParams, theta: Array, drift_bias: Array,
                 offline_steps: Array, climate: dict[str, Array], flow_l_s: Array, current_frac: Array,
                 row: Array, comm_loss: bool) -> dict[str, Array]:
    """Raw readings as the edge box would send them (NaN where missing), telemetry field names."""
    xp = backend.xp
    b = theta.shape[0]
    z, pr = cfg.zones, cfg.probes_per_zone
    n_probe = z * pr
    sigma = cfg.sensor_noise
    noise = row[:, :n_probe].reshape(b, z, pr)
    probes = theta[:, :, None] * (1.0 + sigma * noise) + drift_bias
    probes = xp.clip(probes, 0.0, 0.6)
    lost = offline_steps > 0.0
    if comm_loss:
        event = row[:, -N_UNIFORM + U_COMM] < params.p_comm_loss
        # Which fields a loss drops is decided by a neighbouring column's draw, never by the
        # reading's own noise (that would leave only low-biased survivors).
        coin = xp.concat([row[:, 1:n_probe], row[:, :1]], axis=1).reshape(b, z, pr)
        lost = lost | ((coin > 0.0) & event[:, None, None])
    out = {"soil_vwc": xp.where(lost, xp.nan, probes)}
    # Temperatures get noise relative to a 10 degC scale, the rest relative to the reading.
    scales = {"air_temp_c": None, "air_rh_pct": 1.0, "par_umol_m2_s": 1.0, "co2_ppm": 1.0,
              "leaf_temp_c": None}
    for i, name in enumerate(CLIMATE_SENSORS):
        n = row[:, n_probe + i]
        value = climate[name]
        reading = value + sigma * n * (10.0 if scales[name] is None else value)
        if name == "air_rh_pct":
            reading = xp.clip(reading, 0.0, 100.0)
        elif name in ("par_umol_m2_s", "co2_ppm"):
            reading = xp.maximum(reading, 0.0)
        if comm_loss:
            coin = row[:, n_probe + (i + 1) % len(CLIMATE_SENSORS)]
            reading = xp.where(event & (coin > 0.0), xp.nan, reading)
        out[name] = reading
    out["flow_l_min"] = xp.maximum(flow_l_s * 60.0 * (1.0 + sigma * row[:, n_probe + 5]), 0.0)
    out["pump_current_frac"] = xp.maximum(current_frac * (1.0 + sigma * row[:, n_probe + 6]), 0.0)
    return out


def fuse_probes(xp: Any, probes: Array) -> tuple[Array, Array]:
    """Mean of the valid probes per zone [B, Z] and whether any probe was valid."""
    valid = probes == probes
    count = xp.sum(xp.astype(valid, probes.dtype), axis=2)
    total = xp.sum(xp.where(valid, probes, 0.0), axis=2)
    return total / xp.maximum(count, 1.0), count > 0.0
