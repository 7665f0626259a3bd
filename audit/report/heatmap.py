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

from audit.report.data import ReportData, SaliencyMap, iso
from audit.report.styles import Look, look, p
from audit.wording import DEFAULT_LANGUAGE, feature_name, text

SECTION_TITLE = "Low-confidence decisions: input saliency"
"""The section's English heading (``report.heatmap.title``), which tests find the section by."""
_POSITIVE = (0.698, 0.094, 0.169)  # #b2182b
_NEGATIVE = (0.129, 0.400, 0.675)  # #2166ac
_MISSING = colors.Color(0.82, 0.82, 0.82)
_LABEL_W = 125.0  # points for the feature names, as the catalogue words them ("Zone 6 irrigation over 24 h")
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


def actor_words(actor: str, lang: str) -> str:
    """Who made a decision, in words rather than its stored actor code (``expert:low_confidence``)."""
    if actor == "expert:low_confidence":
        return text("report.expert_fallback", lang)
    for prefix in ("policy", "operator"):
        if actor.startswith(f"{prefix}:"):
            return text(f"report.actor.{prefix}", lang, name=actor.removeprefix(f"{prefix}:"))
    return actor


def heatmap(m: SaliencyMap, width: float = 170 * mm, lk: Look | None = None) -> Drawing:
    """The map of one decision: title, step header, one row per feature, scale bar."""
    lk = lk or look(DEFAULT_LANGUAGE)
    lang = lk.lang
    steps, rows = m.steps, len(m.features)
    cell_w = min(_MAX_CELL_W, (width - _LABEL_W - 4) / max(steps, 1))
    grid_h = rows * _ROW_H
    legend_h, header_h, title_h = 26.0, 12.0, 24.0
    height = title_h + header_h + grid_h + legend_h
    d = Drawing(width, height)
    top = height - 9
    d.add(String(0, top, text("report.heatmap.head", lang, ts=iso(m.ts), seq=m.seq,
                              confidence=f"{m.confidence:.2f}", actor=actor_words(m.actor, lang)),
                 fontName=lk.bold, fontSize=8))
    d.add(String(0, top - 10, text("report.heatmap.rows", lang, rows=rows, total=m.total_features,
                                   share=f"{m.shown_share_pct:.0f}"), fontName=lk.regular, fontSize=6.5))
    grid_top = height - title_h - header_h
    for t in range(steps):
        d.add(String(_LABEL_W + (t + 0.5) * cell_w, grid_top + 3, _step_label(t, steps),
                     fontSize=6.5, textAnchor="middle"))
    scale = max((abs(v) for row in m.values for v in row if v is not None), default=0.0)
    for i, (name, row) in enumerate(zip(m.features, m.values, strict=True)):
        y = grid_top - (i + 1) * _ROW_H
        d.add(String(_LABEL_W - 3, y + 2.5, feature_name(name, lang), fontName=lk.regular, fontSize=6.5,
                     textAnchor="end"))
        for t, value in enumerate(row):
            d.add(Rect(_LABEL_W + t * cell_w, y, cell_w, _ROW_H, fillColor=shade(value, scale),
                       strokeColor=colors.white, strokeWidth=0.4))
    if not rows:
        d.add(String(_LABEL_W, grid_top - 10, text("report.heatmap.all_zero", lang), fontName=lk.regular,
                     fontSize=7))
    _legend(d, scale, y=legend_h - 12, lk=lk)
    return d


def _legend(d: Drawing, scale: float, y: float, lk: Look) -> None:
    """Scale bar from -scale to +scale under the grid, with what the colours mean."""
    bar_w = 120.0
    step_w = bar_w / _LEGEND_STEPS
    for k in range(_LEGEND_STEPS):
        value = scale * (2 * k / (_LEGEND_STEPS - 1) - 1)
        d.add(Rect(_LABEL_W + k * step_w, y, step_w, 6, fillColor=shade(value, scale), strokeColor=None))
    d.add(Rect(_LABEL_W, y, bar_w, 6, fillColor=None, strokeColor=colors.grey, strokeWidth=0.3))
    for frac, tick in ((0.0, f"{-scale:.3g}"), (0.5, "0"), (1.0, f"+{scale:.3g}")):
        d.add(String(_LABEL_W + frac * bar_w, y - 8, tick, fontSize=6, textAnchor="middle"))
    d.add(String(_LABEL_W - 3, y + 0.5, text("report.heatmap.attribution", lk.lang), fontName=lk.regular,
                 fontSize=6.5, textAnchor="end"))
    d.add(String(_LABEL_W + bar_w + 8, y + 0.5, text("report.heatmap.colours", lk.lang), fontName=lk.regular,
                 fontSize=6.5))


def heatmap_section(data: ReportData) -> list[Flowable]:
    """Heading, what the maps show, the first maps, and how many more there are (or why there are none)."""
    lang = data.language
    lk = look(lang)
    out: list[Flowable] = [Paragraph(text("report.heatmap.title", lang), lk.h2)]
    if data.saliency_total == 0:
        if data.decisions_low_confidence == 0:
            out.append(p(text("report.heatmap.none", lang), lk.body))
        else:
            out.append(p(text("report.heatmap.none_recorded", lang, n=data.decisions_low_confidence),
                         lk.body))
        return out
    intro = text("report.heatmap.intro", lang, n=data.saliency_total)
    if data.saliency_omitted:
        intro += text("report.heatmap.omitted", lang, shown=len(data.saliency_maps),
                      more=data.saliency_omitted)
    out.append(p(intro, lk.body))
    for m in data.saliency_maps:
        out += [Spacer(1, 3 * mm), heatmap(m, lk=lk)]
    return out
