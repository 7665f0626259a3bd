"""The forecast's worker process ends with the service, also when the service is killed outright (a pool
that is never shut down would leave it waiting on its task queue for ever, holding an ensemble)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

PARENT = """
import os, sys, multiprocessing
from concurrent.futures import ProcessPoolExecutor
from app.forecast.worker import _worker_init
if __name__ == "__main__":
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init)
    print(pool.submit(os.getpid).result(timeout=60), flush=True)
    os._exit(9)  # as a SIGKILL would end it: no shutdown, no atexit
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_the_worker_ends_when_the_service_is_killed() -> None:
    run = subprocess.run([sys.executable, "-c", PARENT], capture_output=True, text=True, timeout=120,
                         cwd=os.getcwd())
    assert run.returncode == 9, run.stderr
    worker = int(run.stdout.split()[0])
    deadline = time.monotonic() + 20
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker), f"the worker {worker} outlived its killed service"
