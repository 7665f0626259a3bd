"""The optimised threshold baseline: irrigation and lighting rule tuned on training seeds.

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

On a twin that reports money (OBS_VERSION 4) the score is the profit per m2 (CROP_ECONOMICS 5),
and the tuning runs in two stages: the irrigation grid under the growers' price-blind lights,
then the break-even lighting grid (CROP_ECONOMICS 4.4) on the best irrigation. Irrigation and
lighting barely interact (lamp heat moves transpiration by a few per cent), so the sum of the
two grids costs what their product would at a fraction of the time. :func:`hindsight_candidates`
gives the same family's settings a per-scenario hindsight row picks from, and :func:`per_greenhouse`
turns such a row into one that picks per greenhouse.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

from policy.baselines import ThresholdExpert
from policy.evaluate import BestOf, ControllerMetrics, Progress, Scenario, evaluate_many, training_suite
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

    54 candidates (126 before the lighting grid joined): on the two shared cores the irrigation
    grid took 285 s bare and 925 s behind the interlock (whose torch round trip per candidate and
    step dominates), so the full re-tune would not have fitted in ten minutes. The points dropped
    (refill 0.45; stops 0.25, 0.5, 0.7, 0.9) never won a tuning.
    """

    refill: tuple[float, ...] = (0.0, 0.05, 0.15, 0.3)
    stop: tuple[float, ...] = (0.2, 0.3, 0.4, 0.6, 0.8, 1.0)
    pump_pct: tuple[float, ...] = (55.0, 70.0, 85.0)


@dataclass(frozen=True)
class LightingGrid:
    """Candidate break-even lighting settings (:func:`policy.baselines.break_even_lights`).

    c0 spans the break-even of CROP_ECONOMICS 4.1 (about 9 mol PAR per lamp kWh x 12 g fruit per
    mol: 108 kg/MWh at low natural light) from zero (lamps only in negative-price hours) to one and
    a half times; a first grid of 50..200 chose its lowest edge on the training weeks, so the grid
    reaches down. PAR_sat spans a canopy that saturates early to one that never does; H_max is the
    photoperiod cap (the 6-h dark window already bounds it at 18 h).
    """

    c0: tuple[float, ...] = (0.0, 25.0, 50.0, 75.0, 100.0, 150.0)
    par_sat: tuple[float, ...] = (300.0, 600.0, 1000.0, 2000.0)
    h_max: tuple[float, ...] = (16.0, 18.0)


def score(metrics: ControllerMetrics, greenhouses: int) -> float:
    """Tuning objective: the profit per m2 where the twin reports money (a wrecked pump's damage is
    in it); otherwise the mean reward per step, minus a penalty for hard terminations."""
    if math.isfinite(metrics.profit_eur_m2):
        return metrics.profit_eur_m2
    return metrics.reward_mean - TERMINATION_PENALTY * metrics.hard_terminations / max(greenhouses, 1)


def irrigation_candidates(grid: ThresholdGrid, base: ThresholdExpert) -> list[ThresholdExpert]:
    """``base`` with each refill < stop, pump setting of the grid (full grid: pump speed interacts
    with the stop point, since a faster pump overshoots it more within one step)."""
    out = [dataclasses.replace(base, refill=r, stop=s, pump_pct=p)
           for p, r, s in product(grid.pump_pct, grid.refill, grid.stop) if s > r]
    if not out:
        raise ValueError("the grid has no refill < stop candidate")
    return out


def lighting_candidates(grid: LightingGrid, base: ThresholdExpert) -> list[ThresholdExpert]:
    """``base``'s irrigation with each break-even lighting setting of the grid."""
    out = [dataclasses.replace(base, c0=c, par_sat=s, h_max=h)
           for c, s, h in product(grid.c0, grid.par_sat, grid.h_max)]
    if not out:
        raise ValueError("the lighting grid has an empty axis")
    return out


