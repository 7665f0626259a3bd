"""Timestamps at the API's edge: every one it returns, and every one it reads, names its UTC offset.

A time without an offset means a different instant on every client that reads it, so response
models declare their times as :data:`Instant` (always UTC, written as ISO-8601 ending in ``Z``),
and query parameters that name an instant go through :func:`parse_instant`, which refuses a
naive one rather than guess its zone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import HTTPException
from pydantic import AfterValidator


def as_utc(value: datetime) -> datetime:
    """``value`` as an aware instant in UTC. A naive one is read as UTC: the service keeps every time
    in UTC, and SQLite hands stored timestamps back without their offset."""
    if value.tzinfo is None or value.utcoffset() is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


Instant = Annotated[datetime, AfterValidator(as_utc)]
"""A timestamp in a response: ISO-8601 in UTC with its offset (``2026-06-01T12:00:00Z``), whatever the
database handed back."""


def parse_instant(name: str, value: str) -> datetime:
    """An ISO-8601 instant with its UTC offset, in UTC, or a 422 that says how to write one."""
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        hint = " (a '+' in a URL reads as a space: write it as %2B, or use Z)" if " " in value else ""
        raise HTTPException(status_code=422, detail=f"'{name}' {value!r} is not ISO-8601{hint}") from None
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise HTTPException(status_code=422,
                            detail=f"'{name}' {value!r} needs a UTC offset "
                                   "(e.g. 2026-06-01T00:00:00Z or +02:00)")
    try:
        return dt.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 lies before the first representable instant
        raise HTTPException(status_code=422, detail=f"'{name}' {value!r} is out of range") from None
