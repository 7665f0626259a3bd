"""Worker processes for independent jobs (evaluation scenarios, ensemble members).

Both fan out the same way: spawned processes, each computing on its share of the cores. Spawn,
not fork: a forked copy of a process that has already started torch's thread pools can hang.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def spawn_pool(workers: int, threads: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` spawned processes computing on ``threads`` torch/OpenMP threads each."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_set_threads, initargs=(threads,))


def _set_threads(threads: int) -> None:
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
