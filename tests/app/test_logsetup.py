"""The log's guards on their own: repeats collapsed into counts, every line one bounded line."""

from __future__ import annotations

import logging

from app.logsetup import BoundedFormatter, RepeatFilter, bounded


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _record(msg: str, *args: object, name: str = "app.auth.service",
            level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def _guard(**kw: object) -> tuple[RepeatFilter, list[logging.LogRecord], FakeClock]:
    clock, emitted = FakeClock(), []
    f = RepeatFilter(interval_s=10.0, burst=3, sink=emitted.append, clock=clock, **kw)  # type: ignore[arg-type]
    return f, emitted, clock


def test_repeats_of_one_message_are_counted_and_reported_after_the_interval() -> None:
    f, emitted, clock = _guard()
    passed = [f.filter(_record("login refused (%s) for %s from %s", "bad", "x", f"10.0.0.{i}"))
              for i in range(50)]
    assert passed == [True] * 3 + [False] * 47, "the arguments do not make another kind of line"
    assert f.filter(_record("another message")), "another key has its own budget"
    assert emitted == []
    clock.t += 10
    assert f.filter(_record("login refused (%s) for %s from %s", "bad", "y", "10.0.1.1"))
    [summary] = emitted
    assert summary.getMessage() == ("47 similar lines suppressed in 10 s, like: "
                                    "login refused (bad) for x from 10.0.0.3")
    assert summary.levelno == logging.WARNING and summary.name == "app.auth.service"
    assert f.filter(summary), "a summary itself is never held back"


def test_a_quiet_flood_is_reported_by_the_next_line_of_any_kind() -> None:
    f, emitted, clock = _guard()
    for _ in range(10):
        f.filter(_record("flood"))
    clock.t += 11
    assert f.filter(_record("something else entirely"))
    assert [s.getMessage() for s in emitted] == ["7 similar lines suppressed in 10 s, like: flood"]


def test_access_lines_are_keyed_by_status_failures_by_status_only() -> None:
    f, _, _ = _guard()
    access = '%s - "%s %s HTTP/%s" %d'

    def line(path: str, status: int) -> logging.LogRecord:
        return _record(access, "127.0.0.1:5", "GET", path, "1.1", status, name="uvicorn.access",
                       level=logging.INFO)

    assert [f.filter(line(f"/nope/{i}", 404)) for i in range(5)] == [True] * 3 + [False] * 2, \
        "any path, one key"
    assert [f.filter(line("/healthz?x=1", 200)) for _ in range(4)] == [True] * 3 + [False]
    assert f.filter(line("/api/overview", 200)), "another route's successes are another key"


def test_keys_are_bounded_and_an_overflow_of_kinds_shares_one_budget() -> None:
    f, _, _ = _guard(max_keys=4)
    assert all(f.filter(_record(f"kind {i}")) for i in range(4))
    assert [f.filter(_record(f"new kind {i}")) for i in range(6)] == [True] * 3 + [False] * 3
    assert len(f._windows) == 5


def test_a_line_stays_one_bounded_line() -> None:
    assert bounded("plain") == "plain"
    assert bounded("forged\nINFO admin logged in\x00") == "forged\\nINFO admin logged in\\x00"
    long = bounded("x" * 5000, 100)
    assert long.startswith("x" * 100) and long.endswith("... (4900 more characters)")
    formatted = BoundedFormatter("%(levelname)s %(message)s").format(_record("user %s", "a\nb" + "y" * 3000))
    assert "\n" not in formatted and len(formatted) < 2100 and formatted.startswith("WARNING user a\\nb")
