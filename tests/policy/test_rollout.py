"""The twin interface PPO trains on: both implementations keep and restore episodes alike."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from policy.parallel.vector import ShmVectorTwin
from policy.rollout import Rollout, VectorTwin
from twin import GreenhouseTwin
from twin.types import TwinParams, TwinState

KW = {"dt_s": 3600.0, "episode_days": 2.0}
B = 8


@contextmanager
def make(kind: str) -> Iterator[VectorTwin]:
    if kind == "in-process":
        yield GreenhouseTwin(B, backend="torch", seed=4, **KW)  # type: ignore[misc]
    else:
        with ShmVectorTwin(B, 2, seed=4, **KW) as vec:
            yield vec


def _rows(record: TwinParams | TwinState, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v)[ids] for k, v in record.arrays().items()}


@pytest.mark.parametrize("kind", ["in-process", "workers"])
def test_restored_rows_hold_the_saved_episodes_and_the_rest_move_on(kind: str) -> None:
    with make(kind) as twin:
        twin.reset()
        saved_params, saved_state = twin.episodes()
        actions = torch.zeros((B, twin.action_spec.dim))
        for _ in range(3):
            twin.step(actions)
        assert (torch.as_tensor(saved_state.step) == 0).all()  # a copy: stepping the twin left it alone
        ids = torch.tensor([1, 5])
        twin.restore_episodes(TwinParams(**_rows(saved_params, ids)), TwinState(**_rows(saved_state, ids)),
                              ids)
        steps = torch.as_tensor(twin.state.step)
        assert steps[ids].tolist() == [0, 0]
        assert (steps[[0, 2, 3, 4, 6, 7]] == 3).all()
        for name, value in _rows(twin.state, ids).items():
            assert torch.equal(value, _rows(saved_state, ids)[name]), name
        twin.restore_episodes(saved_params, saved_state)  # all rows
        assert (torch.as_tensor(twin.state.step) == 0).all()


def test_rollout_storage_is_preallocated_time_major() -> None:
    r = Rollout.zeros(5, 3, 11, 8, 6, torch.device("cpu"))
    assert r.obs.shape == (5, 3, 11) and r.actions.shape == (5, 3, 8) and r.prior_valves.shape == (5, 3, 6)
    assert r.terminated.dtype == torch.bool and r.logprobs.shape == (5, 3)
    r.terminated[2, 1] = True
    r.truncated[4, 0] = True
    assert r.dones.nonzero().tolist() == [[2, 1], [4, 0]]
