"""The report's layout: the first page, details, charts, the summarised decision log, heat maps.

Everything is laid out with reportlab's platypus on A4; every page gets the watermark and
"page N of M" once the page count is known (:class:`_StampedCanvas`). All text that users or
devices control (names, actors, reasons, explanations) goes through :func:`p`, which escapes
it, so a reason like ``<font name="x">`` prints literally.
"""

from __future__ import annotations

import math
from datetime import datetime
from io import BytesIO
from typing import Any

from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.units import mm
from reportlab.pdfgen.canvas import Canvas
from reportlab.platypus import Flowable, PageBreak, Paragraph, SimpleDocTemplate, Spacer, Table

from audit.report.charts import charts
from audit.report.data import ReportData, iso, require_aware
from audit.report.decision_log import decision_log
from audit.report.firstpage import FIRST_PAGE_ROWS, first_page
from audit.report.heatmap import heatmap_section
from audit.report.styles import GRID, H2, H3, SMALL, fmt, p, when
from audit.report.tables import tables


def watermark_text(data: ReportData, report_id: str) -> str:
    """The diagonal text on every page: whose report, which period, which report."""
    return f"{data.greenhouse_id} | {iso(data.period_from)} - {iso(data.period_to)} | report {report_id}"


def _details(data: ReportData) -> list[Flowable]:
    """What the first page condenses, in full: the accounting, economics, clips, people's actions."""
    rows: list[list[Any]] = [
        ["Quantity", "Value"],
        ["Decisions", f"{data.decision_count}"],
        ["First / last decision (UTC)", f"{when(data.first_decision) if data.first_decision else '-'} / "
                                        f"{when(data.last_decision) if data.last_decision else '-'}"],
        ["Water total (L)", fmt(data.water_total_l)],
        ["Water not attributable to a zone (L)", fmt(data.water_unattributed_l)],
        ["Lamp full-power hours", fmt(data.lamp_hours, 2)],
        ["Energy estimate (kWh): lamps / pump / total",
         f"{fmt(data.energy_lamps_kwh, 2)} / {fmt(data.energy_pump_kwh, 2)} / {fmt(data.energy_total_kwh, 2)}"],
        ["Decisions under manual control / in e-stop", f"{data.decisions_manual} / {data.decisions_estop}"],
        ["Low-confidence decisions", f"{data.decisions_low_confidence}"],
        ["Safety rule firings", f"{sum(data.clips_by_rule.values())}"],
    ]
    out: list[Flowable] = [Paragraph("Details", H2), Table(rows, colWidths=[80 * mm, 100 * mm], style=GRID),
                           Spacer(1, 3 * mm), *_economics(data), Paragraph("Safety clips by rule", H3)]
    out += tables(["Rule", "Firings"], ([p(r, SMALL), f"{n}"] for r, n in data.clips_by_rule.items()),
                  [150 * mm, 30 * mm])
    out += [Paragraph("Mode changes and e-stops", H3)]
    out += tables(["Time (UTC)", "Seq", "Actor", "From", "To", "Reason"],
                  ([when(m.ts), f"{m.seq}", p(m.actor, SMALL), m.from_mode or "-", m.to_mode, p(m.reason, SMALL)]
                   for m in data.mode_changes),
                  [26 * mm, 12 * mm, 34 * mm, 14 * mm, 14 * mm, 80 * mm])
    out += [Paragraph("Operators' alarm actions", H3)]
    out += tables(["Time (UTC)", "Operator", "Action", "Alarm", "Comment"],
                  ([when(a.ts), p(a.actor, SMALL), a.action, p(a.title, SMALL), p(a.comment, SMALL)]
                   for a in data.alarm_actions),
                  [26 * mm, 34 * mm, 16 * mm, 50 * mm, 54 * mm])
    if len(data.settings_changes) > FIRST_PAGE_ROWS:
        out += [Paragraph("Settings changes", H3)]
        out += tables(["Time (UTC)", "Version", "By", "What changed", "Why"],
                      ([when(c.ts), f"{c.version}", p(c.actor, SMALL), p(c.changes, SMALL), p(c.reason, SMALL)]
                       for c in data.settings_changes),
                      [26 * mm, 14 * mm, 30 * mm, 70 * mm, 40 * mm])
    return out


def _economics(data: ReportData) -> list[Flowable]:
    """Per m2 figures and what the lamps paid against the average price."""
    e = data.economics
    per_m2 = (lambda v: f" ({fmt(v / e.floor_m2, 3)} per m2)") if e.floor_m2 > 0 else (lambda v: "")
    capture = e.price_capture
    rows: list[list[Any]] = [
        ["Economics", "Value"],
        ["Yield, fresh fruit (kg)", f"{fmt(e.yield_kg, 2)}{per_m2(e.yield_kg)}"],
        ["Revenue (EUR)", f"{fmt(e.revenue_eur, 2)}{per_m2(e.revenue_eur)}"],
        ["Profit (EUR)", f"{fmt(e.profit_eur, 2)}{per_m2(e.profit_eur)}"],
        ["Price the lamps paid / period average (EUR/MWh)",
         f"{fmt(e.lamp_price_eur_mwh)} / {fmt(e.mean_price_eur_mwh)}"],
        ["Lamp price capture (paid / average)", "-" if capture is None else f"{capture:.2f}"],
    ]
    note = ("Energy at the all-in electricity price each decision recorded for its hour; water at "
            f"{fmt(e.water_price_eur_m3, 2)} EUR/m3; yield is the crop twin's harvest at "
            f"{fmt(e.fruit_price_eur_kg, 2)} EUR/kg. "
            "A capture below 1 means the lamps ran in cheaper hours than the period's average. "
            "Water and energy are derived from measured telemetry: each decision stands for the interval since "
            "the previous one, flow split evenly over the valves open in it.")
    if e.unpriced_hours > 0:
        note += f" {fmt(e.unpriced_hours, 1)} h had no recorded price and carry no energy cost."
    return [Table(rows, colWidths=[80 * mm, 100 * mm], style=GRID), p(note, SMALL)]


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
    """The report as PDF bytes: the first page (the period's answer), details, charts, the decision log by
    event and hour, saliency heat maps, the audit trail's verdict."""
    generated_at = require_aware("generated_at", generated_at)
    stamp = watermark_text(data, report_id)
    canvas_cls = type("_Canvas", (_StampedCanvas,), {
        "watermark": stamp, "footer": f"greentwin report {report_id} - {data.greenhouse_id}"})
    buf = BytesIO()
    doc = SimpleDocTemplate(
        buf, pagesize=A4, leftMargin=15 * mm, rightMargin=15 * mm, topMargin=12 * mm, bottomMargin=16 * mm,
        title=f"greentwin report {data.greenhouse_id} {iso(data.period_from)}/{iso(data.period_to)}",
        author=generated_by, subject=f"report {report_id}", creator="greentwin",
    )
    story: list[Flowable] = [
        *first_page(data, generated_by=generated_by, generated_at=iso(generated_at), report_id=report_id),
        PageBreak(),
        *_details(data),
        PageBreak(),
        *charts(data),
        PageBreak(),
        *decision_log(data),
        # Maps start on a page of their own; the one-line "none" note follows the log.
        PageBreak() if data.saliency_maps else Spacer(1, 6 * mm),
        *heatmap_section(data),
        Spacer(1, 6 * mm),
        Paragraph("Audit trail verification", H2),
        p(data.verification),
    ]
    doc.build(story, canvasmaker=canvas_cls)
    return buf.getvalue()
