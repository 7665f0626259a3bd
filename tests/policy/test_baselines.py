"""The growers' and the break-even lighting rules, fed observations built from the layout's slices."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from policy.baselines import DARK_WINDOW, ThresholdExpert, TimerSchedule
from twin.config import LightingConfig
from twin.spec import observation_spec

ZONES = 6
SPEC = observation_spec(ZONES)
ECONOMIC = all(k in SPEC.slices for k in ("price", "fruit_price", "lamp_hours_today"))
needs_v4 = pytest.mark.skipif(not ECONOMIC, reason="observation without prices (before OBS_VERSION 4)")


def observe(n: int, hour: float | list[float], **features: float | list[float]) -> np.ndarray:
    """``n`` observations with mid-band moisture, the given hour of day and the named features
    (a scalar fills the whole block; a list gives one value per row)."""
    obs = np.zeros((n, SPEC.dim), dtype=np.float32)
    sl = SPEC.slices
    obs[:, sl["target_low"]] = 0.2
    obs[:, sl["target_high"]] = 0.3
    obs[:, sl["moisture"]] = 0.25
    h = np.broadcast_to(np.asarray(hour, dtype=np.float64), (n,))
    obs[:, sl["hour_sin"].start] = np.sin(2 * math.pi * h / 24)
    obs[:, sl["hour_cos"].start] = np.cos(2 * math.pi * h / 24)
    for name, value in features.items():
        v = np.asarray(value, dtype=np.float32)
        obs[:, sl[name]] = v[:, None] if v.ndim == 1 else v
    return obs


def lights(controller, obs: np.ndarray) -> np.ndarray:
    return controller(obs)[:, ZONES + 1]


def test_the_rules_dark_window_is_the_twins() -> None:
    assert DARK_WINDOW == (LightingConfig().dark_start_h, LightingConfig().dark_end_h) == (23.0, 5.0)


def test_growers_lights_never_in_the_dark_window() -> None:
    """A photoperiod reaching into the night is cut by the dark window; natural light switches it off."""
    timer = TimerSchedule(zones=ZONES, photoperiod=(4.0, 24.0))
    hours = [23.5, 4.5, 6.0, 6.0, 22.0]
    got = lights(timer, observe(5, hours, par=[0.0, 0.0, 0.0, 500.0, 0.0]))
    assert got.tolist() == [0.0, 0.0, 100.0, 0.0, 100.0]
    # The lamps' own light does not count as natural light (the twin's 2.5 umol/m2/s per %).
    lit = observe(1, 6.0, par=250.0 + 50.0, lights=100.0)
    assert lights(TimerSchedule(zones=ZONES), lit).tolist() == [100.0]


@needs_v4
def test_break_even_falls_as_natural_light_rises() -> None:
    """c0 100 kg/MWh at 1 EUR/kg: break-even 100 EUR/MWh in the dark, 50 at half saturation, 0 at
    saturation (PAR_sat 1000): an 80 EUR/MWh hour is worth lighting only while it is dark enough."""
    expert = ThresholdExpert(zones=ZONES, c0=100.0, par_sat=1000.0, h_max=18.0)
    par = [0.0, 150.0, 500.0, 1200.0]
    got = lights(expert, observe(4, 12.0, par=par, price=80.0, fruit_price=1.0))
    assert got.tolist() == [100.0, 100.0, 0.0, 0.0]
    # A negative price pays for the lamps even in full sun; a dear hour is never worth it.
    assert lights(expert, observe(1, 12.0, par=1200.0, price=-5.0, fruit_price=1.0)).tolist() == [100.0]
    assert lights(expert, observe(1, 12.0, par=0.0, price=150.0, fruit_price=1.0)).tolist() == [0.0]


@needs_v4
def test_break_even_scales_with_the_fruit_price_and_reads_the_current_hour() -> None:
    expert = ThresholdExpert(zones=ZONES, c0=100.0, par_sat=1000.0)
    got = lights(expert, observe(3, 12.0, price=120.0, fruit_price=[1.0, 1.3, 1.1]))
    assert got.tolist() == [0.0, 100.0, 0.0]  # 120 < 130 only; 110 is still below the price
    later = observe(1, 12.0, fruit_price=1.0)
    later[:, SPEC.slices["price"]] = 200.0
    later[:, SPEC.slices["price"].start] = 20.0  # only the current hour is cheap
    assert lights(expert, later).tolist() == [100.0]


@needs_v4
def test_break_even_respects_the_dark_window_and_the_day_cap() -> None:
    expert = ThresholdExpert(zones=ZONES, c0=100.0, par_sat=1000.0, h_max=16.0)
    cheap = {"price": -50.0, "fruit_price": 1.0}
    assert lights(expert, observe(3, [23.2, 2.0, 4.9], **cheap)).tolist() == [0.0, 0.0, 0.0]
    # One more 10-minute step must fit under the cap.
    got = lights(expert, observe(3, 18.0, lamp_hours_today=[15.5, 15.8, 15.9], **cheap))
    assert got.tolist() == [100.0, 100.0, 0.0]


@needs_v4
def test_break_even_is_the_same_on_torch() -> None:
    expert = ThresholdExpert(zones=ZONES, c0=120.0, par_sat=600.0)
    rng = np.random.default_rng(0)
    obs = observe(64, rng.uniform(0, 24, 64).tolist(), par=rng.uniform(0, 900, 64).tolist(),
                  price=rng.uniform(-20, 200, 64).tolist(), fruit_price=rng.uniform(0.7, 1.6, 64).tolist(),
                  lamp_hours_today=rng.uniform(0, 18, 64).tolist())
    a = expert(obs)
    b = expert(torch.from_numpy(obs)).numpy()
    np.testing.assert_array_equal(a, b)
    assert 0 < (a[:, ZONES + 1] > 0).sum() < 64


def test_bad_break_even_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="break-even"):
        ThresholdExpert(c0=100.0, par_sat=0.0)
    with pytest.raises(ValueError, match="break-even"):
        ThresholdExpert(c0=-1.0)
    ThresholdExpert(par_sat=0.0)  # irrelevant without the break-even rule
