"""Running a function on the service's event loop from any thread, and waiting for its answer.

Operator actions arrive on the API's worker threads; they must run on the loop, between a batch's
stages, never in the middle of half a decision.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop of this thread, None outside one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def call_on_loop(loop: asyncio.AbstractEventLoop | None, fn: Callable[[], T], timeout_s: float = 60.0) -> T:
    """``fn()`` run on ``loop`` (in place when there is none, it is not running, or this is its thread)."""
    if loop is None or not loop.is_running() or running_loop() is loop:
        return fn()
    done: concurrent.futures.Future[T] = concurrent.futures.Future()

    def call() -> None:
        try:
            done.set_result(fn())
        except BaseException as exc:  # handed to the caller's thread
            done.set_exception(exc)

    loop.call_soon_threadsafe(call)
    return done.result(timeout=timeout_s)
