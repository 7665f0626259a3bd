"""The economic reward: five named terms in EUR per m2 of floor, and their sum over a fixed scale.

Growers decide with money, so every term is a price times a physical quantity of the step
(CROP_ECONOMICS section 5): growth = fruit price x fresh fruit allocated; water = irrigation at
the water price plus drainage at the nutrient-loss price; energy = the all-in electricity price x
lamp and pump kWh per m2; climate = the boiler's heat at the heat price plus the CO2 dosed at the
CO2 price (neither is an action, but lamps change both: their heat saves boiler heat, their light
lengthens dosing); moisture = a risk price charged only for leaving the target band (dry and wet
side priced apart, no bonus for being in it: the crop value it protects, from drought and from
waterlogged roots, is already in growth). The reward divides their sum by the fixed ``V_ref``
(a good summer step's fruit), so reward x V_ref is EUR/m2 and numbers stay comparable across
configs. The terms are returned one by one so people, dashboards and the explanations see why a
step scored what it did.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from twin.backend import Array
from twin.config import TwinConfig
from twin.types import TwinParams

TERMS = ("moisture", "growth", "water", "energy", "climate")


class Money(NamedTuple):
    """One step's money flows [EUR/m2 of floor, each [B]]; profit = revenue - the five costs."""

    revenue: Array
    energy_cost: Array
    water_cost: Array
    damage: Array
    heat_cost: Array
    co2_cost: Array


def moisture_penalty(xp: Any, cfg: TwinConfig, params: TwinParams, theta: Array) -> Array:
    """EUR/m2 (<= 0): V_ref x (c_dry x zone-mean depth below the band + c_wet x depth above it), in
    band tolerances; 0 when every zone is in its band."""
    econ, tol = cfg.economics, cfg.reward.band_tolerance_vwc
    dry = xp.mean(xp.maximum(params.band_low - theta, 0.0), axis=1)
    wet = xp.mean(xp.maximum(theta - params.band_high, 0.0), axis=1)
    scale = -cfg.economics.v_ref(cfg.dt_s) / tol
    return (scale * econ.dry_penalty) * dry + (scale * econ.wet_penalty) * wet


def termination_damage(cfg: TwinConfig, params: TwinParams) -> Array:
    """EUR/m2 a hard termination costs: the pump's replacement over the floor area plus the crop
    value lost while irrigation is down for the repair."""
    econ = cfg.economics
    area = cfg.zones * cfg.hydraulics.zone_area_m2
    lost_kg = econ.reference_growth_kg_m2_day * econ.repair_days * econ.stress_yield_loss
    return econ.pump_replacement_eur / area + params.fruit_price * lost_kg


def reward_terms(xp: Any, cfg: TwinConfig, params: TwinParams, theta: Array, fruit_kg_m2: Array,
                 irrigation_mm: Array, drainage_mm: Array, energy_kwh: Array, price_eur_mwh: Array,
                 terminated: Array, heat_kwh_m2: Array,
                 co2_kg_m2: Array) -> tuple[Array, dict[str, Array], Money]:
    """Reward [B], the five terms [EUR/m2] and the step's money flows.

    ``irrigation_mm`` and ``drainage_mm`` are per zone [B, Z] (equal zone areas: their zone mean is
    per m2 of floor); ``energy_kwh`` is the greenhouse's lamp and pump energy; ``price_eur_mwh`` the
    all-in price (spot plus adder). A terminated step also pays :func:`termination_damage`: it is
    charged in the ``water`` term (a wrecked irrigation pump, and the crop lost while irrigation is
    down), so the reward stays the terms' sum over V_ref; ``Money`` keeps it apart from water bills.
    ``heat_kwh_m2`` and ``co2_kg_m2`` are the climate computer's heat and CO2 for the step.
    """
    area = cfg.zones * cfg.hydraulics.zone_area_m2
    growth = params.fruit_price * fruit_kg_m2
    irrigation_m3 = xp.mean(irrigation_mm, axis=1) * 1e-3
    drainage_m3 = xp.mean(drainage_mm, axis=1) * 1e-3
    water_cost = params.water_price * irrigation_m3 + params.drain_price * drainage_m3
    energy_cost = price_eur_mwh * energy_kwh * (1e-3 / area)
    damage = xp.where(terminated, termination_damage(cfg, params), 0.0)
    heat_cost = params.heat_price * heat_kwh_m2
    co2_cost = params.co2_price * co2_kg_m2
    terms = {"moisture": moisture_penalty(xp, cfg, params, theta), "growth": growth,
             "water": -(water_cost + damage), "energy": -energy_cost, "climate": -(heat_cost + co2_cost)}
    total = terms["moisture"] + terms["growth"] + terms["water"] + terms["energy"] + terms["climate"]
    return (total * (1.0 / cfg.economics.v_ref(cfg.dt_s)), terms,
            Money(growth, energy_cost, water_cost, damage, heat_cost, co2_cost))
