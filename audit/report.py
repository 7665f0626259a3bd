"""Agronomist PDF reports: what the controller did to one greenhouse over a period, and why.

:func:`collect_report_data` reads the database in one streaming pass (``yield_per``), so memory
stays bounded whatever the period: totals, per-hour summaries and at most ``max_log_entries``
decisions are kept, never the rows themselves. :func:`render_report` lays the result out with
reportlab's platypus and draws every chart with ``reportlab.graphics``.

Accounting (the same conventions as :class:`app.controller.GreenhouseController`):

* each decision stands for the interval ``(previous decision, this decision]``, clamped to
  [1 s, 3600 s] like the controller's ``dt``; the first decision a greenhouse ever made has no
  interval and contributes no water, light or energy;
* water in that interval is the measured ``telemetry.flow_l_min`` times its length, split evenly
  over the valves that were open: the edge box's ``telemetry.valve_open`` feedback when it
  reports any, else the valves the previous decision commanded (``clipped.valves``); flow with
  no open valve at all is reported as *unattributed*, not silently dropped;
* lights and energy use the measured ``light_pct`` / ``pump_pct`` over the same interval: lamp
  energy = lamp power per m2 x floor area (zones x zone area) x duty, pump energy = rated power
  x duty (a linear, upper-bound estimate: real pump power falls faster than speed);
* a zone's moisture is ``estimate["theta"]``; its interval counts as in band, below
  (stress hours: drier than ``target_low_vwc``) or above the band; decisions without an estimate
  (stale telemetry) count as unobserved.

All text that users or devices control (names, actors, reasons, explanations) is escaped before
it reaches Paragraph markup, so a reason like ``<font name="x">`` prints literally.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from io import BytesIO
from typing import Any
from xml.sax.saxutils import escape

from reportlab.graphics.charts.legends import Legend
from reportlab.graphics.charts.lineplots import LinePlot
from reportlab.graphics.shapes import Drawing, String
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
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
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Decision, Greenhouse, ModeChange, Zone

LOW_CONFIDENCE_THRESHOLD = 0.6
"""Same default as ``Settings.low_confidence_threshold``: below it the loop fell back to the expert."""
DETAIL_LIMIT = 500
"""Periods with at most this many decisions list every one; longer ones are condensed."""
MAX_LOG_ENTRIES = 2000
"""Cap on notable decisions kept for a condensed log (memory and page count stay bounded)."""
MAX_DT_S = 3600.0
MIN_DT_S = 1.0
_STREAM_BATCH = 1000
_TABLE_CHUNK = 60  # rows per Table: reportlab splits long tables in quadratic time


@dataclass(frozen=True)
class EnergyModel:
    """Electrical constants for the energy estimate (defaults mirror ``twin.config``)."""

    lamp_power_w_m2: float = 100.0
    zone_area_m2: float = 50.0
    pump_rated_kw: float = 0.75


@dataclass(frozen=True)
class ZoneBand:
    """A zone's target moisture band (VWC, m3/m3) as configured now."""

    index: int
    low: float
    high: float


@dataclass
class ZoneStats:
    """Per-zone totals over the period; hours are interval-weighted."""

    index: int
    low: float
    high: float
    water_l: float = 0.0
    hours_in_band: float = 0.0
    hours_below: float = 0.0
    hours_above: float = 0.0

    @property
    def hours_observed(self) -> float:
        return self.hours_in_band + self.hours_below + self.hours_above

    @property
    def time_in_band_pct(self) -> float | None:
        """Share of observed time in band; None when the zone was never observed."""
        obs = self.hours_observed
        return None if obs <= 0 else 100.0 * self.hours_in_band / obs


@dataclass
class HourSummary:
    """One clock hour (UTC) of decisions, condensed."""

    start: datetime
    decisions: int = 0
    water_l: list[float] = field(default_factory=list)
    theta_sum: list[float] = field(default_factory=list)
    theta_n: list[int] = field(default_factory=list)
    light_pct_sum: float = 0.0
    light_n: int = 0
    clipped: int = 0
    low_confidence: int = 0
    manual: int = 0
    estop: int = 0

    def theta_mean(self, zone: int) -> float | None:
        n = self.theta_n[zone] if zone < len(self.theta_n) else 0
        return self.theta_sum[zone] / n if n else None

    @property
    def light_pct_mean(self) -> float | None:
        return self.light_pct_sum / self.light_n if self.light_n else None


