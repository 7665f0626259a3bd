"""Charts drawn with ``reportlab.graphics``: moisture against its band, cumulative water, lights."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reportlab.graphics.charts.legends import Legend
from reportlab.graphics.charts.lineplots import LinePlot
from reportlab.graphics.shapes import Drawing, String
from reportlab.lib import colors
from reportlab.lib.units import mm
from reportlab.platypus import Flowable, Paragraph

from audit.labels import band_label, zone_label
from audit.report.data import HourSummary, ReportData
from audit.report.styles import H2

_ZONE_COLORS = (colors.HexColor("#1f77b4"), colors.HexColor("#ff7f0e"), colors.HexColor("#2ca02c"),
                colors.HexColor("#d62728"), colors.HexColor("#9467bd"), colors.HexColor("#8c564b"),
                colors.HexColor("#e377c2"), colors.HexColor("#7f7f7f"))


def _line_chart(title: str, series: Sequence[tuple[str, list[tuple[float, float]], Any, bool]],
                y_label: str, span_days: float, width: float = 170 * mm, height: float = 55 * mm) -> Drawing:
    """One LinePlot over days since the period start; ``series`` = (name, points, colour, dashed)."""
    drawing = Drawing(width, height)
    drawing.add(String(0, height - 10, title, fontName="Helvetica-Bold", fontSize=9))
    plot = LinePlot()
    plot.x, plot.y = 40, 30
    plot.width, plot.height = width - 150, height - 50
    drawn = [(n, pts, c, d) for n, pts, c, d in series if pts]
    if not drawn:
        drawing.add(String(40, height / 2, "no data in this period", fontSize=8))
        return drawing
    plot.data = [pts for _, pts, _, _ in drawn]
    for i, (_, _, colour, dashed) in enumerate(drawn):
        plot.lines[i].strokeColor = colour
        plot.lines[i].strokeWidth = 0.6 if dashed else 1.0
        if dashed:
            plot.lines[i].strokeDashArray = (3, 2)
    plot.xValueAxis.valueMin = 0
    plot.xValueAxis.valueMax = max(span_days, 1e-3)
    plot.xValueAxis.labels.fontSize = 7
    plot.yValueAxis.labels.fontSize = 7
    plot.xValueAxis.labelTextFormat = "%.1f" if span_days < 5 else "%.0f"
    drawing.add(plot)
    drawing.add(String(plot.x + plot.width / 2, 8, "days since period start", fontSize=7, textAnchor="middle"))
    drawing.add(String(2, plot.y + plot.height + 4, y_label, fontSize=7))
    legend = Legend()
    legend.x, legend.y = plot.x + plot.width + 12, plot.y + plot.height
    legend.fontSize, legend.dx, legend.dy, legend.deltay = 7, 8, 6, 9
    legend.colorNamePairs = [(c, n) for n, _, c, d in drawn if not d]
    drawing.add(legend)
    return drawing


def charts(data: ReportData) -> list[Flowable]:
    """The charts section: one moisture chart per zone, cumulative water per zone, lights."""
    span_days = (data.period_to - data.period_from).total_seconds() / 86400.0

    def x(h: HourSummary) -> float:
        return (h.start - data.period_from).total_seconds() / 86400.0

    out: list[Flowable] = [Paragraph("Charts", H2)]
    for i, zs in enumerate(data.zones):  # hourly lists are by position; zs.index is the zone's name
        colour = _ZONE_COLORS[i % len(_ZONE_COLORS)]
        # In % VWC, as the dashboard draws moisture.
        points = [(x(h), 100.0 * m) for h in data.hours if (m := h.theta_mean(i)) is not None]
        low, high = 100.0 * zs.low, 100.0 * zs.high
        band = [(0.0, low), (span_days, low)], [(0.0, high), (span_days, high)]
        out.append(_line_chart(f"{zone_label(zs.index)}: soil moisture (hourly mean) vs target band "
                               f"{band_label(zs.low, zs.high)}",
                               [(zone_label(zs.index), points, colour, False),
                                ("low", band[0], colors.red, True), ("high", band[1], colors.red, True)],
                               "% VWC", span_days, height=45 * mm))
    cumulative: list[tuple[str, list[tuple[float, float]], Any, bool]] = []
    for i, zs in enumerate(data.zones):
        total, pts = 0.0, [(0.0, 0.0)]
        for h in data.hours:
            total += h.water_l[i]
            pts.append((x(h) + 1 / 24, total))
        cumulative.append((zone_label(zs.index), pts, _ZONE_COLORS[i % len(_ZONE_COLORS)], False))
    out.append(_line_chart("Irrigation: cumulative water per zone", cumulative, "litres", span_days))
    lights = [(x(h), m) for h in data.hours if (m := h.light_pct_mean) is not None]
    out.append(_line_chart("Supplemental lights: hourly mean output", [("lights", lights, colors.orange, False)],
                           "% of full power", span_days))
    return out

