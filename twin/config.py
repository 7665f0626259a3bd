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
import math
from dataclasses import dataclass, field
from typing import Any, Final

from twin.crop import CropGrowthConfig


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
    aeration_vol_pct: float = 5.0
    """Aer: the anaerobiosis point lies this many vol % below saturation; above it the roots lack
    air (AquaCrop's tomato, Raes et al., AquaCrop crop parameters: 5)."""
    aeration_lag_days: float = 3.0
    """LagAer: days of waterlogging until the aeration stress is full (AquaCrop: 3)."""

    def __post_init__(self) -> None:
        if not (0.0 < self.aeration_vol_pct < 100.0):
            raise ValueError("aeration_vol_pct is vol % below saturation in (0, 100), "
                             f"got {self.aeration_vol_pct}")
        if self.aeration_lag_days < 0.0:
            raise ValueError(f"aeration_lag_days must be >= 0, got {self.aeration_lag_days}")


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
class LampType:
    """A supplemental lamp: photons per joule and the share of its power the canopy gets as radiation."""

    name: str
    efficacy_umol_j: float
    """PAR photons per joule of electricity [umol J-1]."""
    radiant_share: float
    """Share of the electrical power that reaches the canopy as radiation (PAR and NIR) [-] (it drives
    transpiration as sunlight does)."""
    air_heat_share: float
    """Share of the electrical power that ends as heat in the house air [-]: the rest leaves as
    long-wave radiation from the lamps and the lit canopy through the cover and the screen."""


LAMP_TYPES: dict[str, LampType] = {
    # GreenLight's lamps (Katzin et al. 2020, 2021; greenlight 2.0.5 ``etaLampPar`` x ``zetaLampPar``):
    # LED 0.55 of its power as PAR at 5.4 umol/J of PAR = 2.97 umol/J, plus 0.02 as NIR; HPS 1.8
    # umol/J, a third of its power as PAR and about a fifth as NIR. The air-heat share of the LED is
    # fitted to GreenLight's boiler heat saved per lamp kWh on its Bleiswijk run (0.39 kWh/kWh,
    # docs/twin-fidelity.md); the HPS share is the LED's, not checked against a reference.
    "led": LampType("led", efficacy_umol_j=2.97, radiant_share=0.57, air_heat_share=0.7),
    "hps": LampType("hps", efficacy_umol_j=1.8, radiant_share=0.55, air_heat_share=0.7),
}


