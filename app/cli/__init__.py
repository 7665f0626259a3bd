"""The ``greentwin`` command line: one entry point, subcommands import lazily.

Each command group has its module here (``db``, ``user``, ``demos``, ``audit``, ``report``,
``service``, ``plant_sim``, ``twin``); training and evaluation live with the learner
(``policy.train_cli``, ``policy.eval_cli``). Every command is one :class:`Command` row of
:data:`COMMANDS`: its arguments (an argparse-only function) and its handler, which is imported only
when the command runs, so ``--help`` loads nothing else.
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Handler = Callable[[argparse.Namespace], int]
Arguments = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Command:
    """One subcommand: its name and help, how it takes its arguments, and what runs it.

    ``run`` names the handler as ``module:function`` and is imported only when the command runs, so
    ``--help`` and a mistyped command load argparse and nothing else."""

    name: str
    help: str
    arguments: str
    """``module:function`` adding the arguments; argparse only, imported while the parser is built."""
    run: str


COMMANDS: tuple[Command, ...] = (
    Command("simulate", "run the batched twin under the expert controller and print a summary",
            "app.cli.arguments:add_simulate_arguments", "app.cli.twin:simulate"),
    Command("validate-env", "check the twin against its specs and run smoke episodes",
            "app.cli.arguments:add_validate_env_arguments", "app.cli.twin:validate_env"),
    Command("db", "database migrations (Alembic)", "app.cli.arguments:add_db_arguments",
            "app.cli.db_commands:run_db"),
    Command("greenhouse", "manage registered greenhouses", "app.cli.arguments:add_greenhouse_arguments",
            "app.cli.db_commands:run_greenhouse_add"),
    Command("user", "API accounts: add (with roles), list, disable", "app.cli.user:add_user_arguments",
            "app.cli.user:main"),
    Command("demos", "export operator overrides as demonstrations for training",
            "app.cli.demos:add_demos_arguments", "app.cli.demos:main"),
    Command("policy", "the policy registry: list, promote VERSION, rollback",
            "app.cli.policy:add_policy_arguments", "app.cli.policy:main"),
    Command("retrain", "nightly retraining: calibrate, fine-tune, gate, promote (exit 0/1/3/4)",
            "app.cli.retrain:add_retrain_arguments", "app.cli.retrain:main"),
    Command("retrain-worker", "one rank of retrain's fine-tuning under its launcher (not by hand)",
            "app.cli.retrain:add_worker_arguments", "app.cli.retrain:worker_main"),
    Command("train", "train the PPO policy ensemble on the twin (resumable)",
            "policy.train_cli:add_train_arguments", "policy.train_cli:run_train"),
    Command("audit", "verify or purge the sealed audit trail, make or rotate its keys",
            "app.cli.arguments:add_audit_arguments", "app.cli.audit:main"),
    Command("eval", "compare the policy with the tuned threshold, timer and random controllers on held-out "
            "scenarios, in water, yield and money", "policy.eval_args:add_eval_arguments",
            "policy.eval_cli:run_eval"),
    Command("report", "signed PDF report of one greenhouse's period; `report verify FILE.pdf`",
            "app.cli.report:add_report_arguments", "app.cli.report:main"),
    Command("serve", "run the control service (API, MQTT bridge, control loops)",
            "app.cli.arguments:add_serve_arguments", "app.cli.service:run_serve"),
    Command("init", "make the token secret, audit keys and report signing key (owner-only)",
            "app.cli.init:add_init_arguments", "app.cli.init:run_init"),
    Command("settings", "every GREENTWIN_* setting with its default and meaning",
            "app.cli.arguments:add_settings_arguments", "app.cli.init:run_settings"),
    Command("demo", "service + simulated greenhouses on the configured or an embedded MQTT broker, "
            "one command", "app.cli.demo_start:add_demo_arguments", "app.cli.service:run_demo"),
    Command("plant-sim", "edge-box emulator: twins speaking the MQTT contract",
            "app.cli.arguments:add_plant_sim_arguments", "app.cli.plant_sim:run_plant_sim"),
)
"""Every ``greentwin`` command, in the order ``--help`` lists them."""


def _resolve(target: str) -> Callable[..., Any]:
    module, _, name = target.partition(":")
    fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return fn


def _lazy(target: str) -> Handler:
    """A handler that imports its command's module when it runs, not when the parser is built."""
    def run(args: argparse.Namespace) -> int:
        code: int = _resolve(target)(args)
        return code

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="greentwin", description="Digital-twin greenhouse control.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help)
        _resolve(command.arguments)(p)
        p.set_defaults(handler=_lazy(command.run))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    code = handler(args)
    if os.environ.get("WORLD_SIZE", "1") not in ("", "1"):  # maybe a torchrun rank of train or retrain-worker
        from policy.distributed import exit_rank

        exit_rank(code)
    return code
