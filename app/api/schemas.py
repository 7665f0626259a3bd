"""Typed response models of the dashboard's JSON (live state, overview, history, alarms).

Every time in them is an :data:`~app.api.instants.Instant`, so each carries its UTC offset.
"""

from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import BaseModel, Field

from app.api.alarm_schemas import AlarmAck, AlarmPublic  # noqa: F401  (re-exported)
from app.api.instants import Instant

EdgeState = Literal["online", "offline", "unknown"]
Mode = Literal["auto", "manual", "estop"]
PriceSource = Literal["recorded", "tariff", "mixed"]


class ZoneLive(BaseModel):
    index: int
    label: str = Field(description=(
        "the zone as people name it, on this page and in the report ('Zone 1' for index 0)"))
    soil: str
    moisture_vwc: float | None = Field(description="Kalman estimate of volumetric water content (m3/m3)")
    moisture_std: float | None
    band_low_vwc: float
    band_high_vwc: float
    band_label: str = Field(description=(
        "the band in % VWC as the page and the report print it, e.g. '19.5–27 %'"))
    in_band: bool | None
    probes_vwc: list[float | None] = Field(description="raw probe readings (m3/m3); null: no reading")
    probe_status: list[str] = Field(description="per probe: ok, missing, drifting or offline")
    valve_commanded: int | None = Field(description=(
        "1 open, 0 closed, as last commanded (after the safety clip)"))
    valve_confirmed: int | None = Field(description="1 open, 0 closed, as the edge box last reported")
    valve_failed: bool = Field(description="latched: commanded open and stayed closed")
    water_today_l: float
    water_cap_l: float


class ClimateLive(BaseModel):
    air_temp_c: float | None
    air_rh_pct: float | None
    par_umol_m2_s: float | None
    co2_ppm: float | None
    leaf_temp_c: float | None


class CropLive(BaseModel):
    """The crop twin's estimates: what no sensor measures, beside the measured climate."""

    crop_day: float = Field(description="crop age, days since planting")
    growth_stage: float = Field(description="fraction of the crop season elapsed")
    dli_today_mol_m2: float = Field(description="PAR at the canopy since local midnight, natural plus lamps")
    lamp_hours_today: float
    yield_kg_m2: float = Field(description="fresh fruit harvested since the twin started")
    lai: float | None = Field(description="leaf area index (null until the first telemetry)")
    fruit_load_g_m2: float | None = Field(description="fruit on the plants, g CH2O per m2")
    waterlogged_days: list[float] = Field(default_factory=list, description=(
        "per zone, days its root zone has sat above the anaerobiosis point (the aeration stress "
        "is full after the crop's lag, 3 days for tomato); empty until the first estimate"))


class OutlookLive(BaseModel):
    """The site's outlook every decision is made on now: where it came from, and its arrays."""

    issued: Instant
    weather_source: str = Field(description="live, cache or fallback (yesterday's weather, else climatology)")
    weather_age_s: float | None
    price_source: str = Field(description=(
        "live, cache, fallback (the tariff as a guess) or tariff (the contract)"))
    price_age_s: float | None
    alarms: list[str]
    forecast_temp_c: list[float] = Field(description="outside temperature, hours +1..+24")
    forecast_solar_w_m2: list[float] = Field(description="outside global radiation, hours +1..+24")
    price_eur_mwh: list[float] = Field(description="all-in price (spot plus adder) of clock hours +0..+23")
    price_published: list[int] = Field(description=(
        "1: published day-ahead price; 0: the same hour a day earlier"))


class ActuatorsLive(BaseModel):
    pump_commanded_pct: float | None
    pump_confirmed_pct: float | None
    flow_l_min: float | None
    pump_current_a: float | None
    light_commanded_pct: float | None
    light_confirmed_pct: float | None
    lights_hours_today: float


class SafetyClip(BaseModel):
    rule: str
    actuator: str
    before: float
    after: float
    why: str = Field("", description=(
        "the rule's reason in words (empty for decisions stored before it was kept)"))
    text: str = Field("", description=(
        "the clip as a sentence in the caller's language, shown beside the value it changed"))


class ExplanationFactor(BaseModel):
    feature: str
    sentence: str
    share_pct: float


class DecisionPublic(BaseModel):
    seq: int
    ts: Instant
    actor: str
    mode: str
    confidence: float
    valves: list[int]
    pump_pct: float
    light_pct: float
    clips: list[SafetyClip]
    top_factors: list[ExplanationFactor] = Field(description=(
        "the three largest contributions (ensemble decisions)"))
    alarms: list[str]
    ack_status: str | None
    explanation_text: list[str] = Field(default_factory=list, description=(
        "why, as sentences in the caller's language: who decided, the top factors with labels and units"))
    command_text: str = Field("", description=(
        "the command in words, e.g. 'Zone 2 open, others closed; pump 40 %; lamps on'"))
    clips_text: list[str] = Field(default_factory=list, description="each safety clip as a sentence")
    alarms_text: list[str] = Field(default_factory=list, description=(
        "each of ``alarms`` in words (a held reading, an alarm kind's title), in the caller's language"))


