"""Bulk inserts of sealed records, the fastest way each database takes them.

A :class:`BulkWriter` works in two steps so that the CPU part can run ahead in the sealing
worker (:mod:`audit.pipeline`) while the caller's thread waits on the database:
:meth:`~BulkWriter.prepare` turns records into the driver's input (pure, no connection) and
:meth:`~BulkWriter.write` hands it to the database inside the caller's transaction.

* PostgreSQL (psycopg2): ``COPY audit_record FROM STDIN`` in binary format (text format when
  the connection's client encoding is not UTF-8) on the connection's own DBAPI cursor. Two to
  four times the rows per second of a multi-row ``INSERT``: the server parses no SQL and no
  literals. COPY needs only INSERT privilege for STDIN and checks the same constraints (primary
  key, checks); the append-only triggers guard UPDATE, DELETE and TRUNCATE and stay untouched.
  Sending releases the GIL, so sealing the next chunk meanwhile can pay off (``overlaps``).
* SQLite: one ``executemany`` of a prepared ``INSERT`` through ``exec_driver_sql`` (SQLAlchemy
  events still fire), skipping the per-row parameter processing of ``insert()``. SQLite runs
  in this process and takes the GIL back for every row, so it gains nothing from a worker.
* Anything else: SQLAlchemy's ``insert()``.

Every column holds exactly what ``insert(AuditRecord)`` would store: ``ts_at`` is what the column
type's own bind processor makes of ``ts`` on SQLite (checked when the writer is built) and is parsed
from ``ts`` by the server on PostgreSQL.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Dialect, insert
from sqlalchemy.exc import DBAPIError

from audit.canonical import parse_iso_utc
from audit.sealing import SealedRecord
from audit.tables import AuditRecord

_COLUMNS = ("greenhouse_id", "seq", "ts", "ts_at", "kind", "actor", "key_id", "nonce", "ciphertext",
            "prev_hash", "record_hash")
# COPY text format: backslash, newline, carriage return and the tab delimiter must be escaped.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})
_COPY_READ_SIZE = 1 << 20


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


def _text(value: str) -> str:
    """A text value in COPY text format (backslash-escaped specials; most values have none)."""
    if "\x00" in value:
        raise ValueError("a text value cannot contain NUL (0x00) characters")
    if "\\" in value or "\n" in value or "\r" in value or "\t" in value:
        return value.translate(_COPY_ESCAPES)
    return value


def _utf8(value: str) -> bytes:
    """A text value as COPY binary format takes it (the client encoding, UTF-8 here)."""
    if "\x00" in value:
        raise ValueError("a text value cannot contain NUL (0x00) characters")
    return value.encode()


def _copy_text(records: Sequence[SealedRecord]) -> str:
    """COPY text format: tab-separated rows, bytea as ``\\x`` hex. ``ts`` and the hashes have
    validated formats without specials (timestamp pattern, hex); every other text field is escaped."""
    lines = [
        "\t".join((
            _text(r.greenhouse_id), str(r.seq), r.ts, r.ts, _text(r.kind), _text(r.actor), _text(r.key_id),
            "\\\\x" + r.nonce.hex(), "\\\\x" + r.ciphertext.hex(), r.prev_hash, r.record_hash,
        ))
        for r in records
    ]
    lines.append("")
    return "\n".join(lines)


_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)  # signature, flags, no extension
_BINARY_TRAILER = struct.pack("!h", -1)
_FIELD_COUNT = struct.pack("!h", len(_COLUMNS))
_LENGTH = struct.Struct("!i").pack
_INT8 = struct.Struct("!iq").pack  # a bigint / timestamptz field: length 8, then the value
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def _copy_binary(records: Sequence[SealedRecord]) -> bytes:
    """COPY binary format: per row the field count, then (length, bytes) per field.

    Text as UTF-8, bigint as 8 bytes big-endian, timestamptz as microseconds since
    2000-01-01 UTC (PostgreSQL's integer datetimes), bytea raw: the server parses nothing,
    and the ciphertext travels at half the size of its hex text.
    """
    rows = [_BINARY_HEADER]
    for r in records:
        at = parse_iso_utc(r.ts) - _PG_EPOCH
        micros = (at.days * 86_400 + at.seconds) * 1_000_000 + at.microseconds
        gh, ts, kind, actor, key_id = (_utf8(v) for v in (r.greenhouse_id, r.ts, r.kind, r.actor, r.key_id))
        prev, head = r.prev_hash.encode(), r.record_hash.encode()
        rows.append(b"".join((
            _FIELD_COUNT, _LENGTH(len(gh)), gh, _INT8(8, r.seq), _LENGTH(len(ts)), ts, _INT8(8, micros),
            _LENGTH(len(kind)), kind, _LENGTH(len(actor)), actor, _LENGTH(len(key_id)), key_id,
            _LENGTH(len(r.nonce)), r.nonce, _LENGTH(len(r.ciphertext)), r.ciphertext,
            _LENGTH(len(prev)), prev, _LENGTH(len(head)), head,
        )))
    rows.append(_BINARY_TRAILER)
    return b"".join(rows)


class _PostgresCopy(BulkWriter):
    overlaps = True

    def __init__(self, dialect: Dialect) -> None:
        prep = dialect.identifier_preparer
        copy = (f"COPY {prep.format_table(AuditRecord.__table__)} "
                f"({', '.join(prep.quote(c) for c in _COLUMNS)}) FROM STDIN")
        self._sql_binary, self._sql_text = f"{copy} WITH (FORMAT binary)", copy
        self._dbapi_error: type[Exception] = dialect.loaded_dbapi.Error

    def prepare(self, records: Sequence[SealedRecord]) -> tuple[Sequence[SealedRecord], bytes]:
        """The rows in binary format (and the records, for a connection that is not UTF-8)."""
        return records, _copy_binary(records)

    def write(self, conn: Connection, prepared: tuple[Sequence[SealedRecord], bytes]) -> None:
        records, binary = prepared
        # Binary text fields are taken in the client encoding; the text format lets psycopg2 encode.
        utf8 = getattr(conn.connection.dbapi_connection, "encoding", None) in ("UTF8", "UNICODE")
        sql = self._sql_binary if utf8 else self._sql_text
        data = io.BytesIO(binary) if utf8 else io.StringIO(_copy_text(records))
        cursor = conn.connection.cursor()
        try:
            # psycopg2 sends the data with the GIL released.
            cursor.copy_expert(sql, data, size=_COPY_READ_SIZE)
        except self._dbapi_error as exc:
            # The exception classes of any statement run through SQLAlchemy (IntegrityError for a lost
            # race on a seq), so callers need not know which path wrote the rows.
            raise DBAPIError.instance(sql, None, exc, self._dbapi_error, dialect=conn.dialect) from exc
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
                     f"({', '.join(prep.quote(c) for c in _COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})")
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
    if dialect.name == "postgresql" and dialect.driver == "psycopg2":
        return _PostgresCopy(dialect)
    if dialect.name == "sqlite":
        return _SqliteExecutemany(dialect)
    return BulkWriter()
