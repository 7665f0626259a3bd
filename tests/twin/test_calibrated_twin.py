"""A greenhouse's calibrated twin: the fitted soils per zone replace the soil classes' table values,
and configurations without them keep the hash every trained policy recorded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from policy.checkpoint import read_meta, twin_config_of
from policy.config import PPOConfig
from twin import GreenhouseTwin
from twin.config import StartState, TwinConfig

FITTED = ((0.31, 0.15, 0.45, 0.90),) * 3 + ((0.20, 0.08, 0.40, 0.97),) * 3


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_zone_soils_replace_the_table(backend: str) -> None:
    twin = GreenhouseTwin(4, backend=backend, seed=3, fixed_soils=("loam",) * 6, zone_soils=FITTED)
    twin.reset()
    p = twin.params
    fc = np.asarray(p.field_capacity, dtype=np.float64)
    wp = np.asarray(p.wilting_point, dtype=np.float64)
    want_fc = np.array([s[0] for s in FITTED])
    assert np.all(np.abs(fc / want_fc - 1.0) <= 0.08 + 1e-6)  # the usual per-instance jitter, around the fit
    assert np.all(np.abs(wp / np.array([s[1] for s in FITTED]) - 1.0) <= 0.08 + 1e-6)
    drain = np.asarray(p.drain_frac, dtype=np.float64)[0]
    assert drain[0] > drain[5]  # 0.90/h drains faster than 0.97/h


def test_bad_zone_soils_are_refused() -> None:
    with pytest.raises(ValueError, match="one soil per zone"):
        TwinConfig(zone_soils=FITTED[:2])
    with pytest.raises(ValueError, match="is not a soil"):
        TwinConfig(zone_soils=((0.1, 0.2, 0.45, 0.9),) * 6)


def test_configs_without_zone_soils_keep_their_hash() -> None:
    meta = read_meta(Path(__file__).resolve().parents[2] / "policy" / "shipped" / "member_0")
    cfg = PPOConfig(**{**meta["train_config"], "demo_files": (), "twin_overrides": ()})
    assert twin_config_of(cfg).config_hash() == meta["twin_config_hash"]
    assert "zone_soils" in TwinConfig(zone_soils=FITTED).to_dict()


STARTS = tuple(StartState(hour_of_year=2400.0 + 7.5 * k, crop_day=40.0 + k, theta=(0.18 + 0.02 * k,) * 6,
                          zone_soils=FITTED if k % 2 else None, root_mm=300.0 if k % 2 else 0.0)
               for k in range(4))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_episodes_start_from_the_given_states(backend: str) -> None:
    twin = GreenhouseTwin(16, backend=backend, seed=5, fixed_soils=("loam",) * 6, start_states=STARTS,
                          episode_days=1.0 / 24.0)
    twin.reset()
    hour = np.asarray(twin.params.start_hour, dtype=np.float64)
    pick = np.rint((hour - 2400.0) / 7.5).astype(int)
    # every state drawn, nothing else
    assert np.allclose(2400.0 + 7.5 * pick, hour) and set(pick) == {0, 1, 2, 3}
    assert np.allclose(np.asarray(twin.params.crop_day0), 40.0 + pick)
    assert np.allclose(np.asarray(twin.state.theta, dtype=np.float64), (0.18 + 0.02 * pick)[:, None],
                       atol=1e-6)
    fc = np.asarray(twin.params.field_capacity, dtype=np.float64)[:, 0]
    own = pick % 2 == 1  # these starts carry their greenhouse's fitted soil, the rest the loam table
    assert (np.all(np.abs(fc[own] / 0.31 - 1.0) <= 0.08 + 1e-6)
            and np.all(np.abs(fc[~own] / 0.27 - 1.0) <= 0.08 + 1e-6))
    assert np.allclose(np.asarray(twin.params.root_mm)[own], 300.0)
    for _ in range(6):  # one-hour episodes: the next ones start from the states again
        twin.step(np.zeros((16, 8)))
    assert np.all(np.asarray(twin.state.episode) == 1)
    again = np.asarray(twin.params.start_hour, dtype=np.float64)
    assert set(np.rint((again - 2400.0) / 7.5).astype(int)) <= {0, 1, 2, 3}


def test_start_states_survive_json_and_bad_ones_are_refused() -> None:
    import json

    cfg = TwinConfig(start_states=STARTS)
    back = TwinConfig.from_overrides(start_states=json.loads(json.dumps(cfg.to_dict()["start_states"])))
    assert (back.start_states == STARTS
            and back.config_hash() == cfg.config_hash() != TwinConfig().config_hash())
    with pytest.raises(ValueError, match="one moisture per zone"):
        TwinConfig(start_states=(StartState(hour_of_year=0.0, crop_day=1.0, theta=(0.2,) * 5),))
    with pytest.raises(ValueError, match="at least one state"):
        TwinConfig(start_states=())
