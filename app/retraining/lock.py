"""One retraining run at a time: a PostgreSQL advisory lock, or a lock file next to SQLite.

The advisory lock is held by a connection of its own for the whole run, so it goes with the
process: a killed run never leaves a stale lock behind (nor does the file lock, an ``flock``).
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, text

RETRAIN_LOCK_KEY = 0x67726E7472747261 - (1 << 63)
"""Advisory lock key of retraining runs ("grntrtra" as a signed 64-bit integer)."""


class Locked(RuntimeError):
    """Another retraining run holds the lock."""


@contextmanager
def run_lock(engine: Engine, lock_file: Path) -> Iterator[None]:
    """Hold the run lock for the ``with`` block; :class:`Locked` at once if another run has it."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            if not conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": RETRAIN_LOCK_KEY}).scalar():
                raise Locked("another `greentwin retrain` holds the database's retraining lock")
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": RETRAIN_LOCK_KEY})
                conn.commit()
        return
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise Locked(f"another `greentwin retrain` holds {lock_file}") from exc
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
