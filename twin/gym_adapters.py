"""Gymnasium adapters for the twin: a single-instance ``Env`` and a batched ``VectorEnv``.

The twin autoresets inside ``step`` (same-step). A single gymnasium ``Env`` must not do that:
its caller expects the terminal observation and then calls ``reset()``. So
:class:`GreenhouseEnv` returns the pre-reset observation from ``info['final_obs']`` and keeps
the twin's already-started next episode for that ``reset()``. :class:`GreenhouseVectorEnv`
keeps the twin's same-step autoreset and re-shapes its outputs into gymnasium 1.x vector
conventions (numpy arrays, ``final_obs`` / ``final_info`` with ``_key`` masks), exactly as
``SyncVectorEnv(..., autoreset_mode=SAME_STEP)`` would.

Every array handed out is a fresh numpy copy: the twin's observation is also its own state
(``last_obs``) and torch tensors converted with ``.numpy()`` share memory.

Nothing is registered at import; call :func:`register_envs` once before ``gymnasium.make``.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from twin.backend import Backend, BackendName
from twin.config import TwinConfig
from twin.dynamics import TERMINATION_REASONS
from twin.env import GreenhouseTwin

ENV_ID = "greentwin/Greenhouse-v0"
"""Gymnasium id of the single-instance env; ``make_vec`` on it builds the batched env."""

_TWIN_ONLY_INFO = ("final_obs", "final_info_mask")
"""Twin info keys that the adapters translate into gymnasium's own conventions."""


def register_envs() -> None:
    """Register :data:`ENV_ID` with gymnasium (safe to call repeatedly).

    Kept out of ``twin/__init__`` so importing the twin never touches gymnasium's global
    registry; re-registering would make gymnasium warn about overriding.
    """
    if ENV_ID in gymnasium.registry:
        return
    gymnasium.register(
        id=ENV_ID,
        entry_point="twin.gym_adapters:GreenhouseEnv",
        vector_entry_point="twin.gym_adapters:GreenhouseVectorEnv",
    )


def _observation_box(twin: GreenhouseTwin) -> spaces.Box:
    spec = twin.observation_spec
    return spaces.Box(low=spec.low.copy(), high=spec.high.copy(), dtype=np.float32)


def _action_box(twin: GreenhouseTwin) -> spaces.Box:
    spec = twin.action_spec
    return spaces.Box(low=spec.low.copy(), high=spec.high.copy(), dtype=np.float32)


def _numpy_copy(backend: Backend, value: Any) -> np.ndarray:
    """A numpy array that shares no memory with the twin (torch ``.numpy()`` and numpy views do)."""
    return np.array(backend.to_numpy(value), copy=True)


def _numpy_tree(backend: Backend, info: dict[str, Any]) -> dict[str, Any]:
    """The twin's batched info as nested dicts of fresh numpy arrays, twin-only keys dropped."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key in _TWIN_ONLY_INFO:
            continue
        out[key] = _numpy_tree(backend, value) if isinstance(value, dict) else _numpy_copy(backend, value)
    return out


def _row(info: dict[str, Any], i: int) -> dict[str, Any]:
    """Row ``i`` of a numpy-backed batched info: scalars as Python numbers, vectors as numpy copies."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key in _TWIN_ONLY_INFO:
            continue
        if isinstance(value, dict):
            out[key] = _row(value, i)
        else:
            row = np.asarray(value)[i]
            out[key] = row.item() if row.ndim == 0 else row.copy()
    return out


class GreenhouseEnv(gymnasium.Env[np.ndarray, np.ndarray]):
    """One greenhouse as a standard gymnasium env (numpy backend, no autoreset).

    Keyword overrides go to :class:`~twin.config.TwinConfig`, e.g.
    ``GreenhouseEnv(seed=0, dt_s=600, episode_days=2)``. ``seed`` is the twin seed used until
    ``reset(seed=...)`` picks another; the same seed always replays the same episodes.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, seed: int = 0, validate: bool = False, config: TwinConfig | None = None,
                 **overrides: Any) -> None:
        self.twin = GreenhouseTwin(num_instances=1, backend="numpy", seed=seed, validate=validate,
                                   config=config, **overrides)
        self.observation_space = _observation_box(self.twin)
        self.action_space = _action_box(self.twin)
        self._started = False
        self._needs_reset = True
        self._next_obs: np.ndarray | None = None
        """First observation of the episode the twin already began when the last one ended."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: a seed replays from that seed's first episode, no seed moves to the next one.

        Without a seed the twin's own episode counter advances (it already did so if the last
        episode ended in ``step``), so repeated ``reset()`` calls give new episodes rather than
        replaying episode 0 as ``GreenhouseTwin.reset()`` would.
        """
        super().reset(seed=seed)
        if seed is not None or not self._started:
            obs = self.twin.reset(seed=seed)[0]
        elif self._next_obs is not None:
            obs = self._next_obs
        else:
            self.twin.reset_instances(np.zeros(1, dtype=np.int64))
            obs = self.twin.state.last_obs[0]
        self._started = True
        self._needs_reset = False
        self._next_obs = None
        return np.array(obs, dtype=np.float32, copy=True), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Advance one control step; at episode end return the terminal observation and stop."""
        if self._needs_reset:
            raise RuntimeError("call reset() before step(): the episode has ended or never started")
        batched = np.asarray(action, dtype=np.float32).reshape(1, -1)
        obs, reward, terminated, truncated, info = self.twin.step(batched)
        term, trunc = bool(terminated[0]), bool(truncated[0])
        if term or trunc:
            # The twin has already reset this instance; keep that first obs for reset().
            self._next_obs = np.array(obs[0], copy=True)
            self._needs_reset = True
            obs = info["final_obs"]
        step_info = _row(info, 0)
        step_info["termination_reason"] = TERMINATION_REASONS[int(step_info["termination_reason"])]
        return np.array(obs[0], dtype=np.float32, copy=True), float(reward[0]), term, trunc, step_info


