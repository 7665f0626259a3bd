"""The end-to-end suite prints its summary table after the run (and leaves it in test-artifacts/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.e2e import summary

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not summary.ROWS:
        return
    text = summary.table()
    terminalreporter.write_sep("=", "end-to-end summary")
    terminalreporter.write_line(text)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "e2e-summary.md").write_text(text + "\n", encoding="utf-8")
