"""Twin configuration: every physical constant and knob in one frozen, documented place.

Values are typical for a soil-grown tomato crop under a plastic or glass cover with drip
irrigation (FAO-56 tables 12, 17 and 19 for crop and soil figures). Derived quantities
(steps per episode, step length in hours) are properties, computed from the fields so they
can never disagree with them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SoilType:
    """Hydraulic properties of one soil class (volumetric water contents in m3/m3)."""

    name: str
    field_capacity: float
    wilting_point: float
    saturation: float
    hourly_retention: float
    """Fraction of the water above field capacity still held after one hour (drainage)."""


SOIL_TYPES: tuple[SoilType, ...] = (
    SoilType("sand", field_capacity=0.12, wilting_point=0.05, saturation=0.38, hourly_retention=0.92),
    SoilType("loam", field_capacity=0.27, wilting_point=0.12, saturation=0.45, hourly_retention=0.95),
    SoilType("clay", field_capacity=0.36, wilting_point=0.22, saturation=0.50, hourly_retention=0.98),
)
SOIL_INDEX = {s.name: i for i, s in enumerate(SOIL_TYPES)}


@dataclass(frozen=True)
class CropConfig:
    """FAO-56 crop coefficients and stage lengths (tomato, table 12 and 11)."""

    kc_ini: float = 0.6
    kc_mid: float = 1.15
    kc_end: float = 0.8
    stage_days: tuple[float, float, float, float] = (30.0, 40.0, 40.0, 25.0)
    """Initial, development, mid-season and late-season lengths [days]."""
    depletion_fraction: float = 0.4
    """p: share of total available water the crop can take up before stress (FAO-56 table 22)."""
    root_depth_m: tuple[float, float] = (0.25, 0.40)
    """Effective root-zone depth range [m], drawn per instance."""


@dataclass(frozen=True)
class HydraulicsConfig:
    """Pump, valves and pipe network."""

    pump_runout_flow_l_s: float = 0.5
    """Flow at full speed against an open network [L/s] (pump curve Q_max)."""
    network_resistance: float = 40.4
    """k': system curve H = H0 * k' * (Q / n_open)^2 [1/(L/s)^2]. One valve at full speed passes ~0.15 L/s
    but leaves 91 % of shut-off head: the relief valve opens, so one zone alone needs <= ~90 % speed."""
    pump_rated_power_kw: float = 0.75
    pump_rated_current_a: float = 4.0
    relief_pressure_frac: float = 0.9
    """The safety (relief) valve opens above this fraction of the shut-off head."""
    overcurrent_frac: float = 1.2
    """Hard limit: pump current above this multiple of its rating ends the episode."""
    dead_head_limit_s: float = 120.0
    """Hard limit: pump running against closed valves longer than this ends the episode."""
    valve_delay_s: tuple[float, float] = (0.8, 1.2)
    """Opening delay range [s], drawn per valve."""
    valve_tau_s: tuple[float, float] = (0.5, 2.0)
    """First-order flow rise time-constant range [s], drawn per valve."""
    zone_area_m2: float = 50.0


@dataclass(frozen=True)
class ClimateConfig:
    """Greenhouse air and lights (first-order responses to outside weather)."""

    cover_transmissivity: tuple[float, float] = (0.55, 0.75)
    air_tau_s: float = 1200.0
    humidity_tau_s: float = 1800.0
    co2_tau_s: float = 1800.0
    heating_setpoint_c: float = 14.0
    solar_gain_c_per_w_m2: float = 0.016
    """Air warming above outside per W/m2 of transmitted sunlight (ventilated house)."""
    lamp_power_w_m2: float = 100.0
    """Electrical power of the supplemental lights at 100 % per m2 of floor."""
    lamp_par_umol_m2_s: float = 250.0
    lamp_heat_c: float = 3.0
    """Air warming at 100 % lights [°C]."""
    inside_wind_m_s: float = 0.3
    elevation_m: float = 100.0
    transpiration_humidification_kpa_per_mm_h: float = 0.8


MIN_DARK_HOURS = 6.0
"""Tomato needs a dark period: continuous light injures its leaves (interveinal chlorosis), so
lamps must be off for at least this long each local day."""


def hours_between(start_h: float, end_h: float) -> float:
    """Length of the local clock window [start, end) in hours, wrapping over midnight."""
    return (end_h - start_h) % 24.0


def in_window(hour_of_day: Any, start_h: float, end_h: float) -> Any:
    """True where a local clock hour lies in [start_h, end_h), the window wrapping over midnight.
    Plain operators, so it serves numpy and torch arrays and Python floats alike."""
    return (hour_of_day - start_h) % 24.0 < hours_between(start_h, end_h)


@dataclass(frozen=True)
class LightingConfig:
    """When lamps may burn: the crop's dark period and the site's fixed lamp schedule.

    Hours are local clock hours; the twin's local time is its hour of year.
    """

    dark_start_h: float = 23.0
    dark_end_h: float = 5.0
    """Lamps are off in [dark_start_h, dark_end_h) every day (at least :data:`MIN_DARK_HOURS`)."""
    schedule_on_h: float = 5.0
    schedule_off_h: float = 21.0
    """The site's fixed schedule (climate computer, price-blind): lamps on in [on, off) ..."""
    schedule_par_umol: float = 120.0
    """... while natural PAR at the canopy is below this [umol/m2/s], never in the dark period."""

    def __post_init__(self) -> None:
        for name in ("dark_start_h", "dark_end_h", "schedule_on_h", "schedule_off_h"):
            value = getattr(self, name)
            if not (0.0 <= value < 24.0):
                raise ValueError(f"{name} must be a clock hour in [0, 24), got {value}")
        if hours_between(self.dark_start_h, self.dark_end_h) < MIN_DARK_HOURS:
            raise ValueError(f"the dark period {self.dark_start_h:g}-{self.dark_end_h:g} h is "
                             f"{hours_between(self.dark_start_h, self.dark_end_h):g} h; tomato needs at least "
                             f"{MIN_DARK_HOURS:g} h")
        if self.schedule_par_umol < 0:
            raise ValueError("schedule_par_umol must be >= 0")


