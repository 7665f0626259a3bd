"""Today's money per greenhouse and the decision's outlook, from what the service records.

The service measures no harvest, so fruit grown today is an estimate: the twin's tomato model
(:mod:`twin.crop`) run over today's five-minute trend cells (PAR, CO2, air temperature), from the
crop state of a crop of the greenhouse's age at local midnight, without water stress. Costs come from
the controller's own totals: lamp hours x lamp power x the price of the hours the lamps burned,
water today x the configured water price (the pump's energy, a few percent of the lamps', is left
out, as are heating and labour).

The price of a cell is the all-in price its decisions recorded for their hour (the day-ahead feed's
with ``GREENTWIN_PRICE_URL`` configured, else the tariff's), kept in the trend cells; only a cell
that recorded none (rolled up before prices were kept) falls back to the configured time-of-use
tariff (:func:`hourly_price`), and ``price_source`` says which the figures rest on (:func:`priced`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

import numpy as np

from app.api import trend_rollup as roll
from app.api.schemas import EconomicsToday, Outlook, PriceSource
from control import GreenhouseController
from twin.crop import CropGrowthConfig, initial_crop, step_crop
from twin.prices import tou_at
from twin.spec import observation_spec

CROP = CropGrowthConfig()
ESTIMATED = ["yield_kg", "revenue_eur", "profit_eur"]
"""The fields of :class:`EconomicsToday` that are model estimates rather than counted."""
_PAR = roll.SCALARS.index("par_umol_m2_s")
_CO2 = roll.SCALARS.index("co2_ppm")
_TEMP = roll.SCALARS.index("air_temp_c")
_LIGHT = roll.SCALARS.index("light_pct")
_DEFAULTS = {_PAR: 0.0, _CO2: 420.0, _TEMP: 20.0, _LIGHT: 0.0}
"""A channel with no reading yet today: dark, ambient CO2, 20 degC, lamps off."""


def hourly_price(ctl: GreenhouseController, ts: Sequence[datetime]) -> np.ndarray:
    """All-in electricity price [EUR/MWh] of the clock hour (site time) holding each instant."""
    cfg = ctl.obs_builder.tariff
    return tou_at(cfg, ts, ctl.site_tz) + cfg.adder_eur_mwh


def source_of(recorded: np.ndarray) -> PriceSource:
    """'recorded' when every price was recorded (also for none at all), 'tariff' when none was, else
    'mixed'."""
    if recorded.all():
        return "recorded"
    return "mixed" if recorded.any() else "tariff"


def priced(ctl: GreenhouseController, ts: Sequence[datetime],
           recorded: np.ndarray) -> tuple[np.ndarray, PriceSource]:
    """The recorded price [EUR/MWh] at each instant, the tariff's where none was recorded (NaN), and
    which of the two the prices are."""
    recorded = np.asarray(recorded, dtype=np.float64)
    kept = np.isfinite(recorded)
    if kept.all():
        return recorded, source_of(kept)
    return np.where(kept, recorded, hourly_price(ctl, ts)), source_of(kept)


def recorded_now(ctl: GreenhouseController, decided: tuple[datetime, Sequence[float]] | None,
                 now: datetime) -> float | None:
    """The price of the current clock hour the last decision recorded; None: no decision in this hour."""
    if decided is None:
        return None
    ts, obs = decided
    sl = observation_spec(ctl.z).slices["price"]
    hour = [t.astimezone(ctl.site_tz).replace(minute=0, second=0, microsecond=0) for t in (ts, now)]
    if len(obs) <= sl.start or hour[0] != hour[1]:
        return None
    return float(obs[sl.start])


def floor_area_m2(ctl: GreenhouseController) -> float:
    return float(ctl.z * ctl.obs_builder.zone_area_m2)


def day_bounds(ctl: GreenhouseController) -> tuple[date, datetime, datetime] | None:
    """(the controller's day, its local midnight, the next) or None before its first telemetry."""
    if ctl.day is None:
        return None
    day = date.fromisoformat(ctl.day)
    start = datetime.combine(day, time(0), tzinfo=ctl.site_tz)
    return day, start, datetime.combine(day + timedelta(days=1), time(0), tzinfo=ctl.site_tz)


@dataclass(frozen=True)
class DayClimate:
    """Today's trend cells of one greenhouse as the crop model and the cost weighting need them."""

    starts: list[datetime]
    channels: np.ndarray
    """(cells, scalars + 1) cell means of the trend scalars, gaps held from the cell before, then the
    recorded price (NaN: none recorded, never held: the hour before had another price)."""


def day_climate(cells: np.ndarray, sums: np.ndarray, counts: np.ndarray, zones: int) -> DayClimate:
    """Cell means of the scalar channels, a missing reading held from the cell before (defaults at first)."""
    if not len(cells) or sums.shape[1] != roll.width(zones):
        return DayClimate([], np.zeros((0, len(roll.SCALARS) + 1)))
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums[:, zones:] / counts[:, zones:]
    for j in range(len(roll.SCALARS)):
        last = _DEFAULTS.get(j, math.nan)
        for i in range(means.shape[0]):
            if np.isfinite(means[i, j]):
                last = means[i, j]
            else:
                means[i, j] = last
    return DayClimate([roll.cell_start(int(c)) for c in cells], means)


def crop_age_days(ctl: GreenhouseController, at: datetime) -> float:
    """The greenhouse's crop age at ``at``: its age when first seen plus the days since."""
    builder = ctl.obs_builder
    first = builder.first_ts or at
    return float(builder.crop_day0 + (at - first).total_seconds() / 86400.0)


def fruit_kg_m2(climates: Sequence[DayClimate], ages: Sequence[float]) -> list[float | None]:
    """Fresh fruit grown [kg/m2] over each greenhouse's cells: one model run for all of them at once.

    Greenhouses are lined up by cell position (each its own times); one with fewer cells stops
    counting after its last. None: no cells today."""
    n = max((len(c.starts) for c in climates), default=0)
    if n == 0:
        return [None] * len(climates)
    g = len(climates)
    par, co2, temp = np.zeros((n, g)), np.full((n, g), 420.0), np.full((n, g), 20.0)
    live = np.zeros((n, g), dtype=bool)
    for k, c in enumerate(climates):
        m = len(c.starts)
        par[:m, k], co2[:m, k], temp[:m, k] = c.channels[:, _PAR], c.channels[:, _CO2], c.channels[:, _TEMP]
        live[:m, k] = True
    state = initial_crop(np, CROP, np.asarray(ages, dtype=np.float64), temp[0])
    total = np.zeros(g)
    ones = np.ones(g)
    for i in range(n):
        state, fruit = step_crop(np, CROP, state, np.maximum(par[i], 0.0), co2[i], temp[i], ones,
                                 float(roll.CELL_S))
        total += np.where(live[i], fruit, 0.0)
    return [float(total[k]) if len(c.starts) else None for k, c in enumerate(climates)]


@dataclass(frozen=True)
class DayEstimate:
    """What :class:`app.api.dashboard.Dashboard` caches per greenhouse (the costly part)."""

    day: date
    yield_kg: float | None
    lamp_price_eur_mwh: float | None
    """Mean all-in price of today's lamp hours, weighted by lamp power; None: no lamp hours in the cells."""
    price_now_eur_mwh: float = math.nan
    """The price of the hour the estimate was made in (the lamps' price before they have burned)."""
    lamp_price_source: PriceSource = "tariff"
    now_price_source: PriceSource = "tariff"


def estimate(ctl: GreenhouseController, climate: DayClimate, fruit_kg_per_m2: float | None,
             day: date, now: datetime | None = None, price_now: float | None = None) -> DayEstimate:
    """The costly part of today's economics; ``price_now``: the current hour's recorded price, if any."""
    n = len(climate.starts)
    light = np.clip(climate.channels[:, _LIGHT], 0.0, None) if n else np.zeros(0)
    price: float | None = None
    source: PriceSource = "tariff"
    lit = light > 0
    if lit.any():
        prices, source = priced(ctl, [t for t, on in zip(climate.starts, lit, strict=True) if on],
                                climate.channels[lit, roll.PRICE])
        price = float((light[lit] * prices).sum() / light[lit].sum())
    kg = None if fruit_kg_per_m2 is None else fruit_kg_per_m2 * floor_area_m2(ctl)
    if price_now is None or not math.isfinite(price_now):
        return DayEstimate(day, kg, price, float(hourly_price(ctl, [now or datetime.now(UTC)])[0]), source)
    return DayEstimate(day, kg, price, price_now, source, "recorded")


def today(ctl: GreenhouseController, cached: DayEstimate | None, water_price_eur_m3: float,
          now: datetime) -> EconomicsToday | None:
    """Today's economics: counted parts live from the controller, the estimate from the cache.

    Built for every live event of every open page, so cheap: the prices come with the cached estimate
    (a price a minute old at most), and the model is built without validation (the values are ours)."""
    if ctl.day is None:
        return None
    day = date.fromisoformat(ctl.day)
    if cached is not None and cached.day != day:
        cached = None
    lamp_kwh = ctl.lights_hours_today * ctl.climate.lamp_power_w_m2 * floor_area_m2(ctl) / 1000.0
    price: float | None = None
    source: PriceSource = "tariff"
    if cached is not None:
        price, source = ((cached.lamp_price_eur_mwh, cached.lamp_price_source)
                         if cached.lamp_price_eur_mwh is not None
                         else (cached.price_now_eur_mwh, cached.now_price_source))
    if price is None or not math.isfinite(price):
        price, source = float(hourly_price(ctl, [now])[0]), "tariff"
    energy = lamp_kwh * price / 1000.0
    water_l = float(ctl.water_today_l.sum())
    water = water_l / 1000.0 * water_price_eur_m3
    fruit_price = float(ctl.obs_builder.fruit_price_eur_kg)
    kg = cached.yield_kg if cached is not None else None
    revenue = None if kg is None else kg * fruit_price
    return EconomicsToday.model_construct(
        day=day, dli_mol_m2=float(ctl.crop_twin.dli_today), lights_hours=float(ctl.lights_hours_today),
        lamp_kwh=lamp_kwh, lamp_price_eur_mwh=price, energy_cost_eur=energy, price_source=source,
        water_l=water_l, water_price_eur_m3=water_price_eur_m3, water_cost_eur=water,
        fruit_price_eur_kg=fruit_price, yield_kg=kg, revenue_eur=revenue,
        profit_eur=None if revenue is None else revenue - energy - water, estimated=list(ESTIMATED))


def _floats(a: Sequence[float]) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in a]