def _best(candidates: Sequence[ThresholdExpert], scenarios: Sequence[Scenario], progress: Progress | None,
          interlocked: bool, jobs: int) -> tuple[ThresholdExpert, float, bool]:
    """(best candidate, its score, whether the twin reported money); grid order breaks ties."""
    greenhouses = sum(s.instances for s in scenarios)
    if interlocked:
        from policy.residual import Interlocked

        run: list[Any] = [Interlocked(c, zones=c.zones) for c in candidates]
    else:
        run = list(candidates)
    metrics = evaluate_many(run, scenarios, progress, jobs=jobs)
    scores = [score(m, greenhouses) for m in metrics]
    best = max(range(len(scores)), key=lambda j: (scores[j], -j))
    return candidates[best], scores[best], math.isfinite(metrics[best].profit_eur_m2)


def tune_threshold(train_scenarios: Sequence[Scenario] | None = None, grid: ThresholdGrid | None = None,
                   zones: int = DEFAULT_ZONES, progress: Progress | None = None, *, interlocked: bool = False,
                   jobs: int = 1, lighting: LightingGrid | None = None,
                   lights_of: ThresholdExpert | None = None) -> tuple[ThresholdExpert, float]:
    """Best threshold expert on the training scenarios and its training score.

    First the irrigation ``grid`` under the lights of ``lights_of`` (default: the growers'
    lights); then, when the twin reports money and ``lighting`` is given, the break-even lighting
    grid on the best irrigation (a twin without prices keeps the lights it has). ``interlocked``
    scores each candidate behind the serving interlock (``served_threshold.json``); ``jobs``
    worker processes share the scenarios (same result)."""
    scenarios = list(train_scenarios) if train_scenarios is not None else training_suite()
    base = (dataclasses.replace(lights_of, zones=zones) if lights_of is not None
            else ThresholdExpert(zones=zones))
    candidates = irrigation_candidates(grid or ThresholdGrid(), base)
    best, best_score, economic = _best(candidates, scenarios, progress, interlocked, jobs)
    if lighting is not None and economic:
        best, best_score, _ = _best(lighting_candidates(lighting, best), scenarios, progress, interlocked,
                                    jobs)
    return best, best_score


HINDSIGHT_IRRIGATION = ThresholdGrid(refill=(0.0, 0.3), stop=(0.3, 0.8), pump_pct=())
"""Irrigation settings a hindsight row also tries (at the tuned pump speed): coarser than the tuning
grid, since irrigation is the small lever (CROP_ECONOMICS 4.2) and every candidate runs every
evaluation scenario for 30 days (each costs about 45 s of the held-out suite on two shared cores)."""
HINDSIGHT_LIGHTING = LightingGrid(c0=(0.0, 50.0, 100.0, 150.0), par_sat=(1000.0, 2000.0), h_max=())
"""Lighting settings a hindsight row tries (at the tuned H_max)."""


def hindsight_candidates(tuned: ThresholdExpert, *, lamps_ours: bool = True,
                         irrigation: ThresholdGrid = HINDSIGHT_IRRIGATION,
                         lighting: LightingGrid | None = HINDSIGHT_LIGHTING) -> list[ThresholdExpert]:
    """The tuned expert first, then its irrigation varied under its own lights and (when greentwin
    runs the lamps and the tuned expert has the break-even rule) its lighting varied under its own
    irrigation: the settings a hindsight row picks from per scenario. Containing the tuned
    expert, the row can never do worse than it on any scenario."""
    grid_i = dataclasses.replace(irrigation, pump_pct=irrigation.pump_pct or (tuned.pump_pct,))
    out = [tuned, *irrigation_candidates(grid_i, tuned)]
    if lamps_ours and lighting is not None and tuned.c0 is not None:
        grid_l = dataclasses.replace(lighting, h_max=lighting.h_max or (tuned.h_max,))
        out += lighting_candidates(grid_l, tuned)
    unique: list[ThresholdExpert] = []
    for c in out:
        if c not in unique:
            unique.append(c)
    return unique


