"""Long tables as runs of short ones: reportlab splits one long table in quadratic time."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from reportlab.platypus import Flowable, Table, TableStyle

from audit.report.styles import GRID

TABLE_CHUNK = 60
"""Rows per Table; each repeats the header, so any length lays out fast and reads on every page."""


def tables(header: Sequence[Any], rows: Iterable[Sequence[Any]], widths: Sequence[float],
           style: TableStyle = GRID) -> list[Flowable]:
    """``rows`` under ``header`` as consecutive tables of at most :data:`TABLE_CHUNK` rows (one, empty, if
    none)."""
    out: list[Flowable] = []
    chunk: list[Sequence[Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == TABLE_CHUNK:
            out.append(Table([header, *chunk], colWidths=widths, style=style, repeatRows=1))
            chunk = []
    if chunk or not out:
        out.append(Table([header, *chunk], colWidths=widths, style=style, repeatRows=1))
    return out
