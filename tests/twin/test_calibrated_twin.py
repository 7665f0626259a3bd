"""A greenhouse's calibrated twin: the fitted soils per zone replace the soil classes' table values,
and configurations without them keep the hash every trained policy recorded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from policy.checkpoint import read_meta, twin_config_of
from policy.config import PPOConfig
from twin import GreenhouseTwin
from twin.config import TwinConfig

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
