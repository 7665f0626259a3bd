"""Alarms grouped for operators, and their acknowledgements, kept in the database across restarts.

The runtime raises an alarm per occurrence (a failed valve alarms at every decision), so the list
groups occurrences by greenhouse and kind. An acknowledgement covers the occurrences up to its
moment: a new one afterwards makes the group unacknowledged again, so a recurring fault never
hides behind an old acknowledgement. Each acknowledgement is sealed into the access chain of the
audit trail with the operator's name (the greenhouse chains are written by the writer process),
then stored before it counts; acknowledging a group again before a new occurrence answers the
standing acknowledgement and seals nothing.

Groups live in ``alarm_group``. New occurrences are folded in on the event loop (every open live
stream asks for the counts every second) and written behind by a thread within a second, so no
stream ever waits on the database; an acknowledgement is written before it answers.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.api.schemas import AlarmAck, AlarmPublic
from app.audit_sink import ACCESS_CHAIN
from app.models import AlarmGroup
from app.runtime import Alarm, Runtime

log = logging.getLogger(__name__)

CRITICAL_PREFIXES = ("valve_failed", "flow_without_open_valve", "telemetry_stale", "valve_open_no_flow",
                     "command_rejected")
WRITE_BEHIND_S = 1.0


def alarm_id(gh: str, kind: str) -> str:
    return hashlib.sha256(f"{gh}\x00{kind}".encode()).hexdigest()[:16]


def severity(kind: str) -> str:
    return "critical" if kind.startswith(CRITICAL_PREFIXES) else "warning"


def _utc(ts: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    return None if ts is None else ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts


@dataclass
class _Group:
    gh: str
    kind: str
    first_at: datetime
    last_at: datetime
    count: int
    ack_by: str | None = None
    ack_at: datetime | None = None
    ack_through: datetime | None = None

    @property
    def acknowledged(self) -> bool:
        return self.ack_through is not None and self.ack_through >= self.last_at

    def public(self, key: str) -> AlarmPublic:
        return AlarmPublic(id=key, greenhouse_id=self.gh, kind=self.kind, severity=severity(self.kind),
                           first_at=self.first_at, last_at=self.last_at, count=self.count,
                           acknowledged=self.acknowledged,
                           acknowledged_by=self.ack_by, acknowledged_at=self.ack_at)

    def acknowledgement(self, key: str) -> AlarmAck | None:
        """The acknowledgement that covers every occurrence so far, if there is one."""
        if not self.acknowledged or self.ack_by is None or self.ack_at is None or self.ack_through is None:
            return None
        return AlarmAck(id=key, greenhouse_id=self.gh, kind=self.kind, acknowledged_by=self.ack_by,
                        acknowledged_at=self.ack_at, through=self.ack_through)

    def row(self, key: str) -> AlarmGroup:
        return AlarmGroup(id=key, greenhouse_id=self.gh, kind=self.kind, first_at=self.first_at,
                          last_at=self.last_at, count=self.count, acknowledged_by=self.ack_by,
                          acknowledged_at=self.ack_at, ack_through=self.ack_through)


class UnknownAlarm(LookupError):
    pass


class AlarmBook:
    """Folds the runtime's alarms into groups; keeps who acknowledged what (``sessions``: in the database)."""

    def __init__(self, runtime: Runtime, sessions: sessionmaker[Session] | None = None) -> None:
        self.runtime = runtime
        self.sessions = sessions
        self._lock = threading.Lock()
        self._acknowledging = threading.Lock()
        self._groups: dict[str, _Group] = {}
        self._dirty: set[str] = set()
        self._last_folded: Alarm | None = None
        self._cache: tuple[tuple[int, int, int], list[AlarmPublic]] | None = None
        self._version = 0
        self._wake = threading.Event()
        self._writer: threading.Thread | None = None
        if sessions is not None:
            with sessions() as s:
                for r in s.scalars(select(AlarmGroup)):
                    self._groups[r.id] = _Group(r.greenhouse_id, r.kind, _utc(r.first_at), _utc(r.last_at),  # type: ignore[arg-type]
                                                int(r.count), r.acknowledged_by, _utc(r.acknowledged_at),
                                                _utc(r.ack_through))

    def list(self, gh: str | None = None) -> list[AlarmPublic]:
        """Groups, newest first; unacknowledged ones first of all. Regrouped only when an alarm or an
        acknowledgement came in."""
        alarms = self.runtime.alarms
        key = (len(alarms), id(alarms[-1]) if alarms else 0, self._version)
        cache = self._cache
        if cache is None or cache[0] != key:
            self._fold(list(alarms))
            with self._lock:
                out = [g.public(k) for k, g in self._groups.items()]
            out.sort(key=lambda a: (a.acknowledged, -a.last_at.timestamp()))
            cache = (key, out)
            self._cache = cache
        return [a for a in cache[1] if gh is None or a.greenhouse_id == gh]

    def _fold(self, alarms: list[Alarm]) -> None:
        """Count the occurrences after the last one folded (the runtime's list only grows at its end)."""
        with self._lock:
            start = 0
            if self._last_folded is not None:
                start = next((i + 1 for i in range(len(alarms) - 1, -1, -1) if alarms[i] is self._last_folded), 0)
            for alarm in alarms[start:]:
                key = alarm_id(alarm.greenhouse_id, alarm.kind)
                g = self._groups.get(key)
                if g is None:
                    self._groups[key] = _Group(alarm.greenhouse_id, alarm.kind, alarm.ts, alarm.ts, 1)
                else:
                    g.last_at, g.count = max(g.last_at, alarm.ts), g.count + 1
                self._dirty.add(key)
            if alarms:
                self._last_folded = alarms[-1]
            dirty = bool(self._dirty)
        if dirty and self.sessions is not None:
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_behind, name="alarm-book", daemon=True)
                self._writer.start()
            self._wake.set()

    def _write_behind(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            try:
                self.flush()
            except Exception as exc:  # the database is back later: the groups stay dirty until then
                log.warning("storing alarms failed (%s: %s)", exc.__class__.__name__, exc)
            threading.Event().wait(WRITE_BEHIND_S)

    def flush(self) -> None:
        """Write the groups changed since the last write (kept dirty if the write fails)."""
        if self.sessions is None:
            return
        with self._lock:
            keys, self._dirty = self._dirty, set()
            rows = [self._groups[k].row(k) for k in keys]
        try:
            with self.sessions.begin() as s:
                for row in rows:
                    s.merge(row)
        except IntegrityError:  # one row refused (a greenhouse gone): store the others, drop that one
            for row in rows:
                try:
                    with self.sessions.begin() as s:
                        s.merge(row)
                except IntegrityError as exc:
                    log.warning("alarm %s of %s not stored: %s", row.kind, row.greenhouse_id, exc.__class__.__name__)
        except Exception:
            with self._lock:
                self._dirty |= keys
            raise

    def unacknowledged(self, gh: str) -> int:
        """Open groups of a greenhouse, without building the list: every open live stream asks every
        second, and a failing valve adds an occurrence at every decision."""
        alarms = self.runtime.alarms
        if alarms and alarms[-1] is not self._last_folded:
            self._fold(list(alarms))
        with self._lock:
            return sum(1 for g in self._groups.values() if g.gh == gh and not g.acknowledged)

    def acknowledge(self, key: str, actor: str) -> AlarmAck:
        """Acknowledge every occurrence so far; sealed in the audit trail and stored before it counts. A group
        acknowledged up to its last occurrence answers that acknowledgement and seals nothing: a repeated
        click or request is no new record (one at a time, so two at once cannot both seal)."""
        with self._acknowledging:
            match = next((a for a in self.list() if a.id == key), None)
            if match is None:
                raise UnknownAlarm(f"no current alarm with id {key!r}")
            with self._lock:
                done = self._groups[key].acknowledgement(key)
            return done if done is not None else self._acknowledge(key, match, actor)

    def _acknowledge(self, key: str, match: AlarmPublic, actor: str) -> AlarmAck:
        now = datetime.now(UTC)
        audit = self.runtime.audit
        if audit is not None:
            audit.store.append(ACCESS_CHAIN, "alarm_ack", actor,
                               {"greenhouse": match.greenhouse_id, "kind": match.kind, "count": match.count,
                                "through": match.last_at.isoformat()}, now)
        with self._lock:
            g = self._groups[key]
            before = g.ack_by, g.ack_at, g.ack_through
            g.ack_by, g.ack_at, g.ack_through = actor, now, match.last_at
            self._dirty.add(key)
        try:
            self.flush()
        except Exception:
            with self._lock:
                g.ack_by, g.ack_at, g.ack_through = before
            raise
        with self._lock:
            self._version += 1
        return AlarmAck(id=key, greenhouse_id=match.greenhouse_id, kind=match.kind, acknowledged_by=actor,
                        acknowledged_at=now, through=match.last_at)
