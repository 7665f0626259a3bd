"""GreenhouseTwin: the batched twin as RL users expect it (reset / step over B instances).

The class owns the current params and state and performs same-step autoreset: an instance
that terminates or truncates is reset inside ``step``; the observation returned for it is the
first of its next episode and its last observation is in ``info['final_obs']``.
"""

from __future__ import annotations

from typing import Any

from twin.backend import Array, BackendName, make_backend
from twin.checks import check_step
from twin.config import TwinConfig
from twin.dynamics import TERMINATION_REASONS, TwinModel
from twin.spec import ActionSpec, ObservationSpec
from twin.types import TwinParams, TwinState

COMPILE_OPTIONS: dict[str, Any] = {"unroll_reductions_threshold": 1}
"""Inductor options for ``compile=True``: reductions stay reductions instead of being unrolled
into the step's one big per-instance loop. Unrolled, the zone sums' strided loads push that loop
past inductor's limit on non-contiguous accesses and it compiles without SIMD (about a tenth
more CPU per step). Sums over a zone's probes are written out as column adds
(:func:`twin.kalman.kalman_step`), so they stay cheap either way."""

TWIN_VERSION = "3.0.0"
"""Bumped whenever the dynamics change in a way that invalidates trained policies."""


class GreenhouseTwin:
    """B independent greenhouse twins stepped together on numpy or torch.

    >>> twin = GreenhouseTwin(num_instances=4, seed=1)
    >>> obs = twin.reset()
    >>> obs.shape == (4, twin.observation_spec.dim)
    True
    """

    metadata = {"autoreset_mode": "same_step", "termination_reasons": TERMINATION_REASONS}

    def __init__(self, num_instances: int = 1, backend: BackendName = "numpy", device: str = "cpu",
                 seed: int = 0, validate: bool = False, config: TwinConfig | None = None,
                 compile: bool = False, instance_offset: int = 0, **overrides: Any) -> None:
        if num_instances < 1:
            raise ValueError(f"num_instances must be >= 1, got {num_instances}")
        if instance_offset < 0:
            raise ValueError(f"instance_offset must be >= 0, got {instance_offset}")
        if config is not None and overrides:
            raise TypeError("pass either config= or keyword overrides, not both")
        self.config = config if config is not None else TwinConfig.from_overrides(**overrides)
        self.backend = make_backend(backend, device)
        self.num_instances = int(num_instances)
        self.instance_offset = int(instance_offset)
        """Global id of local instance 0: a slice of a larger batch replays that batch's rows bit for bit."""
        self.seed = int(seed)
        self.validate = validate
        self.compile = compile
        if compile and backend != "torch":
            raise ValueError("compile=True needs backend='torch' (it fuses the step with torch.compile)")
        self._build_model()
        self.observation_spec: ObservationSpec = self.model.obs_spec
        self.action_spec: ActionSpec = self.model.action_spec
        self._ids = self.backend.arange(self.num_instances) + self.instance_offset
        self._params: TwinParams | None = None
        self._state: TwinState | None = None

    def _build_model(self) -> None:
        self.model = TwinModel(self.config, self.backend, self.seed)
        self._step_fn = self.model.step
        if self.compile:
            import torch

            # One fused kernel set per batch shape; the first step pays the compile time (~40 s on CPU).
            self._step_fn = torch.compile(self.model.step, dynamic=False, options=COMPILE_OPTIONS)

    @property
    def params(self) -> TwinParams:
        if self._params is None:
            raise RuntimeError("call reset() before using the twin")
        return self._params

    @property
    def state(self) -> TwinState:
        if self._state is None:
            raise RuntimeError("call reset() before using the twin")
        return self._state

    def reset(self, seed: int | None = None) -> Array:
        """Start a new episode on every instance.

        With a ``seed`` (or on the first call) every instance restarts at its episode 0, so the
        same seed replays the same episodes; without one, each instance moves on to its next
        episode. The returned array is the twin's own: copy it before changing it in place.
        """
        if seed is not None and int(seed) != self.seed:
            self.seed = int(seed)
            self._build_model()
        if seed is None and self._state is not None:
            episode = self._state.episode + 1
        else:
            episode = self.backend.zeros((self.num_instances,), dtype=self.backend.int)
        self._params, self._state, obs = self.model.reset(self._ids, episode)
        return obs

    def reset_instances(self, ids: Array) -> None:
        """Rebuild some instances alone (a crashed or diverged instance), leaving the rest untouched."""
        idx = self.backend.asarray(ids, dtype=self.backend.int)
        episode = self.state.episode[idx] + 1
        params, state, _ = self.model.reset(self._ids[idx], episode)
        self.params.scatter_(idx, params)
        self.state.scatter_(idx, state)

    def episodes(self) -> tuple[TwinParams, TwinState]:
        """Copies of every instance's params and state: a resumable snapshot of the episodes in flight."""
        rows = self.backend.arange(self.num_instances)
        return (TwinParams(**{k: v[rows] for k, v in self.params.arrays().items()}),
                TwinState(**{k: v[rows] for k, v in self.state.arrays().items()}))

    def restore_episodes(self, params: TwinParams, state: TwinState, ids: Array | None = None) -> None:
        """Overwrite the instances ``ids`` (local rows; all when None) with these rows of params and
        state, as :meth:`episodes` returned them: resuming a snapshot, or restarting some episodes."""
        idx = (self.backend.arange(self.num_instances) if ids is None
               else self.backend.asarray(ids, self.backend.int))
        self.params.scatter_(idx, params)
        self.state.scatter_(idx, state)

    def step(self, actions: Array) -> tuple[Array, Array, Array, Array, dict[str, Any]]:
        """Apply actions of shape (B, zones + 2) and advance one control step."""
        action = self._as_action(actions)
        state, out = self._step_fn(self.params, self.state, action)
        obs = out.obs
        done = out.terminated | out.truncated
        info = out.info
        if bool(self.backend.xp.any(done)):
            idx = self.backend.xp.nonzero(done)[0]
            info["final_obs"] = obs + 0.0
            info["final_info_mask"] = done
            params, fresh, first_obs = self.model.reset(self._ids[idx], state.episode[idx] + 1)
            self.params.scatter_(idx, params)
            state.scatter_(idx, fresh)
            obs[idx] = first_obs
        self._state = state
        if self.validate:
            check_step(self, obs, out.reward, out.terminated, out.truncated, info)
        return obs, out.reward, out.terminated, out.truncated, info

    def true_outlook(self) -> dict[str, Array]:
        """Perfect foresight of the forecast features, for the hindsight controller only: the
        observation carries the forecast with its error (:meth:`TwinModel.true_outlook`)."""
        return self.model.true_outlook(self.params, self.state)

    def _as_action(self, actions: Array) -> Array:
        b = self.backend
        a = b.asarray(actions, dtype=b.float)
        expected = (self.num_instances, self.action_spec.dim)
        if tuple(a.shape) != expected:
            raise ValueError(f"actions must have shape {expected} (valves 0/1 per zone, pump %, lights %), "
                             f"got {tuple(a.shape)}")
        if self.validate and not bool(b.xp.all(b.xp.isfinite(a))):
            raise ValueError("actions contain NaN or infinity")
        return a

    def bytes_per_instance(self) -> int:
        """Memory held per instance (params + state), excluding the shared weather and noise tables."""
        return self.params.nbytes_per_instance() + self.state.nbytes_per_instance()
