"""One rank of the two-rank training check in test_distributed.py (run under torchrun, gloo on CPU).

``python distributed_worker.py OUT CONFIG_JSON``: CONFIG_JSON holds overrides of the 'tiny'
preset. Trains that config directly (with a snapshot after every iteration, then once more
resumed from rank 0's first snapshot), runs the synced normaliser and sharded reward scaler on
rank-specific data, then runs ``greentwin train`` itself. Everything the test compares is
saved to ``<out>/rank<r>.pt``.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import torch

from policy import distributed
from policy.config import PPOConfig
from policy.normalize import RunningMeanStd
from policy.ppo import train
from policy.train_cli import build_parser, run_train


def main(out: Path, config: dict[str, Any]) -> None:
    torch.set_num_threads(1)
    created = distributed.init_from_env("cpu")
    ctx = distributed.context()
    cfg = PPOConfig.preset("tiny", **config)
    snapshots: list[dict[str, Any]] = []
    direct = train(cfg, snapshot=lambda s: snapshots.append(copy.deepcopy(s)), snapshot_every=1)
    resumed = train(cfg, resume=snapshots[0] if ctx.is_main else None)

    gen = torch.Generator().manual_seed(100 + ctx.rank)
    rewards = torch.randn((5, 4), generator=gen) * (1.0 + ctx.rank)
    dones = torch.rand((5, 4), generator=gen) < 0.2
    scaler = ctx.reward_scaler(4, 0.9, "cpu")
    scaled = [scaler(rewards, dones), scaler(rewards * 2.0, dones.flip(0))]
    obs = torch.randn((7, 3), generator=gen) * 3.0 + ctx.rank
    rms = distributed.SyncedRunningMeanStd.adopt(RunningMeanStd((3,)))
    rms.update(obs)
    rms.update(obs[:2] * 0.5)

    overrides = [arg for key, value in config.items() for arg in ("--set", f"{key}={value}")]
    args = build_parser().parse_args(["--preset", "tiny", "--device", "cpu", "--members", "1", "--seed", "0",
                                      "--out", str(out / "ensemble"), "--eval-steps", "2", "--snapshot-every",
                                      "1", "--no-progress", *overrides])
    rc = run_train(args)

    torch.save({
        "rank": ctx.rank, "world_size": ctx.world_size, "direct": direct.agent.state_dict(),
        "metrics": [m._asdict() for m in direct.metrics], "resumed": resumed.agent.state_dict(),
        "snapshot": snapshots[0] if snapshots else None, "snapshots": len(snapshots),
        "rewards": rewards, "dones": dones, "scaled": scaled, "scaler_stats": scaler.stats.state_dict(),
        "scaler_returns": scaler.returns, "obs": obs, "rms": rms.state_dict(), "cli_rc": rc,
    }, out / f"rank{ctx.rank}.pt")
    if created:
        distributed.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(sys.argv[2]))
