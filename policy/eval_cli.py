"""``greentwin eval``: the learned policy against the growers' controllers on held-out scenarios."""

# A command-line module prints by design; pyproject's "*/cli.py" ignore does not match this name.

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from policy import tuning
from policy.baselines import RandomController, ThresholdExpert, TimerSchedule
from policy.evaluate import (
    TRAINING_SEEDS,
    Controller,
    ControllerMetrics,
    EnsembleController,
    Scenario,
    default_jobs,
    evaluate_all,
    held_out_suite,
    scenarios_from_seeds,
    training_suite,
)
from policy.residual import Interlocked
from twin.config import DEFAULT_ZONES as ZONES


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
    tuned = {}
    for interlocked, path in ((False, tuning.TUNED_PATH), (True, tuning.SERVED_PATH)):
        t0 = time.perf_counter()
        found, train_score = tuning.tune_threshold(scenarios, interlocked=interlocked, jobs=jobs)
        tuning.save_tuned_threshold(found, train_score, scenarios, path)
        what = "served threshold (behind the interlock)" if interlocked else "tuned threshold"
        print(f"{what}: refill {found.refill:g}, stop {found.stop:g}, pump {found.pump_pct:g} % "
              f"(training score {train_score:.4f}, {time.perf_counter() - t0:.0f} s) -> {path}")
        tuned[interlocked] = found
    return tuned[False]  # the baseline; the served one is the residual prior and the service's fallback


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


def format_table(results: dict[str, dict[str, Any]]) -> str:
    head = (f"{'controller':<10} {'water L/m2':>11} {'in band %':>10} {'stress h':>9} {'energy kWh':>11} "
            f"{'hard term':>10} {'reward/step':>12}")
    rows = [head, "-" * len(head)]
    for name, m in results.items():
        rows.append(f"{name:<10} {m['water_l_per_m2']:>11.1f} {m['time_in_band_pct']:>10.1f} "
                    f"{m['stress_hours']:>9.1f} {m['energy_kwh']:>11.1f} {m['hard_terminations']:>10d} "
                    f"{m['reward_mean']:>12.4f}")
    return "\n".join(rows)


def run_eval(args: argparse.Namespace) -> int:
    """Evaluate policy (if given), tuned expert, timer and random; print a table, optionally write JSON."""
    try:
        scenarios = _scenarios(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    controllers: dict[str, Controller] = {}
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
    controllers["expert"] = expert
    controllers["timer"] = TimerSchedule(zones=ZONES)
    controllers["random"] = RandomController(zones=ZONES, seed=0)
    # What the service runs without a policy, and where the residual policy starts: a policy
    # that does not beat this row has learned nothing the interlock and the tuning did not give.
    served = tuning.served_expert(ZONES)
    controllers["served"] = Interlocked(served, zones=ZONES)

    greenhouses = sum(s.instances for s in scenarios)
    jobs = requested or default_jobs(len(scenarios))
    print(f"evaluating {', '.join(controllers)} on {len(scenarios)} scenarios (seeds {scenarios[0].seed}-"
          f"{scenarios[-1].seed}, {greenhouses} greenhouses x {scenarios[0].days:g} days, {jobs} "
          f"process{'es' if jobs > 1 else ''}); expert: the tuned threshold (refill {expert.refill:g}, stop "
          f"{expert.stop:g}, pump {expert.pump_pct:g} %); served: the threshold tuned behind the interlock (refill "
          f"{served.refill:g}, stop {served.stop:g}, pump {served.pump_pct:g} %), the service's fallback and the "
          "residual policy's starting point")
    t0 = time.perf_counter()

    def progress(done: int, total: int) -> None:
        print(f"  scenario {done}/{total} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)

    masked: dict[str, dict[str, float | int]] = {}
    intact: dict[str, ControllerMetrics] = {}
    paired = [n for n in ("policy", "expert") if n in controllers]
    try:
        results = evaluate_all(controllers, scenarios, progress, masked=masked, intact=intact, intact_among=paired,
                               jobs=jobs)
    except BrokenProcessPool:
        print("error: a worker process died (killed for memory?); rerun with --jobs 1", file=sys.stderr)
        return 1
    print(format_table(results))
    if any(m["hard_terminations"] for m in results.values()):
        print("\nthe same, counting only the steps before a hard termination (survivor-biased; for comparison):")
        print(format_table(masked))
    if any(results[n]["hard_terminations"] for n in paired):
        kept = intact[paired[0]].greenhouses  # the same greenhouses for every controller
        print(f"\npaired: only the {kept} of {greenhouses} greenhouses where no {' or '.join(paired)} pump was "
              "wrecked (the same greenhouses for every controller):")
        print(format_table({n: intact[n].as_dict() for n in paired + ["served", "timer"]}) if kept else "  none")
    print(f"{time.perf_counter() - t0:.1f} s")
    json_path = getattr(args, "json", None)
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {json_path}")
    return 0