def outlook(ctl: GreenhouseController, decided: tuple[datetime, Sequence[float]] | None) -> Outlook | None:
    """The last decision's outlook on one hourly axis: the clock hour holding ``decided`` first.

    Price slot k is clock hour +k; the weather forecast's slot k is k + 1 hours ahead, inside clock
    hour +k + 1, so the current hour has no forecast (null) and the +24 h one falls off the axis."""
    if decided is None:
        return None
    ts, obs = decided
    spec = observation_spec(ctl.z)
    sl = spec.slices
    if len(obs) != spec.dim:
        return None
    values = [float(v) for v in obs]
    # Slot k is clock hour +k on the site's clock, as the observation builder counts them (a half-hour
    # zone's hours start at :30 UTC); whole hours on from there in UTC.
    first = ts.astimezone(ctl.site_tz).replace(minute=0, second=0, microsecond=0).astimezone(UTC)
    slots = sl["price"].stop - sl["price"].start
    temp, solar = values[sl["forecast_temp"]], values[sl["forecast_solar"]]
    # Built for every live event of the page: without validation (the values are ours, typed above).
    return Outlook.model_construct(
        decided_at=ts, hours=[first + timedelta(hours=k) for k in range(slots)],
        temp_c=[None, *_floats(temp[:slots - 1])], solar_w_m2=[None, *_floats(solar[:slots - 1])],
        price_eur_mwh=_floats(values[sl["price"]]),
        published=[v >= 0.5 for v in values[sl["price_published"]]])
