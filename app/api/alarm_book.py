"""Alarms grouped for operators, and their acknowledgements.

The runtime raises an alarm per occurrence (a failed valve alarms at every decision), so the list
groups occurrences by greenhouse and kind. An acknowledgement covers the occurrences up to its
moment: a new one afterwards makes the group unacknowledged again, so a recurring fault never
hides behind an old acknowledgement. Each acknowledgement is sealed into the access chain of the
audit trail with the operator's name (the greenhouse chains are written by the writer process).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from datetime import UTC, datetime

from app.api.schemas import AlarmAck, AlarmPublic
from app.audit_sink import ACCESS_CHAIN
from app.runtime import Alarm, Runtime

CRITICAL_PREFIXES = ("valve_failed", "flow_without_open_valve", "telemetry_stale", "valve_open_no_flow",
                     "command_rejected")


def alarm_id(gh: str, kind: str) -> str:
    return hashlib.sha256(f"{gh}\x00{kind}".encode()).hexdigest()[:16]


def severity(kind: str) -> str:
    return "critical" if kind.startswith(CRITICAL_PREFIXES) else "warning"


@dataclass(frozen=True)
class _Ack:
    by: str
    at: datetime
    through: datetime


class UnknownAlarm(LookupError):
    pass


class AlarmBook:
    """Reads the runtime's recent alarms; keeps who acknowledged what."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._acks: dict[str, _Ack] = {}
        self._lock = threading.Lock()
        self._cache: tuple[tuple[int, int, int], list[AlarmPublic]] | None = None
        self._version = 0

    def list(self, gh: str | None = None) -> list[AlarmPublic]:
        """Groups, newest first; unacknowledged ones first of all. Regrouped only when an alarm or an
        acknowledgement came in: every open live stream asks for the counts every second."""
        alarms = self.runtime.alarms
        key = (len(alarms), id(alarms[-1]) if alarms else 0, self._version)
        cache = self._cache
        if cache is None or cache[0] != key:
            cache = (key, self._group(list(alarms)))
            self._cache = cache
        return [a for a in cache[1] if gh is None or a.greenhouse_id == gh]

    def _group(self, alarms: list[Alarm]) -> list[AlarmPublic]:
        groups: dict[str, dict[str, object]] = {}
        for alarm in alarms:
            key = alarm_id(alarm.greenhouse_id, alarm.kind)
            g = groups.get(key)
            if g is None:
                groups[key] = {"id": key, "greenhouse_id": alarm.greenhouse_id, "kind": alarm.kind,
                               "severity": severity(alarm.kind), "first_at": alarm.ts, "last_at": alarm.ts, "count": 1}
            else:
                g["last_at"] = max(g["last_at"], alarm.ts)  # type: ignore[type-var]
                g["count"] = int(g["count"]) + 1  # type: ignore[call-overload]
        with self._lock:
            acks = dict(self._acks)
        out = []
        for key, g in groups.items():
            ack = acks.get(key)
            acked = ack is not None and ack.through >= g["last_at"]  # type: ignore[operator]
            out.append(AlarmPublic(**g, acknowledged=acked,  # type: ignore[arg-type]
                                   acknowledged_by=ack.by if ack is not None else None,
                                   acknowledged_at=ack.at if ack is not None else None))
        out.sort(key=lambda a: (a.acknowledged, -a.last_at.timestamp()))
        return out

    def unacknowledged(self, gh: str) -> int:
        return sum(1 for a in self.list(gh) if not a.acknowledged)

    def acknowledge(self, key: str, actor: str) -> AlarmAck:
        """Acknowledge every occurrence so far; sealed in the audit trail before it counts."""
        match = next((a for a in self.list() if a.id == key), None)
        if match is None:
            raise UnknownAlarm(f"no current alarm with id {key!r}")
        now = datetime.now(UTC)
        audit = self.runtime.audit
        if audit is not None:
            audit.store.append(ACCESS_CHAIN, "alarm_ack", actor,
                               {"greenhouse": match.greenhouse_id, "kind": match.kind, "count": match.count,
                                "through": match.last_at.isoformat()}, now)
        with self._lock:
            self._acks[key] = _Ack(actor, now, match.last_at)
            self._version += 1
        return AlarmAck(id=key, greenhouse_id=match.greenhouse_id, kind=match.kind, acknowledged_by=actor,
                        acknowledged_at=now, through=match.last_at)
