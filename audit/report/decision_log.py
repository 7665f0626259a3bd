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
from audit.report.styles import fmt, look, p, when
from audit.report.tables import tables
from audit.wording import DEFAULT_LANGUAGE, text

HOURLY_UP_TO_H = 8 * 24
"""Periods up to this long get a row per hour; longer ones a row per day (or week)."""
DAILY_UP_TO_H = 62 * 24
"""Periods up to this long get a row per day; longer ones a row per week from the period's first day."""


def intro_words(data: ReportData, per: str) -> str:
    lang = data.language
    return text("report.log.intro", lang, n=data.decision_count, per=text(f"report.per.{per}", lang),
                gh=data.greenhouse_id)


def no_event_words(lang: str = DEFAULT_LANGUAGE) -> str:
    return text("report.log.no_events", lang)


def row_unit(data: ReportData) -> str:
    """What one row of the table stands for: ``hour``, ``day`` or ``week``."""
    span = data.span_hours
    return "hour" if span <= HOURLY_UP_TO_H else "day" if span <= DAILY_UP_TO_H else "week"


def bucket_start(data: ReportData, start: datetime) -> datetime:
    """The row a clock hour belongs to: itself, its UTC day, or its week counted from the period's first
    day."""
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
    """A row's clips by rule id: the id is the key the details' table words and the CSV counts by."""
    return "\n".join(f"{rule} {n}" for rule, n in sorted(h.rules.items(), key=lambda kv: -kv[1])) or "-"


_HOUR_COLUMNS = ("decisions", "water", "moisture", "light", "clips", "fallbacks", "operator", "estop")


def decision_log(data: ReportData) -> list[Flowable]:
    """The section: by event, then by hour (or day)."""
    per, lang = row_unit(data), data.language
    lk = look(lang)
    out: list[Flowable] = [Paragraph(text("report.h.log", lang), lk.h2), p(intro_words(data, per), lk.body),
                           Paragraph(text("report.h.by_event", lang), lk.h3)]
    if data.events:
        out += tables([text(f"report.event_col.{c}", lang)
                       for c in ("event", "decisions", "first", "last", "latest")],
                      ([p(e.event, lk.small), f"{e.count}", when(e.first), when(e.last),
                        p(e.example or "-", lk.small)]
                       for e in data.events),
                      [48 * mm, 16 * mm, 25 * mm, 25 * mm, 66 * mm], lk.grid)
        if data.events_other:
            out.append(p(text("report.log.rarer", lang, n=data.events_other), lk.small))
    else:
        out.append(p(no_event_words(lang), lk.small))
    zones = range(len(data.zones))
    week = text("report.plus_week", lang)
    out += [Paragraph(text(f"report.h.by_{per}", lang), lk.h3)]
    out += tables(
        [text(f"report.row_col.{per}", lang), *(text(f"report.hour_col.{c}", lang) for c in _HOUR_COLUMNS)],
        ([when(h.start) if per == "hour" else f"{utc(h.start):%Y-%m-%d}" + (week if per == "week" else ""),
          f"{h.decisions}", fmt(sum(h.water_l)), _vwc_lines([h.theta_mean(i) for i in zones]),
          fmt(h.light_pct_mean, 0), _rules(h), f"{h.fallback}", f"{h.operator}", f"{h.estop}"]
         for h in buckets(data)),
        [24 * mm, 13 * mm, 14 * mm, 37 * mm, 11 * mm, 38 * mm, 14 * mm, 17 * mm, 12 * mm], lk.compact)
    return out
