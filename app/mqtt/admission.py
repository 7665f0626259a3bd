"""Which valid-looking inbound messages the bridge lets through: order, age, clock skew and rate.

A payload that passed :mod:`wire.topics` can still be a replay (an old ``seq``), stale, or
stamped in the future by a wrong or hostile edge clock; a future timestamp would pass the stale
check for as long as it lies ahead and keep the stale-telemetry watchdog quiet. And one chatty
or compromised edge box must not fill the intake for everybody: each greenhouse gets a token
bucket, and telemetry beyond it is shed (counted, never silently).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from wire.topics import Telemetry

# (reason code, detail for the log); None when the message is admitted.
Verdict = tuple[str, str] | None

DEFAULT_MAX_FUTURE_S: Final = 30.0
BOOTS_KEPT: Final = 8
"""Earlier boot ids remembered per greenhouse: a box never returns to one, so telemetry naming one is
a replay (recorded before a reboot, sent again to reopen a sequence window that was closed)."""
DEFAULT_RATE_PER_S: Final = 20.0
DEFAULT_BURST: Final = 40


def future_skew(ts: datetime, now: float, max_future_s: float) -> Verdict:
    """``future`` when ``ts`` lies more than ``max_future_s`` ahead of the service's clock."""
    ahead = ts.timestamp() - now
    if ahead > max_future_s:
        return "future", f"{ahead:.1f} s ahead of the service clock > {max_future_s:g} s"
    return None


@dataclass
class _Bucket:
    tokens: float
    at: float


class RateLimit:
    """Per-greenhouse token bucket: ``rate_per_s`` sustained, ``burst`` at once. Thread-safe."""

    def __init__(self, rate_per_s: float = DEFAULT_RATE_PER_S, burst: int = DEFAULT_BURST) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def allow(self, gh: str, now: float, cost: float = 1.0) -> bool:
        """Take ``cost`` tokens for ``gh`` if there are that many (``now`` is a monotonic clock)."""
        with self._lock:
            b = self._buckets.get(gh)
            if b is None:
                b = self._buckets[gh] = _Bucket(float(self.burst), now)
            b.tokens = min(float(self.burst), b.tokens + (now - b.at) * self.rate_per_s)
            b.at = now
            if b.tokens < cost:
                return False
            b.tokens -= cost
            return True


class TelemetryAdmission:
    """Sequence window, age and skew checks per greenhouse (rate limiting is :class:`RateLimit`'s)."""

    def __init__(self, *, max_age_s: float, max_future_s: float = DEFAULT_MAX_FUTURE_S,
                 wall_clock: Callable[[], float]) -> None:
        self.max_age_s = max_age_s
        self.max_future_s = max_future_s
        self._wall_clock = wall_clock
        self._last_seen: dict[str, tuple[str, int]] = {}  # gh -> (boot_id, last accepted seq)
        self._earlier_boots: dict[str, OrderedDict[str, None]] = {}
        self._lock = threading.Lock()

    def check(self, gh: str, tel: Telemetry) -> Verdict:
        """Admit ``tel`` (and move the window) or say why not: duplicate, out_of_order, old_boot, stale,
        future."""
        with self._lock:
            last = self._last_seen.get(gh)
            if last is not None and last[0] == tel.boot_id and tel.seq <= last[1]:
                reason = "duplicate" if tel.seq == last[1] else "out_of_order"
                return reason, f"seq {tel.seq} <= last {last[1]} (boot {tel.boot_id})"
            earlier = self._earlier_boots.get(gh)
            if earlier is not None and tel.boot_id in earlier:
                return "old_boot", f"boot {tel.boot_id} ended before boot {last[0] if last else '?'}"
            now = self._wall_clock()
            age = now - tel.ts.timestamp()
            if age > self.max_age_s:
                return "stale", f"{age:.1f} s old > max_age_s {self.max_age_s:g}"
            if (skew := future_skew(tel.ts, now, self.max_future_s)) is not None:
                return skew
            if last is not None and last[0] != tel.boot_id:  # a reboot: the old boot's window closes for good
                earlier = self._earlier_boots.setdefault(gh, OrderedDict())
                earlier[last[0]] = None
                while len(earlier) > BOOTS_KEPT:
                    earlier.popitem(last=False)
            self._last_seen[gh] = (tel.boot_id, tel.seq)  # a new boot_id starts a new window
            return None

    def check_time(self, ts: datetime) -> Verdict:
        """Acks and e-stops: only the future bound (an old ack or press is still worth recording)."""
        return future_skew(ts, self._wall_clock(), self.max_future_s)
