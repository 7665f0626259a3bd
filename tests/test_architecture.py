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
    _write(tmp_path, {"safety/__init__.py": "import typing\nif typing.TYPE_CHECKING:\n    import app.models\n"})
    assert import_graph(tmp_path)["safety"] == set()
    assert import_graph(tmp_path, type_only=True)["safety"] == {"app.models"}
    assert _violations(import_graph(tmp_path, type_only=True), "safety", ("app",)) == ["safety -> app.models"]
