"""The layering the project promises: the twin, the safety layer and the audit trail are libraries.

``twin``, ``safety`` and ``audit`` import nothing from the service (``app``) or the learner
(``policy``), and the twin nothing from the safety layer, so each can be tested, reused and
reasoned about without the parts above it. The import graph comes from the source (``ast``),
imports inside functions included; imports under ``if TYPE_CHECKING:`` are left out by default,
since they never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("twin", "safety", "audit", "policy", "app")
"""The project's top-level packages; imports of anything else (stdlib, third party) are ignored."""


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, *, type_only: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement at any depth; the body of ``if TYPE_CHECKING:`` only when ``type_only``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            if type_only:
                for child in node.body:
                    yield from _imports(ast.Module(body=[child], type_ignores=[]), type_only=type_only)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), type_only=type_only)
        else:
            yield from _imports(node, type_only=type_only)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The project module ``name`` refers to: itself, else its nearest enclosing known module."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph(root: Path, *, type_only: bool = False) -> dict[str, set[str]]:
    """Module name -> the project modules it imports, for every ``.py`` file of ``PACKAGES`` under ``root``.

    ``from pkg import name`` counts as importing ``pkg.name`` when that is a module, else ``pkg``;
    relative imports are resolved against the importing module's package. With ``type_only`` the
    imports under ``if TYPE_CHECKING:`` count too.
    """
    files = {
        _module_name(root, path): path
        for package in PACKAGES
        if (root / package / "__init__.py").is_file()
        for path in sorted((root / package).rglob("*.py"))
    }
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in _imports(ast.parse(path.read_text(), filename=str(path)), type_only=type_only):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                names = [f"{base}.{alias.name}" if base else alias.name for alias in node.names]
            for name in names:
                target = _resolve(name, modules)
                if target is not None and target != module:
                    targets.add(target)
        graph[module] = targets
    return graph


def _violations(graph: dict[str, set[str]], lower: str, forbidden: tuple[str, ...]) -> list[str]:
    """``importer -> imported`` for every edge from package ``lower`` into a ``forbidden`` package."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.split(".")[0] == lower
        for target in targets
        if target.split(".")[0] in forbidden
    )


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(REPO_ROOT)


@pytest.mark.parametrize("lower", ["twin", "safety", "audit"])
def test_lower_parts_import_neither_service_nor_policy(graph: dict[str, set[str]], lower: str) -> None:
    assert _violations(graph, lower, ("app", "policy")) == []


def test_twin_knows_no_safety_layer(graph: dict[str, set[str]]) -> None:
    assert _violations(graph, "twin", ("safety",)) == []


def test_graph_sees_the_real_imports(graph: dict[str, set[str]]) -> None:
    """Guards the checks above against an empty or blind graph."""
    assert {"twin.env", "safety.clipper", "audit.store", "app.cli", "policy.baselines"} <= set(graph)
    assert "audit.tables" in graph["audit.store"]
    assert "app.cli.db_commands" in graph["app.cli"]  # imported inside a handler function
    assert "policy.baselines" in graph["app.cli.twin"]


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_import_graph_resolves_every_import_form(tmp_path: Path) -> None:
    _write(tmp_path, {
        "twin/__init__.py": "",
        "twin/core.py": "import numpy\nfrom twin import helpers\n",
        "twin/helpers.py": "from .core import thing\nfrom . import sub\n",
        "twin/sub/__init__.py": "from ..helpers import x\n",
        "app/__init__.py": "",
        "app/models.py": "",
        "safety/__init__.py": (
            "from __future__ import annotations\n"
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from app.models import Thing\nelse:\n    import twin.core\n"
            "def late():\n    import app.models as m\n    return m\n"
        ),
    })
    graph = import_graph(tmp_path)
    assert graph["twin.core"] == {"twin.helpers"}  # third party ignored; `from pkg import module`
    assert graph["twin.helpers"] == {"twin.core", "twin.sub"}  # relative, to a module and a subpackage
    assert graph["twin.sub"] == {"twin.helpers"}  # two levels up from a package's __init__
    assert graph["safety"] == {"twin.core", "app.models"}  # the else branch and a function-level import
    with_types = import_graph(tmp_path, type_only=True)
    assert with_types["safety"] == {"twin.core", "app.models"}
    _write(tmp_path, {"safety/__init__.py": "import typing\nif typing.TYPE_CHECKING:\n    import app.models\n"})
    assert import_graph(tmp_path)["safety"] == set()
    assert import_graph(tmp_path, type_only=True)["safety"] == {"app.models"}
    assert _violations(import_graph(tmp_path, type_only=True), "safety", ("app",)) == ["safety -> app.models"]
