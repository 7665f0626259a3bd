"""Gathering a report's data: one streaming pass over a greenhouse's decisions and mode changes.

Memory stays bounded whatever the period (``yield_per``): totals, per-hour summaries, counts per event
kind (:mod:`app.reports.events`) and at most ``max_heatmaps`` saliency maps are kept, never the rows.

Accounting (the same conventions as :class:`control.controller.GreenhouseController`):

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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.models import Decision, Greenhouse, ModeChange, Zone
from app.reports.alarms import collect_alarms
from app.reports.describe import (
    confidence_words,
    describe_explanation,
    describe_rule,
    json_floats,
    json_number,
    saliency_map,
)
from app.reports.events import (
    EventTally,
    clip_event,
    estop_event,
    factor_event,
    fallback_event,
    low_confidence_event,
    operator_event,
    other_actor_event,
    settings_change,
)
from app.reports.money import Ledger
from audit.decision_words import command_text
from audit.report.data import (
    HEATMAP_FEATURES,
    LOW_CONFIDENCE_THRESHOLD,
    MAX_DT_S,
    MAX_LISTED,
    MIN_DT_S,
    EnergyModel,
    HourSummary,
    ModeChangeEntry,
    PolicyUse,
    ReportData,
    ZoneStats,
    heatmap_budget,
    require_aware,
    utc,
)
from audit.wording import DEFAULT_LANGUAGE
from audit.wording import language as wording_language

if TYPE_CHECKING:
    from app.core.config import Settings

_STREAM_BATCH = 1000


class _Collector:
    """One pass over the decision stream; keeps totals, hours, events and the first saliency maps."""

    def __init__(self, data: ReportData, *, energy: EnergyModel, threshold: float, max_heatmaps: int,
                 prev: tuple[datetime, list[float]] | None) -> None:
        self.data = data
        self.z = len(data.zones)
        self.energy = energy
        self.threshold = threshold
        self.max_heatmaps = max_heatmaps
        self.prev_ts, self.prev_valves = prev if prev is not None else (None, [0.0] * self.z)
        econ = data.economics
        econ.floor_m2, econ.fruit_price_eur_kg = self.z * energy.zone_area_m2, energy.fruit_price_eur_kg
        econ.water_price_eur_m3 = energy.water_price_eur_m3
        self.ledger = Ledger(econ, energy)
        self.hour: HourSummary | None = None
        self.policy_counts: Counter[str] = Counter()
        self.policy_span: dict[str, tuple[datetime, datetime]] = {}
        self.clips: Counter[str] = Counter()
        self.events = EventTally()

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
        ts = utc(row.ts)
        tel = row.telemetry if isinstance(row.telemetry, dict) else {}
        clipped = row.clipped if isinstance(row.clipped, dict) else {}
        estimate = row.estimate if isinstance(row.estimate, dict) else {}
        dt_h = 0.0
        if self.prev_ts is not None:
            dt_h = min(max((ts - self.prev_ts).total_seconds(), MIN_DT_S), MAX_DT_S) / 3600.0
        hour = self._hour_for(ts)
        hour.decisions += 1
        d.decision_count += 1
        d.first_decision = d.first_decision or ts
        d.last_decision = ts

        # water: measured flow over the interval, split over the valves open during it
        litres = json_number(tel, "flow_l_min") * dt_h * 60.0
        feedback = [v or 0.0 for v in json_floats(tel.get("valve_open"), self.z)]
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
        self.prev_valves = [v or 0.0 for v in json_floats(clipped.get("valves"), self.z)]
        self.prev_ts = ts

        # lights and energy
        lamp_kwh = 0.0
        if "light_pct" in tel:
            light = json_number(tel, "light_pct")
            hour.light_pct_sum += light
            hour.light_n += 1
            d.lamp_hours += light / 100.0 * dt_h
            lamp_kwh = self.energy.lamp_power_w_m2 * d.economics.floor_m2 * light / 100.0 * dt_h / 1000.0
            d.energy_lamps_kwh += lamp_kwh
        pump_kwh = self.energy.pump_rated_kw * json_number(tel, "pump_pct") / 100.0 * dt_h
        d.energy_pump_kwh += pump_kwh
        self.ledger.add(estimate, dt_h, litres, lamp_kwh, pump_kwh)

        # moisture against each zone's band
        theta = json_floats(estimate.get("theta"), self.z)
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

        # who decided, and what the safety layer changed, as events
        self._events(row, ts, hour, explanation=row.explanation if isinstance(row.explanation, dict) else {},
                     clipped=clipped)
        change = settings_change(ts, estimate.get("settings_change"), d.language)
        if change is not None and len(d.settings_changes) < MAX_LISTED:
            d.settings_changes.append(change)

    def _events(self, row: Any, ts: datetime, hour: HourSummary, *, explanation: dict[str, Any],
                clipped: dict[str, Any]) -> None:
        """Count the decision's flags and name its events (in words) for the summarised log."""
        d, tally, lang = self.data, self.events, self.data.language
        actor, mode = str(row.actor), str(row.mode)
        low = (row.confidence < self.threshold or actor == "expert:low_confidence"
               or bool(explanation.get("low_confidence")))
        if low:
            d.decisions_low_confidence += 1
            hour.low_confidence += 1
        rules = row.rules_fired if isinstance(row.rules_fired, list) else []
        if rules:
            d.decisions_clipped += 1
            hour.clipped += 1
        for firing in rules:
            rule, rule_words = describe_rule(firing, lang)
            self.clips[rule] += 1
            hour.rules[rule] = hour.rules.get(rule, 0) + 1
            tally.add(clip_event(firing, lang), ts, rule_words)
        words = describe_explanation(explanation, lang) if explanation else ""
        if mode == "manual":
            d.decisions_manual += 1
            hour.manual += 1
            if actor.startswith("operator:"):
                d.operator_commands += 1
                hour.operator += 1
                tally.add(operator_event(actor, lang), ts, command_text(clipped, lang))
        elif mode == "estop":
            d.decisions_estop += 1
            hour.estop += 1
            tally.add(estop_event(lang), ts, command_text(clipped, lang))
        if actor == "expert:low_confidence":
            d.decisions_fallback += 1
            hour.fallback += 1
            tally.add(fallback_event(lang), ts, words or confidence_words(row.confidence, lang))
        elif actor.startswith("policy:"):
            version = actor.removeprefix("policy:")
            self.policy_counts[version] += 1
            first, _ = self.policy_span.get(version, (ts, ts))
            self.policy_span[version] = (first, ts)
            if low:
                tally.add(low_confidence_event(lang), ts, words or confidence_words(row.confidence, lang))
            top = explanation.get("top")
            if isinstance(top, list) and top and isinstance(top[0], dict):
                tally.add(factor_event(str(top[0].get("feature", "?")), lang), ts, words)
        elif mode == "auto":
            tally.add(other_actor_event(actor, lang), ts, words)

        if low:
            heat = saliency_map(row, ts, self.z, HEATMAP_FEATURES)
            if heat is not None:
                d.saliency_total += 1
                if len(d.saliency_maps) < self.max_heatmaps:
                    d.saliency_maps.append(heat)

    def finish(self) -> None:
        d = self.data
        if self.hour is not None:
            d.hours.append(self.hour)
        self.events.finish(d)
        d.clips_by_rule = dict(sorted(self.clips.items()))
        d.policies = [PolicyUse(v, n, *self.policy_span[v]) for v, n in sorted(self.policy_counts.items())]


