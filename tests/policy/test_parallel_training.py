"""PPO on twin worker processes (``PPOConfig.workers`` / ``greentwin train --workers``)."""

from __future__ import annotations

import copy
import math
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from policy.checkpoint import run_hash
from policy.config import PPOConfig
from policy.parallel.layout import segment_exists
from policy.parallel.vector import ShmVectorTwin, worker_bounds
from policy.ppo import train
from policy.train_cli import build_parser, run_train
from twin.spec import ObservationSpec

TINY = {"num_envs": 8, "num_steps": 8, "total_steps": 8 * 8 * 2, "bc_demo_steps": 4, "bc_pretrain_updates": 2,
        "bc_decay_steps": 1000, "update_epochs": 1, "num_minibatches": 2, "hidden": 16, "workers": 2}


def test_workers_setting_is_checked_and_not_part_of_the_run_identity() -> None:
    cfg = PPOConfig.preset("tiny")
    assert cfg.workers == 0
    assert run_hash(cfg) == run_hash(cfg.replace(workers=2))  # a run may resume with another worker count
    with pytest.raises(ValueError, match="workers must be between 0 and num_envs // 2"):
        PPOConfig.preset("tiny", workers=-1)
    with pytest.raises(ValueError, match="workers"):
        PPOConfig.preset("tiny", num_envs=8, num_steps=8, total_steps=64, workers=5)


def test_training_finishes_when_a_worker_is_killed_mid_rollout(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = PPOConfig.preset("tiny", **TINY)
    kill_at = cfg.bc_demo_steps + cfg.num_steps + 3  # inside the second rollout
    seen: dict[str, Any] = {"calls": 0, "rebuilt_steps": []}
    step_async, step_wait = ShmVectorTwin.step_async, ShmVectorTwin.step_wait

    def killing_step_async(self: ShmVectorTwin, actions: torch.Tensor) -> None:
        step_async(self, actions)
        seen["calls"] += 1
        seen["vec"] = self
        if seen["calls"] == kill_at:
            os.kill(self.worker_pids[0], signal.SIGKILL)  # while it steps (or just after it answered)

    def watching_step_wait(self: ShmVectorTwin) -> Any:
        out = step_wait(self)
        if out[4]["rebuilt"].any():
            seen["rebuilt_steps"].append((seen["calls"], out[4]["rebuilt"].clone(), out[3].clone()))
        return out

    monkeypatch.setattr(ShmVectorTwin, "step_async", killing_step_async)
    monkeypatch.setattr(ShmVectorTwin, "step_wait", watching_step_wait)
    result = train(cfg)

    assert [m.iteration for m in result.metrics] == [1, 2]
    for m in result.metrics:
        assert all(math.isfinite(float(v)) for v in m), m
    vec: ShmVectorTwin = seen["vec"]
    assert vec.restarts == [1, 0] and vec.closed
    assert not any(segment_exists(n) for n in vec.segment_names)
    (call, rebuilt, truncated), = seen["rebuilt_steps"]  # one step reported the rebuilt instances
    assert call in (kill_at, kill_at + 1)
    lo, hi = worker_bounds(cfg.num_envs, cfg.workers)[0]
    assert rebuilt.nonzero().flatten().tolist() == list(range(lo, hi)) and truncated[rebuilt].all()


def test_resuming_a_snapshot_with_workers_continues_the_same_run() -> None:
    cfg = PPOConfig.preset("tiny", **TINY)
    snapshots: list[dict[str, Any]] = []
    full = train(cfg, snapshot=lambda snap: snapshots.append(copy.deepcopy(snap)), snapshot_every=1)
    assert len(snapshots) == 1 and snapshots[0]["twin_state"]["last_obs"].shape == (8, ObservationSpec(6).dim)
    resumed = train(cfg, resume=snapshots[0])
    a, b = full.agent.state_dict(), resumed.agent.state_dict()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    np.testing.assert_array_equal([m.policy_loss for m in full.metrics],
                                  [m.policy_loss for m in resumed.metrics])


def test_train_command_takes_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert build_parser().parse_args([]).workers is None
    small = [x for k, v in TINY.items() if k != "workers" for x in ("--set", f"{k}={v}")]
    args = build_parser().parse_args(["--preset", "tiny", "--device", "cpu", "--members", "1",
                                      "--workers", "2", "--out", str(tmp_path / "ens"), "--eval-steps", "0",
                                      "--no-progress", *small])
    assert run_train(args) == 0
    out = capsys.readouterr().out
    assert "with 2 twin workers" in out and "member 0 (seed 0) trained" in out
    bad = build_parser().parse_args(["--workers", "-1", "--out", str(tmp_path / "bad")])
    assert run_train(bad) == 2 and "workers must be" in capsys.readouterr().err
