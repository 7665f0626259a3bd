"""Paragraph and table styles shared by the report's sections, and the escaping paragraph helper."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from xml.sax.saxutils import escape

from reportlab.lib import colors
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.cidfonts import UnicodeCIDFont
from reportlab.platypus import Paragraph, TableStyle

from audit.report.data import utc
from audit.wording import language

_STYLES = getSampleStyleSheet()
BODY = ParagraphStyle("gt-body", parent=_STYLES["BodyText"], fontSize=9, leading=11)
SMALL = ParagraphStyle("gt-small", parent=BODY, fontSize=7, leading=8.5)
H1, H2, H3 = _STYLES["Title"], _STYLES["Heading2"], _STYLES["Heading3"]
GRID = TableStyle([
    ("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
    ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8efe8")),
    ("FONTNAME", (0, 0), (-1, 0), "Helvetica-Bold"),
    ("FONTSIZE", (0, 0), (-1, -1), 7.5),
    ("VALIGN", (0, 0), (-1, -1), "TOP"),
])

COMPACT = TableStyle([*GRID.getCommands(), ("FONTSIZE", (0, 1), (-1, -1), 7),
                      ("LEADING", (0, 1), (-1, -1), 8.6),
                      ("TOPPADDING", (0, 1), (-1, -1), 1.5), ("BOTTOMPADDING", (0, 1), (-1, -1), 1.5)])
"""A table of many short rows (the hourly log): tighter, so a week of hours takes a few pages."""
PAIRS = TableStyle([("GRID", (0, 0), (-1, -1), 0.25, colors.grey), ("FONTSIZE", (0, 0), (-1, -1), 7.5),
                    ("FONTNAME", (1, 0), (1, -1), "Helvetica-Bold"), ("VALIGN", (0, 0), (-1, -1), "TOP")])
"""Label and value tables: no header row, the values in bold."""


def p(text: str, style: ParagraphStyle = BODY) -> Paragraph:
    """Paragraph of untrusted text: escaped, so markup in it prints literally."""
    return Paragraph(escape(text), style)
TITLE = ParagraphStyle("gt-title", parent=H1, fontSize=15, leading=18, spaceAfter=4)
H3_TIGHT = ParagraphStyle("gt-h3", parent=H3, fontSize=10.5, leading=13, spaceBefore=5, spaceAfter=3)
"""The first page's headings: it must hold the whole answer, so they are smaller than the sections'."""


def fmt(value: float | None, digits: int = 1) -> str:
    """A number as the report prints it (thousands separated), ``-`` for none."""
    return "-" if value is None else f"{value:,.{digits}f}"


def when(dt: datetime) -> str:
    """A time in a table cell: UTC to the minute (the headings say UTC), short enough for narrow columns."""
    return utc(dt).strftime("%Y-%m-%d %H:%M")


CJK_FONT = "STSong-Light"
"""Adobe's standard Simplified Chinese CID font, built into reportlab: the viewer supplies its glyphs (any
viewer with Asian font support), so the report embeds no font file and stays a few hundred kB in either
language; a viewer without a CJK font shows blanks, while the text itself is there to copy and search."""


@dataclass(frozen=True)
class Look:
    """The fonts and styles of a report in one language: Helvetica cannot draw Chinese, so a zh-Hans
    report sets every paragraph, table cell and chart label in :data:`CJK_FONT` instead."""

    lang: str
    regular: str
    bold: str
    body: ParagraphStyle
    small: ParagraphStyle
    title: ParagraphStyle
    h2: ParagraphStyle
    h3: ParagraphStyle
    h3_tight: ParagraphStyle
    grid: TableStyle
    compact: TableStyle
    pairs: TableStyle


def _cjk_style(base: ParagraphStyle) -> ParagraphStyle:
    """``base`` in the CJK font, wrapping between characters (Chinese puts no spaces between words)."""
    return ParagraphStyle(f"{base.name}-zh", parent=base, fontName=CJK_FONT, wordWrap="CJK")


def _cjk_table(base: TableStyle) -> TableStyle:
    return TableStyle([*base.getCommands(), ("FONTNAME", (0, 0), (-1, -1), CJK_FONT)])


@cache
def look(lang: str) -> Look:
    """The look of a report in ``lang`` (English for an unknown language)."""
    if language(lang) != "zh-Hans":
        return Look("en", "Helvetica", "Helvetica-Bold", BODY, SMALL, TITLE, H2, H3, H3_TIGHT, GRID, COMPACT,
                    PAIRS)
    if CJK_FONT not in pdfmetrics.getRegisteredFontNames():
        pdfmetrics.registerFont(UnicodeCIDFont(CJK_FONT))
    return Look("zh-Hans", CJK_FONT, CJK_FONT,
                *(_cjk_style(s) for s in (BODY, SMALL, TITLE, H2, H3, H3_TIGHT)),
                *(_cjk_table(t) for t in (GRID, COMPACT, PAIRS)))
