"""The economic reward (CROP_ECONOMICS section 5): each term is a price times this step's quantity."""

from __future__ import annotations

import numpy as np
import pytest

from twin import GreenhouseTwin
from twin.config import EconomicsConfig
from twin.reward import termination_damage

INFO_KEYS = ("fruit_kg_m2", "revenue_eur_m2", "energy_cost_eur_m2", "water_cost_eur_m2", "damage_eur_m2",
             "lamp_kwh_m2", "price_eur_mwh", "par_mol_m2")
AREA = 300.0


def _action(b: int, valves: int = 0, pump: float = 0.0, lights: float = 0.0) -> np.ndarray:
    a = np.zeros((b, 8), dtype=np.float32)
    a[:, :valves] = 1.0
    a[:, 6], a[:, 7] = pump, lights
    return a


def test_v_ref_is_a_good_summer_steps_fruit() -> None:
    # 1.0 EUR/kg x 0.25 kg FW/m2/day x 600 s / 86,400 s (CROP_ECONOMICS section 5)
    assert EconomicsConfig().v_ref(600.0) == pytest.approx(1.0 * 0.25 / 144)


def test_each_term_is_its_price_times_the_steps_quantity() -> None:
    twin = GreenhouseTwin(32, seed=4)
    twin.reset()
    p = twin.params
    v_ref = twin.config.economics.v_ref(twin.config.dt_s)
    for i in range(60):
        hour = p.start_hour + twin.state.step * twin.config.dt_h
        _, reward, terminated, _, info = twin.step(_action(32, valves=3, pump=70.0, lights=60.0 * (i % 2)))
        terms = info["reward_terms"]
        for key in INFO_KEYS:
            assert info[key].shape == (32,) and np.isfinite(info[key]).all(), key
        assert not terminated.any()
        np.testing.assert_allclose(terms["growth"], p.fruit_price * info["fruit_kg_m2"], rtol=1e-6)
        water = (p.water_price * info["irrigation_mm"].mean(axis=1) / 1000
                 + p.drain_price * info["drainage_mm"].mean(axis=1) / 1000)
        np.testing.assert_allclose(-terms["water"], water, rtol=1e-5, atol=1e-12)
        np.testing.assert_allclose(info["water_cost_eur_m2"], water, rtol=1e-5, atol=1e-12)
        energy = info["price_eur_mwh"] / 1000 * info["energy_kwh"] / AREA
        np.testing.assert_allclose(-terms["energy"], energy, rtol=1e-5)
        np.testing.assert_allclose(info["lamp_kwh_m2"], 0.1 * 0.6 * (i % 2) / 6, rtol=1e-5)
        spot = twin.model.prices.at(twin.backend, p.year, hour)
        np.testing.assert_allclose(info["price_eur_mwh"], spot * p.price_scale + p.price_adder,
                                   rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(sum(terms.values()) / v_ref, reward, rtol=1e-4, atol=1e-4)
        assert (terms["growth"] >= 0).all() and (terms["moisture"] <= 0).all() and (terms["water"] <= 0).all()
        assert (info["damage_eur_m2"] == 0).all()


def test_moisture_is_charged_only_outside_the_band_dry_and_wet_apart() -> None:
    twin = GreenhouseTwin(3, seed=1, economics=EconomicsConfig(dry_penalty=0.2, wet_penalty=0.5))
    twin.reset()
    p, s = twin.params, twin.state
    inside = (p.band_low + p.band_high) / 2
    theta = np.stack([inside[0], inside[1] - 0.0, inside[2]])
    theta[1, 0] = p.band_low[1, 0] - 0.04   # one zone 0.04 below the band
    theta[2, 0] = p.band_high[2, 0] + 0.04  # one zone 0.04 above it
    twin._state = s.replace(theta=theta.astype(np.float32))
    _, _, _, _, info = twin.step(_action(3))
    moisture = info["reward_terms"]["moisture"]
    v_ref, tol = twin.config.economics.v_ref(twin.config.dt_s), twin.config.reward.band_tolerance_vwc
    # Evaporation moves theta a little during the step: compare with the step's end state.
    end = twin.state.theta
    assert (end[0] >= p.band_low[0]).all() and (end[0] <= p.band_high[0]).all() and moisture[0] == 0.0
    dry = np.maximum(p.band_low[1] - end[1], 0).mean()
    wet = np.maximum(end[2] - p.band_high[2], 0).mean()
    assert moisture[1] == pytest.approx(-v_ref * 0.2 * dry / tol, rel=1e-4) and dry > 0.005
    assert moisture[2] == pytest.approx(-v_ref * 0.5 * wet / tol, rel=1e-4) and wet > 0.005


def test_lamps_at_night_buy_fruit_at_the_all_in_price() -> None:
    twin_on, twin_off = GreenhouseTwin(16, seed=2), GreenhouseTwin(16, seed=2)
    twin_on.reset(), twin_off.reset()
    fruit_on = fruit_off = cost_on = want_cost = 0.0
    for _ in range(36):  # 00:00-06:00: dark outside
        *_, info_on = twin_on.step(_action(16, lights=100.0))
        *_, info_off = twin_off.step(_action(16))
        fruit_on += info_on["fruit_kg_m2"]
        fruit_off += info_off["fruit_kg_m2"]
        cost_on += info_on["energy_cost_eur_m2"]
        want_cost += 0.1 * info_on["price_eur_mwh"] / 6 / 1000  # 100 W/m2 for 10 min at the all-in price
        assert (info_on["par_mol_m2"] >= 250 * 600e-6 - 1e-6).all()
    productive = twin_on.state.t_sum > 0
    assert productive.any()
    assert (fruit_on[productive] >= fruit_off[productive]).all()
    assert fruit_on[productive].sum() > fruit_off[productive].sum()
    np.testing.assert_allclose(cost_on, want_cost, rtol=1e-4)


def test_a_hard_termination_costs_the_pump_and_the_crop_lost_during_repair() -> None:
    twin = GreenhouseTwin(4, seed=0)
    twin.reset()
    v_ref = twin.config.economics.v_ref(twin.config.dt_s)
    fruit_price = twin.params.fruit_price.copy()
    _, reward, terminated, _, info = twin.step(_action(4, valves=0, pump=100.0))  # dead-heading
    assert terminated.all()
    econ = twin.config.economics
    want = econ.pump_replacement_eur / AREA + fruit_price * 0.25 * econ.repair_days * econ.stress_yield_loss
    np.testing.assert_allclose(info["damage_eur_m2"], want, rtol=1e-6)
    assert want.min() > 1.0  # dwarfs a step's money: ending an episode early never pays
    np.testing.assert_allclose(sum(info["reward_terms"].values()) / v_ref, reward, rtol=1e-4)
    assert (reward < -want / v_ref * 0.99).all()
    assert termination_damage(twin.config, twin.params).shape == (4,)


def test_numpy_and_torch_agree_on_the_crop_and_the_money() -> None:
    import torch

    twins = [GreenhouseTwin(6, backend=name, seed=8) for name in ("numpy", "torch")]
    infos = []
    for twin in twins:
        twin.reset()
        for i in range(30):
            *_, info = twin.step(twin.backend.asarray(_action(6, valves=2, pump=60.0,
                                                              lights=100.0 * (i % 3 == 0))))
        infos.append(info)
    for key in INFO_KEYS:
        np.testing.assert_allclose(infos[0][key], infos[1][key].numpy(), rtol=2e-4, atol=1e-7, err_msg=key)
    for name in ("c_buf", "c_leaf", "c_fruit", "fruit_dm_cum", "dli_today", "lamp_h_today"):
        a, b = getattr(twins[0].state, name), getattr(twins[1].state, name)
        assert isinstance(b, torch.Tensor)
        np.testing.assert_allclose(a, b.numpy(), rtol=2e-4, err_msg=name)


def test_the_validator_checks_the_new_observation_and_the_step_info() -> None:
    from twin.checks import SpecViolation, check_info, check_observation

    twin = GreenhouseTwin(4, seed=3, validate=True)
    obs = twin.reset()
    obs, reward, _, _, info = twin.step(_action(4, lights=100.0))
    check_info(twin, reward, info)
    sl = twin.observation_spec.slices
    bad = obs.copy()
    bad[1, sl["price_published"].start + 3] = 0.5
    with pytest.raises(SpecViolation, match="price_published must be 0 or 1"):
        check_observation(twin, bad)
    bad = obs.copy()
    bad[2, sl["lamp_hours_today"]] = 5.0  # ten minutes after midnight
    with pytest.raises(SpecViolation, match="exceeds"):
        check_observation(twin, bad)
    with pytest.raises(SpecViolation, match="sum over V_ref"):
        check_info(twin, reward + 1.0, info)
    with pytest.raises(SpecViolation, match="lacks 'price_eur_mwh'"):
        check_info(twin, reward, {k: v for k, v in info.items() if k != "price_eur_mwh"})
