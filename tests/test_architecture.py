"""The layering the project promises, floor by floor.

``wire`` (the MQTT contract) imports nothing from the project. ``twin``, ``safety`` and ``audit`` are
libraries: nothing from the service (``app``), the learner (``policy``), the control core (``control``)
or the emulator (``plantsim``), and the twin nothing from the safety layer. ``control`` runs a decision
without the service: nothing from ``app`` or ``plantsim``. The emulator is an edge box, which knows the
wire, the twin and the safety fall-back but not the service, the control core or the learner. So each
part can be tested, reused and reasoned about without the parts above it. The graph is
:mod:`tests.import_graph`'s: imports inside functions count, those under ``if TYPE_CHECKING:`` only
where a test asks for them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_graph import import_graph


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
    return import_graph()


PROJECT = ("wire", "twin", "safety", "audit", "policy", "control", "plantsim", "app")
RULES: dict[str, tuple[str, ...]] = {
    "wire": tuple(p for p in PROJECT if p != "wire"),
    "twin": ("app", "policy", "control", "plantsim", "safety"),
    "safety": ("app", "policy", "control", "plantsim"),
    "audit": ("app", "policy", "control", "plantsim"),
    "control": ("app", "plantsim"),
    "plantsim": ("app", "control", "policy", "audit"),
}
"""Package -> the packages it may not import."""


@pytest.mark.parametrize("lower", sorted(RULES))
def test_each_floor_imports_nothing_from_above(graph: dict[str, set[str]], lower: str) -> None:
    assert _violations(graph, lower, RULES[lower]) == []


def test_type_hints_keep_the_floors_too() -> None:
    """A name imported only for a type still ties a package to the one it names."""
    with_types = import_graph(type_only=True)
    for lower, forbidden in RULES.items():
        assert _violations(with_types, lower, forbidden) == [], lower


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


SERVICE_LAYER_MAY_NOT_IMPORT = ("app.api", "app.web", "app.cli")


def _service_layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Edges into the command line from outside it, and from ``app.services`` into its callers."""
    into_cli = [f"{m} -> {t}" for m, targets in graph.items() if not _within(m, "app.cli")
                for t in targets if _within(t, "app.cli")]
    upward = [f"{m} -> {t}" for m, targets in graph.items() if _within(m, "app.services")
              for t in targets if any(_within(t, above) for above in SERVICE_LAYER_MAY_NOT_IMPORT)]
    return sorted(into_cli + upward)


def test_routes_commands_and_retraining_meet_in_the_service_layer(graph: dict[str, set[str]]) -> None:
    """The API, the pages, the retraining pipeline and the rest call ``app.services``; only ``app.cli``
    itself imports the command line (its argument parsing and printing are no one else's), and the
    services know none of their callers."""
    assert "app.services.greenhouses" in graph["app.api.routes.greenhouses"]
    assert _service_layer_violations(graph) == []
    assert _service_layer_violations(import_graph(type_only=True)) == []


def test_the_service_layer_rule_sees_both_directions() -> None:
    graph = {"app.api.routes.reports": {"app.cli.report"}, "app.cli": {"app.cli.db"},
             "app.services.reports": {"app.web.pages", "app.core.db"}, "app.clinic": {"app.cli"}}
    assert _service_layer_violations(graph) == ["app.api.routes.reports -> app.cli.report",
                                                "app.clinic -> app.cli",
                                                "app.services.reports -> app.web.pages"]


def test_graph_sees_the_real_imports(graph: dict[str, set[str]]) -> None:
    """Guards the checks above against an empty or blind graph."""
    assert {"twin.env", "safety.clipper", "audit.store", "app.cli", "policy.baselines", "wire.topics",
            "control.batch", "plantsim.sim"} <= set(graph)
    assert "audit.tables" in graph["audit.store"]
    assert "app.core.settings_doc" in graph["app.cli.init"]  # imported inside a handler function
    assert "policy.baselines" in graph["app.cli.twin"]
    assert "wire.topics" in graph["control.finish"] and "wire.topics" in graph["plantsim.edge"]


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
    _write(tmp_path, {"safety/__init__.py": "import typing\nif typing.TYPE_CHECKING:\n"
                                            "    import app.models\n"})
    assert import_graph(tmp_path)["safety"] == set()
    assert import_graph(tmp_path, type_only=True)["safety"] == {"app.models"}
    assert _violations(import_graph(tmp_path, type_only=True), "safety", ("app",)) == ["safety -> app.models"]


NETWORK_MODULES = ("httpx", "requests", "urllib.request", "socket")
"""Clients that reach outside the process: the twin computes, the service (``app/outlook/``) fetches."""


def _network_imports(root: Path) -> list[str]:
    """``module: imported`` for every import of a :data:`NETWORK_MODULES` module in ``root``'s ``*.py``,
    type-only ones included (a client's types tie the twin to the client too)."""
    import ast

    def reaches_out(name: str) -> bool:
        return any(name == m or name.startswith(m + ".") for m in NETWORK_MODULES)

    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] if reaches_out(node.module) else \
                    [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            found += [f"{path.relative_to(root).as_posix()}: {n}" for n in names if reaches_out(n)]
    return found


def test_the_twin_holds_no_network_client() -> None:
    from tests.import_graph import REPO_ROOT

    assert _network_imports(REPO_ROOT / "twin") == []


def test_the_network_scan_sees_every_import_form(tmp_path: Path) -> None:
    _write(tmp_path, {"a.py": "import httpx\n", "b.py": "from urllib import request\n",
                      "c.py": "import urllib.parse\n",
                      "sub/d.py": "def f():\n    from socket import socket\n",
                      "e.py": "import requests_toolbelt\n"})
    assert _network_imports(tmp_path) == ["a.py: httpx", "b.py: urllib.request", "sub/d.py: socket"]
