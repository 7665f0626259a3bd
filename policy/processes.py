"""Worker processes for independent jobs (evaluation scenarios, hindsight demonstrations, ensemble members).

All fan out the same way: spawned processes, each computing on its share of the cores. Spawn,
not fork: a forked copy of a process that has already started torch's thread pools can hang.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


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
