"""Learning curves: does training longer help? One member of a recipe at several lengths, each
scored on the validation suite every few iterations, beside the tuned rule on the same suite.

    python bench/learning_curve.py [--preset small] [--multiples 1,4,10] [--points 8]
                                   [--scenarios 4] [--days 7] [--out runs/curves] [--set KEY=VALUE ...]

Each multiple m trains ``m x`` the preset's env steps from scratch (its learning rate anneals over
its own length), validating about ``--points`` times. The table gives, per run, the validation
profit (EUR/m2 per greenhouse over the suite's episodes) at each point, the best point (the
checkpoint a member keeps) and the last, and the expert's and the served threshold's profit on the
same suite: the same greenhouses, weather and faults. Runs resume from their directories.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from policy import tuning
from policy.checkpoint import read_meta
from policy.config import PPOConfig
from policy.ensemble_training import train_ensemble
from policy.evaluate import evaluate_many
from policy.residual import Interlocked
from policy.train_cli import parse_overrides
from policy.validation import validation_suite
from twin.config import DEFAULT_ZONES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--multiples", default="1,4,10")
    parser.add_argument("--points", type=int, default=8, help="validations per run (about)")
    parser.add_argument("--scenarios", type=int, default=4)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/curves")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    base = PPOConfig.preset(args.preset, seed=args.seed, validation_scenarios=args.scenarios,
                            validation_days=args.days, **parse_overrides(args.overrides))
    suite = validation_suite(args.scenarios, args.days)
    expert = tuning.load_tuned_threshold()
    served = Interlocked(tuning.served_expert(DEFAULT_ZONES), zones=DEFAULT_ZONES)
    rules = evaluate_many([expert, served], suite)
    baselines = {"expert": rules[0].profit_eur_m2, "served": rules[1].profit_eur_m2}
    print(f"validation suite: {len(suite)} scenarios x 8 greenhouses x {args.days:g} d (seeds "
          f"{suite[0].seed}-{suite[-1].seed}); profit EUR/m2: expert {baselines['expert']:.4f}, "
          f"served {baselines['served']:.4f}")
    results: dict[str, object] = {"baselines": baselines, "runs": {}}
    for m in (int(x) for x in args.multiples.split(",")):
        cfg = base.replace(total_steps=base.total_steps * m)
        cfg = cfg.replace(validate_every=max(1, cfg.num_iterations // args.points))
        out = Path(args.out) / f"{args.preset}-x{m}-seed{args.seed}"
        start = time.perf_counter()
        train_ensemble(cfg, members=1, out_dir=out, progress=False, eval_steps=0)
        seconds = time.perf_counter() - start
        summary = read_meta(out / "member_0")["metrics"]["validation"]
        curve = summary["curve"]
        results["runs"][f"x{m}"] = {"iterations": cfg.num_iterations, "env_steps": cfg.total_steps,  # type: ignore[index]
                                    "seconds": seconds, **summary}
        print(f"\nx{m}: {cfg.num_iterations} iterations, {cfg.total_steps:,} env steps, {seconds:.0f} s")
        print(f"  {'iteration':>9} {'env steps':>11} {'profit':>8} {'- served':>9} {'yield':>7} {'water':>7} "
              f"{'stress h':>8} {'hard':>5}")
        for p in curve:
            mark = " best" if p["iteration"] == summary["best_iteration"] else ""
            print(f"  {p['iteration']:>9} {p['env_steps']:>11,} {p['profit_eur_m2']:>8.4f} "
                  f"{p['profit_eur_m2'] - baselines['served']:>+9.4f} {p['yield_kg_m2']:>7.3f} "
                  f"{p['water_l_per_m2']:>7.1f} {p['stress_hours']:>8.1f} {p['hard_terminations']:>5}{mark}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
