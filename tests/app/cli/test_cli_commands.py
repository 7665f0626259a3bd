"""The command table: every command's arguments and handler resolve, and the handlers stay unloaded until
their command runs (``--help`` and the parser load argparse-only modules)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.cli import COMMANDS, Command, build_parser
from app.cli import _resolve as resolve


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_each_command_resolves_and_helps(command: Command, capsys: pytest.CaptureFixture[str]) -> None:
    assert callable(resolve(command.arguments)) and callable(resolve(command.run))
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([command.name, "--help"])
    assert done.value.code == 0 and command.name in capsys.readouterr().out


def test_names_are_unique_and_the_parser_lists_them_all() -> None:
    names = [c.name for c in COMMANDS]
    assert len(names) == len(set(names))
    assert set(build_parser()._subparsers._group_actions[0].choices) == set(names)


def test_building_the_parser_loads_no_handler() -> None:
    handlers = sorted({c.run.partition(":")[0] for c in COMMANDS}
                      - {c.arguments.partition(":")[0] for c in COMMANDS})
    code = ("import sys; from app.cli import build_parser; build_parser(); "
            f"print([m for m in {handlers!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    assert out.strip() == "[]", out
