"""The optimised threshold baseline: refill/stop points (then pump speed) tuned on training seeds.

A learned policy must beat the best version of the growers' rule, not its factory setting, so
the threshold expert is grid-searched on :func:`policy.evaluate.training_suite` scenarios (seeds
0..999, disjoint from the held-out 10_000+). The grid runs every candidate side by side in one
batched twin per scenario. The result ships in ``tuned_threshold.json`` next to this module so
``greentwin eval`` does not re-tune on every run.

A second tuning, ``served_threshold.json``, searches the same grid with the serving interlock
(:func:`policy.residual.interlock`: never the pump on one valve) applied to every candidate. That
interlock changes what the best setting is (a second path delivers water too, so the best stop
point is lower), and it is what the service's threshold actually runs under: it is the residual
policy's prior and the service's fallback. The baseline stays the growers' rule without it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

from policy.baselines import ThresholdExpert
from policy.evaluate import ControllerMetrics, Progress, Scenario, evaluate_many, training_suite
from twin.config import DEFAULT_ZONES
from twin.env import TWIN_VERSION

TUNED_PATH = Path(__file__).with_name("tuned_threshold.json")
SERVED_PATH = Path(__file__).with_name("served_threshold.json")
TERMINATION_PENALTY = 1.0
"""Score lost per unit share of greenhouses that hit a hard limit: the mean reward per step alone
would let a candidate that trips early look no worse (its failed steps are not counted)."""


@dataclass(frozen=True)
class ThresholdGrid:
    """Candidate settings; refill/stop are positions in the target band (0 = low edge, 1 = high edge).

    Refill starts at the band's low edge. That edge is where FAO-56 water stress begins (the
    band's depletion share equals the crop's p), so refilling below it is deficit irrigation, not
    the growers' rule. A refill of -0.1 won the 7-day training score by ending the week dry, then
    kept zones stressed for 217 h over 30 held-out days. Stop points reach down to 0.2: watering
    only to the lower part of the band stores less, and the stores left in the soil at the end are
    water the crop never used.
    """

    refill: tuple[float, ...] = (0.0, 0.05, 0.15, 0.3, 0.45)
    stop: tuple[float, ...] = (0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    pump_pct: tuple[float, ...] = (55.0, 70.0, 85.0)


def score(metrics: ControllerMetrics, greenhouses: int) -> float:
    """Tuning objective: mean reward per step, minus a penalty for hard terminations."""
    return metrics.reward_mean - TERMINATION_PENALTY * metrics.hard_terminations / max(greenhouses, 1)


def tune_threshold(train_scenarios: Sequence[Scenario] | None = None, grid: ThresholdGrid | None = None,
                   zones: int = DEFAULT_ZONES, progress: Progress | None = None, *, interlocked: bool = False,
                   jobs: int = 1) -> tuple[ThresholdExpert, float]:
    """Best threshold expert on the training scenarios and its training score (full grid: pump speed
    interacts with the stop point, since a faster pump overshoots it more within one step).
    ``interlocked`` scores each candidate behind the serving interlock (``served_threshold.json``);
    ``jobs`` worker processes share the scenarios (same result)."""
    scenarios = list(train_scenarios) if train_scenarios is not None else training_suite()
    grid = grid or ThresholdGrid()
    candidates = [ThresholdExpert(zones=zones, refill=r, stop=s, pump_pct=p)
                  for p, r, s in product(grid.pump_pct, grid.refill, grid.stop) if s > r]
    if not candidates:
        raise ValueError("the grid has no refill < stop candidate")
    greenhouses = sum(s.instances for s in scenarios)
    if interlocked:
        from policy.residual import Interlocked

        run: list[Any] = [Interlocked(c) for c in candidates]
    else:
        run = list(candidates)
    scores = [score(m, greenhouses) for m in evaluate_many(run, scenarios, progress, jobs=jobs)]
    best = max(range(len(scores)), key=lambda j: (scores[j], -j))  # first of equals: grid order breaks ties
    return candidates[best], scores[best]


def save_tuned_threshold(expert: ThresholdExpert, train_score: float, scenarios: Sequence[Scenario],
                         path: Path = TUNED_PATH) -> None:
    """Write the tuned setting with what it was tuned on (seeds, days, twin version)."""
    record: dict[str, Any] = {
        "refill": expert.refill, "stop": expert.stop, "pump_pct": expert.pump_pct, "zones": expert.zones,
        "train_score": train_score, "train_seeds": [s.seed for s in scenarios],
        "train_days": scenarios[0].days if scenarios else None, "twin_version": TWIN_VERSION,
    }
    Path(path).write_text(json.dumps(record, indent=2) + "\n")


def load_tuned_record(path: Path = TUNED_PATH) -> dict[str, Any]:
    """The cached tuning record; FileNotFoundError when it was never tuned."""
    return dict(json.loads(Path(path).read_text()))


def load_tuned_threshold(path: Path = TUNED_PATH) -> ThresholdExpert:
    """The cached tuned expert; FileNotFoundError when it was never tuned."""
    r = load_tuned_record(path)
    return ThresholdExpert(zones=int(r["zones"]), refill=float(r["refill"]), stop=float(r["stop"]),
                           pump_pct=float(r["pump_pct"]))


def served_expert(zones: int, path: Path = SERVED_PATH) -> ThresholdExpert:
    """The threshold expert the service falls back to (behind the interlock, as it was tuned): the
    served setting for ``zones`` zones, or the growers' factory setting when none was ever tuned
    (a fallback must never be missing)."""
    try:
        return dataclasses.replace(load_tuned_threshold(path), zones=zones)
    except FileNotFoundError:
        return ThresholdExpert(zones=zones)