@dataclass(frozen=True)
class DecisionEntry:
    """One decision as the log prints it (already reduced to text)."""

    ts: datetime
    seq: int
    actor: str
    mode: str
    confidence: float
    action: str
    rules: tuple[str, ...]
    explanation: str
    flags: tuple[str, ...]


@dataclass(frozen=True)
class ModeChangeEntry:
    """A mode change inside the period."""

    ts: datetime
    seq: int
    actor: str
    from_mode: str | None
    to_mode: str
    reason: str


@dataclass(frozen=True)
class PolicyUse:
    """A policy version that issued decisions in the period."""

    version: str
    decisions: int
    first: datetime
    last: datetime


@dataclass
class ReportData:
    """Everything a report shows; built by :func:`collect_report_data`, plain data otherwise."""

    greenhouse_id: str
    greenhouse_name: str
    period_from: datetime
    period_to: datetime
    verification: str
    zones: list[ZoneStats]
    decision_count: int = 0
    first_decision: datetime | None = None
    last_decision: datetime | None = None
    condensed: bool = False
    log: list[DecisionEntry] = field(default_factory=list)
    notable_total: int = 0
    hours: list[HourSummary] = field(default_factory=list)
    mode_changes: list[ModeChangeEntry] = field(default_factory=list)
    water_unattributed_l: float = 0.0
    lamp_hours: float = 0.0
    energy_lamps_kwh: float = 0.0
    energy_pump_kwh: float = 0.0
    decisions_manual: int = 0
    decisions_estop: int = 0
    decisions_low_confidence: int = 0
    decisions_clipped: int = 0
    clips_by_rule: dict[str, int] = field(default_factory=dict)
    operator_overrides: dict[str, int] = field(default_factory=dict)
    estops: int = 0
    policies: list[PolicyUse] = field(default_factory=list)

    @property
    def water_total_l(self) -> float:
        return sum(z.water_l for z in self.zones) + self.water_unattributed_l

    @property
    def energy_total_kwh(self) -> float:
        return self.energy_lamps_kwh + self.energy_pump_kwh

    @property
    def log_omitted(self) -> int:
        """Notable decisions counted but not listed (condensed logs only)."""
        return self.notable_total - len(self.log) if self.condensed else 0


# -- time helpers --------------------------------------------------------------------------


def _utc(dt: datetime) -> datetime:
    """Aware UTC; SQLite returns naive datetimes, which the service always writes in UTC."""
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def iso(dt: datetime) -> str:
    """ISO-8601 in UTC to the second: what every date in a report looks like."""
    return _utc(dt).replace(microsecond=0).isoformat()


def _require_aware(name: str, dt: datetime) -> datetime:
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got {dt.isoformat()}")
    return dt.astimezone(UTC)


# -- collection ----------------------------------------------------------------------------


def _floats(value: Any, n: int) -> list[float | None]:
    """``n`` numbers from a JSON list (None where missing or not a number)."""
    out: list[float | None] = [None] * n
    if isinstance(value, list):
        for i, v in enumerate(value[:n]):
            if type(v) is float or type(v) is int:  # not bool; JSON numbers decode to exactly these
                out[i] = float(v) if math.isfinite(v) else None
    return out


def _num(mapping: Any, key: str) -> float:
    v = mapping.get(key) if isinstance(mapping, dict) else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else 0.0


def _describe_rule(firing: Any) -> tuple[str, str]:
    """(rule id, readable firing) for one ``rules_fired`` entry of any shape."""
    if isinstance(firing, Mapping):
        rule = str(firing.get("rule", "?"))
        text = rule
        if "actuator" in firing:
            text += f" on {firing['actuator']}"
        if "before" in firing or "after" in firing:
            text += f": {_short(firing.get('before'))} -> {_short(firing.get('after'))}"
        return rule, text
    return str(firing), str(firing)


