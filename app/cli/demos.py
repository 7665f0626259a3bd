"""``greentwin demos export|hindsight|daily``: demonstrations for training, written as :mod:`policy.bc`'s
files that ``greentwin train`` takes.

``export`` writes the operator overrides from the decision log (the work is
:mod:`app.services.demonstrations`', which the retraining pipeline shares); ``hindsight`` and ``daily``
label lamp settings on the twin's training scenarios.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from twin.config import DEFAULT_ZONES

EXIT_OK, EXIT_USAGE = 0, 2


def add_demos_arguments(parser: argparse.ArgumentParser) -> None:
    """``demos export`` (argparse only)."""
    sub = parser.add_subparsers(dest="demos_command", required=True)
    exp = sub.add_parser("export",
                         help="operator overrides as a .npz of demonstrations for `greentwin train --demos`")
    exp.add_argument("--out", required=True, metavar="FILE.npz")
    exp.add_argument("--zones", type=int, default=DEFAULT_ZONES,
                     help="greenhouses with this many zones (one layout per file)")
    exp.add_argument("--greenhouse", metavar="GH", default=None, help="default: every greenhouse")
    exp.add_argument("--from", dest="since", type=datetime.fromisoformat, default=None, metavar="ISO")
    exp.add_argument("--to", dest="until", type=datetime.fromisoformat, default=None, metavar="ISO")
    exp.add_argument("--url", default=None, help="default: GREENTWIN_DATABASE_URL")
    hin = sub.add_parser("hindsight",
                         help="per greenhouse, the served rule with the lamp setting that earned most, as a "
                              ".npz for `greentwin train --set lamp_demo_files=FILE`")
    _lamp_demo_arguments(hin)
    day = sub.add_parser("daily", help="per greenhouse and day, the lamp option that earned most in paired "
                                       "branches of the twin, as a .npz for `greentwin train --set "
                                       "lamp_demo_files=FILE`")
    _lamp_demo_arguments(day)
    day.add_argument("--learner", default=None, metavar="DIR",
                     help="a policy whose own states the branches start from (DAgger); default: the daily "
                          "oracle's path")


def _lamp_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """What every lamp-demonstration builder takes: where to write, which training scenarios, how densely."""
    parser.add_argument("--out", required=True, metavar="FILE.npz")
    parser.add_argument("--seeds", default="100-139", metavar="A-B",
                        help="training seeds of 30-day scenarios (default %(default)s; never evaluation "
                             "seeds)")
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--stride", type=int, default=3,
                        help="keep every n-th control step (default %(default)s)")
    parser.add_argument("--jobs", type=int, default=0, help="worker processes (default: one per usable core)")


def _lamp_demos(args: argparse.Namespace, build: Callable[[list[Any], int], Any]) -> int:
    """Build lamp demonstrations on the training scenarios ``args`` names, write them and say what
    was picked; ``build(scenarios, jobs)`` returns a result with ``demos`` and ``summary()``."""
    from policy.eval_cli import parse_seeds
    from policy.evaluate import default_jobs
    from policy.hindsight import hindsight_scenarios

    try:
        first, last = parse_seeds(args.seeds)
        if args.days <= 0:  # the builders check the stride
            raise ValueError("--days must be > 0")
        scenarios = hindsight_scenarios(first, last, args.days)
        result = build(scenarios, args.jobs or default_jobs(len(scenarios)))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from policy.bc import save_demos
    from twin.spec import ObservationSpec

    save_demos(args.out, result.demos, ObservationSpec(DEFAULT_ZONES))
    print(f"wrote {args.out}: {result.summary()}")
    return EXIT_OK


def hindsight(args: argparse.Namespace) -> int:
    """``demos hindsight``: each greenhouse's best lamp setting over its episode."""
    from policy.hindsight import hindsight_demos
    from policy.tuning import served_expert

    return _lamp_demos(args, lambda scenarios, jobs: hindsight_demos(
        scenarios, served_expert(DEFAULT_ZONES), stride=args.stride, jobs=jobs))


def daily(args: argparse.Namespace) -> int:
    """``demos daily``: lamp plans labelled day by day in paired branches, on the oracle's or a
    learner's states (policy.daily_plan)."""
    from policy.daily_plan import daily_plan_demos
    from policy.tuning import served_expert

    if args.learner is not None and not Path(args.learner).is_dir():
        print(f"error: --learner {args.learner} is not a policy directory", file=sys.stderr)
        return EXIT_USAGE
    return _lamp_demos(args, lambda scenarios, jobs: daily_plan_demos(
        scenarios, served_expert(DEFAULT_ZONES), learner=args.learner, stride=args.stride, jobs=jobs))


def main(args: argparse.Namespace) -> int:
    if args.demos_command == "hindsight":
        return hindsight(args)
    if args.demos_command == "daily":
        return daily(args)
    from app.core.config import get_settings
    from app.core.db import SchemaOutOfDate
    from app.services.demonstrations import export_demos

    try:
        result = export_demos(args.url or get_settings().database_url, Path(args.out), args.zones,
                              args.greenhouse, args.since, args.until)
    except (ValueError, SchemaOutOfDate) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote {result.count} operator demonstrations to {args.out}"
          + (f" ({result.skipped} overrides skipped: no observation or another layout)"
             if result.skipped else ""))
    return EXIT_OK
