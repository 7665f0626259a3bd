"""Evaluation of controllers on a fixed, seeded suite of held-out greenhouse scenarios.

Seed ranges (kept apart so a tuned or trained controller is never scored on what it saw):

* :data:`TRAINING_SEEDS` ``0..999``: threshold tuning (:mod:`policy.tuning`) and PPO training
  (``PPOConfig.seed`` defaults to 0).
* :data:`HELD_OUT_SEEDS` ``10_000..19_999``: :func:`held_out_suite`, the reported numbers.

A :class:`Scenario` is one twin seed (hence one weather library) with a soil mix and faults on
or off; it runs ``instances`` greenhouses for one episode. All controllers of an evaluation
run side by side in one batched twin per scenario: controller ``c`` drives a block of
instances with the same instance ids as every other block, so all controllers face exactly
the same greenhouses, weather and fault draws, and the numpy overhead of a step is paid once.
The loop calls :class:`twin.dynamics.TwinModel` directly (what ``GreenhouseTwin`` wraps) so
no instance is auto-reset. A hard termination (dead-headed pump, relief valve, overcurrent)
damages the pump: that greenhouse goes on to the end of the episode without irrigation (its
controller still runs the lights), and every step counts. Masking the greenhouse from the
failure on instead would drop exactly the stretch where its crop suffers for the failure,
so a controller that wrecks its pump early would score better per step than one that keeps
irrigating through a fault (survivor bias). :func:`evaluate_many` also returns the masked
figures (its ``masked`` argument), for comparison.

Money (OBS_VERSION 4 twins): per greenhouse and m2 of floor, the fruit grown, its value, what the
lamps, pump and water cost and the profit, summed from the step ``info`` of the economic twin
(CROP_ECONOMICS 5). Profit is revenue less energy, water and damage; the moisture penalty is a
risk price in the reward, not money. A :class:`BestOf` row is a hindsight row of a rule family:
per scenario (or per greenhouse), the candidate that did best on that very scenario (greenhouse).
Picked per scenario it bounds the family's fixed settings, not what a controller that tells the
greenhouses apart can earn: per greenhouse the same candidates score higher. A row that must run
a twin of its own (:class:`OwnTwin`, e.g. :class:`policy.oracles.DailyLampOracle`, which branches
the twin every day) runs beside the shared batch on the same scenario and is counted the same way.

Scenarios are independent, so ``jobs > 1`` runs them in that many worker processes with the
same results bit for bit: a controller with state (``RandomController``) restarts its draws for
every scenario from ``for_scenario(seed)``, whichever process runs it and whatever ran before.
"""

from __future__ import annotations

import copy
import math
import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from policy.processes import map_in_processes, usable_cores
from twin.backend import make_backend
from twin.config import DEFAULT_ZONES, FaultConfig, TwinConfig
from twin.dynamics import TwinModel
from twin.types import StepOut, TwinParams, TwinState

Controller = Callable[[Any], Any]
"""Batched observations (N, obs_dim) -> actions (N, zones + 2)."""
Progress = Callable[[int, int], None]
"""Called with (scenarios done, scenarios total) after each scenario."""

TRAINING_SEEDS = range(0, 1_000)
HELD_OUT_SEEDS = range(10_000, 20_000)
DT_S = 600.0
"""Evaluation control step: 10 minutes, as in training."""
FAULT_RATE = 0.002
"""``FaultConfig.all_on`` rate of the faulty scenarios [events per hour]. Milder than the soak-test
0.01: over a 30-day episode 0.01 gives each greenhouse ~2 stuck valves and ~7 drifting probes, so
every sensor-driven controller floods and the table would measure the fault rate, not the controller."""
SOIL_MIXES: tuple[tuple[str, tuple[float, float, float]], ...] = (
    ("mixed", (0.3, 0.4, 0.3)),
    ("sandy", (0.7, 0.2, 0.1)),
    ("loamy", (0.1, 0.8, 0.1)),
    ("clayey", (0.1, 0.2, 0.7)),
)
"""(name, probabilities of sand / loam / clay per zone) cycled through the suites."""
ECONOMIC_KEYS = ("yield_kg_m2", "revenue_eur_m2", "energy_cost_eur_m2", "water_cost_eur_m2",
                 "climate_cost_eur_m2",
                 "profit_eur_m2", "lamp_kwh_m2", "heat_kwh_m2", "price_capture", "mean_dli_mol")
