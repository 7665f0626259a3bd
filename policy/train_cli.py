"""``greentwin train``: train the PPO ensemble on the twin into a resumable directory.

The default output directory is derived from the preset and seed, so rerunning the same
command after a kill continues the run instead of starting a new one. Torch is imported only
when the command runs, so building the CLI parser stays cheap.

Under ``torchrun`` (RANK / WORLD_SIZE / LOCAL_RANK set, more than one process) the command joins
the process group itself and trains data-parallel (:mod:`policy.distributed`): every rank steps
its own ``num_envs`` instances, and rank 0 alone prints, writes snapshots and saves members.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

PRESETS = ("tiny", "small", "full")


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``train`` subcommand's options (shared by app/cli.py and the tests)."""
    parser.add_argument("--preset", choices=PRESETS, default="small", help="training size (default: small)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="auto: cuda when available, else cpu")
    parser.add_argument("--members", type=int, default=5, help="ensemble size K (default: 5)")
    parser.add_argument("--out", default=None, help="output directory (default: runs/ppo-<preset>-seed<S>)")
    parser.add_argument("--seed", type=int, default=0, help="base seed; member k uses seed + k")
    parser.add_argument("--snapshot-every", type=int, default=10,
                        help="write a resumable mid-training snapshot every N iterations (0: never)")
    parser.add_argument("--eval-steps", type=int, default=None,
                        help="held-out evaluation control steps per member (default: one simulated day; 0: "
                             "none)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a PPOConfig field, e.g. --set total_steps=100000 (repeatable)")
    parser.add_argument("--workers", type=int, default=None, metavar="W",
                        help="step the twin in W worker processes over shared memory (default 0: in-process)")
    parser.add_argument("--demos", action="append", default=[], metavar="FILE.npz",
                        help="operator demonstrations for the BC term (`greentwin demos export`; repeatable)")
    parser.add_argument("--jobs", type=int, default=0,
                        help="members trained at once on CPU cores, each in its own process (default 0: one "
                             "per two cores on a CPU run, else 1); the same --jobs on the same machine gives "
                             "the same weights")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    """A standalone parser (``python -m policy.train_cli``) with the same options as ``greentwin train``."""
    parser = argparse.ArgumentParser(prog="greentwin train", description="Train the PPO policy ensemble.")
    add_train_arguments(parser)
    return parser


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as typed PPOConfig field values (ValueError on unknown or unparsable)."""
    from policy.config import PPOConfig

    defaults = PPOConfig()
    fields = {f.name for f in dataclasses.fields(PPOConfig)} - {"twin_overrides", "device", "seed"}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in fields:
            raise ValueError(f"bad --set {item!r}: expected KEY=VALUE with KEY one of {sorted(fields)}")
        kind = type(getattr(defaults, key))
        if kind is tuple:  # a list of paths: comma-separated, none when empty
            out[key] = tuple(part.strip() for part in raw.split(",") if part.strip())
        elif kind is bool:
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"bad --set {item!r}: expected true or false")
            out[key] = raw.lower() in ("true", "1")
        else:
            try:
                out[key] = kind(float(raw)) if kind is int and "e" in raw.lower() else kind(raw)
            except ValueError as exc:
                raise ValueError(f"bad --set {item!r}: {exc}") from exc
    return out


def resolve_device(choice: str) -> str:
    """'auto' becomes cuda when a GPU is usable; an explicit cuda without one is an error."""
    import torch

    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda requested but torch sees no CUDA device")
    return choice


def run_train(args: argparse.Namespace) -> int:
    """Handler of ``greentwin train``: 0 on success, 2 on bad arguments or an incompatible directory."""
    from policy import distributed

    try:
        device = resolve_device(args.device)
        created = distributed.init_from_env(device)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ctx = distributed.context()
    try:
        if not ctx.is_main:
            from policy.ppo import train

            distributed.follow(train)
            return 0
        try:
            return _train_members(args, device, ctx.world_size)
        finally:
            distributed.release_followers()
    finally:
        if created:
            distributed.shutdown()


def _train_members(args: argparse.Namespace, device: str, world_size: int) -> int:
    from policy.checkpoint import CheckpointError
    from policy.config import PPOConfig
    from policy.ensemble_training import check_jobs, default_jobs, train_ensemble

    try:
        if args.members < 1:
            raise ValueError("--members must be >= 1")
        if args.jobs < 0:
            raise ValueError("--jobs must be 0 (one per core) or more")
        changes = parse_overrides(args.overrides)
        if args.workers is not None:
            changes["workers"] = args.workers
        if args.demos:
            changes["demo_files"] = tuple(str(Path(d).resolve()) for d in args.demos)
        cfg = PPOConfig.preset(args.preset, seed=args.seed, device=device, **changes)
        jobs = args.jobs or default_jobs(cfg, args.members)
        check_jobs(cfg, jobs)
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path("runs") / f"ppo-{args.preset}-seed{args.seed}"
    eval_steps = args.eval_steps if args.eval_steps is not None else max(1, round(86400.0 / cfg.dt_s))
    where, each = (f"{world_size} ranks on {device}", "per rank") if world_size > 1 else (device, "each")
    where += f" with {cfg.workers} twin workers" if cfg.workers else ""
    where += f", {min(jobs, args.members)} members at a time" if jobs > 1 else ""
    print(f"training {args.members} member(s), preset {args.preset} on {where}: {cfg.num_iterations} "
          f"iterations x {cfg.batch_size} env steps {each} -> {out}")
    try:
        result = train_ensemble(cfg, args.members, out, progress=not args.no_progress,
                                snapshot_every=args.snapshot_every, eval_steps=eval_steps, jobs=jobs)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenProcessPool:
        print("error: a member's worker process died (killed for memory?); rerun to resume its member from "
              "its last snapshot, with --jobs 1 if it happens again", file=sys.stderr)
        return 1
    for m in result.members:
        train_m = (m.metrics or {}).get("train", {})
        eval_m = (m.metrics or {}).get("eval")
        parts = [f"member {m.member} (seed {m.seed}) {m.status}"]
        if train_m:
            expert_open = train_m.get("expert_open_rate", -1.0)
            parts.append(f"train reward {train_m['mean_reward']:.3f}, valve open "
                         f"{train_m['valve_open_rate']:.3f}"
                         + (f" (served threshold {expert_open:.3f})" if expert_open >= 0 else ""))
        if eval_m:
            parts.append(f"eval reward {eval_m['mean_reward']:.3f}, terminations "
                         f"{eval_m['terminations']:.0f}")
        parts.append(f"{m.seconds:.1f} s")
        print("  " + ", ".join(parts))
    print(f"ensemble {result.policy_version} ({len(result.members)} members) written to {result.directory}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_train(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
