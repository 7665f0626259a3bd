"""The service's log: one bounded line per record, and floods of one kind collapsed into a count.

A client can make the service log as fast as it can send requests (each refused login, each
malformed body is a line), so a flood must not become megabytes of log or bury the lines that
matter. :class:`RepeatFilter` lets the first ``burst`` records of one message key through per
``interval_s`` and counts the rest; when the key's interval is over, one line says how many were
held back. The key is the logger, the level and the message's format string (not its
arguments: "login refused for %s from %s" is one key whatever the name and address), and for
the access log the status, plus method and path for successful requests. :class:`BoundedFormatter`
keeps a record on one line of bounded length whatever its arguments hold.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
MAX_MESSAGE_CHARS = 2000
SAMPLE_CHARS = 200
ACCESS_LOGGER = "uvicorn.access"


def message_key(record: logging.LogRecord) -> Hashable:
    """What counts as "the same line" for :class:`RepeatFilter`."""
    key: tuple[object, ...] = (record.name, record.levelno, str(record.msg))
    args = record.args
    if record.name == ACCESS_LOGGER and isinstance(args, tuple) and len(args) == 5:
        _client, method, path, _version, status = args
        # Failures by status alone (a flood varies the path at will); successes by route.
        key += (status,) if not isinstance(status, int) or status >= 400 else (
            status, method, str(path).partition("?")[0][:100])
    return key


@dataclass
class _Window:
    start: float
    passed: int = 1
    suppressed: int = 0
    sample: str = ""


class RepeatFilter(logging.Filter):
    """A handler filter: at most ``burst`` records per message key and ``interval_s``; the rest are
    counted and reported in one line by ``sink`` (the handler's ``handle``) after the interval."""

    def __init__(self, *, interval_s: float = 60.0, burst: int = 10, max_keys: int = 1000,
                 sink: Callable[[logging.LogRecord], object] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if interval_s <= 0 or burst < 1 or max_keys < 1:
            raise ValueError("interval_s must be > 0, burst and max_keys >= 1")
        super().__init__()
        self.interval_s, self.burst, self.max_keys = interval_s, burst, max_keys
        self.sink = sink
        self._clock = clock
        self._windows: dict[Hashable, _Window] = {}
        self._next_sweep = clock() + interval_s
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "repeat_summary", False):
            return True
        now = self._clock()
        key = message_key(record)
        with self._lock:
            summaries = self._sweep(now) if now >= self._next_sweep else []
            if key not in self._windows and len(self._windows) >= self.max_keys:
                key = (record.name, record.levelno, "(more kinds of lines)")  # a flood of distinct keys
            window = self._windows.get(key)
            if window is not None and now - window.start >= self.interval_s:
                summaries += self._close(key, window)
                window = None
            if window is None:
                self._windows[key] = _Window(now)
                passed = True
            elif window.passed < self.burst:
                window.passed += 1
                passed = True
            else:
                window.suppressed += 1
                window.sample = window.sample or bounded(record.getMessage(), SAMPLE_CHARS)
                passed = False
        for summary in summaries:
            self._emit(summary, record)
        return passed

    def _sweep(self, now: float) -> list[tuple[Hashable, _Window]]:
        """Close every window whose interval is over (memory stays bounded, quiet floods get reported)."""
        self._next_sweep = now + self.interval_s
        closed: list[tuple[Hashable, _Window]] = []
        for key, window in list(self._windows.items()):
            if now - window.start >= self.interval_s:
                closed += self._close(key, window)
        return closed

    def _close(self, key: Hashable, window: _Window) -> list[tuple[Hashable, _Window]]:
        del self._windows[key]
        return [(key, window)] if window.suppressed else []

    def _emit(self, closed: tuple[Hashable, _Window], current: logging.LogRecord) -> None:
        key, window = closed
        name, level = (key[0], key[1]) if isinstance(key, tuple) else (current.name, current.levelno)
        summary = logging.LogRecord(
            str(name), int(level) if isinstance(level, int) else logging.WARNING, __file__, 0,
            "%d similar lines suppressed in %.0f s, like: %s",
            (window.suppressed, self.interval_s, window.sample), None)
        summary.repeat_summary = True
        if self.sink is not None:
            self.sink(summary)


def bounded(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message`` on one line (line breaks and other control characters escaped), cut at ``limit``."""
    if message.isprintable() and len(message) <= limit:
        return message
    escaped = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    if len(escaped) > limit:
        escaped = f"{escaped[:limit]}... ({len(escaped) - limit} more characters)"
    return escaped


class BoundedFormatter(logging.Formatter):
    """A formatter whose message part is :func:`bounded` (tracebacks stay as they are)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        safe = bounded(message)
        if safe == message:
            return super().format(record)
        saved = record.msg, record.args
        record.msg, record.args = safe, None
        try:
            return super().format(record)
        finally:
            record.msg, record.args = saved


def configure_logging(*, level: int = logging.INFO, repeat_interval_s: float = 60.0,
                      repeat_burst: int = 10) -> logging.Handler:
    """The process's one log handler (stderr) with both guards; replaces the root's handlers.

    Serve uvicorn with ``log_config=None`` (:mod:`app.serving`) so its access and error lines come
    here too instead of through handlers of its own.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(BoundedFormatter(FORMAT))
    handler.addFilter(RepeatFilter(interval_s=repeat_interval_s, burst=repeat_burst, sink=handler.handle))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