def _short(value: Any, limit: int = 60) -> str:
    if isinstance(value, float):
        text = f"{value:.3g}"
    else:
        text = value if isinstance(value, str) else json.dumps(value, default=str, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe_explanation(explanation: Any) -> str:
    """Key: value pairs of the explanation dict, empty values left out."""
    if not isinstance(explanation, Mapping):
        return "" if explanation is None else _short(explanation, 300)
    parts = [f"{k}: {_short(v, 120)}" for k, v in explanation.items() if v not in (None, [], {}, "", False)]
    return "; ".join(parts)


def _describe_action(clipped: Any) -> str:
    if not isinstance(clipped, Mapping):
        return ""
    valves = clipped.get("valves")
    open_ = [str(i) for i, v in enumerate(valves) if v] if isinstance(valves, list) else []
    return ("\n".join(textwrap.wrap(f"valves {','.join(open_) or '-'}", 22))
            + f"\npump {_num(clipped, 'pump_pct'):.0f}% light {_num(clipped, 'light_pct'):.0f}%")


class _Collector:
    """One pass over the decision stream; keeps totals, hours and a bounded log."""

    def __init__(self, data: ReportData, *, energy: EnergyModel, threshold: float,
                 detail_limit: int, max_log_entries: int, prev: tuple[datetime, list[float]] | None) -> None:
        self.data = data
        self.z = len(data.zones)
        self.energy = energy
        self.threshold = threshold
        self.detail_limit = detail_limit
        self.max_log = max_log_entries
        self.prev_ts, self.prev_valves = prev if prev is not None else (None, [0.0] * self.z)
        self.hour: HourSummary | None = None
        self.policy_counts: Counter[str] = Counter()
        self.policy_span: dict[str, tuple[datetime, datetime]] = {}
        self.clips: Counter[str] = Counter()
        self.all_entries: list[DecisionEntry] = []  # every decision until detail_limit is passed

    def _hour_for(self, ts: datetime) -> HourSummary:
        start = ts.replace(minute=0, second=0, microsecond=0)
        if self.hour is None or self.hour.start != start:
            if self.hour is not None:
                self.data.hours.append(self.hour)
            self.hour = HourSummary(start, water_l=[0.0] * self.z, theta_sum=[0.0] * self.z,
                                    theta_n=[0] * self.z)
        return self.hour

    def add(self, row: Any) -> None:
        d = self.data
        ts = _utc(row.ts)
        tel = row.telemetry if isinstance(row.telemetry, dict) else {}
        clipped = row.clipped if isinstance(row.clipped, dict) else {}
        dt_h = 0.0
        if self.prev_ts is not None:
            dt_h = min(max((ts - self.prev_ts).total_seconds(), MIN_DT_S), MAX_DT_S) / 3600.0
        hour = self._hour_for(ts)
        hour.decisions += 1
        d.decision_count += 1
        d.first_decision = d.first_decision or ts
        d.last_decision = ts

        # water: measured flow over the interval, split over the valves open during it
        litres = _num(tel, "flow_l_min") * dt_h * 60.0
        feedback = [v or 0.0 for v in _floats(tel.get("valve_open"), self.z)]
        open_valves = feedback if any(v >= 0.5 for v in feedback) else self.prev_valves
        open_idx = [i for i, v in enumerate(open_valves) if v >= 0.5]
        if litres > 0:
            if open_idx:
                share = litres / len(open_idx)
                for i in open_idx:
                    d.zones[i].water_l += share
                    hour.water_l[i] += share
            else:
                d.water_unattributed_l += litres
        self.prev_valves = [v or 0.0 for v in _floats(clipped.get("valves"), self.z)]
        self.prev_ts = ts

        # lights and energy
        if "light_pct" in tel:
            light = _num(tel, "light_pct")
            hour.light_pct_sum += light
            hour.light_n += 1
            d.lamp_hours += light / 100.0 * dt_h
            area = self.z * self.energy.zone_area_m2
            d.energy_lamps_kwh += self.energy.lamp_power_w_m2 * area * light / 100.0 * dt_h / 1000.0
        d.energy_pump_kwh += self.energy.pump_rated_kw * _num(tel, "pump_pct") / 100.0 * dt_h

        # moisture against each zone's band
        theta = _floats(row.estimate.get("theta") if isinstance(row.estimate, dict) else None, self.z)
        for i, th in enumerate(theta):
            if th is None:
                continue
            hour.theta_sum[i] += th
            hour.theta_n[i] += 1
            zs = d.zones[i]
            if th < zs.low:
                zs.hours_below += dt_h
            elif th > zs.high:
                zs.hours_above += dt_h
            else:
                zs.hours_in_band += dt_h

        # who decided, and what the safety layer changed
        actor, mode = str(row.actor), str(row.mode)
        flags: list[str] = []
        explanation = row.explanation if isinstance(row.explanation, dict) else {}
        if (row.confidence < self.threshold or actor == "expert:low_confidence"
                or bool(explanation.get("low_confidence"))):
            flags.append("low confidence")
            d.decisions_low_confidence += 1
            hour.low_confidence += 1
        rules = row.rules_fired if isinstance(row.rules_fired, list) else []
        if rules:
            flags.append("clipped")
            d.decisions_clipped += 1
            hour.clipped += 1
        described = [_describe_rule(f) for f in rules]
        self.clips.update(rule for rule, _ in described)
        if mode == "manual":
            flags.append("manual")
            d.decisions_manual += 1
            hour.manual += 1
        elif mode == "estop":
            flags.append("e-stop")
            d.decisions_estop += 1
            hour.estop += 1
        if actor.startswith("policy:"):
            version = actor.removeprefix("policy:")
            self.policy_counts[version] += 1
            first, _ = self.policy_span.get(version, (ts, ts))
            self.policy_span[version] = (first, ts)

        keep_all = d.decision_count <= self.detail_limit
        if flags:
            d.notable_total += 1
        if keep_all or (flags and len(d.log) < self.max_log):
            entry = DecisionEntry(ts, int(row.seq), actor, mode, float(row.confidence), _describe_action(clipped),
                                  tuple(text for _, text in described), _describe_explanation(row.explanation),
                                  tuple(flags))
            if keep_all:
                self.all_entries.append(entry)
            if flags and len(d.log) < self.max_log:
                d.log.append(entry)
        if not keep_all and self.all_entries:
            self.all_entries = []  # too long for a full log: condensed from here on

    def finish(self) -> None:
        d = self.data
        if self.hour is not None:
            d.hours.append(self.hour)
        if d.decision_count <= self.detail_limit:
            d.log, d.condensed = self.all_entries, False
        else:
            d.condensed = True
        d.clips_by_rule = dict(sorted(self.clips.items()))
        d.policies = [PolicyUse(v, n, *self.policy_span[v]) for v, n in sorted(self.policy_counts.items())]


def collect_report_data(
    session: Session,
    greenhouse_id: str,
    period_from: datetime,
    period_to: datetime,
    *,
    verification: str,
    energy: EnergyModel | None = None,
    low_confidence_threshold: float = LOW_CONFIDENCE_THRESHOLD,
    detail_limit: int = DETAIL_LIMIT,
    max_log_entries: int = MAX_LOG_ENTRIES,
) -> ReportData:
    """Gather one greenhouse's period ``[period_from, period_to)`` in a single streaming pass.

    ``verification`` is the audit-trail check the caller ran (this module never opens keys).
    Raises ``LookupError`` for an unknown greenhouse, ``ValueError`` for a naive or empty period.
    """
    start = _require_aware("period_from", period_from)
    end = _require_aware("period_to", period_to)
    if end <= start:
        raise ValueError("period_to must be after period_from")
    gh = session.get(Greenhouse, greenhouse_id)
    if gh is None:
        raise LookupError(f"unknown greenhouse {greenhouse_id!r}")
    bands = session.scalars(select(Zone).where(Zone.greenhouse_id == greenhouse_id).order_by(Zone.index)).all()
    zones = [ZoneStats(z.index, z.target_low_vwc, z.target_high_vwc) for z in bands]
    data = ReportData(gh.id, gh.name, start, end, verification, zones)

    # The interval ending at the period's first decision starts at the decision before it.
    prev_row = session.execute(
        select(Decision.ts, Decision.clipped)
        .where(Decision.greenhouse_id == greenhouse_id, Decision.ts < start)
        .order_by(Decision.ts.desc(), Decision.seq.desc())
        .limit(1)
    ).first()
    prev = None
    if prev_row is not None:
        valves = prev_row.clipped.get("valves") if isinstance(prev_row.clipped, Mapping) else None
        prev = (_utc(prev_row.ts), [v or 0.0 for v in _floats(valves, len(zones))])

    collector = _Collector(data, energy=energy or EnergyModel(), threshold=low_confidence_threshold,
                           detail_limit=detail_limit, max_log_entries=max_log_entries, prev=prev)
    for row in _stream_decisions(session, greenhouse_id, start, end):
        collector.add(row)
    collector.finish()

    overrides: Counter[str] = Counter()
    for mc in session.scalars(
        select(ModeChange)
        .where(ModeChange.greenhouse_id == greenhouse_id, ModeChange.ts >= start, ModeChange.ts < end)
        .order_by(ModeChange.ts, ModeChange.seq)
    ):
        data.mode_changes.append(
            ModeChangeEntry(_utc(mc.ts), mc.seq, mc.actor, mc.from_mode, mc.to_mode, mc.reason or "")
        )
        if mc.to_mode == "estop":
            data.estops += 1
        if mc.actor.startswith("operator:"):
            overrides[mc.actor] += 1
    data.operator_overrides = dict(sorted(overrides.items()))
    return data


def _stream_decisions(session: Session, greenhouse_id: str, start: datetime, end: datetime) -> Iterator[Any]:
    """Only the columns a report reads, through a server-side cursor."""
    stmt = (
        select(Decision.ts, Decision.seq, Decision.actor, Decision.mode, Decision.telemetry, Decision.estimate,
               Decision.clipped, Decision.rules_fired, Decision.confidence, Decision.explanation)
        .where(Decision.greenhouse_id == greenhouse_id, Decision.ts >= start, Decision.ts < end)
        .order_by(Decision.ts, Decision.seq)
    )
    result = session.execute(stmt, execution_options={"yield_per": _STREAM_BATCH})
    try:
        yield from result
    finally:
        result.close()


# -- rendering -----------------------------------------------------------------------------

_STYLES = getSampleStyleSheet()
_BODY = ParagraphStyle("gt-body", parent=_STYLES["BodyText"], fontSize=9, leading=11)
_SMALL = ParagraphStyle("gt-small", parent=_BODY, fontSize=7, leading=8.5)
_H1, _H2 = _STYLES["Title"], _STYLES["Heading2"]
_ZONE_COLORS = (colors.HexColor("#1f77b4"), colors.HexColor("#ff7f0e"), colors.HexColor("#2ca02c"),
                colors.HexColor("#d62728"), colors.HexColor("#9467bd"), colors.HexColor("#8c564b"),
                colors.HexColor("#e377c2"), colors.HexColor("#7f7f7f"))
_GRID = TableStyle([
    ("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
    ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8efe8")),
    ("FONTNAME", (0, 0), (-1, 0), "Helvetica-Bold"),
    ("FONTSIZE", (0, 0), (-1, -1), 7.5),
    ("VALIGN", (0, 0), (-1, -1), "TOP"),
])


def _p(text: str, style: ParagraphStyle = _BODY) -> Paragraph:
    """Paragraph of untrusted text: escaped, so markup in it prints literally."""
    return Paragraph(escape(text), style)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def watermark_text(data: ReportData, report_id: str) -> str:
    """The diagonal text on every page: whose report, which period, which report."""
    return f"{data.greenhouse_id} | {iso(data.period_from)} - {iso(data.period_to)} | report {report_id}"


def _vwc_lines(values: Sequence[float | None], per_line: int = 4) -> str:
    """Zone means four to a line, so 64 zones still fit the column."""
    cells = [_fmt(v, 3) for v in values]
    return "\n".join(" ".join(cells[i : i + per_line]) for i in range(0, len(cells), per_line)) or "-"


def _tables(header: Sequence[Any], rows: Iterable[Sequence[Any]], widths: Sequence[float]) -> list[Flowable]:
    """Rows as a run of short tables (each repeating the header); fast to split, any length."""
    out: list[Flowable] = []
    chunk: list[Sequence[Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == _TABLE_CHUNK:
            out.append(Table([header, *chunk], colWidths=widths, style=_GRID, repeatRows=1))
            chunk = []
    if chunk or not out:
        out.append(Table([header, *chunk], colWidths=widths, style=_GRID, repeatRows=1))
    return out


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


def _charts(data: ReportData) -> list[Flowable]:
    span_days = (data.period_to - data.period_from).total_seconds() / 86400.0

    def x(h: HourSummary) -> float:
        return (h.start - data.period_from).total_seconds() / 86400.0

    out: list[Flowable] = [Paragraph("Charts", _H2)]
    for i, zs in enumerate(data.zones):  # hourly lists are by position; zs.index is the zone's name
        colour = _ZONE_COLORS[i % len(_ZONE_COLORS)]
        points = [(x(h), m) for h in data.hours if (m := h.theta_mean(i)) is not None]
        band = [(0.0, zs.low), (span_days, zs.low)], [(0.0, zs.high), (span_days, zs.high)]
        out.append(_line_chart(f"Zone {zs.index}: soil moisture (hourly mean) vs target band "
                               f"{zs.low:.3f}-{zs.high:.3f}",
                               [(f"zone {zs.index}", points, colour, False),
                                ("low", band[0], colors.red, True), ("high", band[1], colors.red, True)],
                               "VWC m3/m3", span_days, height=45 * mm))
    cumulative: list[tuple[str, list[tuple[float, float]], Any, bool]] = []
    for i, zs in enumerate(data.zones):
        total, pts = 0.0, [(0.0, 0.0)]
        for h in data.hours:
            total += h.water_l[i]
            pts.append((x(h) + 1 / 24, total))
        cumulative.append((f"zone {zs.index}", pts, _ZONE_COLORS[i % len(_ZONE_COLORS)], False))
    out.append(_line_chart("Irrigation: cumulative water per zone", cumulative, "litres", span_days))
    lights = [(x(h), m) for h in data.hours if (m := h.light_pct_mean) is not None]
    out.append(_line_chart("Supplemental lights: hourly mean output", [("lights", lights, colors.orange, False)],
                           "% of full power", span_days))
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
        ["Audit trail verification", _p(data.verification)],
    ]
    out: list[Flowable] = [Paragraph("Summary", _H2), Table(rows, colWidths=[80 * mm, 90 * mm], style=_GRID)]
    zone_rows = [[f"{z.index}", f"{z.low:.3f}-{z.high:.3f}", _fmt(z.water_l), _fmt(z.time_in_band_pct),
                  _fmt(z.hours_below), _fmt(z.hours_above), _fmt(z.hours_observed)] for z in data.zones]
    out += [Spacer(1, 4 * mm), Paragraph("Zones", _H2),
            Table([["Zone", "Band (VWC)", "Water (L)", "Time in band %", "Stress h (below)", "Above band h",
                    "Observed h"], *zone_rows], colWidths=[12 * mm, 26 * mm, 24 * mm, 26 * mm, 28 * mm, 26 * mm,
                                                           24 * mm], style=_GRID)]
    policy_rows = [[_p(p.version, _SMALL), f"{p.decisions}", iso(p.first), iso(p.last)] for p in data.policies]
    out += [Spacer(1, 4 * mm), Paragraph("Policy versions in force", _H2),
            Table([["Version", "Decisions", "First", "Last"], *policy_rows] if policy_rows
                  else [["Version", "Decisions", "First", "Last"], ["none", "0", "-", "-"]],
                  colWidths=[50 * mm, 22 * mm, 42 * mm, 42 * mm], style=_GRID)]
    return out


def _safety_and_modes(data: ReportData) -> list[Flowable]:
    out: list[Flowable] = [Paragraph("Safety clips by rule", _H2)]
    out += _tables(["Rule", "Firings"], ([_p(r, _SMALL), f"{n}"] for r, n in data.clips_by_rule.items()),
                   [120 * mm, 30 * mm])
    out += [Spacer(1, 4 * mm), Paragraph("Operator overrides (mode changes by operator)", _H2)]
    out += _tables(["Operator", "Mode changes"],
                   ([_p(a, _SMALL), f"{n}"] for a, n in data.operator_overrides.items()), [120 * mm, 30 * mm])
    out += [Spacer(1, 4 * mm), Paragraph("Mode changes and e-stops", _H2)]
    out += _tables(
        ["Time (UTC)", "Seq", "Actor", "From", "To", "Reason"],
        ([iso(m.ts), f"{m.seq}", _p(m.actor, _SMALL), m.from_mode or "-", m.to_mode, _p(m.reason, _SMALL)]
         for m in data.mode_changes),
        [38 * mm, 10 * mm, 30 * mm, 14 * mm, 14 * mm, 74 * mm])
    return out


def _decision_log(data: ReportData) -> list[Flowable]:
    out: list[Flowable] = [Paragraph("Decision log", _H2)]
    if data.condensed:
        out.append(_p(
            f"{data.decision_count} decisions: condensed to hourly summaries, followed by every decision that "
            f"was low-confidence, clipped by safety, or in manual/e-stop mode ({data.notable_total} in all"
            + (f"; the first {len(data.log)} are listed, {data.log_omitted} more are in the audit trail)"
               if data.log_omitted else ")")))
        out.append(Paragraph("Hourly summaries", _STYLES["Heading3"]))
        zones = range(len(data.zones))
        out += _tables(
            ["Hour (UTC)", "Deci-\nsions", "Water\n(L)", "Mean VWC\nby zone", "Light\n%", "Clip-\nped",
             "Low\nconf.", "Man-\nual", "E-\nstop"],
            ([iso(h.start), f"{h.decisions}", _fmt(sum(h.water_l)), _vwc_lines([h.theta_mean(i) for i in zones]),
              _fmt(h.light_pct_mean, 0), f"{h.clipped}", f"{h.low_confidence}", f"{h.manual}", f"{h.estop}"]
             for h in data.hours),
            [38 * mm, 13 * mm, 16 * mm, 36 * mm, 12 * mm, 12 * mm, 12 * mm, 12 * mm, 12 * mm])
        out.append(Paragraph("Notable decisions", _STYLES["Heading3"]))
    out += _tables(
        ["Time (UTC)", "Seq", "Actor / mode", "Conf.", "Action sent", "Why (safety rules, explanation)"],
        # Plain-string cells are drawn literally and cost far less than Paragraphs; only the
        # free-text column needs wrapping, so only it is a (escaped) Paragraph.
        ([iso(e.ts), f"{e.seq}", "\n".join([*textwrap.wrap(e.actor, 22), e.mode]), f"{e.confidence:.2f}",
          e.action, _p("; ".join(filter(None, [", ".join(e.flags), *e.rules, e.explanation])) or "-", _SMALL)]
         for e in data.log),
        [38 * mm, 12 * mm, 32 * mm, 12 * mm, 31 * mm, 55 * mm])
    return out


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
    """The report as PDF bytes: cover, summary, charts, decision log, safety and mode events, verification."""
    generated_at = _require_aware("generated_at", generated_at)
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
        Paragraph("Greenhouse control report", _H1),
        Spacer(1, 8 * mm),
        Table([
            ["Greenhouse", _p(f"{data.greenhouse_name} ({data.greenhouse_id})")],
            ["Period (UTC, end exclusive)", f"{iso(data.period_from)} to {iso(data.period_to)}"],
            ["Generated by", _p(generated_by)],
            ["Generated at", iso(generated_at)],
            ["Report id", report_id],
            ["Zones", f"{len(data.zones)}"],
        ], colWidths=[55 * mm, 115 * mm], style=TableStyle([
            ("GRID", (0, 0), (-1, -1), 0.25, colors.grey), ("FONTSIZE", (0, 0), (-1, -1), 9),
            ("VALIGN", (0, 0), (-1, -1), "TOP")])),
        Spacer(1, 8 * mm),
        _p("Water, light and energy figures are derived from measured telemetry: each decision stands for the "
           "interval since the previous one; flow is split evenly over the valves open in that interval. "
           "Stress hours are hours with estimated soil moisture below the zone's target band. The PDF carries "
           "a PAdES signature; check it with `greentwin report verify`."),
        PageBreak(),
        *_summary(data),
        PageBreak(),
        *_charts(data),
        PageBreak(),
        *_decision_log(data),
        PageBreak(),
        *_safety_and_modes(data),
        Spacer(1, 6 * mm),
        Paragraph("Audit trail verification", _H2),
        _p(data.verification),
    ]
    doc.build(story, canvasmaker=canvas_cls)
    return buf.getvalue()

