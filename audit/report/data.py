"""What a report shows, as plain data: totals, hourly summaries, the decision log, saliency maps.

:func:`app.reports.collect.collect_report_data` fills a :class:`ReportData`; the layout
(:mod:`audit.report.layout`) only reads it, so both sides can be tested on their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

LOW_CONFIDENCE_THRESHOLD = 0.6
"""Same default as ``Settings.low_confidence_threshold``: below it the loop fell back to the expert."""
DETAIL_LIMIT = 500
"""Periods with at most this many decisions list every one; longer ones are condensed."""
MAX_LOG_ENTRIES = 2000
"""Cap on notable decisions kept for a condensed log (memory and page count stay bounded)."""
MAX_HEATMAPS = 12
"""Saliency heat maps drawn per report; later low-confidence decisions are only counted."""
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
    saliency_maps: list[SaliencyMap] = field(default_factory=list)
    saliency_total: int = 0
    """Low-confidence decisions carrying a saliency history (``saliency_maps`` holds the first ones)."""
    economics: Economics = field(default_factory=Economics)

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
    def log_omitted(self) -> int:
        """Notable decisions counted but not listed (condensed logs only)."""
        return self.notable_total - len(self.log) if self.condensed else 0



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

