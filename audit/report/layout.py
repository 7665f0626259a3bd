"""The report's layout: cover, summary tables, charts, decision log, saliency heat maps, events.

Everything is laid out with reportlab's platypus on A4; every page gets the watermark and
"page N of M" once the page count is known (:class:`_StampedCanvas`). All text that users or
devices control (names, actors, reasons, explanations) goes through :func:`p`, which escapes
it, so a reason like ``<font name="x">`` prints literally.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Sequence
from datetime import datetime
from io import BytesIO
from typing import Any

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.units import mm
from reportlab.pdfgen.canvas import Canvas
from reportlab.platypus import (
    Flowable,
    PageBreak,
    Paragraph,
    SimpleDocTemplate,
    Spacer,
    Table,
    TableStyle,
)

from audit.labels import band_label, vwc_pct, zone_number
from audit.report.charts import charts
from audit.report.data import DecisionEntry, ReportData, iso, require_aware
from audit.report.heatmap import heatmap_section
from audit.report.styles import GRID, H1, H2, H3, SMALL, p

_TABLE_CHUNK = 60  # rows per Table: reportlab splits long tables in quadratic time
_WHY_RULES = 3
"""Safety-rule firings a decision log row spells out; the count of the rest follows them."""


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def watermark_text(data: ReportData, report_id: str) -> str:
    """The diagonal text on every page: whose report, which period, which report."""
    return f"{data.greenhouse_id} | {iso(data.period_from)} - {iso(data.period_to)} | report {report_id}"


def _vwc_lines(values: Sequence[float | None], per_line: int = 4) -> str:
    """Zone means in % VWC, four to a line, so 64 zones still fit the column."""
    cells = ["-" if v is None else vwc_pct(v) for v in values]
    return "\n".join(" ".join(cells[i : i + per_line]) for i in range(0, len(cells), per_line)) or "-"


def _tables(header: Sequence[Any], rows: Iterable[Sequence[Any]], widths: Sequence[float]) -> list[Flowable]:
    """Rows as a run of short tables (each repeating the header); fast to split, any length."""
    out: list[Flowable] = []
    chunk: list[Sequence[Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == _TABLE_CHUNK:
            out.append(Table([header, *chunk], colWidths=widths, style=GRID, repeatRows=1))
            chunk = []
    if chunk or not out:
        out.append(Table([header, *chunk], colWidths=widths, style=GRID, repeatRows=1))
    return out


def _summary(data: ReportData) -> list[Flowable]:
    rows: list[list[Any]] = [
        ["Quantity", "Value"],
        ["Decisions", f"{data.decision_count}"],
        ["First / last decision", f"{iso(data.first_decision) if data.first_decision else '-'} / "
                                  f"{iso(data.last_decision) if data.last_decision else '-'}"],
        ["Water total (L)", _fmt(data.water_total_l)],
        ["Water not attributable to a zone (L)", _fmt(data.water_unattributed_l)],
        ["Lamp full-power hours", _fmt(data.lamp_hours, 2)],
        ["Energy estimate (kWh): lamps / pump / total",
         f"{_fmt(data.energy_lamps_kwh, 2)} / {_fmt(data.energy_pump_kwh, 2)} / {_fmt(data.energy_total_kwh, 2)}"],
        ["E-stops", f"{data.estops}"],
        ["Mode changes by operators", f"{sum(data.operator_overrides.values())}"],
        ["Decisions under manual control", f"{data.decisions_manual}"],
        ["Decisions in e-stop", f"{data.decisions_estop}"],
        ["Low-confidence decisions", f"{data.decisions_low_confidence}"],
        ["Decisions clipped by safety", f"{data.decisions_clipped}"],
        ["Safety rule firings", f"{sum(data.clips_by_rule.values())}"],
        ["Audit trail verification", p(data.verification)],
    ]
    out: list[Flowable] = [Paragraph("Summary", H2), Table(rows, colWidths=[80 * mm, 90 * mm], style=GRID)]
    out += [Spacer(1, 4 * mm), *_economics(data)]
    zone_rows = [[f"{zone_number(z.index)}", band_label(z.low, z.high), _fmt(z.water_l), _fmt(z.time_in_band_pct),
                  _fmt(z.hours_below), _fmt(z.hours_above), _fmt(z.hours_observed)] for z in data.zones]
    out += [Spacer(1, 4 * mm), Paragraph("Zones", H2),
            Table([["Zone", "Band (VWC)", "Water (L)", "Time in band %", "Stress h (below)", "Above band h",
                    "Observed h"], *zone_rows], colWidths=[12 * mm, 26 * mm, 24 * mm, 26 * mm, 28 * mm, 26 * mm,
                                                           24 * mm], style=GRID)]
    policy_rows = [[p(u.version, SMALL), f"{u.decisions}", iso(u.first), iso(u.last)] for u in data.policies]
    out += [Spacer(1, 4 * mm), Paragraph("Policy versions in force", H2),
            Table([["Version", "Decisions", "First", "Last"], *policy_rows] if policy_rows
                  else [["Version", "Decisions", "First", "Last"], ["none", "0", "-", "-"]],
                  colWidths=[50 * mm, 22 * mm, 42 * mm, 42 * mm], style=GRID)]
    return out


def _economics(data: ReportData) -> list[Flowable]:
    """Yield, revenue, energy and water cost, profit, and what the lamps paid against the average price."""
    e = data.economics
    per_m2 = (lambda v: f" ({_fmt(v / e.floor_m2, 3)} per m2)") if e.floor_m2 > 0 else (lambda v: "")
    capture = e.price_capture
    rows: list[list[Any]] = [
        ["Quantity", "Value"],
        ["Yield, fresh fruit (kg)", f"{_fmt(e.yield_kg, 2)}{per_m2(e.yield_kg)}"],
        ["Revenue (EUR)", f"{_fmt(e.revenue_eur, 2)}{per_m2(e.revenue_eur)}"],
        ["Energy cost (EUR)", f"{_fmt(e.energy_cost_eur, 2)}{per_m2(e.energy_cost_eur)}"],
        ["Water cost (EUR)", f"{_fmt(e.water_cost_eur, 2)}{per_m2(e.water_cost_eur)}"],
        ["Profit (EUR)", f"{_fmt(e.profit_eur, 2)}{per_m2(e.profit_eur)}"],
        ["Price the lamps paid / period average (EUR/MWh)",
         f"{_fmt(e.lamp_price_eur_mwh)} / {_fmt(e.mean_price_eur_mwh)}"],
        ["Lamp price capture (paid / average)", "-" if capture is None else f"{capture:.2f}"],
    ]
    note = ("Energy at the all-in electricity price each decision recorded for its hour; water at "
            f"{_fmt(e.water_price_eur_m3, 2)} EUR/m3; yield is the crop twin's harvest at "
            f"{_fmt(e.fruit_price_eur_kg, 2)} EUR/kg. "
            "A capture below 1 means the lamps ran in cheaper hours than the period's average.")
    if e.unpriced_hours > 0:
        note += f" {_fmt(e.unpriced_hours, 1)} h had no recorded price and carry no energy cost."
    return [Paragraph("Economics", H2), Table(rows, colWidths=[80 * mm, 90 * mm], style=GRID), p(note, SMALL)]


def _safety_and_modes(data: ReportData) -> list[Flowable]:
    out: list[Flowable] = [Paragraph("Safety clips by rule", H2)]
    out += _tables(["Rule", "Firings"], ([p(r, SMALL), f"{n}"] for r, n in data.clips_by_rule.items()),
                   [120 * mm, 30 * mm])
    out += [Spacer(1, 4 * mm), Paragraph("Operator overrides (mode changes by operator)", H2)]
    out += _tables(["Operator", "Mode changes"],
                   ([p(a, SMALL), f"{n}"] for a, n in data.operator_overrides.items()), [120 * mm, 30 * mm])
    out += [Spacer(1, 4 * mm), Paragraph("Mode changes and e-stops", H2)]
    out += _tables(
        ["Time (UTC)", "Seq", "Actor", "From", "To", "Reason"],
        ([iso(m.ts), f"{m.seq}", p(m.actor, SMALL), m.from_mode or "-", m.to_mode, p(m.reason, SMALL)]
         for m in data.mode_changes),
        [38 * mm, 10 * mm, 30 * mm, 14 * mm, 14 * mm, 74 * mm])
    return out


def _decision_log(data: ReportData) -> list[Flowable]:
    out: list[Flowable] = [Paragraph("Decision log", H2)]
    if data.condensed:
        out.append(p(
            f"{data.decision_count} decisions: condensed to hourly summaries, followed by every decision that "
            f"was low-confidence, clipped by safety, or in manual/e-stop mode ({data.notable_total} in all"
            + (f"; the first {len(data.log)} are listed, {data.log_omitted} more are in the audit trail)"
               if data.log_omitted else ")")))
        out.append(Paragraph("Hourly summaries", H3))
        zones = range(len(data.zones))
        out += _tables(
            ["Hour (UTC)", "Deci-\nsions", "Water\n(L)", "Mean VWC %\nby zone", "Light\n%", "Clip-\nped",
             "Low\nconf.", "Man-\nual", "E-\nstop"],
            ([iso(h.start), f"{h.decisions}", _fmt(sum(h.water_l)), _vwc_lines([h.theta_mean(i) for i in zones]),
              _fmt(h.light_pct_mean, 0), f"{h.clipped}", f"{h.low_confidence}", f"{h.manual}", f"{h.estop}"]
             for h in data.hours),
            [38 * mm, 13 * mm, 16 * mm, 36 * mm, 12 * mm, 12 * mm, 12 * mm, 12 * mm, 12 * mm])
        out.append(Paragraph("Notable decisions", H3))
    out += _tables(
        ["Time (UTC)", "Seq", "Actor / mode", "Conf.", "Action sent", "Why (safety rules, explanation)"],
        # Plain-string cells are drawn literally and cost far less than Paragraphs; only the
        # free-text column needs wrapping, so only it is a (escaped) Paragraph.
        ([iso(e.ts), f"{e.seq}", "\n".join([*textwrap.wrap(e.actor, 22), e.mode]), f"{e.confidence:.2f}",
          e.action, p(_why(e), SMALL)]
         for e in data.log),
        [38 * mm, 12 * mm, 32 * mm, 12 * mm, 31 * mm, 55 * mm])
    return out


def _why(entry: DecisionEntry) -> str:
    """The log's "Why" cell: flags, the first safety-rule firings in words, then the explanation's gist.
    A step where every valve was clipped would otherwise fill a page with one cell."""
    rules = list(entry.rules[:_WHY_RULES])
    if len(entry.rules) > _WHY_RULES:
        rules.append(f"{len(entry.rules) - _WHY_RULES} more safety rules fired")
    return "; ".join(filter(None, [", ".join(entry.flags), *rules, entry.explanation])) or "-"


class _StampedCanvas(Canvas):
    """Defers each page until the total is known, then stamps watermark and "page N of M" on all.

    Only the page operators are held (a few kB a page), so this costs far less than a second
    layout pass.
    """

    watermark = ""
    footer = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pages: list[dict[str, Any]] = []

    def showPage(self) -> None:  # noqa: N802 - reportlab's name
        self._pages.append(dict(self.__dict__))
        self._startPage()

    def save(self) -> None:
        total = len(self._pages)
        for n, state in enumerate(self._pages, start=1):
            self.__dict__.update(state)
            self._stamp(n, total)
            super().showPage()
        super().save()

    def _stamp(self, page: int, total: int) -> None:
        width, height = self._pagesize
        self.saveState()
        self.setFont("Helvetica", 8)
        self.setFillColor(colors.black)
        self.drawString(15 * mm, 8 * mm, self.footer)
        self.drawRightString(width - 15 * mm, 8 * mm, f"page {page} of {total}")
        self.translate(width / 2, height / 2)
        self.rotate(math.degrees(math.atan2(height, width)))
        self.setFillColor(colors.Color(0.55, 0.55, 0.55, alpha=0.25))
        self.setFont("Helvetica", 11)
        self.drawCentredString(0, 0, self.watermark)
        self.restoreState()


def render_report(data: ReportData, *, generated_by: str, generated_at: datetime, report_id: str) -> bytes:
    """The report as PDF bytes: cover, summary, charts, decision log, saliency heat maps, safety and mode
    events, verification."""
    generated_at = require_aware("generated_at", generated_at)
    stamp = watermark_text(data, report_id)
    canvas_cls = type("_Canvas", (_StampedCanvas,), {
        "watermark": stamp, "footer": f"greentwin report {report_id} - {data.greenhouse_id}"})
    buf = BytesIO()
    doc = SimpleDocTemplate(
        buf, pagesize=A4, leftMargin=15 * mm, rightMargin=15 * mm, topMargin=15 * mm, bottomMargin=16 * mm,
        title=f"greentwin report {data.greenhouse_id} {iso(data.period_from)}/{iso(data.period_to)}",
        author=generated_by, subject=f"report {report_id}", creator="greentwin",
    )
    story: list[Flowable] = [
        Spacer(1, 30 * mm),
        Paragraph("Greenhouse control report", H1),
        Spacer(1, 8 * mm),
        Table([
            ["Greenhouse", p(f"{data.greenhouse_name} ({data.greenhouse_id})")],
            ["Period (UTC, end exclusive)", f"{iso(data.period_from)} to {iso(data.period_to)}"],
            ["Generated by", p(generated_by)],
            ["Generated at", iso(generated_at)],
            ["Report id", report_id],
            ["Zones", f"{len(data.zones)}"],
        ], colWidths=[55 * mm, 115 * mm], style=TableStyle([
            ("GRID", (0, 0), (-1, -1), 0.25, colors.grey), ("FONTSIZE", (0, 0), (-1, -1), 9),
            ("VALIGN", (0, 0), (-1, -1), "TOP")])),
        Spacer(1, 8 * mm),
        p("Water, light and energy figures are derived from measured telemetry: each decision stands for the "
           "interval since the previous one; flow is split evenly over the valves open in that interval. "
           "Stress hours are hours with estimated soil moisture below the zone's target band. Zones are "
           "numbered and moisture given in % VWC as on the dashboard. The PDF carries a PAdES signature; check "
           "it with `greentwin report verify FILE.pdf` and the signer's certificate: `--cert` with the "
           "configured one, or `--state-dir` with the service's state directory."),
        PageBreak(),
        *_summary(data),
        PageBreak(),
        *charts(data),
        PageBreak(),
        *_decision_log(data),
        # Maps start on a page of their own; the one-line "none" note follows the log.
        PageBreak() if data.saliency_maps else Spacer(1, 6 * mm),
        *heatmap_section(data),
        PageBreak(),
        *_safety_and_modes(data),
        Spacer(1, 6 * mm),
        Paragraph("Audit trail verification", H2),
        p(data.verification),
    ]
    doc.build(story, canvasmaker=canvas_cls)
    return buf.getvalue()

