"""Contract, determinism, physics sanity and fault tests for the batched twin."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from policy.baselines import RandomController, ThresholdExpert
from twin import TERMINATION_REASONS, FaultConfig, GreenhouseTwin, ObservationSpec
from twin.checks import SpecViolation, check_observation

ALL_FAULTS = FaultConfig.all_on(0.05)
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                   reason="needs a CUDA device (bench/device_check.sh runs it on a lent GPU)")


def _np(a):
    return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def _rollout(twin: GreenhouseTwin, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    obs = [_np(twin.reset())]
    rewards = []
    for a in actions:
        o, r, *_ = twin.step(a)
        obs.append(_np(o))
        rewards.append(_np(r))
    return np.stack(obs), np.stack(rewards)


def _random_actions(b: int, steps: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.uniform(0, 1, (steps, b, 8)).astype(np.float32)
    a[..., :6] = (a[..., :6] > 0.5)
    a[..., 6] = 30 + 50 * a[..., 6]
    a[..., 7] *= 100
    return a


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_same_seed_same_trajectory_bit_for_bit(backend):
    actions = _random_actions(6, 60)
    o1, r1 = _rollout(GreenhouseTwin(6, backend=backend, seed=11, faults=ALL_FAULTS), actions)
    o2, r2 = _rollout(GreenhouseTwin(6, backend=backend, seed=11, faults=ALL_FAULTS), actions)
    assert np.array_equal(o1, o2, equal_nan=True) and np.array_equal(r1, r2)
    o3, _ = _rollout(GreenhouseTwin(6, backend=backend, seed=12, faults=ALL_FAULTS), actions)
    assert not np.array_equal(o1, o3)


def test_numpy_and_torch_agree():
    actions = _random_actions(5, 80, seed=3)
    o_np, r_np = _rollout(GreenhouseTwin(5, backend="numpy", seed=4, faults=ALL_FAULTS), actions)
    o_t, r_t = _rollout(GreenhouseTwin(5, backend="torch", seed=4, faults=ALL_FAULTS), actions)
    np.testing.assert_allclose(o_np, o_t, rtol=2e-4, atol=2e-3)
    np.testing.assert_allclose(r_np, r_t, rtol=1e-3, atol=1e-3)


@requires_cuda
def test_cuda_twin_is_deterministic_and_agrees_with_numpy():
    actions = _random_actions(5, 80, seed=3)
    o1, r1 = _rollout(GreenhouseTwin(5, backend="torch", device="cuda", seed=4, faults=ALL_FAULTS), actions)
    o2, r2 = _rollout(GreenhouseTwin(5, backend="torch", device="cuda", seed=4, faults=ALL_FAULTS), actions)
    assert np.array_equal(o1, o2, equal_nan=True) and np.array_equal(r1, r2)
    o_np, r_np = _rollout(GreenhouseTwin(5, backend="numpy", seed=4, faults=ALL_FAULTS), actions)
    np.testing.assert_allclose(o_np, o1, rtol=2e-4, atol=2e-3)
    np.testing.assert_allclose(r_np, r1, rtol=1e-3, atol=1e-3)


def test_instance_trajectory_does_not_depend_on_batch_size():
    actions = _random_actions(16, 40, seed=5)
    o_small, r_small = _rollout(GreenhouseTwin(4, seed=9), actions[:, :4])
    o_big, r_big = _rollout(GreenhouseTwin(16, seed=9), actions)
    assert np.array_equal(o_small, o_big[:, :4]) and np.array_equal(r_small, r_big[:, :4])


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_observations_stay_in_spec_with_faults_and_random_actions(backend):
    twin = GreenhouseTwin(8, backend=backend, seed=2, validate=True, faults=ALL_FAULTS, sensor_noise=0.1)
    obs = twin.reset()
    ctl = RandomController(seed=1)
    for _ in range(400):
        obs, *_ = twin.step(ctl(obs))
    check_observation(twin, obs)


def test_validator_rejects_bad_returns():
    twin = GreenhouseTwin(2, seed=0)
    obs = twin.reset()
    bad = obs.copy()
    bad[1, 3] = np.nan
    with pytest.raises(SpecViolation, match="not finite"):
        check_observation(twin, bad)
    bad = obs.copy()
    bad[0, 0] = 5.0
    with pytest.raises(SpecViolation, match=r"moisture\[0\]"):
        check_observation(twin, bad)
    with pytest.raises(ValueError, match="shape"):
        twin.step(np.zeros((2, 7)))


def test_water_balance_closes():
    twin = GreenhouseTwin(16, seed=3, episode_days=5)
    obs = twin.reset()
    theta0 = twin.state.theta.astype(np.float64).copy()
    root = twin.params.root_mm.astype(np.float64)
    irrigation = drainage = uptake = 0.0
    expert = ThresholdExpert(refill=0.6, stop=1.6)  # overshoots field capacity so drainage happens
    for _ in range(300):
        before = twin.state.theta.astype(np.float64)
        obs, _, term, trunc, info = twin.step(expert(obs))
        assert not (term | trunc).any()
        after = twin.state.theta.astype(np.float64)
        step_in = info["irrigation_mm"].astype(np.float64)
        step_out = (after - before) * root + info["drainage_mm"] + info["uptake_mm"]
        assert np.allclose(step_in, step_out, atol=1e-4)
        irrigation += step_in.sum()
        drainage += info["drainage_mm"].sum()
        uptake += info["uptake_mm"].sum()
    storage = ((twin.state.theta - theta0) * root).sum()
    assert irrigation > 100 and drainage > 1 and uptake > 10
    assert abs(irrigation - (storage + drainage + uptake)) <= 1e-3 * irrigation


def test_sand_drains_faster_than_clay():
    twin = GreenhouseTwin(1, seed=0, fixed_soils=("sand", "clay", "loam", "sand", "clay", "loam"),
                          sensor_noise=0.0)
    twin.reset()
    p = twin.params
    state = twin.state.replace(theta=p.saturation.copy())
    state2, out = twin.model.step(p, state, np.zeros((1, 8), np.float32))
    excess0 = p.saturation - p.field_capacity
    drained = (excess0 - (state2.theta - p.field_capacity)) / excess0
    assert drained[0, 0] > 1.5 * drained[0, 1]  # sand (0.92/h retention) vs clay (0.98/h)


def test_more_sun_more_demand_and_no_water_no_uptake_at_wilting_point():
    twin = GreenhouseTwin(1, seed=0, sensor_noise=0.0)
    twin.reset()
    p = twin.params
    dry = twin.state.replace(theta=p.wilting_point.copy())
    _, out = twin.model.step(p, dry, np.zeros((1, 8), np.float32))
    assert np.all(out.info["uptake_mm"] == 0.0)
    assert np.all(out.info["ks"] == 0.0)


def test_dead_heading_terminates_with_reason():
    twin = GreenhouseTwin(2, seed=0)
    twin.reset()
    a = np.zeros((2, 8), np.float32)
    a[:, 6] = 50.0  # pump on, every valve closed
    _, _, term, _, info = twin.step(a)
    assert term.all()
    assert [TERMINATION_REASONS[i] for i in info["termination_reason"]] == ["dead_heading"] * 2
    assert "final_obs" in info


def test_safety_valve_opens_at_full_speed_on_one_valve():
    twin = GreenhouseTwin(1, seed=0)
    twin.reset()
    a = np.zeros((1, 8), np.float32)
    a[0, 0] = 1.0
    a[0, 6] = 100.0
    _, _, term, _, info = twin.step(a)
    assert term[0] and TERMINATION_REASONS[info["termination_reason"][0]] == "safety_valve"
    a[0, 6] = 70.0  # the same valve at a sane speed is fine
    twin.reset()
    _, _, term, _, _ = twin.step(a)
    assert not term[0]


def test_pump_wear_raises_current_until_overcurrent():
    twin = GreenhouseTwin(1, seed=0, faults=FaultConfig(pump_degradation=1e9, wear_per_h=0.5))
    twin.reset()
    a = np.ones((1, 8), np.float32)
    a[0, 6], a[0, 7] = 100.0, 0.0
    currents, reasons = [], []
    for _ in range(20):
        _, _, term, _, info = twin.step(a)
        currents.append(float(info["readings"]["pump_current_frac"][0]))
        if term[0]:
            reasons.append(TERMINATION_REASONS[info["termination_reason"][0]])
            break
    assert reasons == ["pump_overcurrent"]
    assert currents[-1] > currents[0]


def test_saturation_soft_limit_warns_without_terminating():
    twin = GreenhouseTwin(1, seed=0, dt_s=600)
    twin.reset()
    p = twin.params
    twin._state = twin.state.replace(theta=p.saturation.copy())
    a = np.zeros((1, 8), np.float32)
    a[0, :6] = 1.0
    a[0, 6] = 80.0
    warned = False
    for _ in range(6):
        _, _, term, _, info = twin.step(a)
        assert not term[0]
        warned |= bool(info["warnings"]["saturated_30min"].any())
    assert warned


def test_truncation_and_same_step_autoreset():
    twin = GreenhouseTwin(3, seed=1, episode_days=5 * 600 / 86400)
    twin.reset()
    a = np.zeros((3, 8), np.float32)
    for _ in range(5):
        obs, _, term, trunc, info = twin.step(a)
    assert trunc.all() and not term.any()
    assert "final_obs" in info and not np.array_equal(info["final_obs"], obs)
    assert np.all(twin.state.step == 0) and np.all(twin.state.episode == 1)


def test_reset_instances_touches_only_those():
    twin = GreenhouseTwin(4, seed=1)
    twin.reset()
    for _ in range(3):
        twin.step(np.zeros((4, 8), np.float32))
    before = twin.state.theta.copy()
    twin.reset_instances(np.array([2]))
    assert np.array_equal(before[[0, 1, 3]], twin.state.theta[[0, 1, 3]])
    assert twin.state.step[2] == 0 and twin.state.episode[2] == 1


def _fault_run(faults: FaultConfig, steps: int = 200, b: int = 8):
    twin = GreenhouseTwin(b, seed=5, faults=faults, sensor_noise=0.0)
    obs = twin.reset()
    expert = ThresholdExpert()
    infos = []
    for _ in range(steps):
        obs, _, _, _, info = twin.step(expert(obs))
        infos.append(info)
    return twin, infos


def test_sensor_drift_grows_a_bias():
    twin, infos = _fault_run(FaultConfig(sensor_drift=0.5))
    assert np.count_nonzero(twin.state.drift_rate) > 0
    bias = np.abs(twin.state.drift_bias).max()
    assert bias > 0.05
    probes = infos[-1]["readings"]["soil_vwc"]
    true = twin.state.theta[:, :, None]
    assert np.nanmax(np.abs(probes - true)) > 0.05


def test_sensor_offline_gives_persistent_nan():
    _, infos = _fault_run(FaultConfig(sensor_offline=0.3, offline_hours=6.0))
    nan = np.stack([np.isnan(i["readings"]["soil_vwc"]) for i in infos])  # [T, B, Z, P]
    assert nan.any()
    # an offline probe stays offline for consecutive steps
    runs = nan[1:] & nan[:-1]
    assert runs.sum() > 0.5 * nan[1:].sum()


def test_comm_loss_drops_fields_but_observation_stays_finite():
    twin, infos = _fault_run(FaultConfig(comm_loss=2.0))
    lost = [np.isnan(i["readings"]["air_temp_c"]).any() for i in infos]
    assert any(lost)
    assert np.isfinite(twin.state.last_obs).all()


def test_stuck_valve_ignores_commands():
    twin = GreenhouseTwin(4, seed=0, faults=FaultConfig(valve_stuck=1e9), sensor_noise=0.0)
    twin.reset()
    a = np.zeros((4, 8), np.float32)
    a[:, :6] = 1.0
    a[:, 6] = 60.0
    twin.step(a)  # faults start at the end of this step
    fault = twin.state.valve_fault.copy()
    assert (fault > 0).sum() == 4  # one stuck valve per instance
    _, _, _, _, info = twin.step(a)
    stuck_closed = fault == 1
    healthy = fault == 0
    # a stuck-closed valve passes only the ~1 s closing tail of the previous step
    assert np.all(info["water_l"][stuck_closed] < 0.01 * info["water_l"][healthy].mean())
    fault = twin.state.valve_fault.copy()
    twin.step(np.zeros((4, 8), np.float32))  # everything commanded closed
    assert np.all(twin.state.valve_cmd[fault == 2] == 1.0)
    assert np.all(twin.state.valve_cmd[fault != 2] == 0.0)


def test_soak_10000_steps_all_faults_no_nan():
    twin = GreenhouseTwin(4, seed=7, faults=FaultConfig.all_on(0.05), sensor_noise=0.1, episode_days=10)
    obs = twin.reset()
    expert = ThresholdExpert()
    for _ in range(10_000):
        obs, reward, *_ = twin.step(expert(obs))
        if not np.isfinite(reward).all():
            raise AssertionError("non-finite reward")
    for name, arr in twin.state.arrays().items():
        assert np.isfinite(arr).all(), name
    assert np.isfinite(obs).all()


def test_memory_per_instance_is_small():
    twin = GreenhouseTwin(64, seed=0)
    twin.reset()
    assert twin.bytes_per_instance() < 2048


def test_observation_layout_is_declared_once_and_checked():
    spec = ObservationSpec(6)
    assert len(spec.names) == spec.dim == len(spec.low)
    stored = spec.to_dict()
    spec.check_compatible(stored)
    shifted = dict(stored, names=stored["names"][1:] + ["x"])
    with pytest.raises(ValueError, match="index 0"):
        spec.check_compatible(shifted)
    with pytest.raises(ValueError, match="zones"):
        ObservationSpec(4).check_compatible(stored)


def test_reward_breakdown_sums_to_reward():
    twin = GreenhouseTwin(4, seed=0)
    obs = twin.reset()
    obs, reward, _, _, info = twin.step(ThresholdExpert()(obs))
    total = sum(info["reward_terms"].values())  # EUR/m2; the reward is their sum over V_ref
    np.testing.assert_allclose(total / twin.config.economics.v_ref(twin.config.dt_s), reward, rtol=1e-5)
    assert set(info["reward_terms"]) == {"moisture", "growth", "water", "energy", "climate"}


def test_bad_construction_is_refused():
    with pytest.raises(TypeError, match="unknown twin config"):
        GreenhouseTwin(2, zone_count=3)
    with pytest.raises(ValueError):
        GreenhouseTwin(0)
    with pytest.raises(ValueError, match="numpy backend"):
        GreenhouseTwin(2, backend="numpy", device="cuda")
    with pytest.raises(ValueError, match="compile=True"):
        GreenhouseTwin(2, backend="numpy", compile=True)


@pytest.mark.soak
def test_compiled_torch_step_matches_eager():
    """About a minute of compilation on two cores, so by hand (`pytest -m soak`); every compiled row of
    `bench/twin_throughput.py` makes the same check on its warm-up steps before it times."""
    actions = _random_actions(4, 6, seed=8)
    o_eager, r_eager = _rollout(GreenhouseTwin(4, backend="torch", seed=2, faults=ALL_FAULTS), actions)
    o_comp, r_comp = _rollout(GreenhouseTwin(4, backend="torch", seed=2, faults=ALL_FAULTS, compile=True),
                              actions)
    np.testing.assert_allclose(o_eager, o_comp, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(r_eager, r_comp, rtol=1e-4, atol=1e-4)