METRIC_KEYS = ("water_l_per_m2", "time_in_band_pct", "stress_hours", "energy_kwh", "hard_terminations",
               "reward_mean", *ECONOMIC_KEYS)
ECONOMIC_INFO = ("fruit_kg_m2", "revenue_eur_m2", "energy_cost_eur_m2", "water_cost_eur_m2", "damage_eur_m2",
                 "heat_cost_eur_m2", "co2_cost_eur_m2", "heat_kwh_m2", "lamp_kwh_m2", "price_eur_mwh",
                 "par_mol_m2")
"""The step ``info`` keys (each [B], per m2 of floor, this step) the money metrics are summed from."""


@dataclass(frozen=True)
class Scenario:
    """Everything that makes one evaluation twin deterministic.

    The seed picks the weather library (and, per greenhouse, the weather year and start day),
    the soils and every fault event; nothing else is random.
    """

    seed: int
    days: float = 30.0
    soil: str = "mixed"
    soil_mix: tuple[float, float, float] = (0.3, 0.4, 0.3)
    fault_rate: float = 0.0
    """0: healthy greenhouses; otherwise ``FaultConfig.all_on(fault_rate)``."""
    instances: int = 8
    dt_s: float = DT_S
    lamps_ours: bool = True
    """False: the lamps follow the site's fixed schedule whatever a controller asks (irrigation only)."""
    water_stress: bool = True
    """False: the crop feels no water stress (f_w = 1 whatever the soil), so any controller grows
    what perfect irrigation would: with the lamps fixed, the most yield irrigation can add."""

    @property
    def name(self) -> str:
        faults = f"faults {self.fault_rate:g}" if self.fault_rate > 0 else "healthy"
        lamps = "" if self.lamps_ours else ", lamps fixed"
        stress = "" if self.water_stress else ", no water stress"
        return f"seed {self.seed}, {self.soil}, {faults}{lamps}{stress}, {self.instances} x {self.days:g} d"

    def config(self) -> TwinConfig:
        faults = FaultConfig.all_on(self.fault_rate) if self.fault_rate > 0 else FaultConfig()
        cfg = TwinConfig(dt_s=self.dt_s, episode_days=self.days, soil_mix=self.soil_mix, faults=faults)
        if not self.water_stress:  # f_w ** 0 = 1: assimilation as if every zone were watered perfectly
            cfg = replace(cfg, crop_growth=replace(cfg.crop_growth, water_stress_exponent=0.0))
        # Every greenhouse's lamps ours, or every one on the site's schedule: the share is 1 or 0.
        return replace(cfg, economics=replace(cfg.economics, lamps_ours=1.0 if self.lamps_ours else 0.0))


