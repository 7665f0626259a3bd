"""One alarm group in memory (occurrences, acknowledgement, shelving, its open episode) and its rows.

The alarm book (:mod:`app.api.alarm_book`) owns these under its lock; this module only says how a
group reads to the API and how it is written to the tables of :mod:`app.alarm_models`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime

from app.alarm_models import AlarmEpisode, AlarmGroup
from app.alarms.catalogue import describe
from app.api.alarm_schemas import AlarmAck, AlarmPublic


def alarm_id(gh: str, kind: str) -> str:
    return hashlib.sha256(f"{gh}\x00{kind}".encode()).hexdigest()[:16]


def utc(ts: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    return None if ts is None else ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts


@dataclass
class Episode:
    """The group's current spell: raised at its first occurrence, closed when the alarm clears."""

    raised_at: datetime
    last_at: datetime
    count: int
    row_id: int | None = None
    cleared_at: datetime | None = None
    ack_by: str | None = None
    ack_at: datetime | None = None
    ack_comment: str | None = None

    def row(self, key: str, gh: str, kind: str) -> AlarmEpisode:
        return AlarmEpisode(id=self.row_id, group_id=key, greenhouse_id=gh, kind=kind,
                            severity=describe(kind).severity, raised_at=self.raised_at, last_at=self.last_at,
                            count=self.count, cleared_at=self.cleared_at, acknowledged_by=self.ack_by,
                            acknowledged_at=self.ack_at, ack_comment=self.ack_comment)

    @classmethod
    def of(cls, r: AlarmEpisode) -> Episode:
        return cls(utc(r.raised_at), utc(r.last_at), int(r.count), r.id, utc(r.cleared_at),  # type: ignore[arg-type]
                   r.acknowledged_by, utc(r.acknowledged_at), r.ack_comment)


@dataclass
class Group:
    gh: str
    kind: str
    first_at: datetime
    last_at: datetime
    count: int
    ack_by: str | None = None
    ack_at: datetime | None = None
    ack_through: datetime | None = None
    ack_comment: str | None = None
    shelved_by: str | None = None
    shelved_until: datetime | None = None
    shelve_reason: str | None = None
    episode: Episode | None = None
    """The open episode (None while the alarm is inactive)."""

    @property
    def acknowledged(self) -> bool:
        return self.ack_through is not None and self.ack_through >= self.last_at

    def shelved(self, now: datetime) -> bool:
        return self.shelved_until is not None and self.shelved_until > now

    def public(self, key: str, active: bool, now: datetime) -> AlarmPublic:
        text = describe(self.kind)
        shelved = self.shelved(now)
        return AlarmPublic(id=key, greenhouse_id=self.gh, kind=self.kind, severity=text.severity,
                           title=text.title, description=text.description, action=text.action, active=active,
                           first_at=self.first_at, last_at=self.last_at, count=self.count,
                           acknowledged=self.acknowledged, acknowledged_by=self.ack_by,
                           acknowledged_at=self.ack_at, ack_comment=self.ack_comment, shelved=shelved,
                           shelved_by=self.shelved_by if shelved else None,
                           shelved_until=self.shelved_until if shelved else None,
                           shelve_reason=self.shelve_reason if shelved else None)

    def acknowledgement(self, key: str) -> AlarmAck | None:
        """The acknowledgement that covers every occurrence so far, if there is one."""
        if not self.acknowledged or self.ack_by is None or self.ack_at is None or self.ack_through is None:
            return None
        return AlarmAck(id=key, greenhouse_id=self.gh, kind=self.kind, acknowledged_by=self.ack_by,
                        acknowledged_at=self.ack_at, through=self.ack_through, comment=self.ack_comment or "")

    def row(self, key: str) -> AlarmGroup:
        return AlarmGroup(id=key, greenhouse_id=self.gh, kind=self.kind, first_at=self.first_at,
                          last_at=self.last_at, count=self.count, acknowledged_by=self.ack_by,
                          acknowledged_at=self.ack_at, ack_through=self.ack_through,
                          ack_comment=self.ack_comment, shelved_by=self.shelved_by,
                          shelved_until=self.shelved_until, shelve_reason=self.shelve_reason)

    @classmethod
    def of(cls, r: AlarmGroup) -> Group:
        return cls(r.greenhouse_id, r.kind, utc(r.first_at), utc(r.last_at), int(r.count),  # type: ignore[arg-type]
                   r.acknowledged_by, utc(r.acknowledged_at), utc(r.ack_through), r.ack_comment,
                   r.shelved_by, utc(r.shelved_until), r.shelve_reason)
