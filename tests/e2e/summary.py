"""Rows of the end-to-end summary table, printed at the end of the run (``tests/e2e/conftest.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Row:
    scenario: str
    injected: str
    invariants: str
    counts: dict[str, Any]
    seconds: float


ROWS: list[Row] = []


HELD = ("records lost 0, sealed twice 0, applied twice 0, applied in e-stop 0, "
        "safety violations 0 (plant log), "
        "false latches 0, "
        "service exits 0")
"""What :meth:`System.check` asserts: a row is added only after it passed."""


def add(scenario: str, injected: str, counts: dict[str, Any], seconds: float, invariants: str = HELD) -> None:
    ROWS.append(Row(scenario, injected, invariants, counts, seconds))


def table() -> str:
    """A Markdown table: one line per scenario."""
    lines = ["| scenario | injected | invariants | counts | s |", "| --- | --- | --- | --- | --- |"]
    for r in ROWS:
        counts = ", ".join(f"{k} {v}" for k, v in r.counts.items())
        lines.append(f"| {r.scenario} | {r.injected} | {r.invariants} | {counts} | {r.seconds:.0f} |")
    return "\n".join(lines)
