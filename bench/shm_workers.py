"""Twin worker processes: instance-steps per second of ShmVectorTwin versus the in-process twin.

Baseline (same run, same B): one in-process numpy GreenhouseTwin, which is what each worker
steps for its slice; the in-process torch twin (``PPOConfig.workers = 0``) is shown too. The
vector twin is timed through its learner-side API (torch actions in, zero-copy torch views out),
so the numbers include the hand-off through shared memory and the per-step round trip.

    python bench/shm_workers.py [--instances 4096] [--workers 1,2] [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import numpy as np


def _actions(b: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = np.zeros((b, dim), np.float32)
    a[:, : dim - 2] = rng.random((b, dim - 2)) < 0.4
    a[:, 0] = 1.0  # at least one open valve: no dead-heading terminations in the timing
    a[:, dim - 2] = 60.0
    a[:, dim - 1] = 30.0
    return a


def _rate(step: Callable[[], object], b: int, seconds: float) -> float:
    for _ in range(3):
        step()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    return b * n / (time.perf_counter() - t0)


def time_in_process(backend: str, b: int, seconds: float) -> float:
    import torch

    from twin import GreenhouseTwin

    twin = GreenhouseTwin(num_instances=b, backend=backend, seed=0)  # type: ignore[arg-type]
    twin.reset()
    a = _actions(b, twin.action_spec.dim)
    act = torch.as_tensor(a) if backend == "torch" else a
    return _rate(lambda: twin.step(act), b, seconds)


def time_workers(b: int, workers: int, seconds: float) -> tuple[float, float]:
    """(instance-steps/s, seconds to start the workers)."""
    import torch

    from policy.parallel.vector import ShmVectorTwin

    t0 = time.perf_counter()
    with ShmVectorTwin(b, workers, seed=0) as vec:
        started = time.perf_counter() - t0
        vec.reset()
        act = torch.as_tensor(_actions(b, vec.action_spec.dim))
        return _rate(lambda: vec.step(act), b, seconds), started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=4096)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # the learner's threads would compete with the workers for the same cores
    b = args.instances
    print(f"B={b}, {os.cpu_count()} CPUs")
    baseline = time_in_process("numpy", b, args.seconds)
    results: dict[str, dict[str, float]] = {"in_process_numpy": {"steps_per_s": baseline}}
    print(f"{'twin':<26} {'inst-steps/s':>14} {'x baseline':>11} {'start s':>8}")
    print(f"{'in-process numpy':<26} {baseline:>14,.0f} {1.0:>11.2f} {'':>8}")
    rate = time_in_process("torch", b, args.seconds)
    results["in_process_torch"] = {"steps_per_s": rate, "ratio": rate / baseline}
    print(f"{'in-process torch (1 thr)':<26} {rate:>14,.0f} {rate / baseline:>11.2f} {'':>8}")
    for w in (int(x) for x in args.workers.split(",")):
        rate, started = time_workers(b, w, args.seconds)
        results[f"workers={w}"] = {"steps_per_s": rate, "ratio": rate / baseline, "start_s": started}
        print(f"{f'ShmVectorTwin W={w}':<26} {rate:>14,.0f} {rate / baseline:>11.2f} {started:>8.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