class GreenhouseVectorEnv(VectorEnv[np.ndarray, np.ndarray, np.ndarray]):
    """The batched twin as a gymnasium vector env with same-step autoreset.

    Runs on numpy or torch; everything crossing the boundary is numpy. ``infos`` follow
    ``SyncVectorEnv(autoreset_mode=SAME_STEP)``: each key has a ``_key`` mask; an instance that
    ended this step has its step info in ``final_info`` and its terminal observation in
    ``final_obs`` (object array, ``None`` elsewhere), while the top level carries no step info
    for it (its reset info is empty). ``termination_reason`` stays an integer code into
    :data:`twin.TERMINATION_REASONS`, as the twin returns it.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, num_envs: int, backend: BackendName = "numpy", device: str = "cpu", seed: int = 0,
                 validate: bool = False, config: TwinConfig | None = None, **overrides: Any) -> None:
        self.twin = GreenhouseTwin(num_instances=num_envs, backend=backend, device=device, seed=seed,
                                   validate=validate, config=config, **overrides)
        self.num_envs = self.twin.num_instances
        self.single_observation_space = _observation_box(self.twin)
        self.single_action_space = _action_box(self.twin)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._started = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every instance, or only ``options['reset_mask']`` ones (as ``SyncVectorEnv`` allows).

        A seed replays every instance from that seed's first episode; without one each reset
        instance moves on to its next episode.
        """
        super().reset(seed=seed)
        mask = None if options is None else options.get("reset_mask")
        if mask is not None:
            mask = np.asarray(mask)
            if mask.shape != (self.num_envs,) or mask.dtype != np.bool_ or not mask.any():
                raise ValueError(f"options['reset_mask'] must be a bool array of shape ({self.num_envs},) "
                                 f"with at least one True, got {mask.dtype} {mask.shape}")
            if seed is not None or not self._started:
                raise ValueError("reset_mask needs a started env and no seed "
                                 "(the seed is shared by all instances)")
            self.twin.reset_instances(np.flatnonzero(mask))
            obs = self.twin.state.last_obs
        elif seed is not None or not self._started:
            obs = self.twin.reset(seed=seed)
        else:
            self.twin.reset_instances(np.arange(self.num_envs))
            obs = self.twin.state.last_obs
        self._started = True
        return _numpy_copy(self.twin.backend, obs), {}

    def step(self, actions: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step all instances; ended ones are already reset in the returned observation."""
        backend = self.twin.backend
        obs, reward, terminated, truncated, raw = self.twin.step(actions)
        terms = _numpy_copy(backend, terminated)
        truncs = _numpy_copy(backend, truncated)
        done = terms | truncs
        info = _numpy_tree(backend, raw)
        infos: dict[str, Any] = {}
        if not done.all():
            infos = _masked(info, ~done)
        if done.any():
            final = _numpy_copy(backend, raw["final_obs"])
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                final_obs[i] = final[i].copy()
            infos["final_obs"], infos["_final_obs"] = final_obs, done.copy()
            infos["final_info"], infos["_final_info"] = _masked(info, done), done.copy()
        return _numpy_copy(backend, obs), _numpy_copy(backend, reward), terms, truncs, infos


def _masked(info: dict[str, Any], mask: np.ndarray) -> dict[str, Any]:
    """Gymnasium's ``_add_info`` layout for the rows in ``mask``: a ``_key`` mask per key, zeros elsewhere."""
    full = bool(mask.all())
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, dict):
            out[key] = _masked(value, mask)
        elif full:
            out[key] = value  # already a fresh copy, used by this layout only
        else:
            rows = mask.reshape((-1,) + (1,) * (value.ndim - 1))
            out[key] = np.where(rows, value, np.zeros((), dtype=value.dtype))
        out[f"_{key}"] = mask.copy()
    return out
