"""The house's climate computer: heating to setpoints, vents for heat and humidity, CO2 dosing in light,
and the heat and CO2 it uses charged in money."""

from __future__ import annotations

import numpy as np
import pytest

from twin.climate import RHO_CP_AIR, step_air
from twin.config import LAMP_TYPES, ClimateConfig
from twin.env import GreenhouseTwin
from twin.et0 import saturation_vapour_kpa

F = np.float32


def _settle(cfg: ClimateConfig, outside: float, sun: float, lights: float, transpiration_mm_h: float = 0.1,
            uptake: float = 0.0, outside_rh: float = 80.0, steps: int = 60):
    """Hold the weather and lamps for ``steps`` 10-minute steps and return the last step's output."""
    n = 1
    air, co2 = np.full(n, F(outside)), np.full(n, F(420.0))
    e_out = np.full(n, F(outside_rh / 100.0 * float(saturation_vapour_kpa(np, np.float64(outside)))))
    vapour = e_out + 0.0
    out = None
    for _ in range(steps):
        out = step_air(np, cfg, 600.0, air, vapour, co2, np.full(n, F(outside)), e_out, np.full(n, F(sun)),
                       np.full(n, F(lights)), np.full(n, F(transpiration_mm_h)), np.ones(n, F),
                       np.full(n, F(uptake)))
        air, vapour, co2 = out.air_temp, out.vapour_kpa, out.co2
    assert out is not None
    return out


def test_a_cold_night_is_heated_exactly_to_its_setpoint_by_the_heat_balance() -> None:
    cfg = ClimateConfig()
    out = _settle(cfg, outside=0.0, sun=0.0, lights=0.0, transpiration_mm_h=0.0)
    assert float(out.air_temp[0]) == pytest.approx(cfg.heating_night_c, abs=0.01)
    loss = (cfg.cover_u_screened_w_m2k + RHO_CP_AIR * float(out.vent_m3_m2_s[0])) * cfg.heating_night_c
    assert float(out.heat_w_m2[0]) == pytest.approx(loss, rel=1e-4)
    assert float(out.co2_dose_mg_m2_s[0]) == 0.0  # no dosing in the dark


def test_lamp_heat_in_the_air_saves_boiler_heat_while_the_house_needs_heat() -> None:
    cfg = ClimateConfig()
    dark = _settle(cfg, outside=-10.0, sun=0.0, lights=0.0, transpiration_mm_h=0.0)
    lit = _settle(cfg, outside=-10.0, sun=0.0, lights=1.0, transpiration_mm_h=0.0)
    assert float(lit.heat_w_m2[0]) > 0.0  # cold enough that the lamps alone do not heat the house
    # The lit house holds the (higher) day setpoint; what the lamps give the air, the boiler need not.
    extra_setpoint = (cfg.cover_u_screened_w_m2k + RHO_CP_AIR * cfg.leakage_m3_m2_s) * (cfg.heating_day_c
                                                                                      - cfg.heating_night_c)
    saved = float(dark.heat_w_m2[0]) + extra_setpoint - float(lit.heat_w_m2[0])
    assert saved == pytest.approx(cfg.lamp_power_w_m2 * cfg.lamp.air_heat_share, rel=1e-3)
    # On a warm day the lamps' heat is vented, not credited.
    warm = _settle(cfg, outside=22.0, sun=300.0, lights=1.0)
    assert float(warm.heat_w_m2[0]) == 0.0


def test_co2_is_dosed_to_its_setpoint_in_light_and_limited_by_capacity_and_vents() -> None:
    cfg = ClimateConfig()
    closed = _settle(cfg, outside=5.0, sun=100.0, lights=1.0, uptake=0.5)
    assert float(closed.co2[0]) == pytest.approx(cfg.co2_setpoint_ppm, abs=1.0)
    assert 0.5 < float(closed.co2_dose_mg_m2_s[0]) <= cfg.co2_capacity_mg_m2_s
    # A hot day with the vents wide open: dosing stops and the crop draws the air below ambient.
    hot = _settle(cfg, outside=28.0, sun=600.0, lights=0.0, uptake=1.0)
    assert float(hot.vent_m3_m2_s[0]) > cfg.co2_dosing_max_vent_m3_m2_s
    assert float(hot.co2_dose_mg_m2_s[0]) == 0.0 and float(hot.co2[0]) < 420.0
    # Without light nothing is dosed whatever the CO2.
    night = _settle(cfg, outside=5.0, sun=0.0, lights=0.0, uptake=0.0)
    assert float(night.co2_dose_mg_m2_s[0]) == 0.0