@dataclass(frozen=True)
class ClimateConfig:
    """The house and its climate computer (GreenLight's Dutch Venlo glasshouse as the reference).

    The climate is run as growers run it: heating to day and night setpoints, vents above a
    ventilation setpoint and a humidity limit, CO2 dosed to a setpoint in light. None of it is a
    policy action; the heat and CO2 it uses are charged at the scenario's prices (``EconomicsConfig``).
    """

    cover_transmissivity: tuple[float, float] = (0.55, 0.75)
    air_tau_s: float = 1200.0
    """Time constant of the air temperature towards its equilibrium [s]."""
    heating_day_c: float = 19.5
    """Heating setpoint while the sun is up or the lamps are on [degC] (GreenLight, Katzin 2021)."""
    heating_night_c: float = 18.5
    """Heating setpoint in the dark with the lamps off [degC]."""
    vent_offset_c: float = 5.0
    """The vents open for heat above the heating setpoint plus this [degC]."""
    rh_max_pct: float = 87.0
    """The vents open (and heating makes up) to keep the air's humidity under this [%]."""
    co2_setpoint_ppm: float = 1000.0
    """CO2 is dosed to this while the crop is in light [ppm]."""
    co2_capacity_mg_m2_s: float = 5.14
    """Dosing capacity [mg CO2 m-2 s-1] (GreenLight's 185 kg/ha/h)."""
    co2_dosing_max_vent_m3_m2_s: float = 0.01
    """No dosing while the air exchange exceeds this (vents well open: the CO2 would go outside)."""
    cover_u_day_w_m2k: float = 6.0
    """Heat transfer through the cover per m2 floor and K with the energy screen open [W m-2 K-1]."""
    cover_u_screened_w_m2k: float = 3.6
    """The same with the energy screen drawn [W m-2 K-1]."""
    screen_below_day_c: float = 5.0
    """The screen is drawn while the sun is up and the outside air is below this [degC] (GreenLight)."""
    screen_below_night_c: float = 10.0
    """The screen is drawn in the dark below this outside temperature [degC] (GreenLight)."""
    solar_heat_share: float = 0.7
    """Share of the transmitted sun that heats the house (the rest is reflected or leaves as long-wave)."""
    leakage_m3_m2_s: float = 4e-4
    """Air exchange with closed vents [m3 m-2 s-1] (about 0.35 per hour at the house height; GreenLight's
    leakage follows the wind, 1e-4 m3 m-2 s-1 per m/s)."""
    vent_max_m3_m2_s: float = 0.03
    """Air exchange with the vents fully open [m3 m-2 s-1]."""
    condensation_kg_m2_s_kpa: float = 2e-6
    """Vapour condensed on the cover per kPa of vapour above saturation at the cover [kg m-2 s-1 kPa-1]."""
    house_height_m: float = 4.2
    """Mean air height: air volume per m2 floor [m]."""
    lamp_on_frac: float = 0.05
    """Lamps at or above this fraction make a light period for the climate computer (day setpoint,
    CO2 dosing)."""
    lamp_type: str = "led"
    """A key of :data:`LAMP_TYPES`."""
    lamp_power_w_m2: float = 100.0
    """Electrical power of the supplemental lights at 100 % per m2 of floor."""
    inside_wind_m_s: float = 0.3
    elevation_m: float = 100.0

    def __post_init__(self) -> None:
        if not (-10.0 <= self.heating_night_c <= self.heating_day_c <= 35.0):
            raise ValueError("heating setpoints need -10 <= heating_night_c <= heating_day_c <= 35 degC, got "
                             f"{self.heating_night_c} and {self.heating_day_c}")
        if self.lamp_type not in LAMP_TYPES:
            raise ValueError(f"unknown lamp_type {self.lamp_type!r}; known: {sorted(LAMP_TYPES)}")
        if not (0.0 < self.leakage_m3_m2_s <= self.vent_max_m3_m2_s):
            raise ValueError("ventilation needs 0 < leakage_m3_m2_s <= vent_max_m3_m2_s")
        if not (0.0 < self.rh_max_pct <= 100.0):
            raise ValueError(f"rh_max_pct must lie in (0, 100], got {self.rh_max_pct}")
        positive = ("air_tau_s", "cover_u_day_w_m2k", "cover_u_screened_w_m2k", "house_height_m")
        for name in positive:
            if not getattr(self, name) > 0.0:
                raise ValueError(f"ClimateConfig.{name} must be positive, got {getattr(self, name)!r}")
        for name in ("vent_offset_c", "co2_capacity_mg_m2_s", "condensation_kg_m2_s_kpa", "lamp_power_w_m2",
                     "co2_dosing_max_vent_m3_m2_s"):
            if getattr(self, name) < 0.0:
                raise ValueError(f"ClimateConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        if not (0.0 < self.lamp_on_frac <= 1.0):
            raise ValueError(f"lamp_on_frac must lie in (0, 1], got {self.lamp_on_frac}")
        if not (0.0 <= self.solar_heat_share <= 1.0):
            raise ValueError("solar_heat_share is a share in [0, 1]")
        if not (150.0 <= self.co2_setpoint_ppm <= 2000.0):
            raise ValueError(f"co2_setpoint_ppm must lie in [150, 2000], got {self.co2_setpoint_ppm}")

    @property
    def lamp(self) -> LampType:
        return LAMP_TYPES[self.lamp_type]

    @property
    def lamp_par_umol_m2_s(self) -> float:
        """PAR at the canopy from the lamps at 100 % [umol m-2 s-1]: power times efficacy."""
        return self.lamp_power_w_m2 * self.lamp.efficacy_umol_j

    @property
    def lamp_radiant_w_m2(self) -> float:
        """Lamp radiation reaching the canopy at 100 % [W m-2] (drives transpiration like sunlight)."""
        return self.lamp_power_w_m2 * self.lamp.radiant_share


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
                             f"{hours_between(self.dark_start_h, self.dark_end_h):g} h; "
                             "tomato needs at least "
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
    """Network, tax and supplier margin on top of the spot price: the twin charges each scenario its
    own draw (``PriceConfig.adder_eur_mwh`` is the library's reference value for reports)."""
    heat_price_eur_kwh: tuple[float, float] = (0.03, 0.08)
    """Heat from the boiler [EUR per kWh of heat]: natural gas at 0.25-0.65 EUR/m3 over 8.8 kWh/m3 at
    95 % boiler efficiency (0.030-0.078), the range Dutch growers paid 2019-2024 outside the 2022 spike."""
    co2_price_eur_kg: tuple[float, float] = (0.06, 0.20)
    """Pure CO2 delivered [EUR/kg] (pipeline OCAP at the low end, liquid CO2 at the high end)."""
    price_mean_eur_mwh: tuple[float, float] = (60.0, 130.0)
    """The price year's mean spot price: the scenario's spot series is scaled by it over the
    library's mean (a time-of-use tariff is a contract and is not scaled)."""
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
                     "price_mean_eur_mwh", "heat_price_eur_kwh", "co2_price_eur_kg"):
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
    """Library of synthetic weather years shared by all instances.

    The defaults describe a Dutch-like glasshouse site (52 N, maritime, cloudy): about 3,600 MJ/m2
    of global radiation a year, as the KNMI De Bilt normals, and 10.5 degC mean air. For another site
    set the latitude, the temperature pair and the cloud fields together.
    """

    n_years: int = 8
    latitude_deg: tuple[float, float] = (52.0, 52.0)
    """Range the site latitude of each weather year is drawn from [deg N]."""
    mean_temp_c: float | None = 10.5
    """Annual mean outside temperature [degC]; None: 28 - 0.4 * latitude (a continental rule)."""
    temp_amplitude_c: float | None = 7.5
    """Half the difference between the warmest and coldest month [degC]; None: 0.25 * latitude - 2."""
    cloudy_fraction: float = 0.77
    """Annual share of overcast days (a two-state Markov chain of clear and overcast days)."""
    cloudy_fraction_winter: float = 0.08
    """Seasonal swing of that share: it is this much higher in mid-January, this much lower in mid-July."""
    cloud_persistence: float = 0.15
    """Lag-1 day autocorrelation of the overcast state (0: days independent; 1: never changes)."""
    clear_cover: tuple[float, float] = (0.0, 0.5)
    """Cloud cover fraction range of a clear day."""
    cloudy_cover: tuple[float, float] = (0.85, 1.0)
    """Cloud cover fraction range of an overcast day (Kasten-Czeplak: cover 1 passes 25 % of clear sky)."""
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
        if self.n_years < 1:
            raise ValueError("n_years must be >= 1")
        lo, hi = self.latitude_deg
        if not (-66.0 <= lo <= hi <= 66.0):
            raise ValueError("latitude_deg must be an ordered range within the polar circles, "
                             f"got {self.latitude_deg}")
        f, w = self.cloudy_fraction, self.cloudy_fraction_winter
        if not (0.0 <= f - abs(w) and f + abs(w) <= 1.0):
            raise ValueError("cloudy_fraction +/- cloudy_fraction_winter must stay within [0, 1]")
        if not (0.0 <= self.cloud_persistence < 1.0):
            raise ValueError("cloud_persistence must lie in [0, 1)")
        for name in ("clear_cover", "cloudy_cover"):
            a, b = getattr(self, name)
            if not (0.0 <= a <= b <= 1.0):
                raise ValueError(f"{name} must be an ordered range within [0, 1]")


