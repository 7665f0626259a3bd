"""CPU time per step of the compiled twin, one torch thread: a number a loaded machine cannot skew.

Wall-clock rates on a shared machine measure the neighbours; the process CPU time of one thread
does not. This times ``GreenhouseTwin.step`` with ``time.process_time()`` over ``--steps`` steps,
best of ``--repeats``, after ``--warmup`` steps (the first pays the compile), and prints the CPU
milliseconds per step and the instance-steps per CPU-second. ``--set name=value`` passes twin
config overrides, which is how a section is ablated (``--set moisture_estimate=False``).

    python bench/twin_cpu_profile.py [--size 65536] [--no-compile] [--set moisture_estimate=False]
"""

from __future__ import annotations

import argparse
import ast
import time
from typing import Any

import numpy as np
import torch


def _actions(b: int, dim: int, seed: int = 0) -> np.ndarray:
    """The actions ``bench/twin_throughput.py`` times with (one valve always open: no terminations)."""
    rng = np.random.default_rng(seed)
    a = np.zeros((b, dim), np.float32)
    a[:, : dim - 2] = rng.random((b, dim - 2)) < 0.4
    a[:, 0] = 1.0
    a[:, dim - 2] = 60.0
    a[:, dim - 1] = 30.0
    return a


def _overrides(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        name, _, text = pair.partition("=")
        try:
            out[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[name] = text
    return out


def cpu_ms_per_step(size: int, compile: bool = True, steps: int = 10, repeats: int = 5, warmup: int = 3,
                    **overrides: Any) -> float:
    """Best-of-``repeats`` process CPU milliseconds per step at batch ``size`` on one torch thread."""
    from twin import GreenhouseTwin

    torch.set_num_threads(1)
    twin = GreenhouseTwin(num_instances=size, backend="torch", device="cpu", seed=0, compile=compile,
                          **overrides)
    twin.reset()
    act = torch.as_tensor(_actions(size, twin.action_spec.dim))
    for _ in range(warmup):
        twin.step(act)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(steps):
            twin.step(act)
        best = min(best, (time.process_time() - t0) / steps)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=65536)
    parser.add_argument("--no-compile", action="store_true", help="time the eager torch step")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="twin config override (repeatable)")
    args = parser.parse_args()
    overrides = _overrides(args.set)
    t0 = time.process_time()
    ms = cpu_ms_per_step(args.size, not args.no_compile, args.steps, args.repeats, args.warmup, **overrides)
    label = "compiled" if not args.no_compile else "eager"
    extra = " ".join(args.set) or "default config"
    print(f"torch/cpu {label} B={args.size} ({extra}): {ms:.1f} ms CPU per step, "
          f"{args.size / ms * 1e3:,.0f} instance-steps per CPU-second (1 thread; "
          f"{time.process_time() - t0:.0f} s CPU in all)")


if __name__ == "__main__":
    main()
