"""Wet-side water stress: AquaCrop's aeration stress in the twin's root zone and crop."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest

from twin.config import CropConfig, StartState, TwinConfig
from twin.env import GreenhouseTwin
from twin.soil import aeration_point, aeration_stress, waterlogged_days
from twin.types import TwinParams


def _params(sat: float = 0.50) -> TwinParams:
    return cast(TwinParams, SimpleNamespace(saturation=np.array([sat])))


def _aquacrop_ksa(theta: float, sat: float, aer_vol_pct: float, aer_days: float, lag: float) -> float:
    """AquaCrop-OS ``aeration_stress`` written out per its day counter (the reference)."""
    aer = sat - aer_vol_pct / 100.0
    if theta <= aer:
        return 1.0
    stress = 1.0 - (sat - theta) / (sat - aer)
    if aer_days < lag:
        return 1.0 - (aer_days / lag) * stress
    return (sat - theta) / (sat - aer)


@pytest.mark.parametrize("theta", [0.40, 0.45, 0.46, 0.48, 0.50])
@pytest.mark.parametrize("days", [0.0, 1.0, 2.0, 3.0, 7.0])
def test_aeration_stress_is_aquacrops(theta: float, days: float) -> None:
    ks = aeration_stress(np, _params(), np.array([theta]), np.array([min(days, 3.0)]), 5.0, 3.0)
    assert float(ks[0]) == pytest.approx(_aquacrop_ksa(theta, 0.50, 5.0, days, 3.0), abs=1e-12)


def test_the_counter_builds_to_the_lag_and_restarts_below_the_point() -> None:
    p = _params()
    assert float(aeration_point(p, 5.0)[0]) == pytest.approx(0.45)
    days = np.array([0.0])
    for _ in range(144 * 5):  # five days waterlogged at 10-minute steps
        days = waterlogged_days(np, p, np.array([0.48]), days, 5.0, 3.0, 600.0 / 86400.0)
    assert float(days[0]) == pytest.approx(3.0)
    days = waterlogged_days(np, p, np.array([0.44]), days, 5.0, 3.0, 600.0 / 86400.0)
    assert float(days[0]) == 0.0


def test_a_config_with_no_anaerobiosis_margin_is_refused() -> None:
    with pytest.raises(ValueError, match="aeration_vol_pct"):
        CropConfig(aeration_vol_pct=0.0)
    with pytest.raises(ValueError, match="aeration_lag_days"):
        CropConfig(aeration_lag_days=-1.0)


def _waterlog_run(theta0: float, flood: bool, days: float = 6.0) -> tuple[float, float, np.ndarray, float]:
    """A clay greenhouse held either near saturation (all valves with the pump every step) or at
    field capacity: (fruit kg/m2, uptake mm, last Ks_aer, mean water-stress factor)."""
    zones = 6
    twin = GreenhouseTwin(2, seed=3, fixed_soils=("clay",) * zones, sensor_noise=0.0,
                          faults={"instance_fraction": 0.0}, episode_days=days + 1.0,
                          economics={"lamps_ours": 1.0},
                          start_states=(StartState(hour_of_year=4000.0, crop_day=80.0,
                                                   theta=(theta0,) * zones),))
    twin.reset(seed=3)
    fruit = uptake = stress = 0.0
    ks_aer = np.ones((2, zones))
    for _ in range(int(days * 144)):
        water = 1.0 if flood else 0.0
        action = np.array([[water] * zones + [80.0 * water, 0.0]] * 2, dtype=np.float32)
        _, _, term, _, info = twin.step(action)
        assert not term.any()
        fruit += float(info["fruit_kg_m2"][0])
        uptake += float(info["uptake_mm"][0].mean())
        stress += float(info["water_stress"][0])
        ks_aer = np.asarray(info["ks_aer"])
    return fruit, uptake, ks_aer[0], stress / (days * 144)


def test_a_waterlogged_crop_transpires_and_grows_less() -> None:
    """Clay held above its anaerobiosis point (0.45) for days against the same clay at field
    capacity (0.36, no dry-side stress): uptake and fruit both fall, the stress is full after the lag."""
    wet_fruit, wet_uptake, wet_ks, wet_fw = _waterlog_run(0.49, flood=True)
    ok_fruit, ok_uptake, ok_ks, ok_fw = _waterlog_run(0.36, flood=False, days=2.0)
    assert np.all(ok_ks == 1.0) and ok_fw > 0.97
    assert np.all(wet_ks < 0.5), wet_ks
    assert wet_fw < 0.6
    # per day, so the two lengths compare
    assert wet_uptake / 6.0 < 0.6 * ok_uptake / 2.0
    assert wet_fruit / 6.0 < ok_fruit / 2.0


def test_a_soil_whose_roots_lack_air_at_field_capacity_is_refused() -> None:
    """Saturation 0.50 leaves its anaerobiosis point at 0.45: a field capacity of 0.47 would stress a
    zone resting where drainage leaves it."""
    with pytest.raises(ValueError, match="anaerobiosis point"):
        TwinConfig(zone_soils=((0.47, 0.2, 0.50, 0.95),) * 6)
    TwinConfig(zone_soils=((0.40, 0.2, 0.50, 0.95),) * 6)  # 0.45 above 0.40: fine
