"""The service decides on what training saw: for the same state, weather, prices and readings, the
observation the service builds equals the twin's, feature by feature, in the one layout."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from control.observation import ObservationBuilder
from control.outlook import SOLAR_LEADS, Outlook
from twin.config import PriceConfig, TwinConfig
from twin.crop import CropState
from twin.env import GreenhouseTwin
from twin.sensors import CLIMATE_SENSORS
from twin.spec import CROP_STATE, OBS_VERSION, PRICE_SLOTS, ObservationSpec, observation_spec
from twin.weather import SOLAR, TEMP

ZONES = 4
YEAR0 = datetime(2026, 1, 1, tzinfo=UTC)
"""Hour of year 0 as a clock: the twin's hours are the site's local hours (here UTC)."""


def first_mismatch(spec: ObservationSpec, service: np.ndarray, twin: np.ndarray) -> str | None:
    """The first feature (by name, in layout order) where the two differ, with both values."""
    for sl in spec.slices.values():
        a, b = service[sl], twin[sl]
        bad = ~np.isclose(a, b, rtol=1e-4, atol=1e-3)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            return f"{spec.names[sl.start + i]}: service {a[i]!r} != twin {b[i]!r}"
    return None


def service_observation(twin: GreenhouseTwin, i: int, readings: dict[str, np.ndarray],
                        last_obs: np.ndarray) -> np.ndarray:
    """Row ``i`` as the service builds it from the twin's state, weather, prices and sensor readings;
    its crop twin holds the twin's crop pools after the step."""
    params, state, model = twin.params, twin.state, twin.model
    cfg = twin.config
    b = twin.backend
    hour = float(params.start_hour[i] + state.step[i] * cfg.dt_h)
    ts = YEAR0 + timedelta(hours=hour)
    year = params.year[i:i + 1]
    ahead = b.to_numpy(model.weather.ahead(b, year, np.array([hour]), SOLAR_LEADS))[0]
    spot, published = model.prices.outlook(b, year, np.array([hour]), PRICE_SLOTS)
    outlook = Outlook(ts.replace(minute=0, second=0, microsecond=0), ahead[:24, TEMP], ahead[:, SOLAR],
                      b.to_numpy(spot)[0] * float(params.price_scale[i]), b.to_numpy(published)[0], "live",
                      0.0)
    spec = observation_spec(ZONES)
    sl = spec.slices
    builder = ObservationBuilder(
        ZONES, params.band_low[i], params.band_high[i], crop=cfg.crop, growth=cfg.crop_growth,
        zone_area_m2=cfg.hydraulics.zone_area_m2,
        transmissivity=float(params.transmissivity[i]), fruit_price_eur_kg=float(params.fruit_price[i]),
        tariff=PriceConfig(adder_eur_mwh=float(params.price_adder[i])),
        lamps_ours=bool(params.lamps_ours[i] > 0.5))
    builder.irrigation_24h_mm = np.asarray(state.irrigation_24h[i], dtype=np.float64)
    for name in ("air_temp", "air_rh", "par", "co2", "leaf_temp"):  # what a missing reading holds
        builder.held[name] = float(last_obs[sl[name]][0])
    values = {key: float(readings[key][i]) for key in CLIMATE_SENSORS}
    pools = CropState(*(np.array([float(getattr(state, f)[i])]) for f in CropState._fields))
    obs, _ = builder.build(
        ts=ts, moisture=state.est_theta[i],
        readings={k: (None if np.isnan(v) else v) for k, v in values.items()},
        valve_open=state.valve_pos[i], pump_pct=float(state.pump[i]) * 100.0,
        light_pct=float(state.lights[i]) * 100.0,
        pump_current_a=float(readings["pump_current_frac"][i]) * builder.rated_current_a, outlook=outlook,
        valve_failed=state.valve_failed[i], dli_today=float(state.dli_today[i]),
        lamp_hours_today=float(state.lamp_h_today[i]),
        crop_day=float(params.crop_day0[i] + state.step[i] * cfg.dt_s / 86400.0), crop_pools=pools)
    return obs


@pytest.fixture(scope="module")
def twin() -> GreenhouseTwin:
    # Forecast error off: the twin keeps only 24 hourly leads of its erring forecast, and tomorrow's
    # light is a sum over up to 47 leads; with error off both sides read the same hours.
    cfg = TwinConfig.from_overrides(zones=ZONES, weather={"forecast_temp_std_24h_c": 0.0,
                                                          "forecast_solar_log_std_24h": 0.0,
                                                          "forecast_error_c": 0.0,
                                                          "forecast_error_frac": 0.0})
    return GreenhouseTwin(num_instances=6, seed=11, config=cfg)


def test_service_observation_equals_the_twins_feature_by_feature(twin: GreenhouseTwin) -> None:
    spec = observation_spec(ZONES)
    assert twin.observation_spec.to_dict() == spec.to_dict() and spec.to_dict()["version"] == OBS_VERSION
    last = np.asarray(twin.reset(seed=11)).copy()
    rng = np.random.default_rng(5)
    checked, published_seen, crop_seen = 0, set(), []
    for k in range(150):  # 25 h of 10-min steps: both sides of 13:00 and of midnight
        action = np.concatenate([rng.random((6, ZONES)) < 0.3, rng.uniform(0, 100, (6, 1)),
                                 rng.choice([0.0, 60.0, 100.0], (6, 1))], axis=1).astype(np.float32)
        obs, _, term, trunc, info = twin.step(action)
        obs = np.asarray(obs)
        if k % 7 == 0:
            for i in range(6):
                if term[i] or trunc[i]:
                    continue
                mine = service_observation(twin, i, info["readings"], last[i])
                mismatch = first_mismatch(spec, mine, obs[i])
                assert mismatch is None, f"step {k}, instance {i}: first mismatch {mismatch}"
                published_seen.add(int(obs[i][spec.slices["price_published"]].sum()))
                crop_seen.append([float(obs[i][spec.slices[name]][0]) for name in CROP_STATE])
                checked += 1
        last = obs.copy()
    assert checked >= 100
    assert len(published_seen) > 3  # mornings (today only) and afternoons (tomorrow too) both compared
    spread = np.ptp(np.array(crop_seen), axis=0)
    assert (spread > 0.0).all(), \
        f"crop-state features never varied: {dict(zip(CROP_STATE, spread, strict=True))}"


def test_a_mismatch_is_reported_by_feature_name(twin: GreenhouseTwin) -> None:
    spec = observation_spec(ZONES)
    obs = np.asarray(twin.reset(seed=11))[0].copy()
    other = obs.copy()
    other[spec.slices["price"].start + 5] += 10.0
    assert first_mismatch(spec, other, obs).startswith("price[+5h]")


@pytest.mark.parametrize("name", CROP_STATE)
def test_a_crop_state_mismatch_is_reported_by_feature_name(twin: GreenhouseTwin, name: str) -> None:
    spec = observation_spec(ZONES)
    obs = np.asarray(twin.reset(seed=11))[0].copy()
    other = obs.copy()
    other[spec.slices[name].start] += 0.5
    assert first_mismatch(spec, other, obs).startswith(f"{name}: ")
