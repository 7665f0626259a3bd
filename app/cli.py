"""The ``greentwin`` command line: one entry point, subcommands import lazily."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

Handler = Callable[[argparse.Namespace], int]


def _cmd_simulate(args: argparse.Namespace) -> int:
    from twin.cli import simulate

    return simulate(args)


def _cmd_validate_env(args: argparse.Namespace) -> int:
    from twin.cli import validate_env

    return validate_env(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="greentwin", description="Digital-twin greenhouse control.")
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="run the batched twin under the expert controller and print a summary")
    sim.add_argument("--instances", type=int, default=256)
    sim.add_argument("--days", type=float, default=7.0)
    sim.add_argument("--backend", choices=["numpy", "torch"], default="numpy")
    sim.add_argument("--seed", type=int, default=0)
    sim.set_defaults(handler=_cmd_simulate)

    val = sub.add_parser("validate-env", help="check the twin against its specs and run smoke episodes")
    val.add_argument("--instances", type=int, default=64)
    val.add_argument("--steps", type=int, default=288)
    val.add_argument("--backend", choices=["numpy", "torch"], default="numpy")
    val.add_argument("--seed", type=int, default=0)
    val.set_defaults(handler=_cmd_validate_env)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
