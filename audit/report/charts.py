"""Charts drawn with ``reportlab.graphics``: moisture against its band per zone, cumulative water, lights."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reportlab.graphics.charts.legends import Legend
from reportlab.graphics.charts.lineplots import LinePlot
from reportlab.graphics.shapes import Drawing, String
from reportlab.lib import colors
from reportlab.lib.units import mm
from reportlab.platypus import Flowable, Paragraph, Table, TableStyle

from audit.labels import band_label
from audit.report.data import HourSummary, ReportData, iso
from audit.report.styles import Look, look
from audit.wording import text, zone_name

_ZONE_COLORS = (colors.HexColor("#1f77b4"), colors.HexColor("#ff7f0e"), colors.HexColor("#2ca02c"),
                colors.HexColor("#d62728"), colors.HexColor("#9467bd"), colors.HexColor("#8c564b"),
                colors.HexColor("#e377c2"), colors.HexColor("#7f7f7f"))
_CELLS = TableStyle([("LEFTPADDING", (0, 0), (-1, -1), 0), ("RIGHTPADDING", (0, 0), (-1, -1), 0),
                     ("TOPPADDING", (0, 0), (-1, -1), 2), ("BOTTOMPADDING", (0, 0), (-1, -1), 2)])


_TITLE_H = 14.0
"""Points above the plot for its title; the axis label sits under it, so neither touches the other."""
_HOURS_UP_TO = 2.0
"""Periods up to this many days are charted in hours since their start, longer ones in days."""


def _line_chart(title: str, series: Sequence[tuple[str, list[tuple[float, float]], Any, bool]],
                y_label: str, span: float, x_label: str, lk: Look, width: float = 180 * mm,
                height: float = 55 * mm, legend: bool = True) -> Drawing:
    """One LinePlot over time since the period start; ``series`` = (name, points, colour, dashed).

    The title takes the top band, the y axis's label the line under it and the plot starts below
    both, so a long title and the label never overlap; the legend (when drawn) sits right of the plot.
    """
    drawing = Drawing(width, height)
    drawing.add(String(0, height - 10, title, fontName=lk.bold, fontSize=8.5))
    plot = LinePlot()
    plot.x, plot.y = 34, 26
    plot.width = width - plot.x - (110 if legend else 10)
    plot.height = height - plot.y - _TITLE_H - 12
    drawing.add(String(2, plot.y + plot.height + 5, y_label, fontName=lk.regular, fontSize=7))
    drawn = [(n, pts, c, d) for n, pts, c, d in series if pts]
    if not drawn:
        drawing.add(String(plot.x, plot.y + plot.height / 2, text("report.chart.no_data", lk.lang),
                           fontName=lk.regular, fontSize=8))
        return drawing
    plot.data = [pts for _, pts, _, _ in drawn]
    for i, (_, _, colour, dashed) in enumerate(drawn):
        plot.lines[i].strokeColor = colour
        plot.lines[i].strokeWidth = 0.6 if dashed else 1.0
        if dashed:
            plot.lines[i].strokeDashArray = (3, 2)
    plot.xValueAxis.valueMin = 0
    plot.xValueAxis.valueMax = max(span, 1e-3)
    plot.xValueAxis.labels.fontSize = 7
    plot.yValueAxis.labels.fontSize = 7
    plot.xValueAxis.labelTextFormat = "%.0f" if span >= 5 else "%.1f"
    drawing.add(plot)
    drawing.add(String(plot.x + plot.width / 2, 4, x_label, fontName=lk.regular, fontSize=7,
                       textAnchor="middle"))
    if legend:
        key = Legend()
        key.x, key.y = plot.x + plot.width + 12, plot.y + plot.height
        key.fontName, key.fontSize, key.dx, key.dy, key.deltay = lk.regular, 7, 8, 6, 9
        key.columnMaximum = 16  # one column: a second would run off the page's right edge
        key.colorNamePairs = [(c, n) for n, _, c, d in drawn if not d]
        drawing.add(key)
    return drawing


def charts(data: ReportData) -> list[Flowable]:
    """The charts section: moisture against its band per zone, two to a row; cumulative water per zone;
    lights."""
    lang = data.language
    lk = look(lang)
    span_days = (data.period_to - data.period_from).total_seconds() / 86400.0
    in_hours = span_days <= _HOURS_UP_TO
    unit = 24.0 if in_hours else 1.0
    span = span_days * unit
    x_label = text("report.chart.hours_since" if in_hours else "report.chart.days_since", lang,
                   start=iso(data.period_from))

    def x(h: HourSummary) -> float:
        return (h.start - data.period_from).total_seconds() / 86400.0 * unit

    out: list[Flowable] = [Paragraph(text("report.h.charts", lang), lk.h2)]
    cells: list[Drawing] = []
    for i, zs in enumerate(data.zones):  # hourly lists are by position; zs.index is the zone's name
        colour = _ZONE_COLORS[i % len(_ZONE_COLORS)]
        # In % VWC, as the dashboard draws moisture; hourly means at the middle of their hour.
        points = [(x(h) + unit / 48, 100.0 * m) for h in data.hours if (m := h.theta_mean(i)) is not None]
        low, high = 100.0 * zs.low, 100.0 * zs.high
        band = [(0.0, low), (span, low)], [(0.0, high), (span, high)]
        title = text("report.chart.moisture", lang, zone=zone_name(zs.index, lang, zs.name),
                     band=band_label(zs.low, zs.high))
        cells.append(_line_chart(title, [(zone_name(zs.index, lang), points, colour, False),
                                         (text("report.chart.low", lang), band[0], colors.red, True),
                                         (text("report.chart.high", lang), band[1], colors.red, True)],
                                 text("report.chart.moisture_axis", lang), span, x_label, lk, width=88 * mm,
                                 height=44 * mm, legend=False))
    rows = [cells[i : i + 2] + [""] * (2 - len(cells[i : i + 2])) for i in range(0, len(cells), 2)]
    if rows:
        out.append(Table(rows, colWidths=[90 * mm, 90 * mm], style=_CELLS))
    cumulative: list[tuple[str, list[tuple[float, float]], Any, bool]] = []
    for i, zs in enumerate(data.zones):
        total, pts = 0.0, [(0.0, 0.0)]
        for h in data.hours:
            total += h.water_l[i]
            pts.append((x(h) + unit / 24, total))
        cumulative.append((zone_name(zs.index, lang, zs.name), pts, _ZONE_COLORS[i % len(_ZONE_COLORS)],
                           False))
    out.append(_line_chart(text("report.chart.water", lang), cumulative,
                           text("report.chart.water_axis", lang), span, x_label, lk, height=46 * mm))
    lights = [(x(h) + unit / 48, m) for h in data.hours if (m := h.light_pct_mean) is not None]
    out.append(_line_chart(text("report.chart.lights", lang),
                           [(text("report.chart.lights_series", lang), lights, colors.orange, False)],
                           text("report.chart.lights_axis", lang), span, x_label, lk, height=40 * mm))
    return out
