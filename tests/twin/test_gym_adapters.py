"""Gymnasium adapters: API conformance, determinism and the two autoreset contracts."""

from __future__ import annotations

import warnings
from functools import partial
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from twin import TERMINATION_REASONS, GreenhouseTwin
from twin.gym_adapters import ENV_ID, GreenhouseEnv, GreenhouseVectorEnv, register_envs

DT_S = 600.0
SHORT: dict[str, Any] = {"dt_s": DT_S, "episode_days": DT_S * 5 / 86400}
"""Five control steps per episode."""
ACTION_ADVICE = "For Box action spaces, we recommend using a symmetric and normalized space"


def _zero_actions(n: int, dim: int) -> np.ndarray:
    """Valves closed, pump and lights off: no hard limit can end the episode early."""
    return np.zeros((n, dim), dtype=np.float32)


def _check_env_warnings(env: gymnasium.Env, **kwargs: Any) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, **kwargs)
    return [str(w.message) for w in caught]


def _keys(tree: dict[str, Any]) -> dict[str, Any]:
    return {k: _keys(v) if isinstance(v, dict) else None for k, v in tree.items()}


# ---- single env -------------------------------------------------------------------------


def test_check_env_only_warns_about_physical_action_units() -> None:
    # The action space is the twin's physical one (valves 0/1, pump and lights in %), as the
    # runtime and policies use it; gymnasium's advice to normalise it is the one accepted warning.
    # Rescaling belongs to the caller (gymnasium.wrappers.RescaleAction), not to the twin adapter.
    messages = _check_env_warnings(GreenhouseEnv(seed=0, **SHORT), skip_render_check=True)
    assert all(ACTION_ADVICE in m for m in messages), messages


def test_check_env_through_registry_including_render_and_close_checks() -> None:
    register_envs()
    env = gymnasium.make(ENV_ID, seed=0, **SHORT)
    messages = _check_env_warnings(env.unwrapped)
    assert all(ACTION_ADVICE in m for m in messages), messages


def test_register_envs_is_idempotent_and_make_vec_uses_the_batched_env() -> None:
    register_envs()
    register_envs()  # would warn "Overriding environment" (an error here) if not idempotent
    env = gymnasium.make(ENV_ID, seed=3, **SHORT)
    obs, _ = env.reset(seed=3)
    assert obs in env.observation_space
    env.step(env.action_space.sample())  # through PassiveEnvChecker and OrderEnforcing
    vec = gymnasium.make_vec(ENV_ID, num_envs=3, seed=3, **SHORT)
    assert isinstance(vec.unwrapped, GreenhouseVectorEnv)
    assert vec.num_envs == 3


def test_single_env_spaces_and_step_types() -> None:
    env = GreenhouseEnv(seed=0)
    spec = env.twin.observation_spec
    assert env.observation_space.shape == (spec.dim,) and env.observation_space.dtype == np.float32
    assert env.action_space.shape == (env.twin.action_spec.dim,) and env.action_space.dtype == np.float32
    assert isinstance(env.action_space, gymnasium.spaces.Box)
    np.testing.assert_array_equal(env.action_space.high, env.twin.action_spec.high)
    obs, info = env.reset()
    assert obs in env.observation_space and info == {}
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    assert type(reward) is float and type(terminated) is bool and type(truncated) is bool
    assert info["termination_reason"] in TERMINATION_REASONS
    assert set(info["reward_terms"]) == {"moisture", "growth", "water", "energy", "climate"}
    assert all(type(v) is float for v in info["reward_terms"].values())
    v_ref = env.twin.config.economics.v_ref(env.twin.config.dt_s)
    assert sum(info["reward_terms"].values()) / v_ref == pytest.approx(reward, rel=1e-4, abs=1e-4)
    assert info["warnings"]["saturated_30min"].shape == (env.twin.config.zones,)
    assert "final_obs" not in info


def test_single_env_same_seed_same_trajectory() -> None:
    def run(env: GreenhouseEnv) -> list[np.ndarray]:
        env.action_space.seed(11)
        out = [env.reset(seed=42)[0]]
        for _ in range(8):
            obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            out += [obs, np.asarray(reward)]
            if terminated or truncated:
                out.append(env.reset()[0])
        return out

    first = run(GreenhouseEnv(seed=0, **SHORT))
    for a, b in zip(first, run(GreenhouseEnv(seed=7, **SHORT)), strict=True):
        np.testing.assert_array_equal(a, b)


