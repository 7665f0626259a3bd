"""The batched moisture filter (twin.kalman) against the service's filterpy estimator.

Both get the same probe readings (drift, outages and comm losses switched on), the same applied
irrigation and the same crop demand; the batched one must give the same estimates and flag the
same probes, on numpy and torch, so the policy trains on the moisture it will be served.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.twin.recording import record_threshold_run
from twin import FaultConfig, GreenhouseTwin
from twin.backend import make_backend
from twin.config import EstimatorConfig
from twin.estimator import GreenhouseEstimator
from twin.kalman import KalmanState, initial_kalman, kalman_step
from twin.types import TwinParams

B, STEPS = 4, 300


def _record(seed: int = 3) -> tuple[GreenhouseTwin, dict[str, np.ndarray]]:
    faults = FaultConfig(sensor_drift=0.03, comm_loss=0.1, sensor_offline=0.02)
    return record_threshold_run(B, STEPS, seed, faults, moisture_estimate=False)


@pytest.fixture(scope="module")
def recorded() -> tuple[GreenhouseTwin, dict[str, np.ndarray]]:
    return _record()


def _params64(twin: GreenhouseTwin) -> TwinParams:
    return TwinParams(**{k: (np.asarray(v, dtype=np.float64) if np.asarray(v).dtype.kind == "f"
                             else np.asarray(v))
                         for k, v in twin.params.arrays().items()})


def _run_batched(backend_name: str, twin: GreenhouseTwin,
                 rec: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    backend = make_backend(backend_name, "cpu")
    cast = (lambda a: a) if backend_name == "numpy" else __import__("torch").as_tensor
    params = TwinParams(**{k: cast(v) for k, v in _params64(twin).arrays().items()})
    init = initial_kalman(make_backend("numpy", "cpu"), _params64(twin), 2)
    state = KalmanState(**{k: cast(np.asarray(v, dtype=np.float64)) for k, v in init.__dict__.items()})
    thetas, flags = [], []
    for t in range(STEPS):
        state = kalman_step(backend.xp, EstimatorConfig(), params, state, cast(rec["probes"][t]),
                            cast(rec["irr"][t]), cast(rec["etc"][t][:, None]), twin.config.dt_h)
        thetas.append(np.asarray(state.theta, dtype=np.float64))
        flags.append(np.asarray(state.drifting) > 0.5)
    return np.stack(thetas), np.stack(flags)


def _run_filterpy(twin: GreenhouseTwin, rec: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    thetas = np.zeros(rec["theta"].shape)
    flags = np.zeros(rec["probes"].shape, dtype=bool)
    for i in range(B):
        est = GreenhouseEstimator.from_twin_params(_params64(twin), i, twin.config.dt_s)
        for t in range(STEPS):
            out = est.update(rec["probes"][t, i], rec["irr"][t, i], rec["etc"][t, i])
            thetas[t, i] = [e.theta for e in out]
            flags[t, i] = [[s == "drifting" for s in e.probe_status] for e in out]
    return thetas, flags


def test_batched_filter_matches_the_service_estimator(
        recorded: tuple[GreenhouseTwin, dict[str, np.ndarray]]) -> None:
    twin, rec = recorded
    theta_b, drift_b = _run_batched("numpy", twin, rec)
    theta_f, drift_f = _run_filterpy(twin, rec)
    present = ~np.isnan(rec["probes"])
    # The service reports a probe not heard this step as missing, whatever its drift flag.
    assert drift_b[present].any(), "the scenario must make the filter flag a drifting probe"
    np.testing.assert_array_equal(drift_b[present], drift_f[present])
    np.testing.assert_allclose(theta_b, theta_f, rtol=0, atol=2e-4)


def test_numpy_and_torch_filters_agree(recorded: tuple[GreenhouseTwin, dict[str, np.ndarray]]) -> None:
    pytest.importorskip("torch")
    twin, rec = recorded
    theta_n, drift_n = _run_batched("numpy", twin, rec)
    theta_t, drift_t = _run_batched("torch", twin, rec)
    np.testing.assert_array_equal(drift_n, drift_t)
    np.testing.assert_allclose(theta_n, theta_t, rtol=0, atol=1e-9)


def test_estimate_beats_the_probe_mean_under_drift(
        recorded: tuple[GreenhouseTwin, dict[str, np.ndarray]]) -> None:
    twin, rec = recorded
    theta_b, _ = _run_batched("numpy", twin, rec)
    heard = (~np.isnan(rec["probes"])).sum(axis=3)
    mean = np.where(heard > 0, np.nansum(rec["probes"], axis=3) / np.maximum(heard, 1), np.nan)
    seen = ~np.isnan(mean)
    late = slice(STEPS // 2, None)
    err_est = np.abs(theta_b[late] - rec["theta"][late])[seen[late]].mean()
    err_mean = np.abs(mean[late] - rec["theta"][late])[seen[late]].mean()
    assert err_est < 0.5 * err_mean, (err_est, err_mean)


def test_twin_observes_the_estimate_not_the_probe_mean() -> None:
    faults = FaultConfig(sensor_drift=0.05)
    twins = {flag: GreenhouseTwin(num_instances=8, seed=1, faults=faults, moisture_estimate=flag)
             for flag in (True, False)}
    errors = {}
    for flag, twin in twins.items():
        obs = twin.reset()
        err = []
        for _ in range(200):
            obs, *_ = twin.step(np.zeros((8, 8), dtype=np.float32))
            err.append(np.abs(obs[:, :6] - twin.state.theta).mean())
        errors[flag] = float(np.mean(err[100:]))
    assert errors[True] < 0.5 * errors[False], errors
