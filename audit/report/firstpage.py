"""The report's first page: the period's answer on one page.

Yield, revenue, energy and water cost and profit; water and time in band per zone (numbered and
named, bands in % VWC, as on the dashboard); alarms by kind with what operators did; operators'
interventions and settings changes; the policy versions in force; the audit trail's verdict and
the line that checks the signature. Longer listings follow on later pages, so this page keeps to
at most :data:`FIRST_PAGE_ROWS` rows per table. Its words are the catalogue's (``report.*`` in
:mod:`audit.wording`), in the report's language.
"""

from __future__ import annotations

from typing import Any

from reportlab.lib.units import mm
from reportlab.platypus import Flowable, Paragraph, Table, TableStyle

from audit.labels import band_label, zone_number
from audit.report.data import ReportData, iso
from audit.report.styles import Look, fmt, look, p, when
from audit.wording import DEFAULT_LANGUAGE, severity_words, text

FIRST_PAGE_ROWS = 8
"""Rows of the alarms and settings tables on the first page; the rest are counted and listed later."""
_BARE = TableStyle([("VALIGN", (0, 0), (-1, -1), "TOP"), ("LEFTPADDING", (0, 0), (-1, -1), 0),
                    ("RIGHTPADDING", (0, 0), (-1, -1), 0)])
_ZONE_COLUMNS = ("zone", "name", "band", "water", "in_band", "below", "above")
_ALARM_COLUMNS = ("alarm", "severity", "raised", "acknowledged", "shelved", "open_at_end")


def money_rows(data: ReportData) -> list[tuple[str, str]]:
    """What the period earned and cost: the crop twin's yield at the fruit price, energy at the recorded
    prices, water at the site's price."""
    e, lang = data.economics, data.language
    return [(text(f"report.money.{key}", lang), value) for key, value in (
        ("yield", fmt(e.yield_kg, 2)), ("revenue", fmt(e.revenue_eur, 2)),
        ("energy", fmt(data.energy_total_kwh, 1)),
        ("energy_cost", fmt(e.energy_cost_eur, 2)), ("water", fmt(data.water_total_l, 1)),
        ("water_cost", fmt(e.water_cost_eur, 2)), ("profit", fmt(e.profit_eur, 2)))]


def intervention_rows(data: ReportData) -> list[tuple[str, str]]:
    """What people and the safety layer did: the counts an agronomist asks about first."""
    acts, lang = data.alarm_action_counts, data.language
    return [(text(f"report.acts.{key}", lang), f"{count}") for key, count in (
        ("mode_changes", data.operator_mode_changes), ("estops", data.estops),
        ("operator_commands", data.operator_commands), ("acks", acts.get("ack", 0)),
        ("shelvings", acts.get("shelve", 0)), ("settings_changes", len(data.settings_changes)),
        ("fallbacks", data.decisions_fallback), ("clipped", data.decisions_clipped))]


def zone_rows(data: ReportData) -> list[list[str]]:
    """Per zone: number, name, band, water, time in band and hours out of it."""
    return [[f"{zone_number(z.index)}", z.name or "", band_label(z.low, z.high), fmt(z.water_l),
             fmt(z.time_in_band_pct), fmt(z.hours_below), fmt(z.hours_above)] for z in data.zones]


def zone_header(lang: str) -> list[str]:
    """The zone table's column names."""
    return [text(f"report.zone_col.{c}", lang) for c in _ZONE_COLUMNS]


def alarm_header(lang: str) -> list[str]:
    """The alarm table's column names."""
    return [text(f"report.alarm_col.{c}", lang) for c in _ALARM_COLUMNS]


def period_words(data: ReportData) -> str:
    """The period with its length in hours or days, and that it is UTC with its end left out."""
    hours, lang = data.span_hours, data.language
    length = (text("report.hours", lang, n=f"{hours:g}") if hours < 48
              else text("report.days", lang, n=f"{hours / 24:g}"))
    return text("report.period", lang, start=iso(data.period_from), end=iso(data.period_to), length=length)


def no_alarm_words(lang: str = DEFAULT_LANGUAGE) -> str:
    return text("report.no_alarms", lang)


def verify_words(data: ReportData) -> str:
    """How to check the signature, with the exact line when the signer knew it."""
    if data.verify_command:
        return text("report.verify_with", data.language, command=data.verify_command)
    return text("report.verify_generic", data.language)


def _pairs(rows: list[tuple[str, str]], width: float, lk: Look) -> Table:
    return Table([list(r) for r in rows], colWidths=[width * 0.72, width * 0.28], style=lk.pairs)


