"""Saliency heat maps of low-confidence decisions: features down, steps across, cells shaded by attribution.

One :class:`~reportlab.graphics.shapes.Drawing` per decision (it never splits across pages).
The colour scale is diverging and symmetric about zero, per map: red cells pushed the policy
towards actuating (water, pump, light), blue cells away from it; white is no influence and
grey a step without a value. Each map carries its own scale bar, since magnitudes differ
between decisions.
"""

from __future__ import annotations

from reportlab.graphics.shapes import Drawing, Rect, String
from reportlab.lib import colors
from reportlab.lib.units import mm
from reportlab.platypus import Flowable, Paragraph, Spacer

from audit.labels import feature_label
from audit.report.data import ReportData, SaliencyMap, iso
from audit.report.styles import H2, p

SECTION_TITLE = "Low-confidence decisions: input saliency"
_POSITIVE = (0.698, 0.094, 0.169)  # #b2182b
_NEGATIVE = (0.129, 0.400, 0.675)  # #2166ac
_MISSING = colors.Color(0.82, 0.82, 0.82)
_LABEL_W = 82.0  # points for the feature names
_ROW_H = 9.0
_MAX_CELL_W = 30.0
_LEGEND_STEPS = 21


def shade(value: float | None, scale: float) -> colors.Color:
    """Cell colour: white at 0, full red at +scale, full blue at -scale (clipped), grey for no value."""
    if value is None:
        return _MISSING
    x = 0.0 if scale <= 0 else max(-1.0, min(1.0, value / scale))
    r, g, b = _POSITIVE if x > 0 else _NEGATIVE
    a = abs(x)
    return colors.Color(1 + (r - 1) * a, 1 + (g - 1) * a, 1 + (b - 1) * a)


def _step_label(t: int, steps: int) -> str:
    back = steps - 1 - t
    return "t" if back == 0 else f"t-{back}"


def heatmap(m: SaliencyMap, width: float = 170 * mm) -> Drawing:
    """The map of one decision: title, step header, one row per feature, scale bar."""
    steps, rows = m.steps, len(m.features)
    cell_w = min(_MAX_CELL_W, (width - _LABEL_W - 4) / max(steps, 1))
    grid_h = rows * _ROW_H
    legend_h, header_h, title_h = 26.0, 12.0, 24.0
    height = title_h + header_h + grid_h + legend_h
    d = Drawing(width, height)
    top = height - 9
    d.add(String(0, top, f"{iso(m.ts)}  seq {m.seq}  confidence {m.confidence:.2f}  {m.actor}",
                 fontName="Helvetica-Bold", fontSize=8))
    d.add(String(0, top - 10, f"{rows} of {m.total_features} features with the largest total |attribution| "
                              f"({m.shown_share_pct:.0f} % of it); steps oldest to newest, t = this decision",
                 fontSize=6.5))
    grid_top = height - title_h - header_h
    for t in range(steps):
        d.add(String(_LABEL_W + (t + 0.5) * cell_w, grid_top + 3, _step_label(t, steps),
                     fontSize=6.5, textAnchor="middle"))
    scale = max((abs(v) for row in m.values for v in row if v is not None), default=0.0)
    for i, (name, row) in enumerate(zip(m.features, m.values, strict=True)):
        y = grid_top - (i + 1) * _ROW_H
        d.add(String(_LABEL_W - 3, y + 2.5, feature_label(name), fontSize=6.5, textAnchor="end"))
        for t, value in enumerate(row):
            d.add(Rect(_LABEL_W + t * cell_w, y, cell_w, _ROW_H, fillColor=shade(value, scale),
                       strokeColor=colors.white, strokeWidth=0.4))
    if not rows:
        d.add(String(_LABEL_W, grid_top - 10, "every attribution is zero", fontSize=7))
    _legend(d, scale, y=legend_h - 12)
    return d


def _legend(d: Drawing, scale: float, y: float) -> None:
    """Scale bar from -scale to +scale under the grid, with what the colours mean."""
    bar_w = 120.0
    step_w = bar_w / _LEGEND_STEPS
    for k in range(_LEGEND_STEPS):
        value = scale * (2 * k / (_LEGEND_STEPS - 1) - 1)
        d.add(Rect(_LABEL_W + k * step_w, y, step_w, 6, fillColor=shade(value, scale), strokeColor=None))
    d.add(Rect(_LABEL_W, y, bar_w, 6, fillColor=None, strokeColor=colors.grey, strokeWidth=0.3))
    for frac, text in ((0.0, f"{-scale:.3g}"), (0.5, "0"), (1.0, f"+{scale:.3g}")):
        d.add(String(_LABEL_W + frac * bar_w, y - 8, text, fontSize=6, textAnchor="middle"))
    d.add(String(_LABEL_W - 3, y + 0.5, "attribution", fontSize=6.5, textAnchor="end"))
    d.add(String(_LABEL_W + bar_w + 8, y + 0.5, "red: pushed towards water / pump / light; blue: away from it",
                 fontSize=6.5))


def heatmap_section(data: ReportData) -> list[Flowable]:
    """Heading, what the maps show, the first maps, and how many more there are (or why there are none)."""
    out: list[Flowable] = [Paragraph(SECTION_TITLE, H2)]
    if data.saliency_total == 0:
        if data.decisions_low_confidence == 0:
            out.append(p("No low-confidence decisions in this period, so there are no saliency heat maps."))
        else:
            out.append(p(f"{data.decisions_low_confidence} low-confidence decisions in this period, none with a "
                         "recorded saliency history, so there are no saliency heat maps."))
        return out
    shown = len(data.saliency_maps)
    intro = (f"{data.saliency_total} low-confidence decisions carry the steps that led to them with a saliency map "
             "(integrated gradients of the policy ensemble's decision score, each step against a reference with "
             "every zone in its target band). Rows are input features, columns the steps before the decision.")
    if data.saliency_omitted:
        intro += (f" The first {shown} are drawn; {data.saliency_omitted} more are in the audit trail (the "
                  "decision log above counts them).")
    out.append(p(intro))
    for m in data.saliency_maps:
        out += [Spacer(1, 3 * mm), heatmap(m)]
    return out
