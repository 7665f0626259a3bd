"""Daily lamp plans learned from paired branches, on the learner's own states (DAgger).

A lamp hour pays a day later through the crop's carbohydrate buffer, and what it is worth follows
the canopy and the next day's light and prices: the value lives at the grain of a day, where a
10-minute policy gradient sees mostly noise. So the lamp plan is taught at that grain. From each
greenhouse's state at local midnight the twin is copied into one branch per lamp option (the
served rule with each lamp coefficient of :data:`policy.hindsight.HINDSIGHT_C0`), every branch
runs the day under its option and one more under the served setting, and the option with the best
two-day profit plus the fruit value of the buffer left (the scoring of
:class:`policy.oracles.DailyLampOracle`) labels that day: its branch's observations and actions are
the demonstrations. The branches share every random draw (common random numbers), so the
comparison is of the options alone, not of their weather.

Whose midnights: with no learner the path follows the best branch (the daily oracle's own states);
with a learner (a policy directory) the path is the learner's, which takes its own actions all
day, and only the labels come from the branches: the dataset aggregation of DAgger (Ross, Gordon
and Bagnell 2011), so the policy is taught on the states it reaches rather than on the oracle's.
The demonstrations feed the lamp cloning (:attr:`policy.config.PPOConfig.lamp_demo_files`); PPO
stays the learner of the 10-minute actions.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from policy.baselines import ThresholdExpert
from policy.bc import DemoBatch, make_demo_batch
from policy.evaluate import Scenario
from policy.hindsight import HINDSIGHT_C0, picked_counts
from policy.oracles import DailyBranches, advance, take_rows
from policy.processes import map_in_processes


@dataclass(frozen=True)
class DailyPlanResult:
    """The demonstrations and what each day picked."""

    demos: DemoBatch
    c0: tuple[float, ...]
    picks: np.ndarray
    """[greenhouse-days] index into ``c0`` of the option that labelled each day."""
    gains: np.ndarray
    """[greenhouse-days] the picked option's score over the served setting's [EUR/m2]."""

    def summary(self) -> str:
        return (f"{self.demos.size:,} demonstrations from {self.picks.size} greenhouse-days "
                f"({picked_counts(self.c0, self.picks)}); picked over served: {self.gains.mean():+.4f} "
                "EUR/m2 per greenhouse-day")


@functools.lru_cache(maxsize=2)
def _learner(directory: str, zones: int) -> Callable[[np.ndarray], np.ndarray]:
    """The policy at ``directory`` as the evaluation runs it (vote, then the interlock); read once per
    worker process, not once per scenario it is given."""
    from policy.ensemble import load_ensemble
    from policy.evaluate import EnsembleController

    return EnsembleController(load_ensemble(directory, expected_zones=zones), zones=zones)


Learner = str | Callable[[np.ndarray], np.ndarray] | None
"""A policy directory, a picklable controller (observations -> safe actions), or None (the oracle)."""
PlanWork = tuple[Scenario, ThresholdExpert, tuple[float, ...], int, Learner, int, float]


def _scenario_plan(work: PlanWork) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One scenario's demonstration rows (greenhouse-major, day by day), picks and gains."""
    scenario, served, c0s, served_index, learner_of, stride, margin = work
    branches = DailyBranches(scenario, [dataclasses.replace(served, c0=c) for c in c0s], served_index)
    n = branches.n
    learner = _learner(learner_of, branches.zones) if isinstance(learner_of, str) else learner_of
    state, obs, pump_ok = branches.state, branches.obs, np.ones(n, dtype=bool)
    greenhouses = np.arange(n)
    obs_days: list[np.ndarray] = []
    act_days: list[np.ndarray] = []
    picks_days, gains_days = [], []
    for window in branches.windows():
        kept = _Kept(stride)
        out = branches.run_day(state, obs, pump_ok, window, record=kept)
        gains = out.scores - out.scores[served_index]
        picks = np.where(gains.max(axis=0) > margin, gains.argmax(axis=0), served_index)
        rows = picks * n + greenhouses
        obs_days.append(np.stack(kept.obs)[:, rows])  # [steps kept, n, D]
        act_days.append(np.stack(kept.actions)[:, rows])
        picks_days.append(picks)
        gains_days.append(gains[picks, greenhouses])
        if learner is None:  # the oracle's path: the day the best branch had
            state, obs, pump_ok = take_rows(out.state, rows), out.obs[rows], out.pump_ok[rows]
        else:  # the learner's path: its own day, whatever the branches found
            state, obs, _ = advance(branches.model, branches.params, state, obs, pump_ok, learner,
                                    window[1] - window[0], None)
    o = np.concatenate(obs_days)  # [T kept, n, D], greenhouse-major below
    a = np.concatenate(act_days)
    return (o.transpose(1, 0, 2).reshape(-1, o.shape[-1]), a.transpose(1, 0, 2).reshape(-1, a.shape[-1]),
            np.stack(picks_days, axis=1).reshape(-1), np.stack(gains_days, axis=1).reshape(-1))


class _Kept:
    """Every ``stride``-th step's observations and actions of a day's branches."""

    def __init__(self, stride: int) -> None:
        self.stride = stride
        self.obs: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []

    def __call__(self, i: int, obs: np.ndarray, actions: np.ndarray) -> None:
        if i % self.stride == 0:
            self.obs.append(np.asarray(obs, dtype=np.float32).copy())
            self.actions.append(np.asarray(actions, dtype=np.float32).copy())


def daily_plan_demos(scenarios: Sequence[Scenario], served: ThresholdExpert, *, learner: Learner = None,
                     c0: Sequence[float] = HINDSIGHT_C0, stride: int = 3, margin: float = 0.0, jobs: int = 1,
                     progress: Callable[[int, int], None] | None = None) -> DailyPlanResult:
    """Lamp demonstrations labelled day by day from paired branches (module doc).

    ``learner``: a policy directory (or a controller) whose states the branches start from (None:
    the oracle's own);
    ``stride`` keeps every stride-th control step; ``margin`` [EUR/m2 over the two-day window] is
    what an option must gain over the served setting to label a day; ``jobs`` processes share the
    scenarios (same result)."""
    c0s = tuple(float(c) for c in c0)
    if served.c0 is None or float(served.c0) not in c0s:
        raise ValueError(f"the served rule's lamp coefficient {served.c0} must be one of the options {c0s}")
    if stride < 1 or margin < 0.0 or not scenarios:
        raise ValueError("daily plans need stride >= 1, margin >= 0 and at least one scenario")
    work: list[PlanWork] = [(s, served, c0s, c0s.index(float(served.c0)), learner, stride, margin)
                            for s in scenarios]
    results = map_in_processes(_scenario_plan, work, jobs, progress)
    obs = np.concatenate([r[0] for r in results])
    action = np.concatenate([r[1] for r in results])
    dt_us = int(round(scenarios[0].dt_s * stride * 1e6))
    when = np.concatenate([np.tile(np.arange(r[0].shape[0] // s.instances, dtype=np.int64) * dt_us,
                                   s.instances)
                           for r, s in zip(results, scenarios, strict=True)])
    who = "daily-oracle" if learner is None else "daily-dagger"
    return DailyPlanResult(make_demo_batch(obs, action, np.full(obs.shape[0], who), when), c0s,
                           np.concatenate([r[2] for r in results]), np.concatenate([r[3] for r in results]))