def test_single_env_returns_final_observation_then_requires_reset() -> None:
    env = GreenhouseEnv(seed=5, **SHORT)
    twin = GreenhouseTwin(num_instances=1, seed=5, **SHORT)
    np.testing.assert_array_equal(env.reset()[0], twin.reset()[0])
    action = _zero_actions(1, env.twin.action_spec.dim)
    for t in range(1, 6):
        obs, _, terminated, truncated, info = env.step(action[0])
        twin_obs, _, _, _, twin_info = twin.step(action)
        assert not terminated and truncated == (t == 5)
    assert "final_obs" in twin_info
    np.testing.assert_array_equal(obs, twin_info["final_obs"][0])
    assert not np.array_equal(obs, twin_obs[0])  # the twin has already started the next episode
    with pytest.raises(RuntimeError, match="reset"):
        env.step(action[0])
    # reset() continues with the episode the twin began at the end of the last one.
    np.testing.assert_array_equal(env.reset()[0], twin_obs[0])


def test_single_env_unseeded_reset_starts_a_new_episode() -> None:
    env = GreenhouseEnv(seed=1, **SHORT)
    first, _ = env.reset(seed=9)
    env.step(env.action_space.sample())
    second, _ = env.reset()  # mid-episode, no seed: next episode, not a replay of episode 0
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(env.reset(seed=9)[0], first)
    np.testing.assert_array_equal(env.reset()[0], second)


# ---- vector env -------------------------------------------------------------------------


def test_vector_env_spaces() -> None:
    env = GreenhouseVectorEnv(num_envs=3, seed=0)
    d, a = env.twin.observation_spec.dim, env.twin.action_spec.dim
    assert env.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    assert env.num_envs == 3
    assert env.single_observation_space.shape == (d,) and env.observation_space.shape == (3, d)
    assert env.single_action_space.shape == (a,) and env.action_space.shape == (3, a)
    for space in (env.single_observation_space, env.observation_space, env.single_action_space,
                  env.action_space):
        assert space.dtype == np.float32


def test_vector_env_outputs_are_numpy_and_in_space() -> None:
    env = GreenhouseVectorEnv(num_envs=4, seed=2)
    env.action_space.seed(2)
    obs, info = env.reset(seed=2)
    assert info == {} and obs in env.observation_space
    for _ in range(6):
        obs, rewards, terms, truncs, infos = env.step(env.action_space.sample())
        assert obs in env.observation_space
        assert rewards.shape == (4,) and rewards.dtype == np.float32
        assert terms.dtype == np.bool_ and truncs.dtype == np.bool_ and terms.shape == truncs.shape == (4,)
        assert isinstance(infos, dict)


def test_vector_env_same_seed_same_sequences() -> None:
    def run() -> tuple[list[np.ndarray], list[np.ndarray]]:
        env = GreenhouseVectorEnv(num_envs=4, seed=0, **SHORT)
        env.action_space.seed(123)
        obs_seq, rew_seq = [env.reset(seed=17)[0]], []
        for _ in range(20):
            obs, rewards, _, _, _ = env.step(env.action_space.sample())
            obs_seq.append(obs)
            rew_seq.append(rewards)
        return obs_seq, rew_seq

    (obs_a, rew_a), (obs_b, rew_b) = run(), run()
    np.testing.assert_array_equal(np.stack(obs_a), np.stack(obs_b))
    np.testing.assert_array_equal(np.stack(rew_a), np.stack(rew_b))


def test_vector_env_same_step_autoreset() -> None:
    env = GreenhouseVectorEnv(num_envs=3, seed=4, **SHORT)
    fresh = GreenhouseVectorEnv(num_envs=3, seed=4, **SHORT)
    fresh.reset(seed=4)
    next_episode, _ = fresh.reset()  # unseeded reset: every instance's episode 1
    actions = _zero_actions(3, env.twin.action_spec.dim)
    env.reset(seed=4)
    for _ in range(4):
        _, _, terms, truncs, infos = env.step(actions)
        assert not (terms | truncs).any()
        assert "final_obs" not in infos and "final_info" not in infos
        assert infos["_reward_terms"].all() and infos["reward_terms"]["_moisture"].all()
    obs, _, terms, truncs, infos = env.step(actions)
    assert truncs.all() and not terms.any()
    assert infos["_final_obs"].all() and infos["_final_info"].all()
    assert infos["final_obs"].dtype == object
    final = np.stack(list(infos["final_obs"]))
    assert final in env.observation_space
    # Nothing continues at the top level: every instance's step info moved to final_info.
    assert set(infos) == {"final_obs", "_final_obs", "final_info", "_final_info"}
    assert infos["final_info"]["reward_terms"]["moisture"].shape == (3,)
    np.testing.assert_array_equal(obs, next_episode)
    assert not np.array_equal(obs, final)
    for _ in range(4):
        assert not env.step(actions)[3].any()
    assert env.step(actions)[3].all()  # the new episode is again five steps long


