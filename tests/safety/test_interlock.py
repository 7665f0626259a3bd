"""The service's one-action interlock (numpy) is the training interlock (torch), row for row."""

from __future__ import annotations

import numpy as np
import torch

from policy.residual import interlock
from safety.interlock import PUMP_MIN_RUNNING_PCT, interlock_one
from twin.spec import ObservationSpec

ZONES = 6


def test_numpy_interlock_equals_the_batched_torch_one() -> None:
    spec = ObservationSpec(ZONES)
    sl = spec.slices
    rng = np.random.default_rng(7)
    n = 3000
    obs = np.zeros((n, spec.dim), dtype=np.float32)
    obs[:, sl["target_low"]] = 0.20
    obs[:, sl["target_high"]] = rng.uniform(0.25, 0.35, (n, ZONES))
    obs[:, sl["moisture"]] = rng.uniform(0.1, 0.4, (n, ZONES))
    obs[:, sl["valve_failed"]] = rng.random((n, ZONES)) < 0.2
    obs[:50, sl["valve_failed"]] = 1.0
    action = np.concatenate([(rng.random((n, ZONES)) < 0.25), rng.uniform(0, 100, (n, 2))],
                            axis=1).astype(np.float32)
    action[::7, ZONES] = 0.0
    # Local hours on a 10-min grid, the dark window's edges included (23:00 and 05:00).
    hour = rng.integers(0, 144, n) / 6.0
    obs[:, sl["hour_sin"]] = np.sin(2 * np.pi * hour / 24)[:, None]
    obs[:, sl["hour_cos"]] = np.cos(2 * np.pi * hour / 24)[:, None]
    batched = interlock(torch.from_numpy(action), ZONES, torch.from_numpy(obs)).numpy()
    one = np.stack([interlock_one(a, o, ZONES) for a, o in zip(action, obs, strict=True)])
    np.testing.assert_array_equal(one.astype(np.float32), batched)
    # The cases that matter occur: a second path added, failed valves closed, a lone path capped.
    assert ((one[:, :ZONES] > action[:, :ZONES]).any(1)).sum() > 200
    assert ((one[:, :ZONES] < action[:, :ZONES]).any(1)).sum() > 200
    assert (one[:, :ZONES].sum(1) == 1).any()
    dark = (hour >= 23.0) | (hour < 5.0)
    assert (one[dark, ZONES + 1] == 0).all() and (one[~dark, ZONES + 1] == action[~dark, ZONES + 1]).all()
    assert dark.sum() > 500 and (~dark).sum() > 1500
    slow = (action[:, ZONES] > 0) & (action[:, ZONES] < PUMP_MIN_RUNNING_PCT) & (one[:, :ZONES].sum(1) >= 1)
    assert slow.sum() > 100 and (one[slow, ZONES] == PUMP_MIN_RUNNING_PCT).all()


def test_min_running_speed_is_the_clippers() -> None:
    from safety.limits import SafetyLimits

    assert SafetyLimits.default().pump_min_pct == PUMP_MIN_RUNNING_PCT
