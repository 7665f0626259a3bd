"""Failed-login throttling: a sliding window of failure times per (username, client address).

In memory and per process: enough to make online guessing slow (5 tries per 5 minutes by
default), not a defence against an attacker with many addresses. A success clears the key;
attempts refused while blocked are not counted, so the window slides open on schedule.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

MAX_KEYS = 10_000  # bounded memory whatever an attacker sends


class SlidingWindowLimiter:
    """At most ``max_failures`` failures per key in any ``window_s``-second window; thread-safe."""

    def __init__(self, max_failures: int, window_s: float, *, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = MAX_KEYS) -> None:
        if max_failures < 1 or window_s <= 0 or max_keys < 1:
            raise ValueError("max_failures and max_keys must be >= 1 and window_s > 0")
        self.max_failures = max_failures
        self.window_s = window_s
        self._clock = clock
        self._max_keys = max_keys
        self._failures: dict[Hashable, deque[float]] = {}
        self._lock = threading.Lock()

    def attempt(self, key: Hashable) -> float:
        """Count an attempt for ``key`` and return 0.0, or return the seconds to wait when it is blocked.

        Every attempt counts as a failure until :meth:`reset` says it succeeded: checking and
        counting in one step means parallel guesses cannot slip past the limit.
        """
        now = self._clock()
        with self._lock:
            times = self._recent(key, now)
            if times is not None and len(times) >= self.max_failures:
                return max(times[0] + self.window_s - now, 1e-3)
            if times is None:
                if len(self._failures) >= self._max_keys:
                    self._evict(now)
                times = self._failures[key] = deque(maxlen=self.max_failures)
            times.append(now)
            return 0.0

    def reset(self, key: Hashable) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def _recent(self, key: Hashable, now: float) -> deque[float] | None:
        """The key's failures inside the window (older ones dropped), or None when there are none."""
        times = self._failures.get(key)
        if times is None:
            return None
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times

    def _evict(self, now: float) -> None:
        """Drop expired keys; if the table is still full, the key whose last failure is oldest."""
        for key in [k for k, t in self._failures.items() if t[-1] <= now - self.window_s]:
            del self._failures[key]
        if len(self._failures) >= self._max_keys:
            del self._failures[min(self._failures, key=lambda k: self._failures[k][-1])]
