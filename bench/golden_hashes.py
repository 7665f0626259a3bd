"""Golden hashes of twin trajectories and trained weights, to prove a speed-up changed no result.

Prints one SHA-256 per check; ``--save FILE`` records them, ``--check FILE`` compares against a
recording and exits 1 on any difference. Hashes are bit-exact, so they only compare runs on the
same machine, library versions and torch thread count (one thread here, as in the tests).

* ``twin/<backend>``: obs, reward, terminated, truncated of a 200-step run of 64 instances with
  every fault on, random actions and 1-day episodes (so autoreset happens), plus the final state
  and params; ``-healthy``: the same without faults; ``-probe-mean``: with the probe-mean observation;
* ``train/bc`` and ``train/residual``: the final weights of tiny training runs (BC warm start, and
  the residual mode that ships);
* ``train/small-bc`` and ``train/small-residual`` (``--small``): two iterations at preset ``small``
  (20 BC pretraining updates), without and with ``residual=true``;
* ``twin/torch+compile`` (``--compile``): the compiled torch step (about a minute of compilation).

    python bench/golden_hashes.py [--small] [--compile] [--save FILE | --check FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from typing import Any

import numpy as np
import torch


def _digest(arrays: list[Any]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def twin_hash(backend: str, compile: bool = False, steps: int = 200, b: int = 64, faults: bool = True,
              **overrides: Any) -> str:
    from twin import FaultConfig, GreenhouseTwin

    twin = GreenhouseTwin(b, backend=backend, seed=7,
                          faults=FaultConfig.all_on(0.05) if faults else FaultConfig(),
                          episode_days=1.0, compile=compile, **overrides)
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 1, (steps, b, twin.action_spec.dim)).astype(np.float32)
    a[..., :6] = a[..., :6] > 0.5
    a[..., 6] = 30 + 50 * a[..., 6]
    a[..., 7] *= 100
    out = [twin.reset()]
    for t in range(steps):
        act = torch.as_tensor(a[t]) if backend == "torch" else a[t]
        obs, reward, terminated, truncated, _ = twin.step(act)
        out += [obs, reward, terminated, truncated]
    out += list(twin.state.arrays().values()) + list(twin.params.arrays().values())
    return _digest(out)


def train_hash(residual: bool, small: bool = False) -> str:
    from policy.config import PPOConfig
    from policy.ppo import train

    if small:
        cfg = PPOConfig.preset("small", residual=residual, bc_pretrain_updates=20)
        cfg = cfg.replace(total_steps=2 * cfg.batch_size)
    else:
        cfg = PPOConfig.preset("tiny", num_envs=32, num_steps=16, total_steps=32 * 16 * 3, bc_demo_steps=16,
                               bc_pretrain_updates=10, bc_decay_steps=2000, residual=residual)
    result = train(cfg)
    sd = result.agent.state_dict()
    # Every metric but the timing one (rollout steps/s).
    rows = [[v for k, v in m._asdict().items() if k != "steps_per_s"] for m in result.metrics]
    return _digest([sd[k] for k in sorted(sd)] + [np.array(rows, dtype=np.float64)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="also two iterations at preset small")
    parser.add_argument("--compile", action="store_true", help="also the compiled torch twin")
    parser.add_argument("--only", default="", help="comma-separated check names to run (default: all)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--save", default=None)
    group.add_argument("--check", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)

    checks: dict[str, Any] = {
        "twin/numpy": lambda: twin_hash("numpy"),
        "twin/torch": lambda: twin_hash("torch"),
        "twin/numpy-healthy": lambda: twin_hash("numpy", faults=False),
        "twin/torch-healthy": lambda: twin_hash("torch", faults=False),
        "twin/numpy-probe-mean": lambda: twin_hash("numpy", moisture_estimate=False),
        "twin/torch-probe-mean": lambda: twin_hash("torch", moisture_estimate=False),
        "train/bc": lambda: train_hash(False),
        "train/residual": lambda: train_hash(True),
    }
    if args.small:
        checks["train/small-bc"] = lambda: train_hash(False, small=True)
        checks["train/small-residual"] = lambda: train_hash(True, small=True)
    if args.compile:
        checks["twin/torch+compile"] = lambda: twin_hash("torch", compile=True)
    if args.only:
        checks = {k: v for k, v in checks.items() if k in args.only.split(",")}
    ref = json.load(open(args.check)) if args.check else {}
    got: dict[str, str] = {}
    bad = 0
    for name, fn in checks.items():
        got[name] = fn()
        verdict = ""
        if name in ref:
            same = ref[name] == got[name]
            bad += not same
            verdict = "same" if same else "DIFFERENT"
        print(f"{name:<24} {got[name][:16]}  {verdict}", flush=True)
    if args.save:
        with open(args.save, "w") as fh:
            json.dump(got, fh, indent=2)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
