"""Canonical encodings the audit trail hashes, seals and signs, and the field checks they rely on.

Every byte that feeds a hash, an AES-GCM associated-data block or a signature is produced
here, so writer and verifier cannot drift apart: canonical JSON (sorted keys, no whitespace,
UTF-8), the one spelling of a timestamp (``YYYY-MM-DDTHH:MM:SS.ffffff+00:00``) and the
hand-written fast paths that must stay byte-identical to canonical JSON.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from json.encoder import encode_basestring
from typing import Any

GENESIS_HASH = "0" * 64
"""``prev_hash`` of the first record of every greenhouse."""

_HEX64 = re.compile(r"[0-9a-f]{64}")
_TS_FORMAT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00", re.ASCII)
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

encode_str = encode_basestring
"""The string encoder ``JSONEncoder(ensure_ascii=False)`` itself uses, for hand-written fast paths."""


def canonical_json(obj: Any) -> bytes:
    """Deterministic UTF-8 JSON (sorted keys, no whitespace), so hashes and AAD are reproducible.

    Raises ``ValueError`` for NaN/Infinity (and lone surrogates), ``TypeError`` for
    values JSON cannot hold. Use string keys only: like :mod:`json`, other keys are
    turned into strings.
    """
    return _ENCODER.encode(obj).encode("utf-8")


def iso_utc(dt: datetime) -> str:
    """Format an aware datetime as ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00``: one spelling per instant."""
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError("naive datetime: audit timestamps need a time zone")
    return dt.astimezone(UTC).isoformat(timespec="microseconds")


def iso_utc_now() -> str:
    """The current time in the audit timestamp format."""
    return iso_utc(datetime.now(UTC))


def parse_iso_utc(ts: str) -> datetime:
    """Parse an audit timestamp, refusing any other spelling of the same instant."""
    if not isinstance(ts, str) or _TS_FORMAT.fullmatch(ts) is None:
        raise ValueError(f"timestamp {ts!r} is not YYYY-MM-DDTHH:MM:SS.ffffff+00:00")
    return datetime.fromisoformat(ts)


def coerce_ts(ts: str | datetime | None) -> str:
    """An audit timestamp from a string (checked), an aware datetime, or None (now)."""
    if ts is None:
        return iso_utc_now()
    if isinstance(ts, datetime):
        return iso_utc(ts)
    parse_iso_utc(ts)
    return ts


# -- field checks shared by records and signed statements ---------------------------------


def require_text(name: str, value: object) -> None:
    """Refuse anything but a non-empty string."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")


def require_hash(name: str, value: object) -> None:
    """Refuse anything but a SHA-256 in lowercase hex."""
    if not isinstance(value, str) or _HEX64.fullmatch(value) is None:
        raise ValueError(f"{name} must be 64 lowercase hex characters")


def require_seq(value: object, minimum: int) -> None:
    """Refuse anything but an ``int`` (not a bool) of at least ``minimum``."""
    if type(value) is not int or value < minimum:
        raise ValueError(f"seq must be an int >= {minimum}")


def bytes_field(obj: object, name: str) -> None:
    """Turn a ``bytearray``/``memoryview`` field of a frozen dataclass into ``bytes``.

    DB drivers hand bytea back as memoryview (psycopg2) or bytearray; hashing and equality want bytes.
    """
    value = getattr(obj, name)
    if type(value) is not bytes and isinstance(value, bytearray | memoryview):
        object.__setattr__(obj, name, bytes(value))
