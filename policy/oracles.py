"""The per-greenhouse, per-day lamp oracle: a bound the learned policy's lamps can be read against.

The residual policy starts from the served rule and mostly learns when to light (the hindsight
demonstrations of :mod:`policy.hindsight` show it each greenhouse's best lamp coefficient). A
per-scenario hindsight row bounds fixed settings only; the policy sees each greenhouse's crop
and weather and can change its mind every day. :class:`DailyLampOracle` can too, with hindsight:

* per scenario the served rule runs behind the serving interlock; at every local midnight each
  greenhouse's twin (params and state) is copied into one branch per lamp option (the served rule
  with each ``c0`` of :data:`policy.hindsight.HINDSIGHT_C0`), all branches of all greenhouses in
  one twin batch;
* each branch runs the day under its option, then one more day under the served setting (what
  the lamps grow today is still filling fruit tomorrow), and is scored by its profit over the two
  days plus the fruit value of the carbohydrate buffer left at the end
  (:class:`policy.shaping.FruitPotential`, in EUR/m2); where the window reaches the episode's end
  the buffer is worth nothing, as in the reported profit;
* the path goes on from the best branch's end of day (the served setting wins a tie), and its
  sums are that branch's, counted step by step as :func:`policy.evaluate.run_scenario` counts.

The branches are paired (common random numbers): every draw of the twin (weather, prices,
sensor noise, fault onsets) is a hash of the scenario seed, the instance id (through
``params.key``), the episode and the step (:meth:`twin.sensors.NoiseTable.draw`), never a shared
generator's state. A branch copies its greenhouse's params, key included, and its step counter,
so every branch of a greenhouse sees the same weather, prices, noise and faults, and two
branches under the same option end bit for bit alike. The greedy choice with a one-day lookahead
is not the best lamp plan over the episode; it is what a day-ahead planner with perfect
foresight of one day gets, which no controller that sees only the past reaches on average.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import numpy as np
import torch

from policy.baselines import ThresholdExpert
from policy.evaluate import Pair, Scenario, count_step, new_tallies
from policy.hindsight import HINDSIGHT_C0
from policy.residual import Interlocked
from policy.shaping import FruitPotential
from twin.backend import make_backend
from twin.dynamics import TwinModel
from twin.types import ArrayStruct, TwinParams, TwinState


class DayBranches(NamedTuple):
    """What one day's branches did (for inspection and tests)."""

    day: int
    step: int
    """The path's step at the day's start."""
    scores: np.ndarray
    """[options, greenhouses] two-day profit plus the buffer's value [EUR/m2]."""
    profit: np.ndarray
    """[options, greenhouses] profit over the option's day alone [EUR/m2]."""
    value: np.ndarray
    """[options, greenhouses] fruit value of the buffer after the lookahead [EUR/m2]; 0 where the
    window reaches the episode's end."""
    picks: np.ndarray
    """[greenhouses] the option the path took."""
    obs: np.ndarray
    """[options, greenhouses, obs_dim] observation at the end of the option's day."""


DayHook = Callable[[DayBranches], None]


@dataclass(frozen=True)
class DailyLampOracle:
    """Eval row (:class:`policy.evaluate.OwnTwin`): the served rule with the best lamp coefficient per
    greenhouse and day, from paired branches of the twin (module doc)."""

    served: ThresholdExpert
    c0: tuple[float, ...] = HINDSIGHT_C0

    def __post_init__(self) -> None:
        if self.served.c0 is None or float(self.served.c0) not in self.c0:
            raise ValueError(f"the served rule's lamp coefficient {self.served.c0} must be one of the "
                             f"options {self.c0}")

    def options(self) -> tuple[ThresholdExpert, ...]:
        """The served rule under each lamp coefficient."""
        return tuple(dataclasses.replace(self.served, c0=float(c)) for c in self.c0)

    def run_alone(self, scenario: Scenario) -> Pair:
        """The oracle path's sums on the scenario's greenhouses."""
        return daily_oracle(scenario, self.options(), self.c0.index(float(self.served.c0)))


@dataclass(frozen=True)
class OptionBlocks:
    """Option ``k``'s bare rule drives rows ``k * n`` onwards: one interlock call then serves every branch."""

    rules: tuple[ThresholdExpert, ...]
    n: int

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return np.concatenate([np.asarray(r(obs[k * self.n:(k + 1) * self.n]))
                               for k, r in enumerate(self.rules)])


