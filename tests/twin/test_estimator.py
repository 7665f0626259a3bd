"""Soil-moisture estimator driven by the real twin: noise, probe drift, outages, persistence.

The twin runs on numpy with 10-min steps under a simple expert (all valves open with the pump
at 70 % while the mean moisture observation is below the band's low edge, closed above its
high edge), so moisture moves. The estimator is fed exactly what the runtime would have: probe
readings (NaN when missing), the applied irrigation and ETc = ET0 * Kc * dt_h, with Kc from the
twin's own crop curve at mid-step (the twin's unstressed demand; actual uptake is the model's job).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from twin import FaultConfig, GreenhouseTwin
from twin.climate import crop_coefficient
from twin.estimator import (
    GreenhouseEstimator,
    ZoneEstimate,
    ZoneEstimator,
    ZoneSoilModel,
    models_from_twin_params,
)

NOISE = 0.05
WARMUP = 20
"""Steps for the broad initial prior to converge; errors are scored after them."""


@dataclass(frozen=True)
class Run:
    twin: GreenhouseTwin
    readings: np.ndarray  # (T, B, Z, P)
    irrigation: np.ndarray  # (T, B, Z)
    etc: np.ndarray  # (T, B)
    theta: np.ndarray  # (T, B, Z) truth after each step

    def models(self, i: int) -> list[ZoneSoilModel]:
        return models_from_twin_params(self.twin.params, i, self.twin.config.dt_s)


def _simulate(b: int, steps: int, seed: int, faults: FaultConfig | None = None) -> Run:
    twin = GreenhouseTwin(num_instances=b, seed=seed, sensor_noise=NOISE, faults=faults or FaultConfig())
    obs = twin.reset()
    sl, z, cfg = twin.observation_spec.slices, twin.config.zones, twin.config
    irrigating = np.zeros(b, dtype=bool)
    out: dict[str, list[np.ndarray]] = {"r": [], "i": [], "e": [], "t": []}
    for _ in range(steps):
        mean = obs[:, sl["moisture"]].mean(axis=1)
        irrigating = np.where(mean < obs[:, sl["target_low"]].mean(axis=1), True,
                              np.where(mean > obs[:, sl["target_high"]].mean(axis=1), False, irrigating))
        action = np.zeros((b, z + 2), dtype=np.float32)
        action[:, :z] = irrigating[:, None]
        action[:, z] = np.where(irrigating, 70.0, 0.0)
        kc, _ = crop_coefficient(np, cfg.crop,
                                 twin.params.crop_day0 + (twin.state.step + 0.5) * cfg.dt_s / 86400.0)
        obs, _, terminated, truncated, info = twin.step(action)
        assert not (terminated | truncated).any()
        out["r"].append(np.asarray(info["readings"]["soil_vwc"], dtype=float))
        out["i"].append(np.asarray(info["irrigation_mm"], dtype=float))
        out["e"].append(np.asarray(info["et0_mm_h"] * kc * cfg.dt_h, dtype=float))
        out["t"].append(np.asarray(twin.state.theta, dtype=float))
    return Run(twin, *(np.stack(out[k]) for k in "riet"))


@pytest.fixture(scope="module")
def run() -> Run:
    return _simulate(b=2, steps=400, seed=5)


def _replay_zone(run: Run, i: int, z: int, readings: np.ndarray | None = None,
                 irrigation: np.ndarray | None = None) -> list[ZoneEstimate]:
    est = ZoneEstimator(run.models(i)[z], readings.shape[1] if readings is not None else 2)
    r = run.readings[:, i, z] if readings is None else readings
    irr = run.irrigation[:, i, z] if irrigation is None else irrigation
    return [est.update(r[t], irr[t], run.etc[t, i]) for t in range(len(r))]


def _theta(estimates: list[ZoneEstimate]) -> np.ndarray:
    return np.array([e.theta for e in estimates])


def test_zone_model_is_the_twins_own_soil_step(run: Run) -> None:
    """Fed the true state and inputs, the process model reproduces the twin to float32 rounding."""
    for z, model in enumerate(run.models(0)):
        pred = [model.predict(run.theta[t - 1, 0, z], run.irrigation[t, 0, z], run.etc[t, 0])
                for t in range(1, len(run.theta))]
        np.testing.assert_allclose(pred, run.theta[1:, 0, z], atol=2e-6)
    model = run.models(0)[0]
    dry = (0.5 * (model.wilting_point + model.field_capacity)
           - 0.2 * (model.field_capacity - model.wilting_point))
    assert model.predict_with_slope(model.saturation + 0.1, 0.0, 0.1)[1] == pytest.approx(0.0, abs=1e-6)
    assert (model.predict_with_slope(model.field_capacity + 0.01, 0.0, 0.0)[1]
            == pytest.approx(1 - model.drain_frac))
    assert 0.0 < model.predict_with_slope(dry, 0.0, 0.5)[1] <= 1.0


def test_noise_only_estimate_beats_probe_mean(run: Run) -> None:
    for i in range(run.readings.shape[1]):
        est = GreenhouseEstimator(run.models(i), probes_per_zone=2)
        out = [est.update(run.readings[t, i], run.irrigation[t, i], run.etc[t, i])
               for t in range(len(run.etc))]
        theta = np.array([[e.theta for e in step] for step in out])[WARMUP:]
        std = np.array([[e.std for e in step] for step in out])[WARMUP:]
        truth = run.theta[WARMUP:, i]
        rmse = float(np.sqrt(np.mean((theta - truth) ** 2)))
        raw = float(np.sqrt(np.mean((run.readings[WARMUP:, i].mean(axis=2) - truth) ** 2)))
        assert rmse < 0.01 and rmse / raw < 0.5, (rmse, raw)  # measured about 0.001 vs 0.009
        z_rms = float(np.sqrt(np.mean(((theta - truth) / std) ** 2)))
        assert 0.3 < z_rms < 2.0  # the reported std is honest
        assert all(s == "ok" for step in out for e in step for s in e.probe_status)
        assert not any(e.filled for step in out for e in step)


@pytest.mark.parametrize(("i", "onset", "sign"), [(0, 50, 1.0), (1, 200, -1.0)])
def test_drifting_probe_is_flagged_and_excluded(run: Run, i: int, onset: int, sign: float) -> None:
    """Instance 1 drifts down while it irrigates (steps 221-248): the model must referee a moving theta."""
    n = onset + 200
    bias = sign * 0.001 * np.maximum(np.arange(n) - onset + 1, 0)
    for z in range(run.theta.shape[2]):
        readings = run.readings[:n, i, z].copy()
        readings[:, 1] += bias
        out = _replay_zone(run, i, z, readings)
        flagged = [t for t, e in enumerate(out) if e.probe_status[1] == "drifting"]
        beyond_3sigma = int(np.argmax(np.abs(bias) > 3 * NOISE * run.theta[:n, i, z]))
        assert flagged and flagged[0] <= beyond_3sigma + 10, (z, flagged[:1], beyond_3sigma)
        assert flagged == list(range(flagged[0], n))  # stays excluded while it drifts
        assert all(e.probe_status[0] == "ok" for e in out)
        err = np.abs(_theta(out) - run.theta[:n, i, z])
        assert err[onset:].max() < 0.02


def test_drifting_probe_recovers_when_its_readings_return_to_normal(run: Run) -> None:
    readings = run.readings[:, 0, 2].copy()
    readings[50:120, 1] += 0.001 * np.arange(1, 71)
    out = _replay_zone(run, 0, 2, readings)
    assert out[119].probe_status[1] == "drifting"
    back = next(t for t in range(120, len(out)) if out[t].probe_status[1] == "ok")
    assert back <= 120 + 40
    assert all(e.probe_status == ("ok", "ok") for e in out[back:])


def test_offline_probe_and_comm_loss_are_filled_and_recover(run: Run) -> None:
    for z in range(3):
        readings = run.readings[:300, 1, z].copy()
        readings[100:200, 0] = np.nan  # one probe offline for 100 steps
        readings[250:270, :] = np.nan  # full communication loss for 20 steps
        out = _replay_zone(run, 1, z, readings)
        theta = _theta(out)
        err = np.abs(theta - run.theta[:300, 1, z])
        assert np.isfinite(theta).all() and np.isfinite([e.std for e in out]).all()
        assert err[WARMUP:].max() < 0.03 and err[290:].max() < 0.01
        assert [e.probe_status for e in out[150:200]] == [("offline", "ok")] * 50
        assert not any(e.filled for e in out[100:200])  # the other probe still updates
        assert all(e.filled for e in out[250:270]) and out[265].probe_status == ("offline", "offline")
        assert out[252].probe_status == ("missing", "missing")
        assert out[270].std < out[269].std  # readings are back and used
        assert all(e.probe_status == ("ok", "ok") and not e.filled for e in out[270:])


def test_unmeasured_irrigation_is_a_model_error_not_a_drift(run: Run) -> None:
    """Both probes see water the flow meter missed: the filter follows them and flags neither."""
    for z in range(3):
        out = _replay_zone(run, 1, z, irrigation=np.zeros(len(run.etc)))  # it irrigates at steps 221-248
        err = np.abs(_theta(out) - run.theta[:, 1, z])[WARMUP:]
        assert all(e.probe_status == ("ok", "ok") for e in out)
        assert err.max() < 0.03 and np.sqrt(np.mean(err**2)) < 0.01


def test_state_dict_round_trip_gives_identical_estimates(run: Run) -> None:
    readings = run.readings[:, 0].copy()
    readings[50:, 2, 1] += 0.001 * np.arange(1, len(readings) - 49)
    readings[140:170, 3, 0] = np.nan
    a = GreenhouseEstimator(run.models(0), probes_per_zone=2)
    for t in range(150):
        a.update(readings[t], run.irrigation[t, 0], run.etc[t, 0])
    b = GreenhouseEstimator(run.models(0), probes_per_zone=2)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.state_dict() == a.state_dict()
    for t in range(150, 250):
        assert a.update(readings[t], run.irrigation[t, 0], run.etc[t, 0]) == \
            b.update(readings[t], run.irrigation[t, 0], run.etc[t, 0])
    with pytest.raises(ValueError, match="layout"):
        GreenhouseEstimator(run.models(0)[:3], probes_per_zone=2).load_state_dict(a.state_dict())


def test_greenhouse_update_accepts_none_and_scalar_demand(run: Run) -> None:
    est = GreenhouseEstimator.from_twin_params(run.twin.params, 1, run.twin.config.dt_s)
    vwc = run.readings[0, 1].tolist()
    vwc[0] = [None, None]
    out = est.update(vwc, run.irrigation[0, 1], float(run.etc[0, 1]))
    assert len(out) == 6 and out[0].filled and out[0].probe_status == ("missing", "missing")
    assert not out[1].filled and np.isfinite(out[0].theta)


def test_twin_fault_injection_keeps_estimates_finite_and_close() -> None:
    run = _simulate(b=1, steps=500, seed=7, faults=FaultConfig(sensor_drift=0.05, sensor_offline=0.05,
                                                                comm_loss=0.1))
    truly_drifting = np.asarray(run.twin.state.drift_rate) != 0.0
    assert truly_drifting.any() and np.isnan(run.readings).any()
    for i in range(1):
        est = GreenhouseEstimator.from_twin_params(run.twin.params, i, run.twin.config.dt_s)
        out = [est.update(run.readings[t, i], run.irrigation[t, i], run.etc[t, i])
               for t in range(len(run.etc))]
        theta = np.array([[e.theta for e in step] for step in out])
        assert np.isfinite(theta).all()
        err = np.abs(theta - run.theta[:, i])[WARMUP:]
        assert err.max() < 0.03 and np.sqrt(np.mean(err**2)) < 0.01
        status = np.array([[e.probe_status for e in step] for step in out])  # (T, Z, P)
        filled = np.array([[e.filled for e in step] for step in out])
        assert (filled == (status != "ok").all(axis=2)).all()  # filled exactly when no probe is trusted
        assert filled[np.isnan(run.readings[:, i]).all(axis=2)].all()
        flagged = status[-1] == "drifting"
        assert not (flagged & ~truly_drifting[i]).any()  # no healthy probe is blamed
