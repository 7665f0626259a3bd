from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from policy.baselines import ThresholdExpert
from policy.bc import bc_loss, collect_expert_demos, load_demos, make_demo_batch, save_demos, to_epoch_us
from policy.networks import ActorCritic
from twin import GreenhouseTwin
from twin.spec import ObservationSpec


@pytest.fixture(scope="module")
def demos():
    twin = GreenhouseTwin(num_instances=8, backend="torch", seed=3, dt_s=3600, episode_days=2)
    return collect_expert_demos(twin, ThresholdExpert(), steps=24)


def test_collect_expert_demos_shapes(demos) -> None:
    assert demos.obs.shape == (8 * 24, ObservationSpec(6).dim) and demos.action.shape == (8 * 24, 8)
    assert demos.who.shape == demos.when.shape == (8 * 24,)
    assert demos.when.dtype == np.int64 and demos.when[-1] == 23 * 3600 * 10**6
    torch.testing.assert_close(demos.action[:8], ThresholdExpert()(demos.obs[:8]).float())


def test_save_load_round_trip(tmp_path: Path, demos) -> None:
    path = tmp_path / "overrides.demos"
    save_demos(path, demos, ObservationSpec(6))
    back = load_demos(path, ObservationSpec(6))
    assert torch.equal(back.obs, demos.obs) and torch.equal(back.action, demos.action)
    assert back.who.tolist() == demos.who.tolist() and np.array_equal(back.when, demos.when)


def test_layout_mismatch_raises(tmp_path: Path) -> None:
    batch = make_demo_batch(np.zeros((3, ObservationSpec(4).dim)), np.zeros((3, 6)), "op-7",
                            ["2024-05-01T10:00:00Z", "2024-05-01T10:10:00+00:00", "2024-05-01T10:20:00"])
    path = tmp_path / "four_zones.npz"
    save_demos(path, batch, ObservationSpec(4))
    with pytest.raises(ValueError, match="layout"):
        load_demos(path, ObservationSpec(6))


def test_iso_timestamps_become_epoch_microseconds() -> None:
    assert to_epoch_us(["1970-01-01T00:00:01.5Z"]).tolist() == [1_500_000]
    assert to_epoch_us(np.array([7])).dtype == np.int64


def test_bc_loss_balances_rare_open_valves(demos) -> None:
    torch.manual_seed(0)
    agent = ActorCritic(ObservationSpec(6).dim, 6)
    torch.nn.init.zeros_(agent.actor_head.weight)  # every valve at p = 0.5
    # Valve 0 open in 10 % of the demos, the others never: the "never irrigate" trap.
    action = demos.action.clone()
    action[:, :6] = 0.0
    action[: demos.size // 10, 0] = 1.0
    grads = {}
    for balance in (0.0, 1.0):
        agent.zero_grad()
        out = bc_loss(agent, demos.obs, action, balance=balance)
        out.valve_nll.backward()
        assert torch.isfinite(out.loss)
        grads[balance] = agent.actor_head.bias.grad[0].item()
    assert float(out.demo_open_rate) == pytest.approx((demos.size // 10) / action[:, :6].numel())
    assert grads[0.0] > 0  # unweighted: gradient descent closes valve 0
    assert grads[1.0] < 0  # balanced: the rare open samples win