S = TypeVar("S", bound=ArrayStruct)


def take_rows(struct: S, rows: np.ndarray) -> S:
    """A copy of a params or state record holding only ``rows`` (in that order)."""
    return struct.replace(**{k: v[rows] for k, v in struct.arrays().items()})


Record = Callable[[int, np.ndarray, np.ndarray], None]
"""Called with (step within the call, observations, actions) before each step is taken."""


def advance(model: TwinModel, params: TwinParams, state: TwinState, obs: np.ndarray, pump_ok: np.ndarray,
             controller: Callable[[np.ndarray], np.ndarray], steps: int, sums: Pair | None,
             record: Record | None = None) -> tuple[TwinState, np.ndarray, Pair | None]:
    """``steps`` twin steps under ``controller``, counted into ``sums`` (new ones when None) as
    :func:`policy.evaluate.run_scenario` counts: a wrecked pump irrigates no more (``pump_ok``
    goes False in place) and every step counts."""
    z, b = model.cfg.zones, model.backend
    for i in range(steps):
        actions = np.asarray(controller(obs), dtype=np.float32)
        actions[~pump_ok, : z + 1] = 0.0
        if record is not None:
            record(i, obs, actions)
        state, out = model.step(params, state, b.asarray(actions, dtype=b.float))
        obs = out.obs
        if sums is None:
            sums = new_tallies(out.info, pump_ok.size)
        count_step(sums[0], sums[1], out, params, state, pump_ok, model.cfg.dt_h)
    return state, obs, sums


class DayOutcome(NamedTuple):
    """One day of a scenario's branches, rows ``k * n + g`` (option k, greenhouse g)."""

    state: TwinState
    """Every branch at the end of its day."""
    obs: np.ndarray
    """[k * n, obs_dim] observation at the end of the day."""
    sums: Pair
    """The branches' tallies through the day (continuing the ones carried in)."""
    pump_ok: np.ndarray
    """[k * n] pumps still whole at the end of the day."""
    profit: np.ndarray
    """[k * n] profit over the day alone [EUR/m2]."""
    value: np.ndarray
    """[k * n] fruit value of the buffer after the lookahead [EUR/m2]; 0 where the window reaches the
    episode's end (the reported profit never pays for it there)."""
    scores: np.ndarray
    """[k, n] the day's profit, the lookahead day's and the buffer's value."""