@dataclass(frozen=True)
class EconomicsConfig:
    """Prices of the economic reward (CROP_ECONOMICS section 5). Each ``(low, high)`` range is drawn
    uniformly per instance at reset; a range with low == high fixes the value."""

    fruit_price_eur_kg: tuple[float, float] = (0.7, 1.6)
    """Fresh tomato price (NL 2006-09 average 0.73, GreenLight-Gym 1.6)."""
    water_price_eur_m3: tuple[float, float] = (0.0, 1.5)
    """Irrigation water (NL rainwater ~0, Almeria 0.25, tap water 1+)."""
    drain_price_eur_m3: tuple[float, float] = (0.5, 2.0)
    """Nutrients lost with drainage (1-1.5 kg of fertiliser salts per m3 of nutrient solution)."""
    price_adder_eur_mwh: tuple[float, float] = (0.0, 60.0)
    """Network, tax and supplier margin on top of the spot price."""
    price_mean_eur_mwh: tuple[float, float] = (60.0, 130.0)
    """The price year's mean spot price: the scenario's spot series is scaled to it."""
    dry_penalty: float = 0.2
    """c_dry: moisture term below the band, in V_ref per band tolerance (unmodelled quality risk)."""
    wet_penalty: float = 0.5
    """c_wet: above the band (hypoxia and disease risk; drainage itself is priced)."""
    reference_fruit_price_eur_kg: float = 1.0
    reference_growth_kg_m2_day: float = 0.25
    """V_ref = reference price x reference growth x step length: a good summer day's fruit."""
    pump_replacement_eur: float = 600.0
    """A hard termination wrecks the pump: its replacement, spread over the greenhouse floor."""
    repair_days: float = 2.0
    stress_yield_loss: float = 0.5
    """While the pump is replaced irrigation is down: this share of a reference day's crop value
    is lost per day of repair."""
    lamps_ours: float = 1.0
    """Share of instances whose lamps greentwin controls; the rest follow the site's schedule."""

    def __post_init__(self) -> None:
        for name in ("fruit_price_eur_kg", "water_price_eur_m3", "drain_price_eur_m3", "price_adder_eur_mwh",
                     "price_mean_eur_mwh"):
            lo, hi = getattr(self, name)
            if not (lo <= hi) or (name != "price_adder_eur_mwh" and lo < 0):
                raise ValueError(f"{name} must be a (low, high) range with low <= high, got {(lo, hi)}")
        if self.reference_fruit_price_eur_kg <= 0 or self.reference_growth_kg_m2_day <= 0:
            raise ValueError("the reference fruit price and growth must be positive (V_ref divides by them)")
        if min(self.dry_penalty, self.wet_penalty, self.pump_replacement_eur, self.repair_days,
               self.stress_yield_loss) < 0:
            raise ValueError("penalties, repair cost and repair time must be >= 0")
        if not (0.0 <= self.lamps_ours <= 1.0):
            raise ValueError("lamps_ours is a share of instances in [0, 1]")

    def v_ref(self, dt_s: float) -> float:
        """The fixed reward scale [EUR/m2 per step]: rewards stay in EUR across configs."""
        return self.reference_fruit_price_eur_kg * self.reference_growth_kg_m2_day * dt_s / 86400.0