def test_vector_env_partial_done_masks() -> None:
    env = GreenhouseVectorEnv(num_envs=3, seed=6)
    zones = env.twin.config.zones
    actions = _zero_actions(3, env.twin.action_spec.dim)
    actions[1, zones] = 100.0  # pump at full speed against closed valves: dead-heading, one step
    env.reset()
    obs, _, terms, truncs, infos = env.step(actions)
    done = np.array([False, True, False])
    np.testing.assert_array_equal(terms | truncs, done)
    assert infos["final_info"]["termination_reason"][1] == TERMINATION_REASONS.index("dead_heading")
    np.testing.assert_array_equal(infos["_final_obs"], done)
    np.testing.assert_array_equal(infos["_final_info"], done)
    np.testing.assert_array_equal(infos["final_info"]["reward_terms"]["_water"], done)
    np.testing.assert_array_equal(infos["_reward_terms"], ~done)
    np.testing.assert_array_equal(infos["reward_terms"]["_water"], ~done)
    assert infos["final_obs"][0] is None and infos["final_obs"][2] is None
    assert infos["final_obs"][1].shape == (env.twin.observation_spec.dim,)
    assert infos["reward_terms"]["water"][1] == 0.0 and infos["final_info"]["reward_terms"]["water"][0] == 0.0
    assert obs in env.observation_space


def test_vector_env_reset_mask_resets_only_masked_instances() -> None:
    env = GreenhouseVectorEnv(num_envs=3, seed=8)
    start, _ = env.reset()
    after, _ = env.reset(options={"reset_mask": np.array([False, True, False])})
    np.testing.assert_array_equal(after[[0, 2]], start[[0, 2]])
    assert not np.array_equal(after[1], start[1])
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": np.array([1, 0, 0])})


def test_vector_env_matches_sync_vector_env_of_single_envs() -> None:
    # Instance 0 of a batched twin and a one-instance twin with the same seed are the same greenhouse.
    # Equal to the last bit or two only: numpy may pick another SIMD kernel for a single row, and
    # which one depends on the CPU (README, batch size); from B = 2 up rows are bit-identical.
    ours = GreenhouseVectorEnv(num_envs=2, seed=12, **SHORT)
    sync = SyncVectorEnv([lambda: GreenhouseEnv(seed=12, **SHORT)], autoreset_mode=AutoresetMode.SAME_STEP)
    ours.action_space.seed(5)
    a, _ = ours.reset(seed=12)
    b, _ = sync.reset(seed=12)
    np.testing.assert_array_equal(a[0], b[0])
    for _ in range(7):
        actions = ours.action_space.sample()
        actions[:, : ours.twin.config.zones] = 1.0  # open valves: no dead-heading, reach truncation
        a, ra, ta, ua, ia = ours.step(actions)
        b, rb, tb, ub, ib = sync.step(actions[:1])
        np.testing.assert_allclose(a[0], b[0], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(ra[0], np.float32(rb[0]), rtol=1e-6)
        assert ta[0] == tb[0] and ua[0] == ub[0]
        if ua[0] or ta[0]:
            np.testing.assert_allclose(ia["final_obs"][0], ib["final_obs"][0], rtol=1e-6, atol=1e-7)
            assert _keys(ia["final_info"]) == _keys(ib["final_info"])
        else:
            assert _keys(ia) == _keys(ib)


def test_sync_vector_env_of_single_envs_steps() -> None:
    envs = SyncVectorEnv([partial(GreenhouseEnv, seed=i, **SHORT) for i in range(3)])
    envs.action_space.seed(0)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == envs.observation_space.shape
    for _ in range(7):  # crosses an episode end (NEXT_STEP autoreset calls reset())
        obs, rewards, _, _, infos = envs.step(envs.action_space.sample())
        assert obs in envs.observation_space and rewards.shape == (3,)
    envs.close()


def test_vector_env_torch_backend_returns_numpy() -> None:
    pytest.importorskip("torch")
    torch_env = GreenhouseVectorEnv(num_envs=2, backend="torch", seed=3, **SHORT)
    numpy_env = GreenhouseVectorEnv(num_envs=2, backend="numpy", seed=3, **SHORT)
    actions = _zero_actions(2, torch_env.twin.action_spec.dim)
    actions[:, 0] = 1.0
    actions[:, torch_env.twin.config.zones] = 50.0
    a, _ = torch_env.reset()
    b, _ = numpy_env.reset()
    assert type(a) is np.ndarray and a.dtype == np.float32
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    for _ in range(5):
        a, ra, ta, ua, ia = torch_env.step(actions)
        b, rb, tb, ub, ib = numpy_env.step(actions)
        assert all(type(x) is np.ndarray for x in (a, ra, ta, ua))
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(ra, rb, rtol=1e-4, atol=1e-4)
    assert ua.all() and ub.all()
    assert type(ia["final_info"]["reward_terms"]["moisture"]) is np.ndarray
    np.testing.assert_allclose(np.stack(list(ia["final_obs"])), np.stack(list(ib["final_obs"])),
                               rtol=1e-4, atol=1e-4)
