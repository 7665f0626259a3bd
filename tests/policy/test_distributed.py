"""Data-parallel training: two gloo ranks on CPU under torchrun against the one-process run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from policy.config import PPOConfig
from policy.distributed import context, torchrun_world
from policy.ensemble import load_ensemble
from policy.normalize import InstanceRewardScaler, RunningMeanStd
from policy.ppo import make_twin, train

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("distributed_worker.py")
CONFIG = dict(num_envs=16, num_steps=8, total_steps=16 * 8 * 2, bc_demo_steps=8, bc_pretrain_updates=5,
              update_epochs=2, num_minibatches=2, bc_decay_steps=1000)
"""Overrides of the 'tiny' preset for every run here: two iterations of 16 x 8 env steps per rank."""

EPS = 1e-4
"""RunningMeanStd's initial count."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """What each of two torchrun ranks saved (see distributed_worker.py)."""
    out = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), str(WORKER), str(out),
           json.dumps(CONFIG)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    saved = [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(2)]
    for s in saved:
        s["stdout"], s["out"] = proc.stdout, out
    return saved


@pytest.fixture(scope="module")
def single() -> Iterator[dict[str, torch.Tensor]]:
    """The same config trained by one process."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield train(PPOConfig.preset("tiny", **CONFIG)).agent.state_dict()
    torch.set_num_threads(threads)


def test_ranks_end_with_identical_weights_and_normaliser(ranks: list[dict[str, Any]]) -> None:
    a, b = ranks[0]["direct"], ranks[1]["direct"]
    assert a.keys() == b.keys()
    for key in a:  # parameters, normaliser mean/var/count and the residual buffer alike
        assert torch.equal(a[key], b[key]), key
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["world_size"] == 2
    assert ranks[0]["metrics"] == ranks[1]["metrics"]  # reduced over ranks


def test_both_ranks_data_is_used(ranks: list[dict[str, Any]], single: dict[str, torch.Tensor]) -> None:
    two = ranks[0]["direct"]
    assert not torch.equal(two["actor_head.weight"], single["actor_head.weight"])
    assert not torch.equal(two["obs_rms.mean"], single["obs_rms.mean"])
    # Every observation batch is folded in from both ranks: twice the one-rank count.
    assert float(two["obs_rms.count"]) - EPS == pytest.approx(2.0 * (float(single["obs_rms.count"]) - EPS))


def test_ranks_simulate_consecutive_instance_slices(ranks: list[dict[str, Any]]) -> None:
    snap = ranks[0]["snapshot"]
    assert ranks[0]["snapshots"] == 1 and ranks[1]["snapshots"] == 0  # only rank 0's callback runs
    assert snap["world_size"] == 2
    B = CONFIG["num_envs"]
    assert torch.equal(snap["twin_params"]["instance_id"], torch.arange(2 * B))
    # Rank 1's instances are rows B..2B-1 of one twin of 2B instances with the same seed.
    cfg = PPOConfig.preset("tiny", **CONFIG)
    rank1 = make_twin(cfg, instance_offset=B).reset()
    assert torch.equal(rank1, make_twin(cfg, num_instances=2 * B).reset()[B:])


def test_resume_from_rank0_snapshot_continues_the_same_run(ranks: list[dict[str, Any]]) -> None:
    for r in ranks:
        for key, value in r["direct"].items():
            assert torch.equal(r["resumed"][key], value), (r["rank"], key)


def test_reward_scaler_and_normaliser_match_one_process_on_all_data(ranks: list[dict[str, Any]]) -> None:
    first, second = ranks
    rewards = torch.cat([first["rewards"], second["rewards"]], dim=1)
    dones = torch.cat([first["dones"], second["dones"]], dim=1)
    reference = InstanceRewardScaler(8, 0.9)
    expected = [reference(rewards, dones), reference(rewards * 2.0, dones.flip(0))]
    for r, cols in zip(ranks, (slice(0, 4), slice(4, 8)), strict=True):
        for got, want in zip(r["scaled"], expected, strict=True):
            assert torch.equal(got, want[:, cols])
        assert torch.equal(r["scaler_returns"], reference.returns)
        for key, value in reference.stats.state_dict().items():
            assert torch.equal(r["scaler_stats"][key], value), key

    rms = RunningMeanStd((3,))
    obs = torch.cat([first["obs"], second["obs"]])
    rms.update(obs)
    rms.update(torch.cat([first["obs"][:2], second["obs"][:2]]) * 0.5)
    for key, value in rms.state_dict().items():
        assert torch.equal(first["rms"][key], second["rms"][key]), key
        torch.testing.assert_close(first["rms"][key], value, rtol=1e-12, atol=1e-12)


def test_train_command_under_torchrun_saves_once_from_rank0(ranks: list[dict[str, Any]]) -> None:
    assert [r["cli_rc"] for r in ranks] == [0, 0]
    stdout = ranks[0]["stdout"]
    assert stdout.count("on 2 ranks") == 1 and stdout.count("member 0 (seed 0) trained") == 1
    ens = load_ensemble(ranks[0]["out"] / "ensemble")
    assert len(ens) == 1
    # The command trained the same config as the direct run: same weights.
    saved = ens.members[0].state_dict()
    for key, value in ranks[0]["direct"].items():
        assert torch.equal(saved[key], value), key
    assert not list((ranks[0]["out"] / "ensemble" / "member_0").glob("*.tmp"))


def test_one_process_context_is_inert(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = context()
    assert (ctx.rank, ctx.world_size, ctx.is_main, ctx.active) == (0, 1, True, False)
    scaler = ctx.reward_scaler(3, 0.99, "cpu")
    assert type(scaler) is InstanceRewardScaler and scaler.returns.shape == (3,)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert torchrun_world() == (0, 1, 0)
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="must be integers"):
        torchrun_world()


def test_snapshot_from_another_world_size_is_refused() -> None:
    cfg = PPOConfig.preset("tiny", **CONFIG)
    with pytest.raises(ValueError, match="2 rank"):
        train(cfg, resume={"format": 1, "num_envs": CONFIG["num_envs"], "world_size": 2})
