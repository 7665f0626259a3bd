"""What a sealed record says a table row holds, and where a stored row says otherwise.

The API and the reports read decisions, mode changes and each decision's ack status from the tables,
not from the trail, so a row is only as good as its agreement with the record sealed from it. The
writer seals the very row it inserts (as JSON: timestamps as ISO text), so every column of a stored
row must equal its record's field. A decision's ``ack_status`` is the one column written again later
(when the edge box answers): it must be the status of the last ``command_ack`` sealed for its command,
or, before any, the sealed decision's own (``pending``).

Values are compared as the JSON they were sealed as: a timestamp by the instant it names, a number by
value (PostgreSQL's JSONB keeps numbers as decimals, so ``1e16`` comes back as an integer and ``-0.0``
as ``0``), everything else exactly. A row is matched by a digest of its values, so verify keeps 16
bytes per sealed row rather than the row; a row that differs is compared column by column with its
record, read again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, DateTime, select

from app.models import Decision, ModeChange

TABLES = {"decision": Decision, "mode_change": ModeChange}
"""The tables whose rows are sealed as they are written, by the name a difference is reported under."""
ACK_COLUMN = "ack_status"
"""The decision column written after insert: compared with the sealed acks, not the sealed decision."""
def _is_timestamp(column_type: Any) -> bool:
    """A time zone column, however it is declared (``UtcDateTime`` decorates ``DateTime``)."""
    return isinstance(column_type, DateTime) or isinstance(getattr(column_type, "impl", None), DateTime)


COLUMNS: dict[str, tuple[str, ...]] = {
    name: tuple(c.name for c in model.__table__.columns if c.name != "id") for name, model in TABLES.items()}
"""Each table's sealed columns in table order (``id`` is the row's own key, not part of the record)."""
_TIMESTAMPS = {name: frozenset(c.name for c in model.__table__.columns if _is_timestamp(c.type))
               for name, model in TABLES.items()}
_EXACT_INT = 2**63
"""Integers below this compare as integers; beyond, as the float they were sealed as."""


@dataclass(frozen=True, slots=True)
class SealedRow:
    """What verify keeps of one sealed row: where its record is, the digest of its values and, for a
    decision, the ack status it was sealed with."""

    chain_seq: int
    digest: bytes
    ack_status: str | None = None


@dataclass(frozen=True, slots=True)
class Difference:
    """A stored row that is not what was sealed: the first column that differs, and the others' names."""

    table: str
    greenhouse_id: str
    seq: int
    column: str
    stored: Any
    sealed: Any
    sealed_by: str = ""
    """Which record says so, when it is not the row's own (an ack status: the command_ack's chain seq)."""
    also: tuple[str, ...] = ()

    def describe(self) -> str:
        by = f" ({self.sealed_by})" if self.sealed_by else ""
        also = f" (also {', '.join(self.also)})" if self.also else ""
        return (f"{self.table} seq {self.seq} {self.column}: stored {_shown(self.stored)}, "
                f"sealed {_shown(self.sealed)}{by}{also}")


def sealed_row(table: str, chain_seq: int, payload: Mapping[str, Any]) -> SealedRow:
    """What to keep of a sealed ``table`` row's record."""
    ack = payload.get(ACK_COLUMN) if table == "decision" else None
    return SealedRow(chain_seq, digest(table, payload), ack if isinstance(ack, str) else None)


def digest(table: str, values: Mapping[str, Any]) -> bytes:
    """16 bytes that two rows share exactly when :func:`differing_columns` finds nothing between them."""
    doc = {c: comparable(table, c, values.get(c)) for c in COLUMNS[table] if c != ACK_COLUMN}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def differing_columns(table: str, stored: Mapping[str, Any], sealed: Mapping[str, Any]) -> list[str]:
    """The sealed columns (the ack status aside) where ``stored`` is not what ``sealed`` says, in table order.
    A column the record lacks (one added to the table later) counts as sealed empty."""
    return [c for c in COLUMNS[table] if c != ACK_COLUMN
            and comparable(table, c, stored.get(c)) != comparable(table, c, sealed.get(c))]


def comparable(table: str, column: str, value: Any) -> Any:
    """``value`` of ``column`` as the sealed JSON spells it, stored or sealed alike."""
    if column in _TIMESTAMPS[table]:
        return _instant(value)
    return _plain(value)


def _instant(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value  # not a timestamp at all: compared as the text it is
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)  # SQLite: naive UTC
        return aware.astimezone(UTC).isoformat(timespec="microseconds")
    return value


def _plain(value: Any) -> Any:
    t = type(value)  # exact types first: this runs for every value of every row (Mapping is an ABC, slow)
    if t is str or t is bool or value is None:
        return value
    if t is float:
        return int(value) if value.is_integer() and abs(value) < _EXACT_INT else value
    if t is int:
        return value if abs(value) < _EXACT_INT else float(value)
    if t is dict or isinstance(value, Mapping):
        return {k if type(k) is str else str(k): _plain(v) for k, v in value.items()}
    if t is list or isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bool | str):  # subclasses of the exact types above
        return value
    if isinstance(value, float):
        return _plain(float(value))
    if isinstance(value, int):
        return _plain(int(value))
    return str(value)


def _shown(value: Any, limit: int = 80) -> str:
    shown = repr(value) if value is None or isinstance(value, str) \
        else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def stream_rows(conn: Connection, table: str, gh: str, seqs: list[int] | None = None
                 ) -> Iterator[Mapping[str, Any]]:
    """A greenhouse's rows of ``table`` (those with ``seqs``), each as column name to value, by seq."""
    t = TABLES[table].__table__
    stmt = select(*(t.c[c] for c in COLUMNS[table])).where(t.c.greenhouse_id == gh)
    if seqs is not None:
        stmt = stmt.where(t.c.seq.in_(seqs))
    result = conn.execute(stmt.order_by(t.c.seq), execution_options={"yield_per": 1000})
    try:
        for row in result:
            yield row._mapping
    finally:
        result.close()


def one_per_row(differences: list[Difference]) -> list[Difference]:
    """One difference per row, by seq: its first column, naming the row's other differing columns."""
    rows: dict[tuple[int, str], list[Difference]] = {}
    for d in differences:
        rows.setdefault((d.seq, d.table), []).append(d)
    out = []
    for (_, table), ds in sorted(rows.items()):
        order = COLUMNS[table]
        first, *rest = sorted(ds, key=lambda d: order.index(d.column) if d.column in order else -1)
        out.append(dataclasses.replace(first, also=tuple(d.column for d in rest)))
    return out


def aware(ts: datetime) -> datetime:
    """SQLite hands back naive UTC datetimes."""
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def as_datetime(ts: str | datetime) -> datetime:
    return aware(ts if isinstance(ts, datetime) else datetime.fromisoformat(ts))