@dataclass(frozen=True)
class WeatherConfig:
    """Library of synthetic weather years shared by all instances."""

    n_years: int = 8
    latitude_deg: tuple[float, float] = (30.0, 52.0)
    forecast_error_c: float = 1.5
    """Std of a per-episode (site) temperature forecast bias at the 24 h horizon [°C]."""
    forecast_error_frac: float = 0.15
    """Std of a per-episode (site) relative solar forecast bias at the 24 h horizon."""
    forecast_temp_std_24h_c: float = 1.8
    """Std of the forecast's temperature error at +24 h, growing as sqrt(lead) [°C] (day-ahead
    2-m temperature errors of numerical forecasts are 1.5-2.5 °C)."""
    forecast_solar_log_std_24h: float = 0.45
    """Log-std of the forecast's solar factor at +24 h, growing as sqrt(lead): cloud cover is what
    forecasts get wrong, so hourly solar errors are tens of percent a day ahead."""
    forecast_lead_correlation: float = 0.9
    """Correlation of one forecast's errors at neighbouring leads."""

    def __post_init__(self) -> None:
        if self.forecast_temp_std_24h_c < 0 or self.forecast_solar_log_std_24h < 0:
            raise ValueError("forecast error spreads must be >= 0")
        if not (0.0 <= self.forecast_lead_correlation < 1.0):
            raise ValueError("forecast_lead_correlation must lie in [0, 1)")


@dataclass(frozen=True)
class FaultConfig:
    """Fault rates [events per hour per instance]; 0 switches a fault off.

    ``instance_fraction`` is the share of instances that carry faults at all, so a batch can
    mix healthy and faulty greenhouses.
    """

    sensor_drift: float = 0.0
    drift_rate_vwc_per_h: float = 0.002
    comm_loss: float = 0.0
    sensor_offline: float = 0.0
    offline_hours: float = 6.0
    valve_stuck: float = 0.0
    pump_degradation: float = 0.0
    wear_per_h: float = 0.01
    instance_fraction: float = 1.0

    @property
    def any_enabled(self) -> bool:
        return any(r > 0 for r in (self.sensor_drift, self.comm_loss, self.sensor_offline,
                                   self.valve_stuck, self.pump_degradation))

    @classmethod
    def all_on(cls, rate: float = 0.02) -> FaultConfig:
        """Every fault switched on at one rate (soak tests, robust training)."""
        return cls(sensor_drift=rate, comm_loss=rate * 5, sensor_offline=rate, valve_stuck=rate / 4,
                   pump_degradation=rate / 4)


@dataclass(frozen=True)
class RewardConfig:
    """Weights of the named reward terms (BRIEF: 0.5 / 0.3 / -0.2 / -0.1)."""

    moisture: float = 0.5
    growth: float = 0.3
    water: float = -0.2
    energy: float = -0.1
    band_tolerance_vwc: float = 0.05
    """Distance outside the band at which the moisture term reaches 0 [m3/m3]."""
    reference_water_mm_day: float = 5.0
    """Water term is 1 when irrigating at this rate."""
    band_low_depletion: float = 0.4
    """Target band lower edge: field capacity minus this share of total available water."""


