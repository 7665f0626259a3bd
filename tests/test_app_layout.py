"""The project's shape: no import loops between its modules, no module in ``app/`` too long to read.

The import graph is read from the source with :mod:`ast`, so it sees every import the
interpreter could run: one inside a function counts (it runs the first time the function is
called), one under ``if TYPE_CHECKING:`` does not (it never runs).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "audit", "policy", "safety", "twin")
MAX_LINES = 350
def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted name -> file of every module of the project's packages."""
    return {_module_name(root, p): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node`` except those only a type checker runs."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.orelse:  # ``else:`` of a TYPE_CHECKING block does run
                yield from _runtime_imports(ast.Module(body=[stmt], type_ignores=[]))
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        yield from _runtime_imports(child)


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an import of ``name`` runs: ``name`` itself or its nearest module parent."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports at run time."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                # ``from pkg import sub`` imports the submodule when there is one.
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            edges |= {t for t in (_resolve(x, modules) for x in targets) if t is not None and t != name}
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import loop as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_the_project_has_no_import_cycles() -> None:
    cycle = find_cycle(import_graph(project_modules()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_app_module_is_short_enough_to_read() -> None:
    lengths = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in (ROOT / "app").rglob("*.py")}
    over = {p: n for p, n in sorted(lengths.items()) if n >= MAX_LINES}
    assert not over, f"modules of {MAX_LINES} lines or more in app/: " + \
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
    for rel, text in {"pkg/__init__.py": "", "pkg/a.py": "from pkg.b import thing\n", "pkg/b.py": b_source}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert find_cycle(import_graph(project_modules(tmp_path, ("pkg",)))) == cycle


def test_a_cycle_is_reported_as_its_path() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"b"}, "d": set()}
    assert find_cycle(graph) == ["b", "c", "b"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


CONTROL_ORDER = ("records", "setup", "valve_evidence", "outlook", "crop_twin", "step", "observation", "estimation", "proposal", "explain", "finish", "batch", "controller")
"""app/control/'s modules in reading order (its package docstring lists them so)."""


def test_the_control_path_reads_top_down() -> None:
    graph = import_graph(project_modules())
    assert {m for m in graph if m.startswith("app.control.")} == {f"app.control.{n}" for n in CONTROL_ORDER}
    for i, name in enumerate(CONTROL_ORDER):
        later = {"app.control", *(f"app.control.{n}" for n in CONTROL_ORDER[i:])}
        assert not graph[f"app.control.{name}"] & later, f"app.control.{name} imports a module read after it"
