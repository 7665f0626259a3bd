"""What a report shows, as plain data: totals, hourly summaries, the decision log, saliency maps.

:func:`app.reports.collect.collect_report_data` fills a :class:`ReportData`; the layout
(:mod:`audit.report.layout`) only reads it, so both sides can be tested on their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

LOW_CONFIDENCE_THRESHOLD = 0.6
"""Same default as ``Settings.low_confidence_threshold``: below it the loop fell back to the expert."""
MAX_HEATMAPS = 12
"""Saliency heat maps drawn per report at most; later low-confidence decisions are only counted."""
HEATMAPS_PER_DAY = 3
"""Heat maps drawn per day of the period (at least this many): a report's length follows its period."""
MAX_EVENT_KINDS = 60
"""Distinct events the log summarises; rarer ones past this are counted together (the table stays short)."""
MAX_LISTED = 200
"""Rows of a listing (mode changes, alarm actions, settings changes) printed; the rest are counted."""
HEATMAP_FEATURES = 16
"""Rows of a heat map: the features with the largest total |attribution| over the steps."""
MAX_DT_S = 3600.0
MIN_DT_S = 1.0


@dataclass(frozen=True)
class EnergyModel:
    """Electrical constants for the energy estimate and the prices of the economic view (defaults
    mirror ``twin.config``: the reference fruit price, the middle of the water price range)."""

    lamp_power_w_m2: float = 100.0
    zone_area_m2: float = 50.0
    pump_rated_kw: float = 0.75
    fruit_price_eur_kg: float = 1.0
    water_price_eur_m3: float = 0.75


@dataclass
class Economics:
    """The period's money as the decisions saw it: each interval's energy at the all-in electricity
    price its decision recorded, water at the model's price, fruit harvested by the crop twin
    (the evaluation's definitions, ``policy.evaluate``: profit is revenue less energy and water;
    price capture is the price paid per lamp MWh over the period's time-averaged price)."""

    yield_kg: float = 0.0
    floor_m2: float = 0.0
    fruit_price_eur_kg: float = 1.0
    water_price_eur_m3: float = 0.75
    revenue_eur: float = 0.0
    energy_cost_eur: float = 0.0
    water_cost_eur: float = 0.0
    lamp_kwh_priced: float = 0.0
    lamp_paid_eur: float = 0.0
    priced_hours: float = 0.0
    price_hours_eur_mwh: float = 0.0
    """Integral of the all-in price over the priced hours [EUR/MWh x h]."""
    unpriced_hours: float = 0.0
    """Intervals whose decision recorded no price (made before prices were recorded): no energy cost."""

    @property
    def profit_eur(self) -> float:
        return self.revenue_eur - self.energy_cost_eur - self.water_cost_eur

    @property
    def mean_price_eur_mwh(self) -> float | None:
        return self.price_hours_eur_mwh / self.priced_hours if self.priced_hours > 0 else None

    @property
    def lamp_price_eur_mwh(self) -> float | None:
        """What the lamps paid per MWh; None without lamp energy."""
        return 1000.0 * self.lamp_paid_eur / self.lamp_kwh_priced if self.lamp_kwh_priced > 0 else None

    @property
    def price_capture(self) -> float | None:
        """Lamp price over the average price: below 1, the lamps ran in cheaper hours than average."""
        lamp, mean = self.lamp_price_eur_mwh, self.mean_price_eur_mwh
        return lamp / mean if lamp is not None and mean else None


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
    name: str | None = None
    """The zone's name from its settings (the dashboard shows it); None: only its number."""
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
    fallback: int = 0
    """Decisions the threshold expert made because the ensemble's members disagreed."""
    operator: int = 0
    """Operators' commands: decisions in manual mode, made by a person."""
    rules: dict[str, int] = field(default_factory=dict)
    """Safety-rule firings in the hour, by rule."""

    def theta_mean(self, zone: int) -> float | None:
        n = self.theta_n[zone] if zone < len(self.theta_n) else 0
        return self.theta_sum[zone] / n if n else None

    @property
    def light_pct_mean(self) -> float | None:
        return self.light_pct_sum / self.light_n if self.light_n else None


@dataclass
class EventSummary:
    """Decisions of one kind of event (a safety rule on one actuator, an expert fallback, an operator's
    command, a policy's strongest factor), counted, with the latest one in words."""

    event: str
    count: int
    first: datetime
    last: datetime
    example: str
    """The latest such decision in words (never the stored JSON)."""