def site_energy_model(settings: Settings) -> EnergyModel:
    """The report's economics at the site's configured prices, the ones the policy's observation sees."""
    return EnergyModel(fruit_price_eur_kg=settings.fruit_price_eur_kg,
                       water_price_eur_m3=settings.water_price_eur_m3)


def collect_report_data(
    session: Session,
    greenhouse_id: str,
    period_from: datetime,
    period_to: datetime,
    *,
    verification: str,
    energy: EnergyModel | None = None,
    low_confidence_threshold: float = LOW_CONFIDENCE_THRESHOLD,
    max_heatmaps: int | None = None,
    verify_command: str | None = None,
    language: str = DEFAULT_LANGUAGE,
) -> ReportData:
    """Gather one greenhouse's period ``[period_from, period_to)`` in a single streaming pass.

    ``verification`` is the audit-trail check the caller ran (this module never opens keys);
    ``verify_command`` the line that checks the signature the caller will put on it. Heat maps:
    ``max_heatmaps``, by default as many as the period's length allows (:func:`heatmap_budget`).
    Every word collected (events, alarm titles, settings changes) is in ``language``, which the report keeps.
    Raises ``LookupError`` for an unknown greenhouse, ``ValueError`` for a naive or empty period.
    """
    start = require_aware("period_from", period_from)
    end = require_aware("period_to", period_to)
    if end <= start:
        raise ValueError("period_to must be after period_from")
    gh = session.get(Greenhouse, greenhouse_id)
    if gh is None:
        raise LookupError(f"unknown greenhouse {greenhouse_id!r}")
    bands = session.scalars(select(Zone).where(Zone.greenhouse_id == greenhouse_id)
                            .order_by(Zone.index)).all()
    zones = [ZoneStats(z.index, z.target_low_vwc, z.target_high_vwc, name=z.name) for z in bands]
    data = ReportData(gh.id, gh.name, start, end, verification, zones, verify_command=verify_command,
                      language=wording_language(language))

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
        prev = (utc(prev_row.ts), [v or 0.0 for v in json_floats(valves, len(zones))])

    budget = heatmap_budget(start, end) if max_heatmaps is None else max_heatmaps
    collector = _Collector(data, energy=energy or EnergyModel(), threshold=low_confidence_threshold,
                           max_heatmaps=budget, prev=prev)
    for row in _stream_decisions(session, greenhouse_id, start, end):
        collector.add(row)
    collector.finish()

    overrides: Counter[str] = Counter()
    for mc in session.scalars(
        select(ModeChange)
        .where(ModeChange.greenhouse_id == greenhouse_id, ModeChange.ts >= start, ModeChange.ts < end)
        .order_by(ModeChange.ts, ModeChange.seq)
    ):
        if len(data.mode_changes) < MAX_LISTED:
            data.mode_changes.append(
                ModeChangeEntry(utc(mc.ts), mc.seq, mc.actor, mc.from_mode, mc.to_mode, mc.reason or ""))
        if mc.to_mode == "estop":
            data.estops += 1
        if mc.actor.startswith("operator:"):
            overrides[mc.actor] += 1
    data.operator_overrides = dict(sorted(overrides.items()))
    collect_alarms(session, data, start, end)
    return data


def _stream_decisions(session: Session, greenhouse_id: str, start: datetime, end: datetime) -> Iterator[Any]:
    """Only the columns a report reads, through a server-side cursor."""
    stmt = (
        select(Decision.ts, Decision.seq, Decision.actor, Decision.mode, Decision.telemetry,
               Decision.estimate, Decision.clipped, Decision.rules_fired, Decision.confidence,
               Decision.explanation)
        .where(Decision.greenhouse_id == greenhouse_id, Decision.ts >= start, Decision.ts < end)
        .order_by(Decision.ts, Decision.seq)
    )
    result = session.execute(stmt, execution_options={"yield_per": _STREAM_BATCH})
    try:
        yield from result
    finally:
        result.close()