class DailyBranches:
    """A scenario's twin set up for daily branches: its greenhouses' first state and, per day, one
    branch per option from any state of theirs, scored as the module doc says. The daily oracle
    follows the best branch; :mod:`policy.daily_plan` labels days with it from a learner's states."""

    def __init__(self, scenario: Scenario, options: Sequence[ThresholdExpert], served: int) -> None:
        if not options or not 0 <= served < len(options):
            raise ValueError(f"served must index the {len(options)} options, got {served}")
        self.scenario = scenario
        self.cfg = scenario.config()
        backend = make_backend("numpy", "cpu")
        self.model = TwinModel(self.cfg, backend, scenario.seed)
        self.n, self.k, self.zones = scenario.instances, len(options), self.cfg.zones
        self.params, self.state, self.obs = self.model.reset(
            backend.asarray(np.arange(self.n), dtype=backend.int),
                                                             backend.zeros((self.n,), dtype=backend.int))
        self.per_day = _steps_per_day(self.model, self.params)
        self.horizon = self.cfg.horizon_steps
        # row k * n + g continues greenhouse g under option k
        self.branch = np.tile(np.arange(self.n), self.k)
        self.branch_params = take_rows(self.params, self.branch)  # the key, hence every random draw, copied
        self.served = served
        self._choose = Interlocked(OptionBlocks(tuple(options), self.n), zones=self.zones)
        self._serve = Interlocked(options[served], zones=self.zones)
        self._potential = FruitPotential(self.cfg)
        self._eur_m2 = self.cfg.economics.v_ref(self.cfg.dt_s)  # reward units -> EUR/m2

    def windows(self) -> list[tuple[int, int, int]]:
        """(first step, first step of the next day, end of the lookahead) of every day."""
        return [(s, min(s + self.per_day, self.horizon), min(s + 2 * self.per_day, self.horizon))
                for s in range(0, self.horizon, self.per_day)]

    def run_day(self, state: TwinState, obs: np.ndarray, pump_ok: np.ndarray, window: tuple[int, int, int],
                carried: Pair | None = None, record: Record | None = None) -> DayOutcome:
        """Every option's day from the greenhouses' ``state`` (n rows), then a day under the served
        setting; ``carried`` (n rows) goes on counting in each branch, ``record`` sees the day's steps."""
        start, end, ahead = window
        k, n = self.k, self.n
        start_profit = carried[0].profit[self.branch] if carried is not None else np.zeros(n * k)
        ok = pump_ok[self.branch]
        into = (carried[0].take(self.branch), carried[1].take(self.branch)) if carried is not None else None
        day_state, day_obs, day_sums = advance(self.model, self.branch_params, take_rows(state, self.branch),
                                               obs[self.branch], ok, self._choose, end - start, into, record)
        if day_sums is None or not day_sums[0].economic:
            raise ValueError("daily branches score lamp options by profit: this twin reports no money")
        day_ok = ok.copy()
        _, last_obs, look = advance(self.model, self.branch_params, day_state, day_obs, ok, self._serve,
                                    ahead - end, None)
        profit = day_sums[0].profit - start_profit
        value = np.zeros(n * k)
        if ahead < self.horizon:  # the episode goes on: the buffer becomes fruit the reported profit counts
            value = self._potential(torch.as_tensor(last_obs)).double().numpy() * self._eur_m2
        scores = (profit + (look[0].profit if look is not None else 0.0) + value).reshape(k, n)
        return DayOutcome(day_state, day_obs, day_sums, day_ok, profit, value, scores)

    def finish(self, sums: Pair | None) -> Pair:
        """The path's sums as a row of :func:`policy.evaluate.run_scenario` returns them."""
        if sums is None:
            raise ValueError(f"scenario {self.scenario.name} has no steps")
        for t in sums:
            t.finish(self.zones * self.cfg.hydraulics.zone_area_m2, self.zones)
        return sums


def _steps_per_day(model: TwinModel, params: TwinParams) -> int:
    """Control steps per day; ValueError unless days split into whole steps and every greenhouse
    starts at local midnight (as every evaluation scenario does), so days start on one step."""
    dt = model.cfg.dt_s
    per_day = round(86400.0 / dt)
    if abs(per_day * dt - 86400.0) > 1e-6:
        raise ValueError(f"the daily oracle needs a control step that divides a day, got {dt:g} s")
    if np.any(np.asarray(params.start_hour) % 24.0 != 0.0):
        raise ValueError("the daily oracle needs greenhouses that start at local midnight")
    return per_day


def daily_oracle(scenario: Scenario, options: Sequence[ThresholdExpert], served: int,
                 on_day: DayHook | None = None) -> Pair:
    """The scenario's greenhouses on the oracle path: each day the option (a bare rule, run behind
    the interlock) whose branch scored best, ``options[served]`` the lookahead's rule and a tie's
    winner. Returns (every step, steps before a hard termination) sums, as a row of
    :func:`policy.evaluate.run_scenario`; ``on_day`` sees each day's branches."""
    branches = DailyBranches(scenario, options, served)
    k, n = branches.k, branches.n
    state, obs, pump_ok = branches.state, branches.obs, np.ones(n, dtype=bool)
    sums: Pair | None = None
    greenhouses = np.arange(n)
    for day, window in enumerate(branches.windows()):
        out = branches.run_day(state, obs, pump_ok, window, sums)
        scores = out.scores
        picks = np.where(scores[served] >= scores.max(axis=0), served, scores.argmax(axis=0))
        rows = picks * n + greenhouses
        state, obs, pump_ok = take_rows(out.state, rows), out.obs[rows], out.pump_ok[rows]
        sums = (out.sums[0].take(rows), out.sums[1].take(rows))
        if on_day is not None:
            on_day(DayBranches(day, window[0], scores, out.profit.reshape(k, n), out.value.reshape(k, n),
                               picks, out.obs.reshape(k, n, -1)))
    return branches.finish(sums)