def first_page(data: ReportData, *, generated_by: str, generated_at: str, report_id: str) -> list[Flowable]:
    """The flowables of page one (the caller breaks the page after them)."""
    half, lang = 88 * mm, data.language
    lk = look(lang)
    head = Table([
        [text("report.greenhouse", lang), p(f"{data.greenhouse_name} ({data.greenhouse_id})", lk.body)],
        [text("report.period_label", lang), period_words(data)],
        [text("report.generated", lang),
         p(text("report.generated_by", lang, at=generated_at, by=generated_by, report=report_id), lk.body)],
    ], colWidths=[28 * mm, 152 * mm], style=lk.grid)
    out: list[Flowable] = [p(text("report.title", lang, name=data.greenhouse_name), lk.title), head,
                           Paragraph(text("report.h.money", lang), lk.h3_tight),
                           Table([[_pairs(money_rows(data), half, lk),
                                   _pairs(intervention_rows(data), half, lk)]],
                                 colWidths=[half + 4 * mm, half], style=_BARE),
                           Paragraph(text("report.h.zones", lang), lk.h3_tight),
                           Table([zone_header(lang), *zone_rows(data)], style=lk.grid, repeatRows=1,
                                 colWidths=[11 * mm, 37 * mm, 25 * mm, 22 * mm, 28 * mm, 28 * mm, 29 * mm])]
    out += [Paragraph(text("report.h.alarms", lang), lk.h3_tight), *_alarms(data, lk)]
    if data.settings_changes:
        out += [Paragraph(text("report.h.settings", lang), lk.h3_tight), *_settings(data, lk)]
    out += [Paragraph(text("report.h.policies", lang), lk.h3_tight), _policies(data, lk),
            Paragraph(text("report.h.audit", lang), lk.h3_tight),
            p(text("report.audit_verdict", lang, verdict=data.verification), lk.small),
            p(verify_words(data), lk.small)]
    return out


def _alarms(data: ReportData, lk: Look) -> list[Flowable]:
    lang = data.language
    if not data.alarms:
        return [p(no_alarm_words(lang), lk.small)]
    rows: list[list[Any]] = [[p(a.title, lk.small), severity_words(a.severity, lang), f"{a.raised}",
                              f"{a.acknowledged}", f"{a.shelved}", f"{a.open_at_end}"]
                             for a in data.alarms[:FIRST_PAGE_ROWS]]
    rest = data.alarms[FIRST_PAGE_ROWS:]
    if rest:
        rows.append([text("report.more_kinds", lang, n=len(rest)), "", f"{sum(a.raised for a in rest)}",
                     f"{sum(a.acknowledged for a in rest)}", f"{sum(a.shelved for a in rest)}",
                     f"{sum(a.open_at_end for a in rest)}"])
    return [Table([alarm_header(lang), *rows], style=lk.grid, repeatRows=1,
                  colWidths=[70 * mm, 20 * mm, 18 * mm, 26 * mm, 20 * mm, 26 * mm])]


def _settings(data: ReportData, lk: Look) -> list[Flowable]:
    lang = data.language
    rows: list[list[Any]] = [[when(c.ts), p(c.actor, lk.small), p(c.changes, lk.small), p(c.reason, lk.small)]
                             for c in data.settings_changes[:FIRST_PAGE_ROWS]]
    header = [text(f"report.col.{c}", lang) for c in ("time", "by", "what_changed", "why")]
    out: list[Flowable] = [Table([header, *rows], style=lk.grid, repeatRows=1,
                                 colWidths=[26 * mm, 30 * mm, 80 * mm, 44 * mm])]
    if len(data.settings_changes) > FIRST_PAGE_ROWS:
        out.append(p(text("report.more_in_details", lang, n=len(data.settings_changes) - FIRST_PAGE_ROWS),
                     lk.small))
    return out


def _policies(data: ReportData, lk: Look) -> Table:
    lang = data.language
    rows: list[list[Any]] = [[p(u.version, lk.small), f"{u.decisions}", when(u.first), when(u.last)]
                             for u in data.policies]
    if data.decisions_fallback:
        rows.append([text("report.expert_fallback", lang), f"{data.decisions_fallback}", "", ""])
    if not rows:
        rows.append([text("report.none", lang), "0", "-", "-"])
    header = [text(f"report.col.{c}", lang) for c in ("version", "decisions", "first", "last")]
    return Table([header, *rows], style=lk.grid, colWidths=[80 * mm, 24 * mm, 38 * mm, 38 * mm])
