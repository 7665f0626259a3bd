"""``greentwin eval``: the learned policy against the growers' controllers on held-out scenarios.

Rows: ``policy`` (with ``--policy``), ``expert`` (the tuned threshold with break-even lighting),
``timer`` (the growers' fixed windows and price-blind lights), ``random`` and ``served`` (the
expert tuned behind the serving interlock: the service's fallback and the residual policy's
starting point). ``--hindsight`` adds rows picked with hindsight, none of them a controller:

* ``hindsight``: the expert's rule family with the best setting per scenario, chosen on that
  scenario: a ceiling for the family's fixed settings;
* ``ceiling``: the same for the served rule, each setting behind the interlock. The name is
  historical (kept for the JSON): it is the per-scenario best setting, not an upper bound on a
  controller that treats greenhouses apart, which the policy is;
* ``oracle``: the same candidates as ``ceiling``, the best picked per greenhouse on that
  greenhouse's own profit (:func:`policy.tuning.per_greenhouse`; it reuses ``ceiling``'s runs);
* ``daily``: the served rule with the best lamp coefficient per greenhouse and day, chosen
  greedily from paired branches of the twin with a day's lookahead
  (:class:`policy.oracles.DailyLampOracle`; about 0.8 s per scenario-day on one core, under a
  tenth of a ``--hindsight`` run, so it comes with the flag rather than behind one of its own).
  Not with ``--lamps fixed``, where lamps do not follow the rule, nor when the served rule has no
  break-even lights to vary.

Neither ``oracle`` nor ``daily`` bounds the policy: each bounds its own family of choices with
hindsight (``oracle`` one setting per greenhouse among lamp and irrigation settings, ``daily`` the
lamp coefficient alone, day by day and greedily), and the policy may act outside both.

Paired differences of profit per scenario (policy - expert, oracle - served, ...) carry a
bootstrap 95 % interval, and the share of each gap from a rule to a hindsight row that the
policy closes is printed (past 100 % where it beats the row).
"""

# A command-line module prints by design; pyproject's "*/cli.py" ignore does not match this name.

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from policy import tuning
from policy.baselines import RandomController, ThresholdExpert, TimerSchedule
from policy.compare import PairedDifference, paired_bootstrap
from policy.evaluate import (
    TRAINING_SEEDS,
    Controller,
    ControllerMetrics,
    EnsembleController,
    Row,
    Scenario,
    default_jobs,
    evaluate_all,
    held_out_suite,
    scenarios_from_seeds,
    training_suite,
)
from policy.hindsight import HINDSIGHT_C0
from policy.oracles import DailyLampOracle
from policy.residual import Interlocked
from twin.config import DEFAULT_ZONES as ZONES

PAIRS = (("policy", "expert"), ("policy", "served"), ("expert", "timer"), ("hindsight", "expert"),
         ("ceiling", "served"), ("oracle", "served"), ("daily", "served"), ("policy", "daily"))
"""(a, b) rows whose per-scenario profit difference a - b the report gives with a bootstrap interval;
policy - served is what learning adds to its residual prior (the interlock is in both)."""
GAPS: tuple[tuple[str, str, str], ...] = (
    ("expert", "hindsight", "the expert's best setting per scenario"),
    ("served", "ceiling", "the served rule's best setting per scenario, not an upper bound"),
    ("served", "oracle", "the served rule's best setting per greenhouse"),
    ("served", "daily", "the served rule's best lamps per greenhouse and day, a day ahead"),
)
"""(rule, hindsight row, what the row is) of the gaps :func:`gap_closed` reports."""


def parse_seeds(text: str) -> tuple[int, int]:
    """'A-B' (inclusive) or 'A' -> (A, B)."""
    first, sep, last = text.partition("-")
    try:
        a = int(first)
        b = int(last) if sep else a
    except ValueError:
        raise ValueError(f"--seeds expects A-B (e.g. 10000-10019), got {text!r}") from None
    if b < a:
        raise ValueError(f"--seeds range {text!r} is empty")
    return a, b


