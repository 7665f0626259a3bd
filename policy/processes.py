"""Worker processes for independent jobs (evaluation scenarios, hindsight demonstrations, ensemble members).

All fan out the same way: spawned processes, each computing on its share of the cores. Spawn,
not fork: a forked copy of a process that has already started torch's thread pools can hang.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
"""cgroup v2's CPU bandwidth limit of this process's group: "<quota> <period>" in microseconds, or "max"."""


def cgroup_cpu_limit(path: Path = CGROUP_CPU_MAX) -> float | None:
    """The CPU time this process's cgroup may use, in cores; None when unlimited or unknown."""
    try:
        quota, period = path.read_text().split()[:2]
        return None if quota == "max" else max(int(quota) / int(period), 0.0)
    except (OSError, ValueError, ZeroDivisionError):
        return None


def usable_cores(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """CPU cores this process may run on: its affinity mask where the OS has one, capped by its
    cgroup's CPU quota (a container given 2 of 16 cores sees 16 in its mask; more threads than its
    quota only queue for the same time slices)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = cgroup_cpu_limit(cpu_max)
    if limit is not None:
        cores = min(cores, math.ceil(limit))
    return max(1, cores)


def spawn_pool(workers: int, threads: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` spawned processes computing on ``threads`` torch/OpenMP threads each."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_set_threads, initargs=(threads,))


def map_in_processes(fn: Callable[[T], R], items: Sequence[T], jobs: int,
                     progress: Callable[[int, int], None] | None = None) -> list[R]:
    """``[fn(item) for item in items]`` on ``min(jobs, len(items))`` spawned one-thread processes
    (in this process when that is one); ``progress(done, total)`` as each item finishes."""
    total = len(items)
    if jobs <= 1 or total <= 1:
        results = []
        for item in items:
            results.append(fn(item))
            if progress is not None:
                progress(len(results), total)
        return results
    with spawn_pool(min(jobs, total), threads=1) as pool:
        futures = [pool.submit(fn, item) for item in items]
        for done, _ in enumerate(as_completed(futures), 1):
            if progress is not None:
                progress(done, total)
        return [f.result() for f in futures]


def _set_threads(threads: int) -> None:
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