@dataclass(frozen=True)
class PriceConfig:
    """Electricity price seen by the grower: hourly day-ahead spot (a seeded generator row-aligned
    with the weather years) or a two-period time-of-use tariff, plus a fixed adder.

    Spot generator (parameters as in the design notes, calibrated to DE-LU/NL day-ahead 2023):
    ``level_d = mean * season * exp(z_d - sd^2/2) * wind * weekend``, ``z_d`` an AR(1) over days;
    ``p = level_d * shape_h - solar discount + AR(1) hourly noise + scarcity spikes``; negative
    events on sunny middays and windy nights; clipped to [floor, cap]; then shifted so each year's
    mean is ``mean_eur_mwh``.
    """

    source: str = "spot"
    """"spot" (hourly day-ahead generator) or "tou" (time-of-use tariff)."""
    mean_eur_mwh: float = 95.0
    """Annual mean spot price of every generated year [EUR/MWh] (DE-LU 2023 base: 95.2)."""
    adder_eur_mwh: float = 30.0
    """Network, tax and supplier margin on top of spot or tariff [EUR/MWh]; the grower pays price + adder."""
    seasonal_amplitude: float = 0.15
    """Relative rise of the daily level in mid-January over the annual mean (and fall in mid-July)."""
    level_persistence: float = 0.85
    """Lag-1 day autocorrelation of the log daily level (gas and wind regimes last days)."""
    level_std: float = 0.25
    """Stationary std of the log daily level."""
    wind_sensitivity: float = 0.08
    """Log daily level change per std of the day's log mean wind, negative: windy days are cheaper."""
    weekend_factor: float = 0.88
    """Daily level on Saturdays and Sundays relative to weekdays."""
    morning_peak: float = 0.30
    """Height of the 08:00 peak of the hourly shape (Gaussian, 1.5 h wide), relative to the level."""
    evening_peak: float = 0.50
    """Height of the 19:00 peak (2 h wide), relative to the level."""
    night_dip: float = -0.15
    """Height of the 03:00 trough (2.5 h wide), relative to the level."""
    solar_discount_eur_mwh: float = 55.0
    """Price drop per kW/m2 of the site's global radiation in winter [EUR/MWh per kW/m2] (solar in-feed)."""
    solar_discount_summer: float = 1.5
    """Multiplier of the solar discount in mid-July (it grows smoothly from 1 in mid-January)."""
    hourly_persistence: float = 0.75
    """Lag-1 hour autocorrelation of the hourly noise."""
    hourly_std_eur_mwh: float = 9.0
    """Stationary std of the hourly noise [EUR/MWh]."""
    spike_prob: float = 0.004
    """Mean hourly probability of a scarcity spike (weighted towards the evening peak)."""
    spike_median_eur_mwh: float = 150.0
    """Median spike height [EUR/MWh] (log-normal, log std 0.6)."""
    negative_prob_sunny: float = 0.35
    """Probability that a fully sunny midday hour goes negative on a weekday (doubled at weekends);
    one draw per day, so the sunniest hours of a day go negative together."""
    negative_prob_windy_night: float = 0.03
    """Probability that a night hour (00-06) of a windy day (top quarter of the year's mean wind) goes
    negative."""
    negative_median_eur_mwh: float = 45.0
    """Median depth below zero of a negative hour [EUR/MWh] (log-normal, log std 0.8)."""
    floor_eur_mwh: float = -500.0
    """Harmonised minimum clearing price of the single day-ahead coupling [EUR/MWh]."""
    cap_eur_mwh: float = 4000.0
    """Harmonised maximum clearing price [EUR/MWh]."""
    tou_peak_eur_mwh: float = 110.0
    """Time-of-use energy price in the peak period [EUR/MWh]; with the default adder 0.14 EUR/kWh all-in."""
    tou_offpeak_eur_mwh: float = 50.0
    """Time-of-use energy price off peak [EUR/MWh]; with the default adder 0.08 EUR/kWh all-in."""
    tou_peak_hours: tuple[int, int] = (7, 23)
    """Peak period [start, end) in local clock hours, Monday to Friday (Dutch "normaal/dal")."""

    def __post_init__(self) -> None:
        if self.source not in ("spot", "tou"):
            raise ValueError(f"price source must be 'spot' or 'tou', got {self.source!r}")
        if not (self.floor_eur_mwh < self.mean_eur_mwh < self.cap_eur_mwh):
            raise ValueError("prices need floor_eur_mwh < mean_eur_mwh < cap_eur_mwh")
        if self.adder_eur_mwh < 0:
            raise ValueError("adder_eur_mwh must be >= 0")
        for name in ("level_persistence", "hourly_persistence"):
            if not (0.0 <= getattr(self, name) < 1.0):
                raise ValueError(f"{name} must lie in [0, 1)")
        for name in ("spike_prob", "negative_prob_sunny", "negative_prob_windy_night"):
            if not (0.0 <= getattr(self, name) <= 0.5):
                raise ValueError(f"{name} must lie in [0, 0.5] (it is doubled at weekends)")
        if min(self.level_std, self.hourly_std_eur_mwh, self.weekend_factor, self.solar_discount_summer) < 0:
            raise ValueError("stds, the weekend factor and the summer solar multiplier must be >= 0")
        start, end = self.tou_peak_hours
        if not (0 <= start < end <= 24):
            raise ValueError(f"tou_peak_hours must satisfy 0 <= start < end <= 24, got {self.tou_peak_hours}")


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
    """The moisture target band; the reward's prices are in :class:`EconomicsConfig`."""

    band_tolerance_vwc: float = 0.05
    """Depth outside the band [m3/m3] that one unit of the dry or wet penalty prices."""
    band_low_depletion: float = 0.4
    """Target band lower edge: field capacity minus this share of total available water."""

    def __post_init__(self) -> None:
        if self.band_tolerance_vwc <= 0:
            raise ValueError("band_tolerance_vwc must be positive")


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
class StartState:
    """A logged moment an episode can start from instead of a random one (a greenhouse's own
    states, so training sees the moisture, season and time of day it really runs in)."""

    hour_of_year: float
    """Site-local hours since 1 January 00:00 (taken modulo the twin's 8760-hour year)."""
    crop_day: float
    """Crop age [days since planting]."""
    theta: tuple[float, ...]
    """Volumetric moisture per zone [m3/m3] (the logged estimate)."""
    zone_soils: tuple[tuple[float, float, float, float], ...] | None = None
    """The greenhouse's calibrated soils, as ``TwinConfig.zone_soils``; None: the config's soils."""
    root_mm: float = 0.0
    """The greenhouse's calibrated root depth [mm]; 0: drawn from ``crop.root_depth_m``."""

    def check(self, zones: int) -> None:
        """Refuse a state that does not fit a twin of ``zones`` zones."""
        if len(self.theta) != zones:
            raise ValueError(f"start state needs one moisture per zone ({zones}), got {len(self.theta)}")
        if not all(0.0 <= t <= 1.0 for t in self.theta):
            raise ValueError(f"start state moisture {self.theta} is not a volumetric fraction in [0, 1]")
        if not (math.isfinite(self.hour_of_year) and self.hour_of_year >= 0.0):
            raise ValueError(f"start state hour_of_year must be finite and >= 0, got {self.hour_of_year}")
        if not (math.isfinite(self.crop_day) and self.crop_day >= 0.0):
            raise ValueError(f"start state crop_day must be finite and >= 0, got {self.crop_day}")
        if not (math.isfinite(self.root_mm) and self.root_mm >= 0.0):
            raise ValueError(f"start state root_mm must be finite and >= 0, got {self.root_mm}")
        if self.zone_soils is not None:
            _check_zone_soils(self.zone_soils, zones)

    @classmethod
    def of(cls, value: StartState | dict[str, Any]) -> StartState:
        """From itself or its JSON form (``dataclasses.asdict``: lists for tuples)."""
        if isinstance(value, StartState):
            return value
        soils = value.get("zone_soils")
        return cls(hour_of_year=float(value["hour_of_year"]), crop_day=float(value["crop_day"]),
                   theta=tuple(float(t) for t in value["theta"]),
                   zone_soils=None if soils is None else tuple(tuple(float(v) for v in s) for s in soils),  # type: ignore[misc]
                   root_mm=float(value.get("root_mm", 0.0)))


