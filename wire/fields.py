"""What the database accepts, defined once: the payload models and the tables both read it here.

A payload that passes its schema but that PostgreSQL then refuses (a NUL in a string, a string
longer than its column, a timestamp outside what the service can compute with) would stall the
writer on one row; so the edge refuses it with a clear reason, and the table columns are sized
from the same constants so the two can never drift apart.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Final

from pydantic import AfterValidator, AwareDatetime, Field

ACTOR_MAX_LEN: Final = 64
"""Actor columns of decisions and mode changes (``edge:<source>``, ``operator:<name>``, ``policy``)."""
REASON_MAX_LEN: Final = 500
"""A mode change's reason."""
REASON_MIN_LEN: Final = 3
"""Characters a reason needs besides leading and trailing blanks (the dashboard trims and asks as much)."""
SHORT_TEXT_MAX_LEN: Final = 64
"""Identifiers an edge box sends: boot id, policy version."""
DAILY_WATER_CAP_MAX_L: Final = 100_000.0
"""The most a zone's daily water cap may be: a safety limit, not "no limit" spelled as 1e308 (the
default is 250 L; a large glasshouse zone under drip takes a few thousand)."""
ACK_REASON_MAX_LEN: Final = 200
NAME_MAX_LEN: Final = 200
"""A greenhouse's display name."""
EDGE_ACTOR_PREFIX: Final = "edge:"
ESTOP_SOURCE_MAX_LEN: Final = ACTOR_MAX_LEN - len(EDGE_ACTOR_PREFIX)
"""An e-stop's source becomes the actor ``edge:<source>`` of its mode change."""

TS_MIN: Final = datetime(2000, 1, 1, tzinfo=UTC)
TS_MAX: Final = datetime(2100, 1, 1, tzinfo=UTC)
"""Timestamps outside this range are no clock reading: near ``datetime``'s own limits, adding a
TTL or converting to UTC overflows, and PostgreSQL hands back years Python cannot represent."""

# C0 controls and DEL: PostgreSQL refuses NUL in text and JSONB; the others have no place in an
# identifier and make logs lie (a newline forges a log line). Free text (a reason) keeps tab and
# line breaks, which an operator may type.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FREE_TEXT_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def check_db_text(value: str, *, free_text: bool = False) -> str:
    """``value`` if the database stores it as given; ValueError naming the offending character."""
    if (bad := (_FREE_TEXT_CONTROL if free_text else _CONTROL).search(value)) is not None:
        raise ValueError(f"control character {bad.group()!r} at position {bad.start()} is not allowed")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 for the database
        raise ValueError(f"not encodable as UTF-8 at position {exc.start}") from None
    return value


def check_free_text(value: str) -> str:
    """:func:`check_db_text` for free text: tab and line breaks allowed."""
    return check_db_text(value, free_text=True)


def check_reason(value: str) -> str:
    """:func:`check_free_text`, and :data:`REASON_MIN_LEN` characters besides blanks: a reason of spaces
    says nothing in the audit trail."""
    if len(check_free_text(value).strip()) < REASON_MIN_LEN:
        raise ValueError(f"a reason needs at least {REASON_MIN_LEN} characters besides blanks")
    return value


def check_db_timestamp(value: datetime) -> datetime:
    """``value`` if it lies in [:data:`TS_MIN`, :data:`TS_MAX`); ValueError otherwise.

    The offset the edge box sent is kept (the contract echoes it); the tables' ``UtcDateTime``
    columns store the instant in UTC, so SQLite, which keeps only wall-clock digits, cannot shift it."""
    if value.tzinfo is None:
        raise ValueError("timestamp has no time zone")
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"timestamp {value.isoformat()} is out of range") from None
    if not TS_MIN <= utc < TS_MAX:
        raise ValueError(f"timestamp {value.isoformat()} outside [{TS_MIN:%Y-%m-%d}, {TS_MAX:%Y-%m-%d})")
    return value


DbText = Annotated[str, AfterValidator(check_db_text)]
"""Text without control characters (length limits come on top, per field)."""
ShortText = Annotated[str, Field(min_length=1, max_length=SHORT_TEXT_MAX_LEN), AfterValidator(check_db_text)]
AckReason = Annotated[str, Field(max_length=ACK_REASON_MAX_LEN), AfterValidator(check_free_text)]
EstopSource = Annotated[str, Field(min_length=1, max_length=ESTOP_SOURCE_MAX_LEN),
                        AfterValidator(check_db_text)]
Reason = Annotated[str, Field(min_length=REASON_MIN_LEN, max_length=REASON_MAX_LEN),
                   AfterValidator(check_reason)]
Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX_LEN), AfterValidator(check_db_text)]
DbTimestamp = Annotated[AwareDatetime, AfterValidator(check_db_timestamp)]
