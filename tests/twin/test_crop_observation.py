"""Observation v5: the crop's state in the observation is the twin's pools after the step, unclipped."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from twin.checks import SpecViolation, check_observation
from twin.config import TwinConfig
from twin.crop import CropGrowthConfig, CropState, observed_crop
from twin.dynamics import check_crop_fits_layout
from twin.env import GreenhouseTwin
from twin.spec import CROP_STATE, FEATURES, ObservationSpec


def _pools(twin: GreenhouseTwin) -> np.ndarray:
    """The state's crop-state features (N, 5) as the observation should carry them."""
    crop = CropState(*(np.asarray(getattr(twin.state, f), dtype=np.float64) for f in CropState._fields))
    return np.stack(observed_crop(np, twin.config.crop_growth, crop), axis=1)


def test_crop_state_sits_after_growth_stage_in_order() -> None:
    spec = ObservationSpec(6)
    start = spec.slices["growth_stage"].stop
    assert spec.names[start:start + len(CROP_STATE)] == CROP_STATE
    assert spec.dim == 154
    assert all(f.doc for f in FEATURES if f.name in CROP_STATE)


def test_the_observation_carries_the_pools_after_each_step_unclipped() -> None:
    twin = GreenhouseTwin(num_instances=16, seed=2, validate=True)
    sl = twin.observation_spec.slices
    cols = [sl[name].start for name in CROP_STATE]
    obs = np.asarray(twin.reset(seed=2))
    np.testing.assert_allclose(obs[:, cols], _pools(twin), rtol=1e-6, atol=1e-6)
    rng = np.random.default_rng(1)
    for _ in range(3 * 144):  # three days, lamps on at random: the buffer and t_can24 move
        action = np.concatenate([rng.random((16, 6)) < 0.3, rng.uniform(0, 100, (16, 1)),
                                 rng.choice([0.0, 100.0], (16, 1))], axis=1).astype(np.float32)
        before = _pools(twin)
        obs = np.asarray(twin.step(action)[0])
        np.testing.assert_allclose(obs[:, cols], _pools(twin), rtol=1e-6, atol=1e-6)
    assert not np.allclose(before, _pools(twin))  # the last step grew the crop
    assert (np.ptp(obs[:, cols], axis=0) > 0.0).all()  # crop ages differ between instances


def test_a_crop_reaching_past_the_layouts_bounds_is_refused() -> None:
    check_crop_fits_layout(CropGrowthConfig())
    with pytest.raises(ValueError, match="lai=6"):
        check_crop_fits_layout(CropGrowthConfig(lai_max=6.0))
    with pytest.raises(ValueError, match="temp_sum=-1200"):
        check_crop_fits_layout(CropGrowthConfig(generative_onset_days=60.0))
    with pytest.raises(ValueError, match="fruit_load"):
        GreenhouseTwin(num_instances=2, seed=0,
                       config=replace(TwinConfig(), crop_growth=CropGrowthConfig(c_fruit_max=500e3)))


def test_a_fruit_load_over_the_crops_cap_fails_the_check() -> None:
    twin = GreenhouseTwin(num_instances=2, seed=0)
    obs = np.asarray(twin.reset(seed=0)).copy()
    check_observation(twin, obs)
    # inside the layout's bounds, over the cap
    obs[1, twin.observation_spec.slices["fruit_load"].start] = 350.0
    with pytest.raises(SpecViolation, match="fruit_load=350.*cap 300"):
        check_observation(twin, obs)
