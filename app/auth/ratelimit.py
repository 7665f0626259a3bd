"""A sliding window of failure times per key: the counter behind every failed-login limit.

In memory and per process: enough to make online guessing slow, not a shared count across
replicas (:mod:`app.auth.throttle` says which keys are counted and what a full window means).
Attempts refused while blocked are not counted, so the window slides open on schedule.
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

    def attempt(self, key: Hashable, *, limit: int | None = None) -> float:
        """Count an attempt for ``key`` and return 0.0, or return the seconds to wait when it is blocked.

        Every attempt counts as a failure until :meth:`reset` or :meth:`forgive` says it succeeded:
        checking and counting in one step means parallel guesses cannot slip past the limit.
        ``limit`` (at most ``max_failures``) holds this one attempt to a tighter limit.
        """
        allowed = self.max_failures if limit is None else max(1, min(limit, self.max_failures))
        now = self._clock()
        with self._lock:
            times = self._recent(key, now)
            if times is not None and len(times) >= allowed:
                # Blocked until enough failures slide out to leave room for one more.
                return max(times[len(times) - allowed] + self.window_s - now, 1e-3)
            self._append(key, times, now)
            return 0.0

    def record(self, key: Hashable) -> int:
        """Count a failure for ``key`` whatever the count (the oldest goes once the window holds
        ``max_failures``); the number of failures in the window now."""
        now = self._clock()
        with self._lock:
            times = self._append(key, self._recent(key, now), now)
            return len(times)

    def count(self, key: Hashable) -> int:
        """Failures of ``key`` in the window now."""
        with self._lock:
            times = self._recent(key, self._clock())
            return 0 if times is None else len(times)

    def forgive(self, key: Hashable) -> None:
        """Take back the newest attempt of ``key`` (it succeeded) and keep the rest counted."""
        with self._lock:
            times = self._failures.get(key)
            if times:
                times.pop()
                if not times:
                    del self._failures[key]

    def reset(self, key: Hashable) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def keys_where(self, predicate: Callable[[Hashable], bool]) -> list[Hashable]:
        """The keys with failures in the window that ``predicate`` selects."""
        now = self._clock()
        with self._lock:
            return [k for k in list(self._failures) if predicate(k) and self._recent(k, now) is not None]

    def _append(self, key: Hashable, times: deque[float] | None, now: float) -> deque[float]:
        if times is None:
            if len(self._failures) >= self._max_keys:
                self._evict(now)
            times = self._failures[key] = deque(maxlen=self.max_failures)
        times.append(now)
        return times

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
