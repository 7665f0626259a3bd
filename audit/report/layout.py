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

from audit.decision_words import rule_key
from audit.report.charts import charts
from audit.report.data import ReportData, iso, require_aware
from audit.report.decision_log import decision_log
from audit.report.firstpage import FIRST_PAGE_ROWS, first_page
from audit.report.heatmap import heatmap_section
from audit.report.styles import fmt, look, p, when
from audit.report.tables import tables
from audit.wording import has, text, texts


def watermark_text(data: ReportData, report_id: str) -> str:
    """The diagonal text on every page: whose report, which period, which report."""
    return text("report.watermark", data.language, gh=data.greenhouse_id, start=iso(data.period_from),
                end=iso(data.period_to), report=report_id)


def _rule_words(rule: str, lang: str) -> str:
    """A safety rule id in words, as the dashboard words a clip; the id itself when the catalogue lacks it."""
    key = rule_key(rule)
    return text(key, lang) if key else rule


def _details(data: ReportData) -> list[Flowable]:
    """What the first page condenses, in full: the accounting, economics, clips, people's actions."""
    lang = data.language
    lk = look(lang)
    first = when(data.first_decision) if data.first_decision else "-"
    last = when(data.last_decision) if data.last_decision else "-"
    rows: list[list[Any]] = [[text(f"report.details.{key}", lang), value] for key, value in (
        ("quantity", text("report.details.value", lang)),
        ("decisions", f"{data.decision_count}"),
        ("first_last", f"{first} / {last}"),
        ("water_total", fmt(data.water_total_l)),
        ("water_unattributed", fmt(data.water_unattributed_l)),
        ("lamp_hours", fmt(data.lamp_hours, 2)),
        ("energy", f"{fmt(data.energy_lamps_kwh, 2)} / {fmt(data.energy_pump_kwh, 2)} / "
                   f"{fmt(data.energy_total_kwh, 2)}"),
        ("manual_estop", f"{data.decisions_manual} / {data.decisions_estop}"),
        ("low_confidence", f"{data.decisions_low_confidence}"),
        ("rule_firings", f"{sum(data.clips_by_rule.values())}"))]
    out: list[Flowable] = [Paragraph(text("report.h.details", lang), lk.h2),
                           Table(rows, colWidths=[80 * mm, 100 * mm], style=lk.grid),
                           Spacer(1, 3 * mm), *_economics(data),
                           Paragraph(text("report.h.clips", lang), lk.h3)]
    # The rule's words, then its id: the id is what the hourly rows and the CSV count clips by.
    out += tables([text(f"report.col.{c}", lang) for c in ("rule_words", "rule", "firings")],
                  ([p(_rule_words(r, lang), lk.small), p(r, lk.small), f"{n}"]
                   for r, n in data.clips_by_rule.items()),
                  [110 * mm, 50 * mm, 20 * mm], lk.grid)
    out += [Paragraph(text("report.h.modes", lang), lk.h3)]
    out += tables([text(f"report.col.{c}", lang) for c in ("time", "seq", "actor", "from", "to", "reason")],
                  ([when(m.ts), f"{m.seq}", p(m.actor, lk.small), mode_words(m.from_mode, lang),
                    mode_words(m.to_mode, lang), p(m.reason, lk.small)] for m in data.mode_changes),
                  [26 * mm, 12 * mm, 34 * mm, 16 * mm, 16 * mm, 76 * mm], lk.grid)
    out += [Paragraph(text("report.h.alarm_actions", lang), lk.h3)]
    out += tables([text(f"report.col.{c}", lang) for c in ("time", "operator", "action", "alarm", "comment")],
                  ([when(a.ts), p(a.actor, lk.small), p(action_words(a.action, lang), lk.small),
                    p(a.title, lk.small), p(a.comment, lk.small)] for a in data.alarm_actions),
                  [26 * mm, 32 * mm, 22 * mm, 50 * mm, 50 * mm], lk.grid)
    if len(data.settings_changes) > FIRST_PAGE_ROWS:
        out += [Paragraph(text("report.h.settings", lang), lk.h3)]
        out += tables([text(f"report.col.{c}", lang)
                       for c in ("time", "version", "by", "what_changed", "why")],
                      ([when(c.ts), f"{c.version}", p(c.actor, lk.small), p(c.changes, lk.small),
                        p(c.reason, lk.small)]
                       for c in data.settings_changes),
                      [26 * mm, 14 * mm, 30 * mm, 70 * mm, 40 * mm], lk.grid)
    return out


