"""The ``greentwin eval`` options, apart from :mod:`policy.eval_cli` so that building the command
line parser loads neither the twin nor torch."""

from __future__ import annotations

import argparse


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``eval`` subcommand's options (shared by app/cli.py and the tests)."""
    parser.add_argument("--policy", metavar="DIR", default=None,
                        help="ensemble directory (policy.ensemble.load_ensemble); omitted: baselines only")
    parser.add_argument("--seeds", metavar="A-B", default=None,
                        help="evaluate seeds A..B inclusive instead of the held-out suite (10000-10019)")
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--json", metavar="FILE", default=None, help="write {controller: metrics} here")
    parser.add_argument("--retune", action="store_true",
                        help="re-tune the threshold on training seeds, bare and behind the interlock, and "
                             "rewrite policy/tuned_threshold.json and policy/served_threshold.json")
    parser.add_argument("--hindsight", action="store_true",
                        help="add the hindsight rows (none a controller): hindsight and ceiling, the "
                             "expert's and the served rule's family with the best setting per scenario "
                             "(ceiling is no upper bound); oracle, the served family's best setting per "
                             "greenhouse; daily, the served rule's best lamp coefficient per greenhouse and "
                             "day from paired twin branches with a day's lookahead (lamps ours only; about 1 "
                             "s per scenario-day on one core); with --lamps fixed also no-stress, the timer "
                             "without water stress (the most yield irrigation can reach)")
    parser.add_argument("--lamps", choices=["ours", "fixed"], default="ours",
                        help="fixed: every greenhouse's lamps follow the site's schedule (irrigation only)")
    parser.add_argument("--jobs", type=int, default=0,
                        help="worker processes sharing the scenarios (0: one per CPU core); results do not "
                             "depend on it")