def test_vents_open_for_humidity_and_condensation_holds_a_cold_night_under_its_limit() -> None:
    cfg = ClimateConfig()
    mild = _settle(cfg, outside=12.0, sun=0.0, lights=0.0, transpiration_mm_h=0.06, outside_rh=90.0)
    assert float(mild.rh_pct[0]) <= cfg.rh_max_pct + 1.0
    assert float(mild.vent_m3_m2_s[0]) > cfg.leakage_m3_m2_s  # vented for humidity, not for heat
    assert float(mild.heat_w_m2[0]) > 0.0  # and the boiler makes up the heat it costs
    leak_only = ClimateConfig(vent_max_m3_m2_s=cfg.leakage_m3_m2_s, condensation_kg_m2_s_kpa=0.0)
    damp = _settle(leak_only, outside=12.0, sun=0.0, lights=0.0, transpiration_mm_h=0.06, outside_rh=90.0)
    assert float(damp.rh_pct[0]) > cfg.rh_max_pct + 5.0


def test_lamp_types_set_the_lamps_light_per_watt() -> None:
    led, hps = ClimateConfig(lamp_type="led"), ClimateConfig(lamp_type="hps")
    assert led.lamp_par_umol_m2_s == pytest.approx(100.0 * LAMP_TYPES["led"].efficacy_umol_j)
    assert hps.lamp_par_umol_m2_s < led.lamp_par_umol_m2_s
    with pytest.raises(ValueError, match="lamp_type"):
        ClimateConfig(lamp_type="candle")
    with pytest.raises(ValueError, match="leakage"):
        ClimateConfig(leakage_m3_m2_s=0.1, vent_max_m3_m2_s=0.01)


def test_the_twin_charges_heat_and_co2_at_each_scenarios_prices() -> None:
    twin = GreenhouseTwin(16, seed=5, validate=True, economics={"heat_price_eur_kwh": (0.03, 0.06),
                                                                 "co2_price_eur_kg": (0.1, 0.2)})
    twin.reset(seed=5)
    p = twin.params
    assert np.all((p.heat_price >= 0.03) & (p.heat_price <= 0.06)) and np.ptp(p.heat_price) > 0.0
    heat = co2 = 0.0
    for k in range(144):
        action = np.zeros((16, twin.action_spec.dim), np.float32)
        action[:, -1] = 100.0 * (k % 144 > 40)
        _, _, _, _, info = twin.step(action)  # validate=True checks the climate term is minus the two bills
        np.testing.assert_allclose(info["heat_cost_eur_m2"], p.heat_price * info["heat_kwh_m2"], rtol=1e-6)
        np.testing.assert_allclose(info["co2_cost_eur_m2"], p.co2_price * info["co2_kg_m2"], rtol=1e-6)
        heat += float(np.sum(info["heat_kwh_m2"]))
        co2 += float(np.sum(info["co2_kg_m2"]))
    assert heat > 0.0 and co2 > 0.0


def test_a_lamp_barely_on_makes_no_light_period() -> None:
    """A sampled policy's lamps never sit at exactly 0: below ``lamp_on_frac`` they neither raise the
    heating setpoint nor start CO2 dosing in the dark."""
    cfg = ClimateConfig()
    off = _settle(cfg, outside=5.0, sun=0.0, lights=0.0)
    faint = _settle(cfg, outside=5.0, sun=0.0, lights=1e-4)
    assert float(faint.air_temp[0]) == pytest.approx(cfg.heating_night_c, abs=0.01)
    assert float(faint.co2_dose_mg_m2_s[0]) == 0.0
    assert float(faint.heat_w_m2[0]) == pytest.approx(float(off.heat_w_m2[0]) - 1e-4 * cfg.lamp_power_w_m2
                                                      * cfg.lamp.air_heat_share, abs=1e-3)
    lit = _settle(cfg, outside=5.0, sun=0.0, lights=cfg.lamp_on_frac)
    assert float(lit.air_temp[0]) == pytest.approx(cfg.heating_day_c, abs=0.01)
    assert float(lit.co2_dose_mg_m2_s[0]) > 0.0
