"""The project's shape: no import loops between its modules, no module in ``app/`` too long to read.

The import graph is :mod:`tests.import_graph`'s, read from the source: an import inside a function
counts (it runs the first time the function is called), one under ``if TYPE_CHECKING:`` does not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_graph import REPO_ROOT, find_cycle, import_graph

ROOT = REPO_ROOT
MAX_LINES = 350
SERVICE_SIDE = ("app", "control", "wire", "plantsim")
"""The packages the line cap holds for (the twin and the learner keep longer numeric modules)."""


def test_the_project_has_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_app_module_is_short_enough_to_read() -> None:
    lengths = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines())
               for pkg in SERVICE_SIDE for p in (ROOT / pkg).rglob("*.py")}
    over = {p: n for p, n in sorted(lengths.items()) if n >= MAX_LINES}
    assert not over, f"modules of {MAX_LINES} lines or more in {'/, '.join(SERVICE_SIDE)}/: " + \
        ", ".join(f"{p} ({n})" for p, n in over.items())


# ---- the checker itself ----------------------------------------------------------------------------


LOOP = ["pkg.a", "pkg.b", "pkg.a"]


@pytest.mark.parametrize(("b_source", "cycle"), [
    ("from pkg.a import thing\n", LOOP),
    ("def f():\n    from pkg import a\n", LOOP),  # inside a function: runs when called
    ("from . import a\n", LOOP),
    ("import pkg.a.missing\n", LOOP),  # the nearest module of a dotted name
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n", None),
    ("import typing\nif typing.TYPE_CHECKING:\n    import os\nelse:\n    import pkg.a\n", LOOP),
    ("import os\n", None),
])
def test_the_checker_sees_runtime_imports_and_ignores_type_only_ones(tmp_path: Path, b_source: str,
                                                                     cycle: list[str] | None) -> None:
    for rel, text in {"pkg/__init__.py": "", "pkg/a.py": "from pkg.b import thing\n",
                      "pkg/b.py": b_source}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert find_cycle(import_graph(tmp_path, packages=("pkg",))) == cycle


def test_a_cycle_is_reported_as_its_path() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"b"}, "d": set()}
    assert find_cycle(graph) == ["b", "c", "b"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


CONTROL_ORDER = ("records", "setup", "valve_evidence", "state", "outlook", "crop_twin", "observation",
                 "decision_setup", "step", "estimation", "proposal", "explain", "finish", "batch",
                 "controller")
"""control/'s modules in reading order (its package docstring lists them so)."""


def test_the_control_path_reads_top_down() -> None:
    graph = import_graph()
    assert {m for m in graph if m.startswith("control.")} == {f"control.{n}" for n in CONTROL_ORDER}
    for i, name in enumerate(CONTROL_ORDER):
        later = {"control", *(f"control.{n}" for n in CONTROL_ORDER[i:])}
        assert not graph[f"control.{name}"] & later, f"control.{name} imports a module read after it"


def test_the_control_path_has_no_loop_even_in_type_hints() -> None:
    """The stages take a set-up and a memory, not the controller: no control module needs to name the
    controller, so not even a type hint closes a loop back to it."""
    graph = import_graph(type_only=True)
    control = {m: {t for t in targets if t.startswith("control.")}
               for m, targets in graph.items() if m.startswith("control.")}
    cycle = find_cycle(control)
    assert cycle is None, "import cycle in control/ (type hints included): " + " -> ".join(cycle or [])
    assert "control.controller" not in graph["control.step"]
