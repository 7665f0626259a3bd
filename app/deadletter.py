"""Quarantine for records the database or the audit trail can never take.

Retrying such a record forever would stall everything queued behind it, and dropping it would
lose it silently; instead it goes, whole, to a JSON-lines file in the state directory (readable
by the service's user only: records carry telemetry and operator names) and raises an alarm.
An operator can inspect, repair and re-import it; the rest of the queue goes on.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.exc import InterfaceError, OperationalError

from app.private_files import open_private

log = logging.getLogger(__name__)

UNAVAILABLE = (OperationalError, InterfaceError)
"""The database is down or the connection broke: the record waits (spool, queue). Any other error
is about the record itself, and retrying it would fail the same way for ever."""

OnDeadLetter = Callable[[str, str, str], None]
"""Called with (greenhouse, kind, reason) after a record was quarantined."""


def _default(obj: Any) -> Any:
    return obj.isoformat() if isinstance(obj, datetime) else repr(obj)


def count_lines(path: Path) -> int:
    """Non-empty lines of a JSON-lines file (0 when there is none)."""
    if not path.exists():
        return 0
    with path.open("rb") as fh:
        return sum(1 for line in fh if line.strip())


class DeadLetters:
    """The dead-letter file: append one record per line, fsync'd, and tell the owner (thread-safe)."""

    def __init__(self, path: Path, on_add: OnDeadLetter | None = None) -> None:
        self.path = Path(path)
        self.on_add = on_add
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        """Records quarantined so far (all runs)."""
        return count_lines(self.path)

    def add(self, greenhouse_id: str, kind: str, reason: str, record: Any) -> None:
        """Quarantine ``record`` (a row or an audit event) with why it could not be stored."""
        line = json.dumps({"at": datetime.now(UTC).isoformat(), "greenhouse_id": greenhouse_id, "kind": kind,
                           "reason": reason[:1000], "record": record},
                          default=_default, separators=(",", ":"))
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open_private(self.path) as fh:
                fh.write(line + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        log.error("dead-lettered %s of %s to %s: %s", kind, greenhouse_id, self.path, reason[:200])
        if self.on_add is not None:
            try:
                self.on_add(greenhouse_id, kind, reason)
            except Exception:
                log.exception("dead-letter alarm hook failed")


def reason_of(exc: BaseException) -> str:
    """One line saying why a record was refused (the driver's message, without the SQL)."""
    orig = getattr(exc, "orig", None) or exc
    first = str(orig).strip().splitlines()[0] if str(orig).strip() else ""
    return f"{orig.__class__.__name__}: {first}"
