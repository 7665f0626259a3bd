"""The project's import graph, read from the source with :mod:`ast`: the one builder the layering test
(``tests/test_architecture.py``), the loop test (``tests/test_app_layout.py``) and any other test that
asks who imports whom share, so the rules they check are read off the same graph.

An import inside a function counts (it runs the first time the function is called); one under
``if TYPE_CHECKING:`` counts only when asked for (``type_only``), since it never runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("wire", "twin", "safety", "audit", "policy", "control", "plantsim", "app")
"""The project's top-level packages, lowest floor first; imports of anything else are ignored."""


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules(root: Path = REPO_ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted name -> file of every module of ``packages`` under ``root`` (a package without an
    ``__init__.py`` is not one)."""
    return {_module_name(root, p): p for pkg in packages if (root / pkg / "__init__.py").is_file()
            for p in sorted((root / pkg).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(node: ast.AST, *, type_only: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``; the body of ``if TYPE_CHECKING:`` only with ``type_only``
    (its ``else:`` always, since that runs)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in [*(child.body if type_only else []), *child.orelse]:
                yield from _imports(ast.Module(body=[stmt], type_ignores=[]), type_only=type_only)
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        yield from _imports(child, type_only=type_only)


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an import of ``name`` runs: ``name`` itself or its nearest module parent."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph(root: Path = REPO_ROOT, *, packages: tuple[str, ...] = PACKAGES,
                 type_only: bool = False) -> dict[str, set[str]]:
    """Module -> the project modules it imports. ``from pkg import name`` imports ``pkg.name`` when that
    is a module, else ``pkg``; relative imports resolve against the importing module's package."""
    modules = project_modules(root, packages)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in _imports(ast.parse(path.read_text(), str(path)), type_only=type_only):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" if base else alias.name for alias in node.names]
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
