"""The crop twin beside a greenhouse: the twin's crop model on the greenhouse's readings, today's light
by the site's calendar, and a restart that continues the same crop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import cast
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from control import ExpertProposer, GreenhouseController, ZoneSetup
from control.crop_twin import CROP_DAY0, CropTwin, initial_pools
from policy.tuning import served_expert
from safety import SafetyLimits
from twin.crop import CropState, observed_crop
from twin.env import GreenhouseTwin
from twin.spec import CROP_STATE
from twin.types import TwinParams
from wire.topics import Telemetry

ZONES = [ZoneSetup("loam", 0.21, 0.27, 0.45, 400.0) for _ in range(6)]


def test_fed_the_twins_climate_the_crop_twin_grows_the_twins_crop() -> None:
    """Exact readings (no noise, no faults): the crop twin's harvest and pools follow the twin's own."""
    twin = GreenhouseTwin(1, seed=4, sensor_noise=0.0, faults={"instance_fraction": 0.0})
    twin.reset(seed=4)
    s = twin.state
    crop = CropTwin(crop=twin.config.crop, growth=twin.config.crop_growth,
                    day=float(twin.params.crop_day0[0]))
    crop.state = CropState(*(np.array([float(getattr(s, f)[0])]) for f in CropState._fields))
    dt = twin.config.dt_s
    harvest, rng = 0.0, np.random.default_rng(0)
    for k in range(3 * 144):  # three days
        water = k % 12 == 0  # all valves with the pump, now and then: never dead-heading
        action = np.concatenate([[float(water)] * 6, [60.0 * water], [100.0 * (rng.random() < 0.5)]])[None, :]
        _, _, term, trunc, info = twin.step(action.astype(np.float32))
        assert not (term[0] or trunc[0])
        r = info["readings"]
        par = float(info["par_mol_m2"][0]) / (dt * 1e-6)  # the canopy PAR the twin's crop saw
        crop.grow(dt, par, float(r["co2_ppm"][0]), float(r["leaf_temp_c"][0]), float(info["water_stress"][0]))
        harvest += float(info["fruit_kg_m2"][0])
    assert harvest > 0.0
    assert abs(crop.yield_kg_m2 - harvest) <= 0.02 * harvest
    assert crop.state is not None
    assert abs(float(crop.state.c_fruit[0]) - float(twin.state.c_fruit[0])) \
        <= 0.02 * float(twin.state.c_fruit[0])


def test_todays_light_restarts_at_local_midnight() -> None:
    crop = CropTwin()
    tz = ZoneInfo("Europe/Amsterdam")
    t = datetime(2026, 12, 2, 22, 30, tzinfo=UTC)  # 23:30 in Amsterdam
    crop.account(t.astimezone(tz), 1800.0, 200.0)
    assert crop.dli_today == 200.0 * 1800.0 * 1e-6
    crop.account((t + timedelta(hours=1)).astimezone(tz), 3600.0, 100.0)  # 00:30: a new day
    assert crop.dli_today == 100.0 * 3600.0 * 1e-6
    assert crop.day == 60.0 + 5400.0 / 86400.0


def _telemetry(k: int, par: float) -> Telemetry:
    return Telemetry(ts=datetime(2026, 6, 1, 6, tzinfo=UTC) + timedelta(minutes=k), boot_id="b", seq=k,
                     soil_vwc=[[0.24, 0.24]] * 6, air_temp_c=24.0, air_rh_pct=70.0, par_umol_m2_s=par,
                     co2_ppm=700.0,
                     leaf_temp_c=23.0, flow_l_min=0.0, pump_current_a=0.0, valve_open=[0] * 6, pump_pct=0.0,
                     light_pct=0.0, estop=False)


def _controller() -> GreenhouseController:
    return GreenhouseController("gh1", ZONES, ExpertProposer(served_expert(6)), SafetyLimits.default())


def test_the_crop_twin_feeds_the_observation_and_survives_a_restart() -> None:
    one, two = _controller(), _controller()
    for k in range(60):
        d = one.on_telemetry(_telemetry(k, 800.0))
        two.on_telemetry(_telemetry(k, 800.0))
    spec = one.obs_builder.spec
    obs = np.asarray(d.observation)
    # an hour at 800 umol
    assert obs[spec.slices["dli_today"]][0] == np.float32(one.crop_twin.dli_today) > 2.0
    assert d.record()["estimate"]["crop_twin"]["crop_day"] > 60.0
    restarted = _controller()
    restarted.restore(two.snapshot())
    for k in range(60, 120):
        one.on_telemetry(_telemetry(k, 800.0))
        restarted.on_telemetry(_telemetry(k, 800.0))
    assert one.crop_estimates() == restarted.crop_estimates()
    assert one.crop_twin.yield_kg_m2 > 0.0 or one.crop_estimates()["fruit_load_g_m2"] > 0.0
    # An old snapshot (before the crop twin) keeps today's totals.
    old = two.snapshot()
    del old["crop_twin"]
    old["par_mol_today"] = 1.5
    again = _controller()
    again.restore(old)
    assert again.crop_twin.dli_today == 1.5 and again.crop_twin.date == old["day"]
    assert again.crop_twin.day == pytest.approx(60.0 + 59 * 60.0 / 86400.0)  # the age the builder had counted


def test_the_observation_carries_the_crop_twins_pools_after_its_growth() -> None:
    ctl = _controller()
    assert ctl.crop_twin.state is None
    sl = ctl.obs_builder.spec.slices
    for k in range(3):
        obs = np.asarray(ctl.on_telemetry(_telemetry(k, 800.0)).observation)
        pools = ctl.crop_twin.state
        assert pools is not None
        expected = observed_crop(np, ctl.crop_twin.growth, pools)
        assert [obs[sl[name]][0] for name in CROP_STATE] == [np.float32(v[0]) for v in expected]
    # grown, not the pools it started from: 23 degC leaves add to the temperature sum
    start = initial_pools(ctl.crop, ctl.crop_twin.growth, CROP_DAY0, 23.0)
    assert obs[sl["temp_sum"]][0] > float(start.t_sum[0])


def test_without_a_crop_twin_the_builder_observes_the_initial_pools() -> None:
    ctl = _controller()
    obs, _ = ctl.obs_builder.build(ts=datetime(2026, 6, 1, 6, tzinfo=UTC), moisture=np.full(6, 0.24),
                                   readings={}, valve_open=np.zeros(6), pump_pct=0.0, light_pct=0.0,
                                   pump_current_a=0.0, crop_day=80.0)
    start = initial_pools(ctl.crop, ctl.crop_twin.growth, 80.0, 20.0)  # the held leaf temperature's default
    sl = ctl.obs_builder.spec.slices
    expected = observed_crop(np, ctl.crop_twin.growth, start)
    assert [obs[sl[name]][0] for name in CROP_STATE] == [np.float32(v[0]) for v in expected]
    assert obs[sl["t_can24"]][0] == 20.0 and obs[sl["lai"]][0] > 2.0


def test_root_zone_stress_is_the_twins_on_both_sides_and_a_retry_counts_nothing_twice() -> None:
    """Dry zone, comfortable zone, waterlogged zone: the factor is the zone mean of the twin's Ks x Ks_aer,
    the counters advance by the twin's rule, and asking again for the same step returns the same."""
    crop = CropTwin()
    theta = np.array([0.15, 0.26, 0.43])
    span = 1.0 / (0.6 * 0.15)
    soils = cast(TwinParams, SimpleNamespace(wilting_point=np.full((3, 1), 0.12),
                                             inv_stress_span=np.full((3, 1), span),
                                             saturation=np.full((3, 1), 0.45)))
    crop.aer_days = [0.0, 0.0, 2.0]
    factor, days = crop.root_zone_stress(theta, soils, 600.0)
    again = crop.root_zone_stress(theta, soils, 600.0)
    assert again == (factor, days) and crop.aer_days == [0.0, 0.0, 2.0]
    dry = (0.15 - 0.12) * span
    wet = 1.0 - (2.0 / 3.0) * (0.43 - 0.40) / 0.05
    assert factor == pytest.approx((dry + 1.0 + wet) / 3.0)
    assert days == pytest.approx([0.0, 0.0, 2.0 + 600.0 / 86400.0])