class EconomicsToday(BaseModel):
    """Money of the greenhouse's current local day so far; the fields named in ``estimated`` are estimates."""

    day: date = Field(description="the site's calendar day these totals count")
    dli_mol_m2: float = Field(description=(
        "PAR received at the canopy since local midnight (mol/m2), lamps included"))
    lights_hours: float = Field(description="lamp hours today at full power (h)")
    lamp_kwh: float = Field(description="lamp energy today (kWh): lamp hours x lamp power x floor area")
    lamp_price_eur_mwh: float = Field(description="mean all-in price of today's lamp hours, or of the "
                                                  "current hour while the lamps have not burned (EUR/MWh)")
    energy_cost_eur: float = Field(description=(
        "lamp energy x its price (EUR); the pump's energy is not counted"))
    price_source: PriceSource = Field("tariff", description=(
        "recorded: the lamps' price is the one their decisions recorded; tariff: the time-of-use tariff's, "
        "as no decision recorded one; mixed: some of each"))
    water_l: float = Field(description="irrigation water today, measured by the flow meter (L)")
    water_price_eur_m3: float
    water_cost_eur: float = Field(description="water today x the configured water price (EUR)")
    fruit_price_eur_kg: float
    yield_kg: float | None = Field(description=(
        "fresh fruit grown today, estimated by the crop model from today's PAR, CO2 and air temperature "
        "(kg); null: no trend data yet"))
    revenue_eur: float | None = Field(description="yield estimate x fruit price (EUR)")
    profit_eur: float | None = Field(description="revenue less energy and water cost (EUR)")
    estimated: list[str] = Field(description="the fields above that are model estimates, not counted")


class Outlook(BaseModel):
    """The last decision's view ahead, on one hourly axis (the current clock hour first)."""

    decided_at: Instant
    hours: list[Instant] = Field(description="start of each clock hour")
    temp_c: list[float | None] = Field(description=(
        "outside temperature forecast (degC); null: none for that hour"))
    solar_w_m2: list[float | None] = Field(description="outside global radiation forecast (W/m2)")
    price_eur_mwh: list[float | None] = Field(description="all-in electricity price of the hour (EUR/MWh)")
    published: list[bool] = Field(description="true: a published price; false: a forecast of it")


class GreenhouseSummary(BaseModel):
    """One overview row."""

    id: str
    name: str
    mode: Mode
    estop_latched: bool
    edge: EdgeState
    edge_since: Instant | None
    last_telemetry_at: Instant | None
    telemetry_age_s: float | None
    water_today_l: float
    water_cap_l: float
    time_in_band_pct: float | None = Field(description="zones in their band over the last 24 h, % of samples")
    alarms_unacknowledged: int
    policy_version: str
    economics: EconomicsToday | None = Field(description="today so far; null before the first telemetry")


class GreenhouseLive(GreenhouseSummary):
    """Everything the greenhouse page shows live."""

    server_time: Instant
    confidence: float | None
    last_decision_seq: int | None
    last_decision_at: Instant | None
    manual_action: list[float] | None = Field(description=(
        "the held action in manual mode: valves 0/1, pump %, light %"))
    zones: list[ZoneLive]
    climate: ClimateLive
    actuators: ActuatorsLive
    crop: CropLive
    outlook: OutlookLive
    decision_outlook: Outlook | None = Field(description=(
        "the last decision's forecast and prices; null before one"))


class HistoryResponse(BaseModel):
    """Trends, averaged server-side into at most ``points`` time buckets (empty buckets left out)."""

    greenhouse_id: str
    start: Instant
    end: Instant
    bucket_s: float
    samples: int = Field(description="decisions read from the database")
    ts: list[Instant] = Field(description="bucket centres")
    moisture_vwc: list[list[float | None]] = Field(description="per zone, then per bucket")
    zone_labels: list[str] = Field(default_factory=list, description=(
        "per zone, its name as the page prints it"))
    band_low_vwc: list[float]
    band_high_vwc: list[float]
    flow_l_min: list[float | None]
    pump_pct: list[float | None]
    light_pct: list[float | None]
    air_temp_c: list[float | None]
    air_rh_pct: list[float | None]
    par_umol_m2_s: list[float | None]
    co2_ppm: list[float | None]
    price_eur_mwh: list[float | None] = Field(default_factory=list, description=(
        "mean all-in electricity price the bucket's decisions recorded, else the tariff's at its centre "
        "(EUR/MWh)"))
    price_source: PriceSource = Field("tariff", description=(
        "recorded: every bucket's price was recorded by its decisions; tariff: none was; mixed: some were"))