def _check_zone_soils(zone_soils: tuple[tuple[float, float, float, float], ...], zones: int) -> None:
    if len(zone_soils) != zones:
        raise ValueError("zone_soils needs one soil per zone")
    for fc, wp, sat, ret in zone_soils:
        if not (0.0 <= wp < fc <= sat <= 1.0 and 0.0 < ret < 1.0):
            raise ValueError(f"zone_soils entry {(fc, wp, sat, ret)} "
                             "is not a soil (0 <= wp < fc <= sat <= 1, "
                             "0 < retention < 1)")


DEFAULT_ZONES: Final = 6
"""Irrigation zones of a standard greenhouse [count]: the twin's default, and the safety layer's,
the service's and the policy's wherever a zone count is not given."""


@dataclass(frozen=True)
class TwinConfig:
    """Everything that defines a twin instance family."""

    zones: int = DEFAULT_ZONES
    probes_per_zone: int = 2
    dt_s: float = 600.0
    """Control step [s]: 60 for real time, 600 (10 min) for training and evaluation."""
    episode_days: float = 30.0
    sensor_noise: float = 0.02
    """Relative standard deviation of sensor readings (0.1 = 10 % noise)."""
    crop: CropConfig = field(default_factory=CropConfig)
    crop_growth: CropGrowthConfig = field(default_factory=CropGrowthConfig)
    """The tomato growth and yield model (twin.crop)."""
    hydraulics: HydraulicsConfig = field(default_factory=HydraulicsConfig)
    climate: ClimateConfig = field(default_factory=ClimateConfig)
    weather: WeatherConfig = field(default_factory=WeatherConfig)
    prices: PriceConfig = field(default_factory=PriceConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    lighting: LightingConfig = field(default_factory=LightingConfig)
    economics: EconomicsConfig = field(default_factory=EconomicsConfig)
    soil_mix: tuple[float, float, float] = (0.3, 0.4, 0.3)
    """Probability of sand, loam and clay for each zone."""
    fixed_soils: tuple[str, ...] | None = None
    """If set, one soil name per zone instead of random draws (registered greenhouses)."""
    zone_soils: tuple[tuple[float, float, float, float], ...] | None = None
    """If set, one calibrated soil per zone, (field capacity, wilting point, saturation, hourly retention),
    instead of the soil classes' table values: the twin of one greenhouse as its logs fitted it."""
    start_states: tuple[StartState, ...] | None = None
    """If set, every episode starts from one of these logged states (drawn per instance and episode
    from the seeded counter streams) instead of a random moisture, start day and crop age: the
    nightly retraining's episodes begin where the greenhouses really were."""
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
        if self.zone_soils is not None:
            _check_zone_soils(self.zone_soils, self.zones)
        if self.start_states is not None:
            if not self.start_states:
                raise ValueError("start_states needs at least one state (None: random starts)")
            for state in self.start_states:
                state.check(self.zones)
        if abs(sum(self.soil_mix) - 1.0) > 1e-6:
            raise ValueError("soil_mix must sum to 1")
        soils = [(t.field_capacity, t.saturation) for t in SOIL_TYPES]
        soils += [(fc, sat) for fc, _, sat, _ in self.zone_soils or ()]
        soils += [(fc, sat) for st in self.start_states or () for fc, _, sat, _ in st.zone_soils or ()]
        margin = self.crop.aeration_vol_pct * 0.01
        for fc, sat in soils:
            if sat - margin <= fc:
                raise ValueError(f"a soil with field capacity {fc:g} and saturation {sat:g} "
                                 "has its anaerobiosis "
                                 f"point ({sat - margin:g}, {self.crop.aeration_vol_pct:g} vol % "
                                 "under saturation) "
                                 "at or below field capacity: its roots would lack air at rest")

    @property
    def dt_h(self) -> float:
        return self.dt_s / 3600.0

    @property
    def horizon_steps(self) -> int:
        return max(1, round(self.episode_days * 86400.0 / self.dt_s))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for key in ("zone_soils", "start_states"):
            if d[key] is None:  # absent, as before the field existed: the hashes of trained policies hold
                del d[key]
        return d

    def config_hash(self) -> str:
        """Stable hash recorded with every trained policy (which twin it learned in)."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @classmethod
    def from_overrides(cls, **overrides: Any) -> TwinConfig:
        """Build from flat keyword overrides; nested sections accept dicts or instances."""
        sections = {"crop": CropConfig, "hydraulics": HydraulicsConfig, "climate": ClimateConfig,
                    "weather": WeatherConfig, "prices": PriceConfig, "faults": FaultConfig,
                    "reward": RewardConfig, "estimator": EstimatorConfig, "lighting": LightingConfig,
                    "economics": EconomicsConfig, "crop_growth": CropGrowthConfig}
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
        if isinstance(kwargs.get("zone_soils"), list):  # read back from JSON
            kwargs["zone_soils"] = tuple(tuple(float(v) for v in s) for s in kwargs["zone_soils"])
        if kwargs.get("start_states") is not None:
            kwargs["start_states"] = tuple(StartState.of(s) for s in kwargs["start_states"])
        return cls(**kwargs)