def _tuned_expert(retune: bool, jobs: int) -> ThresholdExpert:
    """The tuned threshold; with ``retune`` (or none saved) both tunings run first, on ``jobs``
    processes (0: one per core)."""
    if not retune:
        try:
            return tuning.load_tuned_threshold()
        except FileNotFoundError:
            print("no tuned threshold cached: tuning now", file=sys.stderr)
    scenarios = training_suite()
    jobs = jobs or default_jobs(len(scenarios))
    grid, lighting = tuning.ThresholdGrid(), tuning.LightingGrid()
    tuned: dict[bool, ThresholdExpert] = {}
    for interlocked, path in ((False, tuning.TUNED_PATH), (True, tuning.SERVED_PATH)):
        t0 = time.perf_counter()
        # Behind the interlock only irrigation is re-tuned, under the lights just tuned: the interlock
        # changes the pump and valves, and lamps only in the dark window, where the rule keeps them off.
        found, train_score = tuning.tune_threshold(scenarios, grid, interlocked=interlocked, jobs=jobs,
                                                   lighting=None if interlocked else lighting,
                                                   lights_of=tuned.get(False))
        tuning.save_tuned_threshold(found, train_score, scenarios, path, grid=grid, lighting=lighting)
        what = "served threshold (behind the interlock)" if interlocked else "tuned threshold"
        print(f"{what}: {describe(found)} (training score {train_score:.4f}, {time.perf_counter() - t0:.0f} "
              f"s) -> {path}")
        tuned[interlocked] = found
    return tuned[False]  # the baseline; the served one is the residual prior and the service's fallback


def describe(expert: ThresholdExpert) -> str:
    """The expert's setting in one line."""
    lights = (f"break-even lights c0 {expert.c0:g} kg/MWh, PAR_sat {expert.par_sat:g}, H_max "
              f"{expert.h_max:g} h"
              if expert.c0 is not None else "growers' lights")
    return f"refill {expert.refill:g}, stop {expert.stop:g}, pump {expert.pump_pct:g} %, {lights}"


def _policy_controller(directory: str) -> Controller:
    from policy.ensemble import load_ensemble  # only the policy needs torch checkpoints

    return EnsembleController(load_ensemble(directory, expected_zones=ZONES), zones=ZONES)


def _scenarios(args: argparse.Namespace) -> list[Scenario]:
    days = float(getattr(args, "days", None) or 30.0)
    seeds = getattr(args, "seeds", None)
    if not seeds:
        return held_out_suite(days=days)
    a, b = parse_seeds(seeds)
    if a <= TRAINING_SEEDS[-1] and b >= TRAINING_SEEDS[0]:
        print(f"warning: seeds {a}-{b} overlap the training seeds {TRAINING_SEEDS[0]}-{TRAINING_SEEDS[-1]}",
              file=sys.stderr)
    return scenarios_from_seeds(a, b, days)


COLUMNS: tuple[tuple[str, str, int, str], ...] = (
    ("water_l_per_m2", "water L/m2", 11, ".1f"), ("time_in_band_pct", "in band %", 10, ".1f"),
    ("stress_hours", "stress h", 9, ".1f"), ("energy_kwh", "energy kWh", 11, ".1f"),
    ("hard_terminations", "hard term", 10, "d"), ("reward_mean", "reward/step", 12, ".4f"),
    ("yield_kg_m2", "yield kg/m2", 12, ".3f"), ("revenue_eur_m2", "revenue", 9, ".3f"),
    ("energy_cost_eur_m2", "energy EUR", 11, ".3f"), ("water_cost_eur_m2", "water EUR", 10, ".3f"),
    ("climate_cost_eur_m2", "heat+CO2 EUR", 13, ".3f"),
    ("profit_eur_m2", "profit EUR/m2", 14, ".3f"), ("lamp_kwh_m2", "lamp kWh/m2", 12, ".2f"),
    ("heat_kwh_m2", "heat kWh/m2", 12, ".1f"),
    ("price_capture", "price capt", 11, ".3f"), ("mean_dli_mol", "DLI mol", 8, ".1f"),
)
"""(metric, header, width, format) of the printed table; money per m2 of floor over the episode."""


