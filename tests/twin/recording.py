"""A recorded twin run for the estimator tests: what a moisture filter is fed, step by step."""

from __future__ import annotations

import numpy as np

from twin import FaultConfig, GreenhouseTwin
from twin.climate import crop_coefficient


def record_threshold_run(num: int, steps: int, seed: int, faults: FaultConfig, *,
                         moisture_estimate: bool = True) -> tuple[GreenhouseTwin, dict[str, np.ndarray]]:
    """Drive ``num`` noisy, faulty twins with "irrigate a zone while it is dry" and record, per step,
    the probe readings, the irrigation applied, the crop demand ET0 x Kc (one per instance) and
    the true moisture, all float64."""
    twin = GreenhouseTwin(num_instances=num, seed=seed, sensor_noise=0.05, faults=faults,
                          moisture_estimate=moisture_estimate)
    obs = twin.reset()
    cfg, z, sl = twin.config, twin.config.zones, twin.observation_spec.slices
    out: dict[str, list[np.ndarray]] = {"probes": [], "irr": [], "etc": [], "theta": []}
    for _ in range(steps):
        dry = obs[:, sl["moisture"]] < obs[:, sl["target_low"]] + 0.01
        action = np.zeros((num, z + 2), dtype=np.float32)
        action[:, :z] = dry
        action[:, z] = np.where(dry.any(axis=1), 70.0, 0.0)
        kc, _ = crop_coefficient(np, cfg.crop,
                                 twin.params.crop_day0 + (twin.state.step + 0.5) * cfg.dt_s / 86400.0)
        obs, _, terminated, _, info = twin.step(action)
        assert not terminated.any(), "the recording rule drove the twin into a hard termination"
        out["probes"].append(np.asarray(info["readings"]["soil_vwc"], dtype=np.float64))
        out["irr"].append(np.asarray(info["irrigation_mm"], dtype=np.float64))
        out["etc"].append(np.asarray(info["et0_mm_h"] * kc * cfg.dt_h, dtype=np.float64))
        out["theta"].append(np.asarray(twin.state.theta, dtype=np.float64))
    return twin, {k: np.stack(v) for k, v in out.items()}