def hindsight_row(tuned: ThresholdExpert, greenhouses_per_scenario: int, *, lamps_ours: bool = True,
                  interlocked: bool = False) -> BestOf:
    """The hindsight row: per evaluation scenario, the candidate of :func:`hindsight_candidates`
    with the best tuning score on that scenario; ``interlocked``: each candidate behind the serving
    interlock, the ceiling of the served rule (which the residual policy starts from)."""
    from policy.residual import Interlocked

    def scored(m: ControllerMetrics) -> float:
        return score(m, greenhouses_per_scenario)

    cands: list[Any] = list(hindsight_candidates(tuned, lamps_ours=lamps_ours))
    if interlocked:
        cands = [Interlocked(c, zones=c.zones) for c in cands]
    return BestOf(tuple(cands), scored)


def per_greenhouse(row: BestOf) -> BestOf:
    """``row``'s candidates, the best picked per greenhouse on that greenhouse's own tuning score.

    The same candidate objects, so an evaluation with both rows runs them once. A per-scenario
    pick is no bound on a controller that tells greenhouses apart; this one is, for the family."""
    def scored(m: ControllerMetrics) -> float:
        return score(m, 1)

    return dataclasses.replace(row, score=scored, per="greenhouse")


def save_tuned_threshold(expert: ThresholdExpert, train_score: float, scenarios: Sequence[Scenario],
                         path: Path = TUNED_PATH, *, grid: ThresholdGrid | None = None,
                         lighting: LightingGrid | None = None) -> None:
    """Write the tuned setting with what it was tuned on (grids, seeds, days, score, twin version)."""
    record: dict[str, Any] = {
        "refill": expert.refill, "stop": expert.stop, "pump_pct": expert.pump_pct, "zones": expert.zones,
        "lighting": "break_even" if expert.c0 is not None else "growers",
        "c0": expert.c0, "par_sat": expert.par_sat, "h_max": expert.h_max,
        "train_score": train_score,
        "score": "profit_eur_m2" if expert.c0 is not None else "reward_mean",
        "train_seeds": [s.seed for s in scenarios],
        "train_days": scenarios[0].days if scenarios else None,
        "train_instances": scenarios[0].instances if scenarios else None, "twin_version": TWIN_VERSION,
    }
    if grid is not None:
        record["grid"] = dataclasses.asdict(grid)
    if lighting is not None:
        record["lighting_grid"] = dataclasses.asdict(lighting)
    Path(path).write_text(json.dumps(record, indent=2) + "\n")


def load_tuned_record(path: Path = TUNED_PATH) -> dict[str, Any]:
    """The cached tuning record; FileNotFoundError when it was never tuned."""
    return dict(json.loads(Path(path).read_text()))


def load_tuned_threshold(path: Path = TUNED_PATH) -> ThresholdExpert:
    """The cached tuned expert; FileNotFoundError when it was never tuned."""
    r = load_tuned_record(path)
    expert = ThresholdExpert(zones=int(r["zones"]), refill=float(r["refill"]), stop=float(r["stop"]),
                             pump_pct=float(r["pump_pct"]))
    if r.get("c0") is None:  # tuned before the break-even rule: the growers' lights
        return expert
    return dataclasses.replace(expert, c0=float(r["c0"]), par_sat=float(r["par_sat"]),
                               h_max=float(r["h_max"]))


def served_expert(zones: int, path: Path = SERVED_PATH) -> ThresholdExpert:
    """The threshold expert the service falls back to (behind the interlock, as it was tuned): the
    served setting for ``zones`` zones, or the growers' factory setting when none was ever tuned
    (a fallback must never be missing)."""
    try:
        return dataclasses.replace(load_tuned_threshold(path), zones=zones)
    except FileNotFoundError:
        return ThresholdExpert(zones=zones)