def _cell(value: Any, width: int, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"{'-':>{width}}"
    return f"{value:>{width}{fmt}}"


def format_table(results: dict[str, dict[str, Any]]) -> str:
    head = f"{'controller':<10} " + " ".join(f"{h:>{w}}" for _, h, w, _ in COLUMNS)
    rows = [head, "-" * len(head)]
    for name, m in results.items():
        rows.append(f"{name:<10} " + " ".join(_cell(m.get(k), w, f) for k, _, w, f in COLUMNS))
    return "\n".join(rows)


def paired_profit(by_scenario: dict[str, list[ControllerMetrics]]) -> dict[str, PairedDifference]:
    """``{"a - b": difference}`` of the per-scenario profit for each pair of :data:`PAIRS` present
    (the twin must report money)."""
    out = {}
    for a, b in PAIRS:
        if a in by_scenario and b in by_scenario:
            pa = [m.profit_eur_m2 for m in by_scenario[a]]
            pb = [m.profit_eur_m2 for m in by_scenario[b]]
            if all(math.isfinite(v) for v in pa + pb):
                out[f"{a} - {b}"] = paired_bootstrap(pa, pb, seed=0)
    return out


def gap_closed(results: dict[str, dict[str, Any]]) -> list[str]:
    """The share of each gap of :data:`GAPS` the policy closes: (policy - rule) / (row - rule)."""
    lines = []
    for base, top, what in GAPS:
        if not all(n in results for n in ("policy", base, top)):
            continue
        p, b, t = (results[n]["profit_eur_m2"] for n in ("policy", base, top))
        gap = t - b
        share = f"{100.0 * (p - b) / gap:.0f} %" if gap > 1e-9 else "- (no gap)"
        lines.append(f"the policy closes {share} of the {base}-to-{top} profit gap ({gap:+.3f} EUR/m2; "
                     f"{top}: {what})")
    return lines


NO_STRESS = "no-stress"
"""The row of ``--hindsight --lamps fixed`` that bounds irrigation: the timer on the same scenarios
with the crop's water stress switched off (a bound, not a controller)."""


def yield_bound(results: dict[str, dict[str, Any]]) -> str | None:
    """How much yield irrigation can add over the timer at all (the :data:`NO_STRESS` row), beside
    what the policy (or the expert) adds; None without that row."""
    if NO_STRESS not in results or "timer" not in results:
        return None
    timer = results["timer"]["yield_kg_m2"]

    def over(name: str) -> str:
        return f"{100.0 * (results[name]['yield_kg_m2'] / timer - 1.0):+.2f} %"

    said = ", ".join(f"{n} {over(n)}" for n in ("policy", "expert", "served") if n in results)
    return (f"yield over timer: {said}; no controller can beat {over(NO_STRESS)} (the timer with no water "
            f"stress at all, {results[NO_STRESS]['yield_kg_m2']:.3f} kg/m2)")


def versus(results: dict[str, dict[str, Any]], a: str, b: str) -> str | None:
    """``a`` against ``b`` in the terms of the irrigation literature (water and yield in per cent,
    profit in EUR/m2), or None when either row or the money is missing."""
    if a not in results or b not in results:
        return None
    ma, mb = results[a], results[b]
    keys = ("water_l_per_m2", "yield_kg_m2", "profit_eur_m2")
    if not all(isinstance(m[k], float) and math.isfinite(m[k]) for m in (ma, mb) for k in keys):
        return None
    def pct(k: str) -> str:
        return f"{100.0 * (ma[k] / mb[k] - 1.0):+.1f} %" if mb[k] else "-"

    return (f"{a} vs {b}: water {pct('water_l_per_m2')}, yield {pct('yield_kg_m2')}, profit "
            f"{ma['profit_eur_m2'] - mb['profit_eur_m2']:+.3f} EUR/m2 over the episode")


def json_safe(value: Any) -> Any:
    """NaN (an undefined metric, e.g. the price capture of a controller that lit no lamp) as null:
    strict JSON has no NaN."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def run_eval(args: argparse.Namespace) -> int:
    """Evaluate policy (if given), tuned expert, timer and random; print a table, optionally write JSON."""
    try:
        scenarios = _scenarios(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    controllers: dict[str, Row] = {}
    policy_dir = getattr(args, "policy", None)
    if policy_dir:
        if not Path(policy_dir).is_dir():
            print(f"error: policy directory {policy_dir} not found", file=sys.stderr)
            return 2
        try:
            controllers["policy"] = _policy_controller(policy_dir)
        except Exception as exc:  # a bad checkpoint is reported, not a traceback
            print(f"error: cannot load policy from {policy_dir}: {exc}", file=sys.stderr)
            return 2
    requested = int(getattr(args, "jobs", 0) or 0)
    if requested < 0:
        print(f"error: --jobs must be 0 (one per CPU core) or more, got {requested}", file=sys.stderr)
        return 2
    expert = _tuned_expert(bool(getattr(args, "retune", False)), requested)
    lamps_ours = (getattr(args, "lamps", None) or "ours") == "ours"
    if not lamps_ours:
        scenarios = [dataclasses.replace(s, lamps_ours=False) for s in scenarios]
    controllers["expert"] = expert
    controllers["timer"] = TimerSchedule(zones=ZONES)
    controllers["random"] = RandomController(zones=ZONES, seed=0)
    # What the service runs without a policy, and where the residual policy starts: a policy
    # that does not beat this row has learned nothing the interlock and the tuning did not give.
    served = tuning.served_expert(ZONES)
    controllers["served"] = Interlocked(served, zones=ZONES)
    if getattr(args, "hindsight", False):
        controllers["hindsight"] = tuning.hindsight_row(expert, scenarios[0].instances, lamps_ours=lamps_ours)
        ceiling = tuning.hindsight_row(served, scenarios[0].instances, lamps_ours=lamps_ours,
                                       interlocked=True)
        controllers["ceiling"] = ceiling
        controllers["oracle"] = tuning.per_greenhouse(ceiling)
        if lamps_ours and served.c0 in HINDSIGHT_C0:
            controllers["daily"] = DailyLampOracle(served)

    greenhouses = sum(s.instances for s in scenarios)
    jobs = requested or default_jobs(len(scenarios))
    print(f"evaluating {', '.join(controllers)} on {len(scenarios)} scenarios (seeds {scenarios[0].seed}-"
          f"{scenarios[-1].seed}, {greenhouses} greenhouses x {scenarios[0].days:g} days, {jobs} "
          f"process{'es' if jobs > 1 else ''}{'' if lamps_ours else ', lamps on the site schedule'}); "
          f"expert: the tuned threshold ({describe(expert)}); served: the threshold tuned behind the "
          f"interlock ({describe(served)}), the service's fallback and the residual policy's starting point")
    if "hindsight" in controllers:
        row = controllers["hindsight"]
        print(f"hindsight: per scenario, the best of {len(getattr(row, 'candidates', ()))} settings of the "
              "expert's rule family chosen on that scenario's own outcome (a ceiling for fixed settings, not "
              "a controller); ceiling: the same for the served rule behind the interlock, its per-scenario "
              "best setting (not an upper bound); oracle: the same candidates picked per greenhouse on its "
              "own profit"
              + ("; daily: per greenhouse and day the served rule's best lamp coefficient (c0 "
                 f"{', '.join(f'{c:g}' for c in HINDSIGHT_C0)}) from paired branches of the twin, each "
                 "scored by two days' profit (its day, then a day of the served setting) and the fruit its "
                 "carbohydrate buffer holds" if "daily" in controllers else "")
              + ("" if lamps_ours else "; no-stress: the timer with the crop's water stress switched off, "
                 "the most yield any irrigation reaches with these lamps"))
    t0 = time.perf_counter()

    def progress(done: int, total: int) -> None:
        print(f"  scenario {done}/{total} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)

    masked: dict[str, dict[str, float | int]] = {}
    intact: dict[str, ControllerMetrics] = {}
    per_scenario: dict[str, list[ControllerMetrics]] = {}
    chosen: dict[str, list[int]] = {}
    paired = [n for n in ("policy", "expert") if n in controllers]
    try:
        results = evaluate_all(controllers, scenarios, progress, masked=masked, intact=intact,
                               intact_among=paired, by_scenario=per_scenario, chosen=chosen, jobs=jobs)
        if "hindsight" in controllers and not lamps_ours:
            # With every greenhouse on the same lamps, water acts on yield only through the crop's
            # water stress: the timer in a twin without it grows what perfect irrigation would.
            unstressed = [dataclasses.replace(s, water_stress=False) for s in scenarios]
            results[NO_STRESS] = evaluate_all({"timer": controllers["timer"]}, unstressed, jobs=jobs)["timer"]
    except BrokenProcessPool:
        print("error: a worker process died (killed for memory?); rerun with --jobs 1", file=sys.stderr)
        return 1
    print(format_table(results))
    if any(m["hard_terminations"] for m in results.values()):
        print("\nthe same, counting only the steps before a hard termination (survivor-biased; for "
              "comparison):")
        print(format_table(masked))
    if any(results[n]["hard_terminations"] for n in paired):
        kept = intact[paired[0]].greenhouses  # the same greenhouses for every controller
        print(f"\npaired: only the {kept} of {greenhouses} greenhouses where no {' or '.join(paired)} pump "
              "was wrecked (the same greenhouses for every controller):")
        print(format_table({n: intact[n].as_dict() for n in paired + ["served", "timer"]}) if kept
              else "  none")
    summary = versus(results, "expert", "timer")
    if summary:
        print(f"\n{summary}")
    differences = paired_profit(per_scenario)
    if differences:
        print("\nprofit difference per scenario, EUR/m2 over the episode (paired by scenario, bootstrap "
              "interval):")
        for pair, diff in differences.items():
            print(f"  {pair:<20} {diff}")
    for line in gap_closed(results):
        print(line)
    bound = yield_bound(results)
    if bound:
        print(bound)
    if "hindsight" in chosen:
        cands = getattr(controllers["hindsight"], "candidates", ())
        picks = sorted(set(chosen["hindsight"]))
        print(f"hindsight picked {len(picks)} distinct settings over {len(scenarios)} scenarios: "
              + "; ".join(describe(cands[i]) for i in picks[:5]) + (" ..." if len(picks) > 5 else ""))
    print(f"{time.perf_counter() - t0:.1f} s")
    json_path = getattr(args, "json", None)
    if json_path:
        record: dict[str, Any] = dict(results)
        if differences:
            record["paired_profit"] = {k: d.as_dict() for k, d in differences.items()}
        Path(json_path).write_text(json.dumps(json_safe(record), indent=2) + "\n")
        print(f"wrote {json_path}")
    return 0