@dataclass(frozen=True)
class EstimatorConfig:
    """Noise and detection settings; defaults suit 10-min steps and probes with 5 % noise."""

    probe_rel_std: float = 0.05
    probe_abs_std: float = 0.003
    q_floor: float = 5e-4
    """Random-walk model error [m3/m3 per sqrt(hour)]."""
    q_etc: float = 0.2
    q_irr: float = 0.1
    ewma_alpha: float = 0.1
    drift_threshold: float = 1.0
    recover_threshold: float = 0.5
    confirm_steps: int = 3
    offline_after_steps: int = 6
    mismatch_threshold: float = 0.5
    """|EWMA| that two or more trusted probes must share, same sign, to call the model wrong."""
    mismatch_inflation: float = 100.0
    """Factor on Q (variance) while two or more trusted probes agree the prediction is off."""


@dataclass(frozen=True)
class TwinConfig:
    """Everything that defines a twin instance family."""

    zones: int = 6
    probes_per_zone: int = 2
    dt_s: float = 600.0
    """Control step [s]: 60 for real time, 600 (10 min) for training and evaluation."""
    episode_days: float = 30.0
    sensor_noise: float = 0.02
    """Relative standard deviation of sensor readings (0.1 = 10 % noise)."""
    crop: CropConfig = field(default_factory=CropConfig)
    hydraulics: HydraulicsConfig = field(default_factory=HydraulicsConfig)
    climate: ClimateConfig = field(default_factory=ClimateConfig)
    weather: WeatherConfig = field(default_factory=WeatherConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    lighting: LightingConfig = field(default_factory=LightingConfig)
    economics: EconomicsConfig = field(default_factory=EconomicsConfig)
    soil_mix: tuple[float, float, float] = (0.3, 0.4, 0.3)
    """Probability of sand, loam and clay for each zone."""
    fixed_soils: tuple[str, ...] | None = None
    """If set, one soil name per zone instead of random draws (registered greenhouses)."""
    moisture_estimate: bool = True
    """Observed moisture is the per-zone Kalman estimate (what the runtime feeds the policy),
    with drifting probes excluded; False: the plain mean of the valid probes."""
    estimator: EstimatorConfig = field(default_factory=EstimatorConfig)

    def __post_init__(self) -> None:
        if self.zones < 1 or self.probes_per_zone < 1:
            raise ValueError("zones and probes_per_zone must be >= 1")
        if not (1.0 <= self.dt_s <= 3600.0):
            raise ValueError(f"dt_s must lie in [1, 3600] s, got {self.dt_s}")
        if self.episode_days <= 0:
            raise ValueError("episode_days must be positive")
        if not (0.0 <= self.sensor_noise <= 0.5):
            raise ValueError("sensor_noise is a relative std in [0, 0.5]")
        if self.fixed_soils is not None:
            if len(self.fixed_soils) != self.zones:
                raise ValueError("fixed_soils needs one soil name per zone")
            unknown = [s for s in self.fixed_soils if s not in SOIL_INDEX]
            if unknown:
                raise ValueError(f"unknown soil types {unknown}; known: {sorted(SOIL_INDEX)}")
        if abs(sum(self.soil_mix) - 1.0) > 1e-6:
            raise ValueError("soil_mix must sum to 1")

    @property
    def dt_h(self) -> float:
        return self.dt_s / 3600.0

    @property
    def horizon_steps(self) -> int:
        return max(1, round(self.episode_days * 86400.0 / self.dt_s))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def config_hash(self) -> str:
        """Stable hash recorded with every trained policy (which twin it learned in)."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @classmethod
    def from_overrides(cls, **overrides: Any) -> TwinConfig:
        """Build from flat keyword overrides; nested sections accept dicts or instances."""
        sections = {"crop": CropConfig, "hydraulics": HydraulicsConfig, "climate": ClimateConfig,
                    "weather": WeatherConfig, "faults": FaultConfig, "reward": RewardConfig,
                    "estimator": EstimatorConfig, "lighting": LightingConfig, "economics": EconomicsConfig}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise TypeError(f"unknown twin config keys: {sorted(unknown)}")
        kwargs = dict(overrides)
        for name, section in sections.items():
            if isinstance(kwargs.get(name), dict):
                kwargs[name] = section(**kwargs[name])
        for key in ("soil_mix", "fixed_soils"):
            if isinstance(kwargs.get(key), list):
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)
