"""Twin throughput: instance-steps per second of the batched twin versus a per-instance baseline.

Baseline (same run): gymnasium's SyncVectorEnv over B=64 single-instance ``GreenhouseEnv``s,
i.e. what an RL user gets by wrapping a one-greenhouse simulator.

    python bench/twin_throughput.py [--sizes 1,64,4096,65536] [--backends numpy,torch] [--devices cpu,cuda]
                                    [--seconds 3] [--threads N] [--compile-sizes 4096,65536] [--json FILE]

Each compiled row is first checked against the eager twin over its warm-up steps (same seed and
actions); a compiled step that computes something else fails its row instead of timing it (this
is where the compiled twin's agreement is checked on every run; the test of it is a soak test).
CUDA rows appear when a GPU is present (``bench/device_check.sh`` runs this on a lent one). A
configuration that fails (an out-of-memory size, a compiler missing) prints its error as its row
and the run goes on, so one run on a rented machine always reports what it could measure.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import torch


def _actions(b: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = np.zeros((b, dim), np.float32)
    a[:, : dim - 2] = rng.random((b, dim - 2)) < 0.4
    a[:, 0] = 1.0  # at least one open valve: no dead-heading terminations in the timing
    a[:, dim - 2] = 60.0
    a[:, dim - 1] = 30.0
    return a


def time_batched(backend: str, b: int, seconds: float, device: str = "cpu", compile: bool = False
                 ) -> tuple[float, int]:
    from twin import GreenhouseTwin

    twin = GreenhouseTwin(num_instances=b, backend=backend, device=device, seed=0, compile=compile)
    twin.reset()
    a = _actions(b, twin.action_spec.dim)
    act = torch.as_tensor(a, device=device) if backend == "torch" else a
    warmup = [twin.step(act)[:2] for _ in range(3)]
    if compile:  # a throughput is only worth reporting for a compiled step that computes the eager one
        _check_against_eager(b, device, act, warmup)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        twin.step(act)
        n += 1
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return b * n / (time.perf_counter() - t0), twin.bytes_per_instance()


def _check_against_eager(b: int, device: str, act: torch.Tensor, compiled: list[tuple[Any, Any]]) -> None:
    """AssertionError unless the eager twin on the same seed gives the compiled steps' observations and
    rewards."""
    from twin import GreenhouseTwin

    eager = GreenhouseTwin(num_instances=b, backend="torch", device=device, seed=0)
    eager.reset()
    for k, (obs, reward) in enumerate(compiled):
        want_obs, want_reward = eager.step(act)[:2]
        for name, got, want, atol in (("observation", obs, want_obs, 1e-3),
                                      ("reward", reward, want_reward, 1e-4)):
            try:
                np.testing.assert_allclose(got.cpu().numpy(), want.cpu().numpy(), rtol=1e-4, atol=atol)
            except AssertionError as exc:
                said = [ln.strip() for ln in str(exc).splitlines()
                        if ln.strip().startswith(("Mismatched", "Max abs"))]
                raise AssertionError(f"compiled step {k + 1} {name} differs from eager: "
                                     f"{'; '.join(said)}") from None


def time_sync_vector(b: int, seconds: float) -> float:
    import gymnasium

    from twin.gym_adapters import GreenhouseEnv

    envs = gymnasium.vector.SyncVectorEnv([lambda i=i: GreenhouseEnv(seed=i) for i in range(b)])
    envs.reset(seed=0)
    a = _actions(b, envs.single_action_space.shape[0])
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        envs.step(a)
        n += 1
    envs.close()
    return b * n / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,64,4096,65536")
    parser.add_argument("--backends", default="numpy,torch")
    parser.add_argument("--devices", default="cpu,cuda", help="torch devices timed; cuda only when present")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads (0: torch's default); "
                             "1 gives steadier numbers on a shared machine")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--compile-sizes", default="4096,65536",
                        help="sizes also timed with torch.compile "
                             "(each costs ~40 s of compilation on a CPU); "
                             "'' for none")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    sizes = [int(s) for s in args.sizes.split(",")]
    devices = args.devices.split(",")
    backends = args.backends.split(",")
    compile_sizes = {int(s) for s in args.compile_sizes.split(",") if s}
    targets = [(name, "cpu", False) for name in backends] if "cpu" in devices else []
    if "cpu" in devices and "torch" in backends and compile_sizes:
        targets.append(("torch", "cpu", True))
    if "cuda" in devices and "torch" in backends and torch.cuda.is_available():
        targets.append(("torch", "cuda", False))
        if compile_sizes:
            targets.append(("torch", "cuda", True))

    baseline = time_sync_vector(64, args.seconds)
    print(f"baseline: gymnasium SyncVectorEnv of 64 single-instance envs: {baseline:,.0f} instance-steps/s")
    results: dict[str, dict[str, Any]] = {"baseline_sync_vector_64": {"steps_per_s": baseline}}
    print(f"{'backend':<20} {'B':>8} {'inst-steps/s':>14} {'x baseline':>11} {'bytes/inst':>11}")
    for name, device, compiled in targets:
        for b in sizes:
            if compiled and b not in compile_sizes:
                continue
            label = f"{name}/{device}" + ("+compile" if compiled else "")
            try:
                rate, nbytes = time_batched(name, b, args.seconds, device, compiled)
            except Exception as exc:  # noqa: BLE001 - report the row and measure the rest
                results[f"{label}/B={b}"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                print(f"{label:<20} {b:>8} failed: {type(exc).__name__}: {str(exc)[:200]}")
                if device.startswith("cuda"):
                    torch.cuda.empty_cache()
                continue
            results[f"{label}/B={b}"] = {"steps_per_s": rate, "ratio": rate / baseline,
                                         "bytes_per_instance": nbytes}
            print(f"{label:<20} {b:>8} {rate:>14,.0f} {rate / baseline:>11.1f} {nbytes:>11}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
