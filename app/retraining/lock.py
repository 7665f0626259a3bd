"""One retraining run at a time per database: a PostgreSQL advisory lock, or a file lock beside SQLite.

The advisory lock is held by a connection of its own for the whole run, so it goes with the
process: a killed run never leaves a stale lock behind (nor does the file lock, an ``flock``).
The file lock lives with the database it guards (next to the SQLite file, or keyed by the URL
for an in-memory one), not in a run folder: two runs with different ``--dir`` on the same
database still exclude each other.
"""

from __future__ import annotations

import fcntl
import hashlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, text

RETRAIN_LOCK_KEY = 0x67726E7472747261 - (1 << 63)
"""Advisory lock key of retraining runs ("grntrtra" as a signed 64-bit integer)."""


class Locked(RuntimeError):
    """Another retraining run holds the lock."""


def lock_path(engine: Engine) -> Path:
    """The lock file of a database without advisory locks: ``<file>.retrain.lock`` beside a SQLite
    file; for any other database (in-memory SQLite) one in the temporary folder named by its URL."""
    url = engine.url
    database = url.database or ""
    if url.get_backend_name() == "sqlite" and database and database != ":memory:" \
            and not database.startswith("file:"):
        db = Path(database).resolve()
        return db.with_name(db.name + ".retrain.lock")
    key = hashlib.sha256(url.render_as_string(hide_password=False).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"greentwin-retrain-{key}.lock"


@contextmanager
def run_lock(engine: Engine) -> Iterator[None]:
    """Hold the run lock of ``engine``'s database for the ``with`` block; :class:`Locked` at once
    if another run has it."""
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
    lock_file = lock_path(engine)
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