def mode_words(mode: str | None, lang: str) -> str:
    """A control mode code (``auto``, ``manual``, ``estop``) in words; '-' for none, an unknown one as it
    is."""
    if not mode:
        return "-"
    return text(f"report.mode.{mode}", lang) if has(f"report.mode.{mode}") else mode


def action_words(action: str, lang: str) -> str:
    """An operator's alarm action code (``ack``, ``shelve``, ``unshelve``) in words."""
    return text(f"report.action.{action}", lang) if has(f"report.action.{action}") else action


def _economics(data: ReportData) -> list[Flowable]:
    """Per m2 figures and what the lamps paid against the average price."""
    e, lang = data.economics, data.language
    lk = look(lang)

    def per_m2(v: float) -> str:
        return text("report.per_m2", lang, value=fmt(v / e.floor_m2, 3)) if e.floor_m2 > 0 else ""

    capture = e.price_capture
    rows: list[list[Any]] = [[text(f"report.econ.{key}", lang), value] for key, value in (
        ("header", text("report.details.value", lang)),
        ("yield", f"{fmt(e.yield_kg, 2)}{per_m2(e.yield_kg)}"),
        ("revenue", f"{fmt(e.revenue_eur, 2)}{per_m2(e.revenue_eur)}"),
        ("profit", f"{fmt(e.profit_eur, 2)}{per_m2(e.profit_eur)}"),
        ("lamp_price", f"{fmt(e.lamp_price_eur_mwh)} / {fmt(e.mean_price_eur_mwh)}"),
        ("capture", "-" if capture is None else f"{capture:.2f}"))]
    note = text("report.econ.note", lang, water_price=fmt(e.water_price_eur_m3, 2),
                fruit_price=fmt(e.fruit_price_eur_kg, 2))
    if e.unpriced_hours > 0:
        note += text("report.econ.unpriced", lang, hours=fmt(e.unpriced_hours, 1))
    return [Table(rows, colWidths=[80 * mm, 100 * mm], style=lk.grid), p(note, lk.small)]


class _StampedCanvas(Canvas):
    """Defers each page until the total is known, then stamps watermark and "page N of M" on all.

    Only the page operators are held (a few kB a page), so this costs far less than a second
    layout pass.
    """

    watermark = ""
    footer = ""
    font = "Helvetica"
    page_words = "page {n} of {total}"

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
        self.setFont(self.font, 8)
        self.setFillColor(colors.black)
        self.drawString(15 * mm, 8 * mm, self.footer)
        self.drawRightString(width - 15 * mm, 8 * mm, self.page_words.format(n=page, total=total))
        self.translate(width / 2, height / 2)
        self.rotate(math.degrees(math.atan2(height, width)))
        self.setFillColor(colors.Color(0.55, 0.55, 0.55, alpha=0.25))
        self.setFont(self.font, 11)
        self.drawCentredString(0, 0, self.watermark)
        self.restoreState()


def catalogue_template(key: str, lang: str) -> str:
    """A catalogue text with its placeholders unfilled (the canvas fills the page numbers at the end)."""
    return texts((key,), lang).get(key, key)


def render_report(data: ReportData, *, generated_by: str, generated_at: datetime, report_id: str) -> bytes:
    """The report as PDF bytes, in ``data.language``: the first page (the period's answer), details, charts,
    the decision log by event and hour, saliency heat maps, the audit trail's verdict."""
    generated_at = require_aware("generated_at", generated_at)
    lang = data.language
    lk = look(lang)
    stamp = watermark_text(data, report_id)
    canvas_cls = type("_Canvas", (_StampedCanvas,), {
        "watermark": stamp, "footer": text("report.footer", lang, report=report_id, gh=data.greenhouse_id),
        "font": lk.regular, "page_words": catalogue_template("report.page", lang)})
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
        Paragraph(text("report.h.verification", lang), lk.h2),
        p(data.verification, lk.body),
    ]
    doc.build(story, canvasmaker=canvas_cls)
    return buf.getvalue()
