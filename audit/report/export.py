"""The report's summary as CSV: the first page's numbers, the events and the hourly rows, for a spreadsheet.

One long table, so every section has the same columns and a reader needs no layout knowledge:
``section, item, zone, zone_name, start, value, unit``. Zones are numbered from 1 and moisture is
in % VWC, as on the dashboard and in the PDF; numbers are plain (no thousands separator, a dot for
decimals); times are ISO-8601 with their offset.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from audit.labels import zone_number
from audit.report.data import ReportData, iso

COLUMNS = ("section", "item", "zone", "zone_name", "start", "value", "unit")
Row = tuple[str, str, str, str, str, str, str]


def _n(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _row(section: str, item: str, value: str, unit: str = "", *, zone: str = "", name: str = "",
         start: str = "") -> Row:
    return section, item, zone, name, start, value, unit


def rows(data: ReportData) -> Iterator[Row]:
    """Every row of the CSV, section by section (the PDF's first page, then its decision log)."""
    e = data.economics
    yield _row("period", "greenhouse", data.greenhouse_id)
    yield _row("period", "greenhouse_name", data.greenhouse_name)
    yield _row("period", "from", iso(data.period_from))
    yield _row("period", "to", iso(data.period_to))
    yield _row("period", "decisions", f"{data.decision_count}")
    yield _row("period", "audit_verification", data.verification)
    for item, value, unit in (("yield", e.yield_kg, "kg"), ("revenue", e.revenue_eur, "EUR"),
                              ("energy", data.energy_total_kwh, "kWh"),
                              ("energy_cost", e.energy_cost_eur, "EUR"),
                              ("water", data.water_total_l, "L"), ("water_cost", e.water_cost_eur, "EUR"),
                              ("profit", e.profit_eur, "EUR")):
        yield _row("money", item, _n(value), unit)
    acts = data.alarm_action_counts
    for item, count in (("operator_mode_changes", data.operator_mode_changes), ("estops", data.estops),
                        ("operator_commands", data.operator_commands), ("alarm_acks", acts.get("ack", 0)),
                        ("alarm_shelvings", acts.get("shelve", 0)),
                        ("settings_changes", len(data.settings_changes)),
                        ("expert_fallbacks", data.decisions_fallback),
                        ("decisions_clipped", data.decisions_clipped)):
        yield _row("interventions", item, f"{count}", "count")
    for z in data.zones:
        zone, name = f"{zone_number(z.index)}", z.name or ""
        zone_rows: tuple[tuple[str, float | None, str], ...] = (
            ("band_low", 100.0 * z.low, "% VWC"), ("band_high", 100.0 * z.high, "% VWC"),
            ("water", z.water_l, "L"), ("time_in_band", z.time_in_band_pct, "%"),
            ("below_band", z.hours_below, "h"), ("above_band", z.hours_above, "h"))
        for item, amount, unit in zone_rows:
            yield _row("zone", item, _n(amount), unit, zone=zone, name=name)
    for a in data.alarms:
        for item, count in (("raised", a.raised), ("acknowledged", a.acknowledged), ("shelved", a.shelved),
                            ("open_at_end", a.open_at_end)):
            yield _row("alarm", f"{a.title} ({a.severity}): {item}", f"{count}", "count")
    for c in data.settings_changes:
        yield _row("settings_change", f"{c.actor}: {c.changes}", c.reason, "reason", start=iso(c.ts))
    for u in data.policies:
        yield _row("policy", u.version, f"{u.decisions}", "decisions", start=iso(u.first))
    if data.decisions_fallback:
        yield _row("policy", "threshold expert (fallback)", f"{data.decisions_fallback}", "decisions")
    yield from _log_rows(data)


def _log_rows(data: ReportData) -> Iterator[Row]:
    for ev in data.events:
        yield _row("event", ev.event, f"{ev.count}", "decisions", start=iso(ev.first))
    # every hour, whatever the period: the PDF condenses long periods, a spreadsheet need not
    for h in data.hours:
        start = iso(h.start)
        for item, value, unit in (("decisions", f"{h.decisions}", "count"),
                                  ("water", _n(sum(h.water_l)), "L"),
                                  ("light", _n(h.light_pct_mean, 1), "%"),
                                  ("safety_clips", f"{h.clipped}", "count"),
                                  ("expert_fallbacks", f"{h.fallback}", "count"),
                                  ("operator_commands", f"{h.operator}", "count"),
                                  ("estop", f"{h.estop}", "count")):
            yield _row("hour", item, value, unit, start=start)
        for rule, n in sorted(h.rules.items()):
            yield _row("hour", f"clip {rule}", f"{n}", "count", start=start)
        for i, z in enumerate(data.zones):
            mean = h.theta_mean(i)
            yield _row("hour", "moisture", _n(None if mean is None else 100.0 * mean, 1), "% VWC",
                       start=start, zone=f"{zone_number(z.index)}", name=z.name or "")


def report_csv(data: ReportData) -> str:
    """The CSV text, header first. Names, reasons and comments are people's text: one a spreadsheet would
    run as a formula (a leading ``=``, ``+``, ``-`` or ``@``) is prefixed with ``'`` and shows as text."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\r\n")
    out.writerow(COLUMNS)
    for row in rows(data):
        out.writerow([_text(cell) for cell in row])
    return buf.getvalue()


def _text(cell: str) -> str:
    """User-controlled text that a spreadsheet would run as a formula is prefixed with ``'``; numbers pass."""
    if cell[:1] in ("=", "+", "@") or (cell[:1] == "-" and not _is_number(cell)):
        return "'" + cell
    return cell


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