def _scenario(index: int, seed: int, days: float, instances: int) -> Scenario:
    """The index-th scenario of a suite: soils cycle, and faults alternate so each soil mix gets both."""
    soil, mix = SOIL_MIXES[index % len(SOIL_MIXES)]
    faulty = (index + index // len(SOIL_MIXES)) % 2 == 1
    return Scenario(seed=seed, days=days, soil=soil, soil_mix=mix, fault_rate=FAULT_RATE if faulty else 0.0,
                    instances=instances)


def scenarios_from_seeds(first: int, last: int, days: float = 30.0, instances: int = 8) -> list[Scenario]:
    """Scenarios for seeds ``first..last`` inclusive (``--seeds A-B``), soils and faults cycled as in the
    suite."""
    if last < first:
        raise ValueError(f"empty seed range {first}-{last}")
    return [_scenario(i, seed, days, instances) for i, seed in enumerate(range(first, last + 1))]


def held_out_suite(n: int = 20, days: float = 30.0, instances: int = 8) -> list[Scenario]:
    """The fixed held-out suite: ``n`` scenarios on the first held-out seeds (10_000 + i).

    Half the scenarios carry faults; the soil mixes cycle mixed / sandy / loamy / clayey.
    """
    if not 1 <= n <= len(HELD_OUT_SEEDS):
        raise ValueError(f"n must lie in [1, {len(HELD_OUT_SEEDS)}], got {n}")
    return scenarios_from_seeds(HELD_OUT_SEEDS[0], HELD_OUT_SEEDS[0] + n - 1, days, instances)


def training_suite(n: int = 6, days: float = 7.0, instances: int = 8) -> list[Scenario]:
    """Scenarios on training seeds (0 + i) for tuning: same structure as the held-out suite, other seeds."""
    if not 1 <= n <= len(TRAINING_SEEDS):
        raise ValueError(f"n must lie in [1, {len(TRAINING_SEEDS)}], got {n}")
    return scenarios_from_seeds(TRAINING_SEEDS[0], TRAINING_SEEDS[0] + n - 1, days, instances)


@dataclass(frozen=True)
class ControllerMetrics:
    """One controller's results over a set of scenarios (every greenhouse weighs the same)."""

    water_l_per_m2: float
    """Irrigation water per m2 of floor over the episode, mean per greenhouse."""
    time_in_band_pct: float
    """Share of counted zone-steps whose true moisture lies inside the zone's target band."""
    stress_hours: float
    """Hours with Ks < 1 (FAO-56 water stress), summed over the episode, mean per zone and greenhouse."""
    energy_kwh: float
    """Pump and light energy over the episode, mean per greenhouse."""
    hard_terminations: int
    """Greenhouses whose episode ended in a hard limit (overcurrent, dead-heading, relief valve)."""
    reward_mean: float
    """Mean reward per counted greenhouse-step."""
    yield_kg_m2: float = math.nan
    """Fresh fruit grown (allocated) per m2 of floor over the episode, mean per greenhouse."""
    revenue_eur_m2: float = math.nan
    """That fruit at the scenario's fruit price."""
    energy_cost_eur_m2: float = math.nan
    """Lamp and pump kWh at the all-in price (spot plus adder)."""
    water_cost_eur_m2: float = math.nan
    """Irrigation at the water price plus drainage at the nutrient-loss price."""
    climate_cost_eur_m2: float = math.nan
    """The boiler's heat and the CO2 dosed, at the scenario's heat and CO2 prices."""
    profit_eur_m2: float = math.nan
    """Revenue less energy, water, climate and damage (pump replacement and crop lost on a hard
    termination)."""
    lamp_kwh_m2: float = math.nan
    """Lamp energy per m2 of floor over the episode, mean per greenhouse."""
    heat_kwh_m2: float = math.nan
    """Heat from the boiler per m2 of floor over the episode (lamp heat saves some), mean per greenhouse."""
    price_capture: float = math.nan
    """Mean all-in price paid per lamp kWh over the time-averaged all-in price of the same greenhouses:
    below 1, the lamps ran in cheaper than average hours (NaN when no lamp ran)."""
    mean_dli_mol: float = math.nan
    """PAR at the canopy per day, natural plus lamps [mol/m2/d], mean per greenhouse."""
    greenhouses: int = field(default=0, compare=False)
    """How many greenhouses the figures cover (not part of the eval JSON)."""

    def as_dict(self) -> dict[str, float | int]:
        """The eval JSON's metrics (:data:`METRIC_KEYS`)."""
        d = asdict(self)
        return {k: d[k] for k in METRIC_KEYS}


@dataclass
class _Tally:
    """Per-greenhouse running sums of one scenario."""

    reward: np.ndarray
    steps: np.ndarray
    water_l: np.ndarray
    energy_kwh: np.ndarray
    in_band: np.ndarray
    """Zone-steps inside the band."""
    stress_h: np.ndarray
    """Zone-hours with water stress on either side (dry Ks or aeration Ks_aer below 1)."""
    terminated: np.ndarray
    fruit_kg: np.ndarray
    revenue: np.ndarray
    energy_cost: np.ndarray
    water_cost: np.ndarray
    damage: np.ndarray
    climate_cost: np.ndarray
    heat_kwh: np.ndarray
    lamp_kwh: np.ndarray
    lamp_paid: np.ndarray
    """Sum of lamp kWh x all-in price [EUR/MWh x kWh]: over ``lamp_kwh`` the mean price paid per kWh."""
    price: np.ndarray
    """Sum of the all-in price over counted steps: over ``steps`` the time-averaged price."""
    par_mol: np.ndarray
    hours: np.ndarray
    """Counted hours: over them ``par_mol`` is the daily light integral."""
    economic: bool = True
    """False when the twin reports no money in its step info (the money metrics are then NaN)."""

    @classmethod
    def zeros(cls, n: int, economic: bool = True) -> _Tally:
        arrays = {k: np.zeros(n) for k in cls.__dataclass_fields__ if k not in ("terminated", "economic")}
        return cls(**arrays, terminated=np.zeros(n, dtype=bool), economic=economic)

    def add_money(self, info: Mapping[str, Any], counted: np.ndarray) -> None:
        """Fold one step's money info into the sums (the ``counted`` greenhouses only)."""
        def got(key: str) -> np.ndarray:
            return np.where(counted, np.asarray(info[key], dtype=np.float64), 0.0)

        price = got("price_eur_mwh")
        lamp = got("lamp_kwh_m2")
        self.fruit_kg += got("fruit_kg_m2")
        self.revenue += got("revenue_eur_m2")
        self.energy_cost += got("energy_cost_eur_m2")
        self.water_cost += got("water_cost_eur_m2")
        self.damage += got("damage_eur_m2")
        self.climate_cost += got("heat_cost_eur_m2") + got("co2_cost_eur_m2")
        self.heat_kwh += got("heat_kwh_m2")
        self.lamp_kwh += lamp
        self.lamp_paid += lamp * price
        self.price += price
        self.par_mol += got("par_mol_m2")

    def add_hours(self, counted: np.ndarray, dt_h: float) -> None:
        self.hours += np.where(counted, dt_h, 0.0)

    @property
    def profit(self) -> np.ndarray:
        """Per-greenhouse profit [EUR/m2]: revenue less the energy, water, climate and damage costs."""
        return self.revenue - self.energy_cost - self.water_cost - self.climate_cost - self.damage

    def block(self, sl: slice) -> _Tally:
        return self._rows(sl)

    def take(self, rows: np.ndarray) -> _Tally:
        """The sums of greenhouses ``rows`` (a copy: adding to it leaves this one as it was)."""
        return self._rows(rows)

    def _rows(self, index: slice | np.ndarray) -> _Tally:
        """Every per-greenhouse array indexed by ``index``; the scalar fields as they are."""
        out = copy.copy(self)
        for name, value in self.__dict__.items():
            if isinstance(value, np.ndarray):
                setattr(out, name, value[index])
        return out

    @classmethod
    def pick(cls, tallies: Sequence[_Tally], choice: np.ndarray) -> _Tally:
        """Greenhouse ``g``'s sums from ``tallies[choice[g]]`` (same greenhouses in every tally)."""
        g = np.arange(choice.size)
        arrays = {k: np.stack([getattr(t, k) for t in tallies])[choice, g] for k in cls.__dataclass_fields__
                  if k != "economic"}
        return cls(**arrays, economic=all(t.economic for t in tallies))

    def finish(self, area_m2: float, zones: int) -> None:
        """Turn the step sums into the per-m2 and per-zone figures the metrics average."""
        self.water_l /= area_m2
        self.in_band /= zones
        self.stress_h /= zones


def new_tallies(info: Mapping[str, Any], rows: int) -> tuple[_Tally, _Tally]:
    """(every step, steps before a hard termination) sums for ``rows`` greenhouses; the first step's
    ``info`` tells whether this twin reports money."""
    economic = all(key in info for key in ECONOMIC_INFO)
    return _Tally.zeros(rows, economic), _Tally.zeros(rows, economic)


def count_step(tally: _Tally, masked: _Tally, out: StepOut, params: TwinParams, state: TwinState,
               pump_ok: np.ndarray, dt_h: float) -> None:
    """Fold one twin step (``state`` after it) into both sums and mark new hard terminations:
    ``pump_ok`` goes False in place where the pump was wrecked this step."""
    info = out.info
    rows = pump_ok.size
    theta = state.theta
    in_band = ((theta >= params.band_low) & (theta <= params.band_high)).sum(axis=1)
    for t, counted in ((tally, np.ones(rows, dtype=bool)), (masked, pump_ok)):
        # np.where, not multiplication: a masked greenhouse may carry NaN or inf after its failure.
        t.reward += np.where(counted, out.reward, 0.0)
        t.steps += counted
        t.water_l += np.where(counted, info["water_l"].sum(axis=1), 0.0)
        t.energy_kwh += np.where(counted, info["energy_kwh"], 0.0)
        t.in_band += np.where(counted, in_band, 0)
        t.stress_h += np.where(counted, (info["ks"] * info["ks_aer"] < 1.0).sum(axis=1) * dt_h, 0.0)
        if t.economic:
            t.add_money(info, counted)
            t.add_hours(counted, dt_h)
    hard = pump_ok & out.terminated
    tally.terminated |= hard
    masked.terminated |= hard
    pump_ok &= ~hard


def _to_numpy(a: Any) -> np.ndarray:
    if hasattr(a, "detach"):  # torch tensor from a policy network
        a = a.detach().cpu().numpy()
    return np.asarray(a)


StepHook = Callable[[int, np.ndarray, np.ndarray], None]
"""Called with (step index, observations, actions) of every block before the twin steps."""


def run_scenario(scenario: Scenario, controllers: Sequence[Controller], on_step: StepHook | None = None
                 ) -> list[tuple[_Tally, _Tally]]:
    """One episode of the scenario's greenhouses under each controller, side by side in one batch
    (controller j's greenhouses are rows ``j * instances`` onwards of what ``on_step`` sees).

    Per controller: (every step, irrigation off after a hard termination; steps before it only).
    """
    controllers = [c.for_scenario(scenario.seed) if hasattr(c, "for_scenario") else c for c in controllers]
    cfg = scenario.config()
    backend = make_backend("numpy", "cpu")
    model = TwinModel(cfg, backend, scenario.seed)
    n, k, z = scenario.instances, len(controllers), cfg.zones
    ids = backend.asarray(np.tile(np.arange(n), k), dtype=backend.int)  # same greenhouses in every block
    params, state, obs = model.reset(ids, backend.zeros((n * k,), dtype=backend.int))
    tally = masked = None
    pump_ok = np.ones(n * k, dtype=bool)
    blocks = [slice(i * n, (i + 1) * n) for i in range(k)]
    for step in range(cfg.horizon_steps):
        actions = np.concatenate([_to_numpy(c(obs[sl])) for c, sl in zip(controllers, blocks, strict=True)])
        actions[~pump_ok, : z + 1] = 0.0  # a damaged pump irrigates no more
        if on_step is not None:
            on_step(step, obs, actions)
        state, out = model.step(params, state, backend.asarray(actions, dtype=backend.float))
        obs = out.obs
        if tally is None or masked is None:
            tally, masked = new_tallies(out.info, n * k)
        count_step(tally, masked, out, params, state, pump_ok, cfg.dt_h)
    if tally is None or masked is None:
        raise ValueError(f"scenario {scenario.name} has no steps")
    for t in (tally, masked):
        t.finish(z * cfg.hydraulics.zone_area_m2, z)
    return [(tally.block(sl), masked.block(sl)) for sl in blocks]


def _metrics(tallies: Sequence[_Tally], keep: np.ndarray | None = None) -> ControllerMetrics:
    """Metrics over the greenhouses of ``tallies`` (scenarios in order), or only those ``keep`` marks."""
    arrays = {k: np.concatenate([getattr(x, k) for x in tallies]) for k in _Tally.__dataclass_fields__
              if k != "economic"}
    if keep is not None:
        arrays = {k: v[keep] for k, v in arrays.items()}
    t = _Tally(**arrays, economic=all(x.economic for x in tallies))
    if t.reward.size == 0:
        nan = float("nan")
        return ControllerMetrics(nan, nan, nan, nan, 0, nan, greenhouses=0)
    steps = max(float(t.steps.sum()), 1.0)
    return ControllerMetrics(
        water_l_per_m2=float(t.water_l.mean()),
        time_in_band_pct=float(100.0 * t.in_band.sum() / steps),
        stress_hours=float(t.stress_h.mean()),
        energy_kwh=float(t.energy_kwh.mean()),
        hard_terminations=int(t.terminated.sum()),
        reward_mean=float(t.reward.sum() / steps),
        greenhouses=int(t.reward.size),
        **(_money(t, steps) if t.economic else {}),
    )


def _money(t: _Tally, steps: float) -> dict[str, float]:
    """The money metrics of :class:`ControllerMetrics` from pooled tallies."""
    hours = float(t.hours.sum())
    lamp = float(t.lamp_kwh.sum())
    paid = float(t.lamp_paid.sum()) / lamp if lamp > 0.0 else math.nan
    mean_price = float(t.price.sum()) / steps
    return {
        "yield_kg_m2": float(t.fruit_kg.mean()),
        "revenue_eur_m2": float(t.revenue.mean()),
        "energy_cost_eur_m2": float(t.energy_cost.mean()),
        "water_cost_eur_m2": float(t.water_cost.mean()),
        "climate_cost_eur_m2": float(t.climate_cost.mean()),
        "profit_eur_m2": float(t.profit.mean()),
        "lamp_kwh_m2": float(t.lamp_kwh.mean()),
        "heat_kwh_m2": float(t.heat_kwh.mean()),
        "price_capture": paid / mean_price if mean_price != 0.0 else math.nan,
        "mean_dli_mol": 24.0 * float(t.par_mol.sum()) / hours if hours > 0.0 else math.nan,
    }


Pair = tuple[_Tally, _Tally]
"""One row's sums on one scenario: (every step, steps before a hard termination only)."""


@dataclass(frozen=True)
class BestOf:
    """A row made of, per scenario or per greenhouse, the candidate that scored best there.

    Per scenario (the default) it is the hindsight ceiling of a rule family's fixed settings: no
    fixed setting can do better on every scenario, because this one is chosen after seeing each.
    It is not a bound on a controller that treats greenhouses differently: ``per="greenhouse"``
    picks each greenhouse's best candidate on that greenhouse's own outcome, which scores at least
    as high. The candidates run in the same batch as the other controllers, on the same greenhouses.
    """

    candidates: tuple[Controller, ...]
    score: Callable[[ControllerMetrics], float]
    """Higher is better; it sees one scenario's (or one greenhouse's) metrics of one candidate."""
    per: Literal["scenario", "greenhouse"] = "scenario"

    def __post_init__(self) -> None:
        if not self.candidates:
            raise ValueError("BestOf needs at least one candidate")
        if self.per not in ("scenario", "greenhouse"):
            raise ValueError(f"BestOf picks per scenario or per greenhouse, not per {self.per!r}")

    def choose(self, runs: Sequence[Pair]) -> tuple[Pair, list[int]]:
        """The row's sums on one scenario from its candidates' ``runs`` (in candidate order) and the
        candidate index it took: one per scenario, or one per greenhouse. The first candidate wins a tie."""
        def best(tallies: Sequence[_Tally]) -> int:
            return max(range(len(tallies)), key=lambda j: (self.score(_metrics([tallies[j]])), -j))

        if self.per == "scenario":
            j = best([t for t, _ in runs])
            return runs[j], [j]
        n = runs[0][0].reward.size
        picks = np.array([best([t.block(slice(g, g + 1)) for t, _ in runs]) for g in range(n)],
                         dtype=np.int64)
        return ((_Tally.pick([t for t, _ in runs], picks), _Tally.pick([m for _, m in runs], picks)),
                picks.tolist())


@runtime_checkable
class OwnTwin(Protocol):
    """A row that runs a twin of its own per scenario instead of a block of the shared batch: an
    oracle that branches the twin cannot step in lockstep with the controllers."""

    def run_alone(self, scenario: Scenario) -> Pair:
        """Its sums on the scenario's greenhouses, counted as :func:`run_scenario` counts a block."""
        ...


Row = Controller | BestOf | OwnTwin


def _expand(rows: Sequence[Row]) -> tuple[list[Controller], list[OwnTwin], list[list[int]]]:
    """The controllers to batch, the rows that run alone and, per row, the indices of its runs among
    a scenario's results (the batched controllers first, then the rows alone). An object that
    several rows share runs once: a block's sums depend on that block alone."""
    def once(objects: Sequence[Any]) -> list[Any]:
        out: list[Any] = []
        for o in objects:
            if not any(o is seen for seen in out):
                out.append(o)
        return out

    def position(o: Any, among: Sequence[Any]) -> int:
        return next(i for i, seen in enumerate(among) if seen is o)

    alone = once([row for row in rows if isinstance(row, OwnTwin)])
    run = once([c for row in rows if not isinstance(row, OwnTwin)
                for c in (row.candidates if isinstance(row, BestOf) else (row,))])
    members = [[len(run) + position(row, alone)] if isinstance(row, OwnTwin)
               else [position(c, run) for c in (row.candidates if isinstance(row, BestOf) else (row,))]
               for row in rows]
    return run, alone, members


def evaluate_many(controllers: Sequence[Row], scenarios: Sequence[Scenario],
                  progress: Progress | None = None, *, masked: list[ControllerMetrics] | None = None,
                  intact: list[ControllerMetrics] | None = None, intact_among: Sequence[int] = (),
                  by_scenario: list[list[ControllerMetrics]] | None = None,
                  chosen: list[list[int]] | None = None, jobs: int = 1) -> list[ControllerMetrics]:
    """Metrics per controller (or :class:`BestOf` or :class:`OwnTwin` row), all batched together
    scenario by scenario.

    ``masked``, when given, receives the same metrics over the steps before each hard
    termination only. ``intact`` receives every controller's metrics over the greenhouses that
    none of the controllers at indices ``intact_among`` ended in a hard limit: a paired
    comparison on the same greenhouses, free of what a wrecked pump does to water and stress.
    ``by_scenario`` receives, per controller, its metrics on each scenario (for paired tests);
    ``chosen``, per row, the candidate index a :class:`BestOf` row took on each scenario (on each
    greenhouse, scenarios in order, for one that picks per greenhouse; 0 for other rows). ``jobs >
    1`` runs the scenarios in that many processes (the rows must pickle); the results are the same
    as with one.
    """
    if not controllers:
        return []
    run, alone, members = _expand(controllers)
    runs = _run_scenarios(scenarios, run, progress, jobs, alone)
    per_row: list[list[Pair]] = []
    picks: list[list[int]] = []
    for row, idx in zip(controllers, members, strict=True):
        if isinstance(row, BestOf):
            made = [row.choose([r[i] for i in idx]) for r in runs]
            per_row.append([pair for pair, _ in made])
            picks.append([j for _, took in made for j in took])
        else:
            per_row.append([r[idx[0]] for r in runs])
            picks.append([0] * len(runs))
    per_ctrl = [[t for t, _ in pairs] for pairs in per_row]
    if chosen is not None:
        chosen[:] = picks
    if masked is not None:
        masked[:] = [_metrics([m for _, m in pairs]) for pairs in per_row]
    if intact is not None:
        wrecked = np.zeros(sum(s.instances for s in scenarios), dtype=bool)
        for j in intact_among:
            wrecked |= np.concatenate([t.terminated for t in per_ctrl[j]])
        intact[:] = [_metrics(t, ~wrecked) for t in per_ctrl]
    if by_scenario is not None:
        by_scenario[:] = [[_metrics([t]) for t in tallies] for tallies in per_ctrl]
    return [_metrics(t) for t in per_ctrl]


def default_jobs(scenarios: int) -> int:
    """One worker per CPU core this process may use, never more than there are scenarios."""
    return max(1, min(usable_cores(), scenarios))


def _scenario_rows(scenario: Scenario, controllers: Sequence[Controller],
                   alone: Sequence[OwnTwin]) -> list[Pair]:
    """One scenario's sums: each batched controller's block, then each row that runs alone."""
    batched = run_scenario(scenario, controllers) if controllers else []
    return batched + [row.run_alone(scenario) for row in alone]


def _run_scenarios(scenarios: Sequence[Scenario], controllers: Sequence[Controller],
                   progress: Progress | None, jobs: int, alone: Sequence[OwnTwin] = ()) -> list[list[Pair]]:
    """:func:`_scenario_rows` for every scenario, in order, on ``jobs`` processes (1: this one)."""
    if jobs > 1 and len(scenarios) > 1:
        try:
            pickle.dumps((list(controllers), list(alone)))
        except Exception as exc:
            raise ValueError("jobs > 1 needs controllers that can be pickled to the worker processes: "
                             f"{exc}") from exc
    return map_in_processes(partial(_scenario_rows, controllers=list(controllers), alone=list(alone)),
                            scenarios, jobs, progress)


def evaluate(controller: Controller, scenarios: Sequence[Scenario]) -> ControllerMetrics:
    """One controller's metrics over the scenarios."""
    return evaluate_many([controller], scenarios)[0]


def evaluate_all(controllers: Mapping[str, Row], scenarios: Sequence[Scenario],
                 progress: Progress | None = None, *, masked: dict[str, dict[str, float | int]] | None = None,
                 intact: dict[str, ControllerMetrics] | None = None, intact_among: Sequence[str] = (),
                 by_scenario: dict[str, list[ControllerMetrics]] | None = None,
                 chosen: dict[str, list[int]] | None = None,
                 jobs: int = 1) -> dict[str, dict[str, float | int]]:
    """``{name: {metric: value}}`` for every controller on the same scenarios (the eval JSON);
    ``masked`` receives the same over the steps before each hard termination only, ``intact``
    over the greenhouses where none of the controllers named in ``intact_among`` hit a hard limit,
    ``by_scenario`` each controller's metrics per scenario, ``chosen`` each :class:`BestOf` row's
    pick per scenario."""
    before: list[ControllerMetrics] = []
    paired: list[ControllerMetrics] = []
    per: list[list[ControllerMetrics]] = []
    picks: list[list[int]] = []
    names = list(controllers)
    results = evaluate_many(list(controllers.values()), scenarios, progress, masked=before, intact=paired,
                            intact_among=[names.index(n) for n in intact_among], by_scenario=per,
                            chosen=picks, jobs=jobs)
    if masked is not None:
        masked.update({name: m.as_dict() for name, m in zip(names, before, strict=True)})
    if intact is not None:
        intact.update(dict(zip(names, paired, strict=True)))
    if by_scenario is not None:
        by_scenario.update(dict(zip(names, per, strict=True)))
    if chosen is not None:
        chosen.update({n: p for n, p, row in zip(names, picks, controllers.values(), strict=True)
                       if isinstance(row, BestOf)})
    return {name: m.as_dict() for name, m in zip(names, results, strict=True)}


def ensemble_vote(proposals: Any, zones: int) -> np.ndarray:
    """Per-greenhouse consensus of K members' proposals (K, N, Z + 2) -> (N, Z + 2).

    Valves open only on a strict majority (a tie stays closed: no water is the safe side);
    pump and lights take the element-wise median, so one wild member cannot move them.
    """
    p = _to_numpy(proposals).astype(np.float32)
    if p.ndim != 3 or p.shape[2] != zones + 2:
        raise ValueError(f"proposals must have shape (K, N, {zones + 2}), got {p.shape}")
    valves = ((p[:, :, :zones] >= 0.5).mean(axis=0) > 0.5).astype(np.float32)
    return np.concatenate([valves, np.median(p[:, :, zones:], axis=0)], axis=1)


class EnsembleController:
    """Controller voting over an ensemble's proposals (anything with ``propose(obs) -> (K, N, Z + 2)``)."""

    def __init__(self, ensemble: Any, zones: int = DEFAULT_ZONES) -> None:
        self.ensemble = ensemble
        self.zones = zones

    def __call__(self, obs: Any) -> np.ndarray:
        import torch

        from policy.residual import interlock

        voted = ensemble_vote(self.ensemble.propose(obs), self.zones)
        # Members' actions are interlocked one by one; the vote of safe actions need not be safe.
        safe = interlock(torch.from_numpy(voted), self.zones,
                         torch.as_tensor(_to_numpy(obs), dtype=torch.float32))
        return safe.numpy()
