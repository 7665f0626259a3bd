"""Bulk inserts of sealed records, the fastest way each database takes them.

A :class:`BulkWriter` works in two steps so that the CPU part can run ahead in the sealing
worker (:mod:`audit.pipeline`) while the caller's thread waits on the database:
:meth:`~BulkWriter.prepare` turns records into the driver's input (pure, no connection) and
:meth:`~BulkWriter.write` hands it to the database inside the caller's transaction.

* PostgreSQL (psycopg 3): ``COPY audit_record FROM STDIN`` in binary format, rows encoded by
  psycopg's C extension (``Copy.write_row`` with declared types) on the connection's own cursor. Two to
  four times the rows per second of a multi-row ``INSERT``: the server parses no SQL and no
  literals. COPY needs only INSERT privilege for STDIN and checks the same constraints (primary
  key, checks); the append-only triggers guard UPDATE, DELETE and TRUNCATE and stay untouched.
  Sending releases the GIL, so sealing the next chunk meanwhile can pay off (``overlaps``).
* SQLite: one ``executemany`` of a prepared ``INSERT`` through ``exec_driver_sql`` (SQLAlchemy
  events still fire), skipping the per-row parameter processing of ``insert()``. SQLite runs
  in this process and takes the GIL back for every row, so it gains nothing from a worker.
* Anything else: SQLAlchemy's ``insert()``.

Every column holds exactly what ``insert(AuditRecord)`` would store: ``ts_at`` is what the column
type's own bind processor makes of ``ts`` on SQLite (checked when the writer is built) and the
parsed ``ts`` as a ``timestamptz`` on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Dialect, insert
from sqlalchemy.exc import DBAPIError

from audit.canonical import parse_iso_utc
from audit.sealing import SealedRecord
from audit.tables import AuditRecord

_COLUMNS = ("greenhouse_id", "seq", "ts", "ts_at", "kind", "actor", "key_id", "nonce", "ciphertext",
            "prev_hash", "record_hash")
# Binary COPY sends each field in its column's wire type; psycopg does the encoding (text in the
# connection's client encoding, so no UTF-8 assumption here).
# varchar and char share text's binary form (psycopg has no binary dumper registered for bpchar).
_PG_TYPES = ("text", "int8", "text", "timestamptz", "text", "text", "text", "bytea", "bytea", "text", "text")

def record_row(record: SealedRecord) -> dict[str, Any]:
    """The ``audit_record`` row of ``record`` for SQLAlchemy's ``insert()``."""
    return {
        "greenhouse_id": record.greenhouse_id,
        "seq": record.seq,
        "ts": record.ts,
        "ts_at": parse_iso_utc(record.ts),
        "kind": record.kind,
        "actor": record.actor,
        "key_id": record.key_id,
        "nonce": record.nonce,
        "ciphertext": record.ciphertext,
        "prev_hash": record.prev_hash,
        "record_hash": record.record_hash,
    }


class BulkWriter:
    """Inserts sealed records into ``audit_record`` for one dialect; build with :func:`bulk_writer`."""

    overlaps = False
    """Whether writing leaves the GIL free long enough for sealing ahead in a worker to pay off."""

    def prepare(self, records: Sequence[SealedRecord]) -> Any:
        """The driver's input for ``records``; touches no connection, so any thread may call it."""
        return [record_row(r) for r in records]

    def write(self, conn: Connection, prepared: Any) -> None:
        """Insert prepared rows in ``conn``'s transaction; committing is the caller's business."""
        conn.execute(insert(AuditRecord), prepared)

    def insert(self, conn: Connection, records: Sequence[SealedRecord]) -> None:
        """Prepare and write in one go."""
        if records:
            self.write(conn, self.prepare(records))


class _PostgresCopy(BulkWriter):
    overlaps = True

    def __init__(self, dialect: Dialect) -> None:
        prep = dialect.identifier_preparer
        self._sql = (f"COPY {prep.format_table(AuditRecord.__table__)} "
                     f"({', '.join(prep.quote(c) for c in _COLUMNS)}) FROM STDIN WITH (FORMAT binary)")
        self._dbapi_error: type[Exception] = dialect.loaded_dbapi.Error

    def prepare(self, records: Sequence[SealedRecord]) -> list[tuple[Any, ...]]:
        """Row tuples; psycopg encodes them (binary COPY, in the connection's encoding) when written."""
        for r in records:
            # Refused here, before the transaction starts writing, with the same error for every driver path.
            if "\x00" in r.greenhouse_id + r.kind + r.actor + r.key_id:
                raise ValueError("a text value cannot contain NUL (0x00) characters")
        return [(r.greenhouse_id, r.seq, r.ts, parse_iso_utc(r.ts), r.kind, r.actor, r.key_id, r.nonce,
                 r.ciphertext, r.prev_hash, r.record_hash) for r in records]

    def write(self, conn: Connection, prepared: list[tuple[Any, ...]]) -> None:
        cursor = conn.connection.cursor()
        try:
            with cursor.copy(self._sql) as copy:
                copy.set_types(_PG_TYPES)
                for row in prepared:
                    copy.write_row(row)
        except self._dbapi_error as exc:
            # The exception classes of any statement run through SQLAlchemy (IntegrityError for a lost
            # race on a seq), so callers need not know which path wrote the rows.
            raise DBAPIError.instance(self._sql, None, exc, self._dbapi_error, dialect=conn.dialect) from exc
        finally:
            cursor.close()


_TS_SAMPLES = ("2026-01-01T00:00:00.000000+00:00", "1999-12-31T23:59:59.999999+00:00")


def _sqlite_ts_at(ts: str) -> str:
    """An audit timestamp (always UTC) in SQLAlchemy's SQLite DATETIME storage format, by slicing."""
    return ts[:10] + " " + ts[11:26]


class _SqliteExecutemany(BulkWriter):
    def __init__(self, dialect: Dialect) -> None:
        prep = dialect.identifier_preparer
        self._sql = (f"INSERT INTO {prep.format_table(AuditRecord.__table__)} "
                     f"({', '.join(prep.quote(c) for c in _COLUMNS)}) "
                     f"VALUES ({', '.join('?' * len(_COLUMNS))})")
        to_db = AuditRecord.__table__.c.ts_at.type.dialect_impl(dialect).bind_processor(dialect)

        def processed(ts: str) -> Any:
            value = parse_iso_utc(ts)
            return value if to_db is None else to_db(value)

        # Slicing the ISO text is ten times cheaper than parse + bind processor; use it only when it
        # gives exactly what the column type would store.
        same = all(processed(ts) == _sqlite_ts_at(ts) for ts in _TS_SAMPLES)
        self._ts_at: Callable[[str], Any] = _sqlite_ts_at if same else processed

    def prepare(self, records: Sequence[SealedRecord]) -> list[tuple[Any, ...]]:
        ts_at = self._ts_at
        return [(r.greenhouse_id, r.seq, r.ts, ts_at(r.ts), r.kind, r.actor, r.key_id, r.nonce, r.ciphertext,
                 r.prev_hash, r.record_hash) for r in records]

    def write(self, conn: Connection, prepared: list[tuple[Any, ...]]) -> None:
        conn.exec_driver_sql(self._sql, prepared)


def bulk_writer(dialect: Dialect) -> BulkWriter:
    """The fastest writer this dialect and driver support."""
    if dialect.name == "postgresql" and dialect.driver == "psycopg":
        return _PostgresCopy(dialect)
    if dialect.name == "sqlite":
        return _SqliteExecutemany(dialect)
    return BulkWriter()
