"""The report's first page: the period's answer on one page.

Yield, revenue, energy and water cost and profit; water and time in band per zone (numbered and
named, bands in % VWC, as on the dashboard); alarms by kind with what operators did; operators'
interventions and settings changes; the policy versions in force; the audit trail's verdict and
the line that checks the signature. Longer listings follow on later pages, so this page keeps to
at most :data:`FIRST_PAGE_ROWS` rows per table. Its English words are in the small functions
below, so that a catalogue of labels can take their place.
"""

from __future__ import annotations

from typing import Any

from reportlab.lib.units import mm
from reportlab.platypus import Flowable, Paragraph, Table, TableStyle

from audit.labels import band_label, zone_number
from audit.report.data import ReportData, iso
from audit.report.styles import GRID, H3_TIGHT, PAIRS, SMALL, TITLE, fmt, p, when

FIRST_PAGE_ROWS = 8
"""Rows of the alarms and settings tables on the first page; the rest are counted and listed later."""
_BARE = TableStyle([("VALIGN", (0, 0), (-1, -1), "TOP"), ("LEFTPADDING", (0, 0), (-1, -1), 0),
                    ("RIGHTPADDING", (0, 0), (-1, -1), 0)])


def money_rows(data: ReportData) -> list[tuple[str, str]]:
    """What the period earned and cost: the crop twin's yield at the fruit price, energy at the recorded
    prices, water at the site's price."""
    e = data.economics
    return [("Yield, fresh fruit (kg)", fmt(e.yield_kg, 2)), ("Revenue (EUR)", fmt(e.revenue_eur, 2)),
            ("Energy (kWh)", fmt(data.energy_total_kwh, 1)), ("Energy cost (EUR)", fmt(e.energy_cost_eur, 2)),
            ("Water (L)", fmt(data.water_total_l, 1)), ("Water cost (EUR)", fmt(e.water_cost_eur, 2)),
            ("Profit (EUR)", fmt(e.profit_eur, 2))]


def intervention_rows(data: ReportData) -> list[tuple[str, str]]:
    """What people and the safety layer did: the counts an agronomist asks about first."""
    acts = data.alarm_action_counts
    return [("Mode changes by operators", f"{data.operator_mode_changes}"), ("E-stops", f"{data.estops}"),
            ("Operators' commands (manual mode)", f"{data.operator_commands}"),
            ("Alarm acknowledgements", f"{acts.get('ack', 0)}"),
            ("Alarm shelvings", f"{acts.get('shelve', 0)}"),
            ("Settings changes", f"{len(data.settings_changes)}"),
            ("Expert fallbacks (ensemble disagreed)", f"{data.decisions_fallback}"),
            ("Decisions clipped by safety", f"{data.decisions_clipped}")]


def zone_rows(data: ReportData) -> list[list[str]]:
    """Per zone: number, name, band, water, time in band and hours out of it."""
    return [[f"{zone_number(z.index)}", z.name or "", band_label(z.low, z.high), fmt(z.water_l),
             fmt(z.time_in_band_pct), fmt(z.hours_below), fmt(z.hours_above)] for z in data.zones]


ZONE_HEADER = ["Zone", "Name", "Band (% VWC)", "Water (L)", "Time in band (%)", "Below band (h)", "Above band (h)"]
ALARM_HEADER = ["Alarm", "Severity", "Raised", "Acknowledged", "Shelved", "Open at end"]


def period_words(data: ReportData) -> str:
    hours = data.span_hours
    length = f"{hours:g} h" if hours < 48 else f"{hours / 24:g} days"
    return f"{iso(data.period_from)} to {iso(data.period_to)} ({length}; UTC, end exclusive)"


def no_alarm_words() -> str:
    return "No alarm was raised in this period."


def verify_words(data: ReportData) -> str:
    """How to check the signature, with the exact line when the signer knew it."""
    if data.verify_command:
        return f"Check this file's signature with: {data.verify_command}"
    return ("Check this file's signature with `greentwin report verify FILE.pdf` and the signer's certificate "
            "(`--cert`, or `--state-dir` with the service's state directory).")


