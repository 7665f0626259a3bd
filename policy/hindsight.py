"""Hindsight lamp demonstrations: per greenhouse, the served rule with the lamp setting that earned most.

The break-even lighting rule values a lamp MWh at one coefficient ``c0`` for every crop, but what a
lamp grows depends on the canopy: a young crop's few leaves let most lamp light reach the floor, a
mature one turns it into fruit. On 30-day training greenhouses the setting that earned most per
greenhouse follows the crop's age (correlation 0.77 with the age at the start, 0.80 with leaf mass)
and beats the served setting by 0.16 EUR/m2 a month on average, where the best single setting for
all of them is the served one. No fixed rule can follow that; a policy that sees the crop's growth
stage can.

:func:`hindsight_demos` runs the served rule behind the serving interlock with each lamp coefficient
of :data:`HINDSIGHT_C0`, side by side on the same greenhouses, picks per greenhouse the one that
earned most over the episode (the served setting unless another earned ``margin`` more: small
differences are the weather's noise, not the crop's), and records that run's observations and
actions. The policy learns from them what the hindsight knew, from what it sees at decision time
(:attr:`policy.config.PPOConfig.lamp_demo_files`); evaluation scenarios never enter here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from policy.baselines import ThresholdExpert
from policy.bc import DemoBatch, make_demo_batch
from policy.evaluate import TRAINING_SEEDS, Scenario, run_scenario, scenarios_from_seeds
from policy.processes import map_in_processes

HINDSIGHT_C0: tuple[float, ...] = (0.0, 25.0, 50.0, 75.0, 100.0, 125.0)
"""Lamp coefficients a demonstrator picks from [kg fruit per lamp MWh]: the tuning grid's up to 125
(150 never earned most on the training greenhouses measured)."""
HINDSIGHT_SEEDS = (100, 139)
"""Training seeds of the shipped demonstrations (the threshold tuning used 0-5; evaluation uses
10_000+, unseen 20_000+ and validation 30_000+)."""
HINDSIGHT_DAYS = 30.0
"""The lamps' worth shows over weeks (leaf grown now intercepts light for the rest of the season)."""


@dataclass(frozen=True)
class HindsightResult:
    """Demonstrations and what was picked."""

    demos: DemoBatch
    c0: tuple[float, ...]
    picks: np.ndarray
    """[greenhouses] index into ``c0`` each greenhouse's demonstrator used."""
    gains: np.ndarray
    """[len(c0), greenhouses] profit over the served setting [EUR/m2 over the episode]."""

    def summary(self) -> str:
        best = self.gains[self.picks, np.arange(self.picks.size)]
        return (f"{self.demos.size:,} demonstrations from {self.picks.size} greenhouses "
                f"({picked_counts(self.c0, self.picks)}); picked over served: {best.mean():+.3f} EUR/m2 per "
                "greenhouse")


def picked_counts(c0: Sequence[float], picks: np.ndarray) -> str:
    """How often each lamp coefficient was picked, e.g. 'c0 0: 3, c0 75: 12'."""
    counts = np.bincount(picks, minlength=len(c0))
    return ", ".join(f"c0 {c:g}: {int(n)}" for c, n in zip(c0, counts, strict=True))


def _scenario_demos(args: tuple[Scenario, ThresholdExpert, tuple[float, ...], int, float, int]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One scenario's (obs, action) rows of each greenhouse's picked demonstrator, picks and gains."""
    from policy.residual import Interlocked

    scenario, served, c0s, stride, margin, served_index = args
    rules = [Interlocked(dataclasses.replace(served, c0=c), zones=served.zones) for c in c0s]
    obs_rows, act_rows = [], []

    def record(step: int, obs: np.ndarray, actions: np.ndarray) -> None:
        if step % stride == 0:
            obs_rows.append(np.asarray(obs, dtype=np.float32).copy())
            act_rows.append(actions.astype(np.float32))

    runs = run_scenario(scenario, rules, record)
    # Profit over the steps before a hard termination (the wrecked pump's damage in it), less the served
    # setting's.
    profit = np.stack([masked.profit for _, masked in runs])  # [candidates, greenhouses]
    gains = profit - profit[served_index]
    picks = np.where(gains.max(axis=0) > margin, gains.argmax(axis=0), served_index)
    n = scenario.instances
    rows = picks * n + np.arange(n)
    o, a = np.stack(obs_rows)[:, rows], np.stack(act_rows)[:, rows]  # [T, n, ...]
    # Greenhouse-major, so each greenhouse's rows are contiguous.
    return (o.transpose(1, 0, 2).reshape(-1, o.shape[-1]), a.transpose(1, 0, 2).reshape(-1, a.shape[-1]),
            picks, gains)


def hindsight_demos(scenarios: Sequence[Scenario], served: ThresholdExpert, *,
                    c0: Sequence[float] = HINDSIGHT_C0, stride: int = 3, margin: float = 0.02, jobs: int = 1,
                    progress: Callable[[int, int], None] | None = None) -> HindsightResult:
    """Demonstrations of each greenhouse's best lamp setting of the ``served`` rule (module doc).

    ``stride`` keeps every stride-th control step (neighbouring steps repeat each other);
    ``margin`` [EUR/m2 over the episode] is what another setting must earn over the served one to
    be picked; ``jobs`` processes share the scenarios (same result)."""
    c0s = tuple(float(c) for c in c0)
    if served.c0 is None or served.c0 not in c0s:
        raise ValueError(f"the served rule's lamp coefficient {served.c0} must be one of the candidates "
                         f"{c0s}")
    if stride < 1 or margin < 0.0 or not scenarios:
        raise ValueError("hindsight demos need stride >= 1, margin >= 0 and at least one scenario")
    work = [(s, served, c0s, stride, margin, c0s.index(served.c0)) for s in scenarios]
    results = map_in_processes(_scenario_demos, work, jobs, progress)
    obs = np.concatenate([r[0] for r in results])
    action = np.concatenate([r[1] for r in results])
    dt_us = int(round(scenarios[0].dt_s * stride * 1e6))
    when = np.concatenate([np.tile(np.arange(r[0].shape[0] // s.instances, dtype=np.int64) * dt_us,
                                   s.instances)
                           for r, s in zip(results, scenarios, strict=True)])
    demos = make_demo_batch(obs, action, np.full(obs.shape[0], "hindsight"), when)
    return HindsightResult(demos, c0s, np.concatenate([r[2] for r in results]),
                           np.concatenate([r[3] for r in results], axis=1))


def hindsight_scenarios(first: int = HINDSIGHT_SEEDS[0], last: int = HINDSIGHT_SEEDS[1],
                        days: float = HINDSIGHT_DAYS) -> list[Scenario]:
    """The demonstrators' training scenarios (soils and faults cycled as in every suite); ValueError
    outside the training seeds, so no evaluation greenhouse can teach the policy."""
    if first not in TRAINING_SEEDS or last not in TRAINING_SEEDS:
        raise ValueError(f"hindsight demonstrations come from training seeds {TRAINING_SEEDS.start}-"
                         f"{TRAINING_SEEDS.stop - 1}, got {first}-{last}")
    return scenarios_from_seeds(first, last, days)
