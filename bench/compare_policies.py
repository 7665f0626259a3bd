"""Several policies side by side on the held-out suite, paired by scenario.

    python bench/compare_policies.py --policy daily=runs/daily-clone --policy hindsight=runs/hindsight-clone
                                     [--scenarios 20] [--days 30] [--jobs 1] [--json FILE]

``greentwin eval`` scores one policy against the rules; this scores several (single members or
ensembles, each voted and interlocked as eval does) and the served rule on the same greenhouses,
weather and faults, and gives every pair's profit difference per scenario with a bootstrap 95 %
interval: what a change of recipe bought, free of the weather's noise.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

from policy.compare import paired_bootstrap
from policy.ensemble import load_ensemble
from policy.evaluate import EnsembleController, Row, evaluate_all, held_out_suite
from policy.residual import Interlocked
from policy.tuning import served_expert
from twin.config import DEFAULT_ZONES

SHOWN = ("profit_eur_m2", "yield_kg_m2", "water_l_per_m2", "stress_hours", "lamp_kwh_m2", "hard_terminations")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--scenarios", type=int, default=20)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows: dict[str, Row] = {}
    for item in args.policy:
        name, sep, directory = item.partition("=")
        if not sep or not Path(directory).is_dir():
            parser.error(f"--policy expects NAME=DIR with DIR a policy directory, got {item!r}")
        rows[name] = EnsembleController(load_ensemble(directory, expected_zones=DEFAULT_ZONES),
                                        zones=DEFAULT_ZONES)
    rows["served"] = Interlocked(served_expert(DEFAULT_ZONES), zones=DEFAULT_ZONES)
    suite = held_out_suite(n=args.scenarios, days=args.days)
    start = time.perf_counter()
    per: dict = {}
    results = evaluate_all(rows, suite, by_scenario=per, jobs=args.jobs)
    seconds = time.perf_counter() - start
    record: dict = {"results": results, "seconds": seconds, "scenarios": args.scenarios, "days": args.days}
    print(f"{len(suite)} held-out scenarios x 8 greenhouses x {args.days:g} d, {seconds:.0f} s")
    for name, m in results.items():
        print(f"  {name:<12} " + "  ".join(f"{k} {m[k]:.4g}" for k in SHOWN))
    print("profit difference per scenario, EUR/m2 over the episode (paired, bootstrap 95 % interval):")
    for a, b in itertools.combinations(rows, 2):
        diff = paired_bootstrap([m.profit_eur_m2 for m in per[a]], [m.profit_eur_m2 for m in per[b]], seed=0)
        record[f"{a} - {b}"] = diff.as_dict()
        print(f"  {a} - {b}: {diff}")
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