def _pairs(rows: list[tuple[str, str]], width: float) -> Table:
    return Table([list(r) for r in rows], colWidths=[width * 0.72, width * 0.28], style=PAIRS)


def first_page(data: ReportData, *, generated_by: str, generated_at: str, report_id: str) -> list[Flowable]:
    """The flowables of page one (the caller breaks the page after them)."""
    half = 88 * mm
    head = Table([
        ["Greenhouse", p(f"{data.greenhouse_name} ({data.greenhouse_id})")],
        ["Period", period_words(data)],
        ["Generated", p(f"{generated_at} by {generated_by}; report {report_id}")],
    ], colWidths=[28 * mm, 152 * mm], style=GRID)
    out: list[Flowable] = [p(f"Greenhouse report: {data.greenhouse_name}", TITLE), head,
                           Paragraph("Money, and what people and the safety layer did", H3_TIGHT),
                           Table([[_pairs(money_rows(data), half), _pairs(intervention_rows(data), half)]],
                                 colWidths=[half + 4 * mm, half], style=_BARE),
                           Paragraph("Zones: water and time in band", H3_TIGHT),
                           Table([ZONE_HEADER, *zone_rows(data)], style=GRID, repeatRows=1,
                                 colWidths=[11 * mm, 37 * mm, 25 * mm, 22 * mm, 28 * mm, 28 * mm, 29 * mm])]
    out += [Paragraph("Alarms", H3_TIGHT), *_alarms(data)]
    if data.settings_changes:
        out += [Paragraph("Settings changes", H3_TIGHT), *_settings(data)]
    out += [Paragraph("Policy versions in force", H3_TIGHT), _policies(data),
            Paragraph("Audit trail and signature", H3_TIGHT),
            p(f"Audit trail verification: {data.verification}", SMALL), p(verify_words(data), SMALL)]
    return out


def _alarms(data: ReportData) -> list[Flowable]:
    if not data.alarms:
        return [p(no_alarm_words(), SMALL)]
    rows: list[list[Any]] = [[p(a.title, SMALL), a.severity, f"{a.raised}", f"{a.acknowledged}", f"{a.shelved}",
                              f"{a.open_at_end}"] for a in data.alarms[:FIRST_PAGE_ROWS]]
    rest = data.alarms[FIRST_PAGE_ROWS:]
    if rest:
        rows.append([f"{len(rest)} more kinds", "", f"{sum(a.raised for a in rest)}",
                     f"{sum(a.acknowledged for a in rest)}", f"{sum(a.shelved for a in rest)}",
                     f"{sum(a.open_at_end for a in rest)}"])
    return [Table([ALARM_HEADER, *rows], style=GRID, repeatRows=1,
                  colWidths=[70 * mm, 20 * mm, 18 * mm, 26 * mm, 20 * mm, 26 * mm])]


def _settings(data: ReportData) -> list[Flowable]:
    rows: list[list[Any]] = [[when(c.ts), p(c.actor, SMALL), p(c.changes, SMALL), p(c.reason, SMALL)]
                             for c in data.settings_changes[:FIRST_PAGE_ROWS]]
    out: list[Flowable] = [Table([["Time (UTC)", "By", "What changed", "Why"], *rows], style=GRID, repeatRows=1,
                                 colWidths=[26 * mm, 30 * mm, 80 * mm, 44 * mm])]
    if len(data.settings_changes) > FIRST_PAGE_ROWS:
        out.append(p(f"{len(data.settings_changes) - FIRST_PAGE_ROWS} more in the details.", SMALL))
    return out


def _policies(data: ReportData) -> Table:
    rows: list[list[Any]] = [[p(u.version, SMALL), f"{u.decisions}", when(u.first), when(u.last)]
                             for u in data.policies]
    if data.decisions_fallback:
        rows.append(["threshold expert (fallback)", f"{data.decisions_fallback}", "", ""])
    if not rows:
        rows.append(["none", "0", "-", "-"])
    return Table([["Version", "Decisions", "First (UTC)", "Last (UTC)"], *rows], style=GRID,
                 colWidths=[80 * mm, 24 * mm, 38 * mm, 38 * mm])