@dataclass
class AlarmSummary:
    """Episodes of one alarm kind raised in the period and what operators did about them."""

    title: str
    severity: str
    raised: int = 0
    acknowledged: int = 0
    """Episodes raised in the period that an operator acknowledged."""
    shelved: int = 0
    """Shelvings of this kind in the period."""
    open_at_end: int = 0
    """Episodes raised in the period still not cleared when it ended."""


@dataclass(frozen=True)
class AlarmActionEntry:
    """An operator's acknowledgement, shelving or unshelving of an alarm."""

    ts: datetime
    actor: str
    action: str
    title: str
    comment: str


@dataclass(frozen=True)
class SettingsChangeEntry:
    """A change of the greenhouse's settings as the first decision under it recorded it."""

    ts: datetime
    version: int
    actor: str
    reason: str
    changes: str
    """What changed, in words and the dashboard's units."""


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


@dataclass(frozen=True)
class SaliencyMap:
    """Input saliency of one low-confidence decision over the steps that led to it.

    ``values[i][t]`` is the attribution of ``features[i]`` at step ``t`` (oldest first; the
    last step is the decision itself), for the features with the largest total |attribution|.
    Positive values pushed the policy towards actuating (water, pump, light).
    """

    ts: datetime
    seq: int
    actor: str
    confidence: float
    features: tuple[str, ...]
    values: tuple[tuple[float, ...], ...]
    total_features: int
    """How many features the observation had (``features`` is the strongest of them)."""
    shown_share_pct: float
    """Share of the summed |attribution| that the shown features carry."""

    @property
    def steps(self) -> int:
        return len(self.values[0]) if self.values else 0


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
    events: list[EventSummary] = field(default_factory=list)
    events_other: int = 0
    """Decisions of event kinds past :data:`MAX_EVENT_KINDS`, counted together."""
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
    decisions_fallback: int = 0
    operator_commands: int = 0
    clips_by_rule: dict[str, int] = field(default_factory=dict)
    operator_overrides: dict[str, int] = field(default_factory=dict)
    estops: int = 0
    policies: list[PolicyUse] = field(default_factory=list)
    saliency_maps: list[SaliencyMap] = field(default_factory=list)
    saliency_total: int = 0
    """Low-confidence decisions carrying a saliency history (``saliency_maps`` holds the first ones)."""
    economics: Economics = field(default_factory=Economics)
    alarms: list[AlarmSummary] = field(default_factory=list)
    alarm_actions: list[AlarmActionEntry] = field(default_factory=list)
    alarm_action_counts: dict[str, int] = field(default_factory=dict)
    """Operators' alarm actions in the period by action (ack, shelve, unshelve); all of them, listed or
    not."""
    settings_changes: list[SettingsChangeEntry] = field(default_factory=list)
    verify_command: str | None = None
    """The ``greentwin report verify`` line that checks this report's signature, when the signer knows it."""
    language: str = "en"
    """The language of every word the report prints (:data:`audit.wording.LANGUAGES`); the collected words
    (events, alarm titles, settings changes) were put in it when the data was collected."""

    @property
    def span_hours(self) -> float:
        return (self.period_to - self.period_from).total_seconds() / 3600.0

    @property
    def operator_mode_changes(self) -> int:
        return sum(self.operator_overrides.values())

    @property
    def saliency_omitted(self) -> int:
        """Saliency maps counted but not drawn."""
        return self.saliency_total - len(self.saliency_maps)

    @property
    def water_total_l(self) -> float:
        return sum(z.water_l for z in self.zones) + self.water_unattributed_l

    @property
    def energy_total_kwh(self) -> float:
        return self.energy_lamps_kwh + self.energy_pump_kwh

    @property
    def alarms_raised(self) -> int:
        return sum(a.raised for a in self.alarms)


# -- time helpers --------------------------------------------------------------------------


def utc(dt: datetime) -> datetime:
    """Aware UTC; SQLite returns naive datetimes, which the service always writes in UTC."""
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def iso(dt: datetime) -> str:
    """ISO-8601 in UTC to the second: what every date in a report looks like."""
    return utc(dt).replace(microsecond=0).isoformat()


def require_aware(name: str, dt: datetime) -> datetime:
    """``dt`` in UTC; a naive datetime is refused, since a report period must name its instants."""
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got {dt.isoformat()}")
    return dt.astimezone(UTC)



def heatmap_budget(period_from: datetime, period_to: datetime) -> int:
    """Heat maps a period's report draws: :data:`HEATMAPS_PER_DAY` for each started day, at most
    :data:`MAX_HEATMAPS`, so six hours get one page of them and a week no more than four."""
    days = math.ceil(max((period_to - period_from).total_seconds(), 1.0) / 86400.0)
    return min(MAX_HEATMAPS, HEATMAPS_PER_DAY * days)
