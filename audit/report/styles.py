"""Paragraph and table styles shared by the report's sections, and the escaping paragraph helper."""

from __future__ import annotations

from xml.sax.saxutils import escape

from reportlab.lib import colors
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.platypus import Paragraph, TableStyle

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


def p(text: str, style: ParagraphStyle = BODY) -> Paragraph:
    """Paragraph of untrusted text: escaped, so markup in it prints literally."""
    return Paragraph(escape(text), style)
