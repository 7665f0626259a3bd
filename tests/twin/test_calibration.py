"""Soil calibration: recover a twin zone's known soil parameters from its own noisy log.

The data come from the real twin (numpy backend, 10-minute steps, 3 % probe noise). The
irrigation policy peeks at the true moisture of zone 0 only to guarantee that the log holds
what makes the parameters identifiable: wetting well above field capacity (drainage rate and
field capacity) and drying into water stress (wilting point). Lights stay on to raise the
crop demand so a dry spell fits in a short log. Ten days of the 20-day episode keep the test
fast; the episode is never truncated, so the parameters never change under the log.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pytest

from twin import GreenhouseTwin
from twin.calibration import (
    CalibrationResult,
    SoilLog,
    fit_soil_parameters,
    fit_zones,
    simulate_zone,
)
from twin.climate import crop_coefficient

SEED = 15  # zone 0 is a loam; this weather and crop age give ~5 mm/day of demand
DAYS = 10
DT_S = 600.0
NOISE = 0.03
TOLERANCE = 0.05  # the acceptance criterion: within 5 % of the truth
CHECKED = ("field_capacity", "wilting_point", "hourly_retention", "drain_frac", "root_mm")


@dataclass(frozen=True)
class TwinRun:
    log: SoilLog
    truth: dict[str, float]
    theta: np.ndarray
    """(T,) true water content after each step."""
    uptake_mm: np.ndarray
    ks: np.ndarray


def _run_twin() -> TwinRun:
    twin = GreenhouseTwin(num_instances=1, seed=SEED, dt_s=DT_S, sensor_noise=NOISE, episode_days=20)
    twin.reset()
    cfg = twin.config
    prm = twin.params
    fc, wp = float(prm.field_capacity[0, 0]), float(prm.wilting_point[0, 0])
    sat = float(prm.saturation[0, 0])
    drain_frac = float(prm.drain_frac[0, 0])
    truth = {
        "field_capacity": fc, "wilting_point": wp, "saturation": sat, "root_mm": float(prm.root_mm[0, 0]),
        "drain_frac": drain_frac, "hourly_retention": (1.0 - drain_frac) ** (1.0 / cfg.dt_h),
        "theta0": float(twin.state.theta[0, 0]),
    }
    crop_day0 = float(prm.crop_day0[0])
    steps = int(DAYS * 86400 / DT_S)
    assert steps < cfg.horizon_steps
    z = cfg.zones
    cols: dict[str, list[float]] = {k: [] for k in ("obs", "irr", "et0", "uptake", "ks", "theta")}
    wet = True
    for _ in range(steps):
        theta = float(twin.state.theta[0, 0])
        if wet and theta > fc + 0.5 * (sat - fc):
            wet = False
        elif not wet and theta < wp + 0.3 * (fc - wp):
            wet = True
        action = np.zeros((1, z + 2), dtype=np.float32)
        action[0, z + 1] = 100.0  # lights on: more demand, faster drying
        if wet:
            action[0, :z] = 1.0  # all valves with the pump: no dead-heading, low line pressure
            action[0, z] = 100.0
        _, _, terminated, truncated, info = twin.step(action)
        assert not (terminated[0] or truncated[0])
        cols["obs"].append(float(np.mean(info["readings"]["soil_vwc"][0, 0, :])))
        cols["irr"].append(float(info["irrigation_mm"][0, 0]))
        cols["et0"].append(float(info["et0_mm_h"][0]))
        cols["uptake"].append(float(info["uptake_mm"][0, 0]))
        cols["ks"].append(float(info["ks"][0, 0]))
        cols["theta"].append(float(twin.state.theta[0, 0]))
    day = crop_day0 + (np.arange(steps) + 0.5) * (DT_S / 86400.0)
    kc, _ = crop_coefficient(np, cfg.crop, day)
    etc = np.array(cols["et0"]) * kc * cfg.dt_h
    log = SoilLog(moisture_vwc=np.array(cols["obs"]), irrigation_mm=np.array(cols["irr"]), etc_mm=etc,
                  dt_s=DT_S)
    return TwinRun(log=log, truth=truth, theta=np.array(cols["theta"]), uptake_mm=np.array(cols["uptake"]),
                   ks=np.array(cols["ks"]))


@pytest.fixture(scope="module")
def run() -> TwinRun:
    return _run_twin()


def _wrong_guess(truth: dict[str, float]) -> dict[str, float]:
    """30 % off in the direction that hurts: fc high, wp low, drainage and roots off too."""
    return {"field_capacity": 1.3 * truth["field_capacity"], "wilting_point": 0.7 * truth["wilting_point"],
            "hourly_retention": 0.8, "root_mm": 1.3 * truth["root_mm"]}


def _rel_errors(result: CalibrationResult, truth: dict[str, float]) -> dict[str, float]:
    return {k: abs(result.params[k] / truth[k] - 1.0) for k in CHECKED}


@pytest.fixture(scope="module")
def fit(run: TwinRun) -> tuple[CalibrationResult, float]:
    start = time.perf_counter()
    result = fit_soil_parameters(run.log, initial=_wrong_guess(run.truth))
    return result, time.perf_counter() - start


def test_log_matches_the_twin(run: TwinRun) -> None:
    """The log is built the way the twin computes demand, and covers both regimes."""
    # Uptake is the unstressed demand times Ks (the water-availability cap never binds here:
    # the zone stays well above the wilting point).
    np.testing.assert_allclose(run.uptake_mm, run.log.etc_mm * run.ks, rtol=1e-5, atol=1e-9)
    assert run.ks.min() < 0.7 and np.mean(run.ks < 1.0) > 0.2
    assert run.theta.max() > run.truth["field_capacity"] + 0.03
    # With the true parameters the calibration's forward model is the twin's soil, step for step.
    sim = simulate_zone(run.truth, run.log)
    np.testing.assert_allclose(sim, run.theta, atol=1e-5)


def test_recovers_known_parameters_within_5_percent(run: TwinRun,
                                                    fit: tuple[CalibrationResult, float]) -> None:
    result, seconds = fit
    assert result.success, result.message
    assert set(result.fitted) == {"field_capacity", "wilting_point", "hourly_retention", "root_mm", "theta0"}
    errors = _rel_errors(result, run.truth)
    assert max(errors.values()) < TOLERANCE, errors
    assert result.params["wilting_point"] < result.params["field_capacity"]
    # The reported standard errors are honest: the truth lies within a few of them.
    for k in CHECKED:
        assert abs(result.params[k] - run.truth[k]) < 4.0 * result.stderr[k], (k, result.stderr)
    assert seconds < 60.0


def test_fitted_trajectory_rmse_is_at_the_noise_level(run: TwinRun,
                                                      fit: tuple[CalibrationResult, float]) -> None:
    result, _ = fit
    sim = simulate_zone(result.params, run.log)
    rmse = float(np.sqrt(np.mean((sim - run.log.moisture_vwc) ** 2)))
    assert rmse == pytest.approx(result.residual_rmse, rel=1e-6)
    # Two probes, each with 3 % relative noise, are averaged per reading.
    expected = float(np.sqrt(np.mean((NOISE * run.theta) ** 2 / 2.0)))
    assert 0.85 * expected < rmse < 1.15 * expected
    # The model error itself is far below the noise.
    assert float(np.sqrt(np.mean((sim - run.theta) ** 2))) < 0.25 * expected


def test_gaps_and_spikes_still_fit(run: TwinRun) -> None:
    """NaN gaps (a day offline plus scattered drop-outs) and a few spikes do not move the fit."""
    moisture = run.log.moisture_vwc.copy()
    rng = np.random.default_rng(0)
    moisture[rng.random(moisture.size) < 0.15] = np.nan
    moisture[400:544] = np.nan
    spikes = rng.choice(np.flatnonzero(np.isfinite(moisture)), size=10, replace=False)
    moisture[spikes] += 0.1
    gappy = SoilLog(moisture_vwc=moisture, irrigation_mm=run.log.irrigation_mm, etc_mm=run.log.etc_mm,
                    dt_s=DT_S)
    [result] = fit_zones([gappy], initial=_wrong_guess(run.truth))
    assert result.success, result.message
    assert result.n_obs == int(np.isfinite(moisture).sum())
    assert np.isfinite(result.cost) and np.isfinite(result.residual_rmse)
    errors = _rel_errors(result, run.truth)
    assert max(errors.values()) < TOLERANCE, errors


def test_fixed_parameters_stay_put(run: TwinRun) -> None:
    """A known root depth and start moisture are held; only the rest is fitted."""
    n = 432  # three days keep this cheap
    log = SoilLog(moisture_vwc=run.log.moisture_vwc[:n], irrigation_mm=run.log.irrigation_mm[:n],
                  etc_mm=run.log.etc_mm[:n], dt_s=DT_S, theta0=run.truth["theta0"])
    result = fit_soil_parameters(log, fixed={"root_mm": run.truth["root_mm"],
                                             "wilting_point": run.truth["wilting_point"]})
    assert result.fitted == ("field_capacity", "hourly_retention")
    assert result.params["root_mm"] == run.truth["root_mm"]
    assert result.params["wilting_point"] == run.truth["wilting_point"]
    assert result.params["theta0"] == run.truth["theta0"]
    assert abs(result.params["field_capacity"] / run.truth["field_capacity"] - 1.0) < TOLERANCE


def test_unidentified_parameter_gets_a_large_stderr() -> None:
    """A log that never dries into stress cannot pin the wilting point, and says so."""
    t = 300
    irrigation = np.where(np.arange(t) % 100 < 10, 2.0, 0.0)
    log = SoilLog(moisture_vwc=np.full(t, np.nan), irrigation_mm=irrigation, etc_mm=np.full(t, 0.05),
                  dt_s=DT_S, theta0=0.26)
    truth = {"field_capacity": 0.27, "wilting_point": 0.12, "hourly_retention": 0.95, "root_mm": 300.0}
    clean = simulate_zone(truth, log)
    log = SoilLog(moisture_vwc=clean * (1.0 + 0.01 * np.random.default_rng(1).standard_normal(t)),
                  irrigation_mm=irrigation, etc_mm=log.etc_mm, dt_s=DT_S, theta0=0.26)
    result = fit_soil_parameters(log, initial=truth, fixed={"root_mm": 300.0})
    assert result.stderr["field_capacity"] < 0.01
    assert result.stderr["wilting_point"] > 0.1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"moisture_vwc": np.zeros((5, 2))}, "1-D"),
        ({"irrigation_mm": np.zeros(4)}, "equal length"),
        ({"etc_mm": np.zeros(6)}, "equal length"),
        ({"etc_mm": np.full(5, -1.0)}, "non-negative"),
        ({"irrigation_mm": np.array([0.0, np.nan, 0.0, 0.0, 0.0])}, "finite"),
        ({"moisture_vwc": np.array([0.2, np.inf, 0.2, 0.2, 0.2])}, "infinity"),
        ({"dt_s": 0.0}, "dt_s"),
        ({"theta0": 1.5}, "theta0"),
    ],
)
def test_bad_logs_raise(kwargs: dict[str, object], match: str) -> None:
    base: dict[str, object] = {"moisture_vwc": np.full(5, 0.2), "irrigation_mm": np.zeros(5),
                               "etc_mm": np.full(5, 0.05), "dt_s": DT_S}
    with pytest.raises(ValueError, match=match):
        SoilLog(**{**base, **kwargs})  # type: ignore[arg-type]


def test_too_few_readings_and_unknown_names_raise() -> None:
    moisture = np.full(20, np.nan)
    moisture[:3] = 0.2
    log = SoilLog(moisture_vwc=moisture, irrigation_mm=np.zeros(20), etc_mm=np.full(20, 0.05), dt_s=DT_S)
    with pytest.raises(ValueError, match="cannot determine"):
        fit_soil_parameters(log)
    with pytest.raises(ValueError, match="unknown soil parameters"):
        fit_soil_parameters(log, fixed={"porosity": 0.4})
