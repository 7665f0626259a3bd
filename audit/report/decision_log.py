"""The decision log, summarised: by event (what happened, how often, the latest one in words) and by
hour (decisions, water, moisture, lights, clips by rule, fallbacks, operators' commands, e-stop).

One row per event kind and per hour, never per decision, so six hours take a page and a week a few;
periods longer than :data:`HOURLY_UP_TO_H` are summarised by day, and longer than
:data:`DAILY_UP_TO_H` by week, so no period needs more than a few pages of rows. Every decision
stays in the audit trail and in the decisions API, which the section names; the CSV keeps every hour.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from reportlab.lib.units import mm
from reportlab.platypus import Flowable, Paragraph

from audit.labels import vwc_pct
from audit.report.data import HourSummary, ReportData, utc
from audit.report.styles import COMPACT, H2, H3, SMALL, fmt, p, when
from audit.report.tables import tables

HOURLY_UP_TO_H = 8 * 24
"""Periods up to this long get a row per hour; longer ones a row per day (or week)."""
DAILY_UP_TO_H = 62 * 24
"""Periods up to this long get a row per day; longer ones a row per week from the period's first day."""


def intro_words(data: ReportData, per: str) -> str:
    return (f"{data.decision_count} decisions, summarised by event and by {per}. Every decision is kept in the "
            f"audit trail and listed by GET /api/greenhouses/{data.greenhouse_id}/decisions with from and to; "
            "the same summary is in the report's CSV.")


def no_event_words() -> str:
    return "No clip, fallback, operator command, e-stop or explained decision in this period."


def row_unit(data: ReportData) -> str:
    """What one row of the table stands for: ``hour``, ``day`` or ``week``."""
    span = data.span_hours
    return "hour" if span <= HOURLY_UP_TO_H else "day" if span <= DAILY_UP_TO_H else "week"


def bucket_start(data: ReportData, start: datetime) -> datetime:
    """The row a clock hour belongs to: itself, its UTC day, or its week counted from the period's first day."""
    start, unit = utc(start), row_unit(data)
    if unit == "hour":
        return start
    day = start.replace(hour=0)
    if unit == "day":
        return day
    first = utc(data.period_from).replace(hour=0, minute=0, second=0, microsecond=0)
    return first + timedelta(days=7 * ((day - first).days // 7))


def buckets(data: ReportData) -> list[HourSummary]:
    """The rows of the "by hour" table: the hours as collected, or merged into days or weeks."""
    if row_unit(data) == "hour":
        return data.hours
    out: list[HourSummary] = []
    for h in data.hours:
        start = bucket_start(data, h.start)
        if not out or out[-1].start != start:
            z = len(h.water_l)
            out.append(HourSummary(start, water_l=[0.0] * z, theta_sum=[0.0] * z, theta_n=[0] * z))
        merge(out[-1], h)
    return out


def merge(into: HourSummary, h: HourSummary) -> None:
    """Add hour ``h`` to the row ``into`` (sums and counts, so the means stay exact)."""
    into.decisions += h.decisions
    for i in range(len(into.water_l)):
        into.water_l[i] += h.water_l[i]
        into.theta_sum[i] += h.theta_sum[i]
        into.theta_n[i] += h.theta_n[i]
    into.light_pct_sum += h.light_pct_sum
    into.light_n += h.light_n
    for name in ("clipped", "low_confidence", "manual", "estop", "fallback", "operator"):
        setattr(into, name, getattr(into, name) + getattr(h, name))
    for rule, n in h.rules.items():
        into.rules[rule] = into.rules.get(rule, 0) + n


def _vwc_lines(values: Sequence[float | None], per_line: int = 6) -> str:
    """Zone means in % VWC, six to a line in zone order, so many zones still fit the column."""
    cells = ["-" if v is None else vwc_pct(v) for v in values]
    return "\n".join(" ".join(cells[i : i + per_line]) for i in range(0, len(cells), per_line)) or "-"


def _rules(h: HourSummary) -> str:
    return "\n".join(f"{rule} {n}" for rule, n in sorted(h.rules.items(), key=lambda kv: -kv[1])) or "-"


def decision_log(data: ReportData) -> list[Flowable]:
    """The section: by event, then by hour (or day)."""
    per = row_unit(data)
    out: list[Flowable] = [Paragraph("Decision log, summarised", H2), p(intro_words(data, per)),
                           Paragraph("By event", H3)]
    if data.events:
        out += tables(["Event", "Decisions", "First (UTC)", "Last (UTC)", "The latest, in words"],
                      ([p(e.event, SMALL), f"{e.count}", when(e.first), when(e.last), p(e.example or "-", SMALL)]
                       for e in data.events),
                      [48 * mm, 16 * mm, 25 * mm, 25 * mm, 66 * mm])
        if data.events_other:
            out.append(p(f"{data.events_other} decisions of rarer events are counted only in the audit trail.",
                         SMALL))
    else:
        out.append(p(no_event_words(), SMALL))
    zones = range(len(data.zones))
    out += [Paragraph(f"By {per}", H3)]
    out += tables(
        [f"{per.capitalize()} (UTC)", "Deci-\nsions", "Water\n(L)", "Mean % VWC\nzone 1, 2, ...", "Light\n%",
         "Safety clips\nby rule", "Expert\nfallbacks", "Operator\ncommands", "E-stop"],
        ([when(h.start) if per == "hour" else f"{utc(h.start):%Y-%m-%d}" + (" +7 d" if per == "week" else ""), f"{h.decisions}", fmt(sum(h.water_l)),
          _vwc_lines([h.theta_mean(i) for i in zones]), fmt(h.light_pct_mean, 0), _rules(h), f"{h.fallback}",
          f"{h.operator}", f"{h.estop}"] for h in buckets(data)),
        [24 * mm, 13 * mm, 14 * mm, 37 * mm, 11 * mm, 38 * mm, 14 * mm, 17 * mm, 12 * mm], COMPACT)
    return out
