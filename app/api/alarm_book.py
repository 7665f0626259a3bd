"""The operators' side of the alarm groups: acknowledge, shelve, unshelve, and the history.

Every action is sealed into the access chain of the audit trail (the greenhouse chains are written
by the writer process) with the operator's name and why, then stored, with a row in
``alarm_action``, before it counts; if storing fails the group goes back to where it was.
Acknowledging a group again before a new occurrence answers the standing acknowledgement and seals
nothing. The grouping itself is :mod:`app.api.alarm_groups`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from app.alarm_models import AlarmAction, AlarmEpisode
from app.alarms.catalogue import Severity, describe
from app.api.alarm_groups import AlarmGroups, UnknownAlarm
from app.api.alarm_schemas import AlarmAck, AlarmActionPublic, AlarmEpisodePublic, AlarmPublic
from app.api.alarm_state import Group, alarm_id, utc
from app.audit_sink import ACCESS_CHAIN

__all__ = ["AlarmBook", "NotShelved", "UnknownAlarm", "alarm_id"]

HistoryState = Literal["active", "cleared", "acknowledged", "unacknowledged"]


class NotShelved(ValueError):
    pass


class AlarmBook(AlarmGroups):
    """Alarm groups with the actions operators take on them."""

    def acknowledge(self, key: str, actor: str, comment: str = "") -> AlarmAck:
        """Acknowledge every occurrence so far (and every episode not yet acknowledged); a group
        acknowledged up to its last occurrence answers that acknowledgement and seals nothing: a
        repeated click or request is no new record."""
        with self.acting:
            match = self.get(key)
            with self.lock:
                done = self.groups[key].acknowledgement(key)
            if done is not None:
                return done
            now = self.clock()
            self._seal("alarm_ack", actor, {"greenhouse": match.greenhouse_id, "kind": match.kind,
                                            "count": match.count, "through": match.last_at.isoformat(),
                                            "comment": comment}, now)

            def change(g: Group) -> None:
                g.ack_by, g.ack_at, g.ack_through, g.ack_comment = actor, now, match.last_at, comment or None
                for ep in [g.episode, *(e for k, e in self._closed if k == key)]:
                    if ep is not None and ep.ack_by is None:
                        ep.ack_by, ep.ack_at, ep.ack_comment = actor, now, comment or None

            def store(s: Session) -> None:
                s.add(self._action_row(match, "ack", actor, now, comment))
                s.execute(update(AlarmEpisode).where(AlarmEpisode.group_id == key,
                                                     AlarmEpisode.acknowledged_by.is_(None))
                          .values(acknowledged_by=actor, acknowledged_at=now, ack_comment=comment or None))

            self._apply(key, change, store)
            return AlarmAck(id=key, greenhouse_id=match.greenhouse_id, kind=match.kind, acknowledged_by=actor,
                            acknowledged_at=now, through=match.last_at, comment=comment)

    def shelve(self, key: str, actor: str, reason: str, minutes: int) -> AlarmPublic:
        """Hide the alarm from the open list and its notifications for ``minutes``."""
        with self.acting:
            match = self.get(key)
            now = self.clock()
            until = now + timedelta(minutes=minutes)
            self._seal("alarm_shelve", actor, {"greenhouse": match.greenhouse_id, "kind": match.kind,
                                               "reason": reason, "until": until.isoformat()}, now)

            def change(g: Group) -> None:
                g.shelved_by, g.shelved_until, g.shelve_reason = actor, until, reason

            self._apply(key, change,
                        lambda s: s.add(self._action_row(match, "shelve", actor, now, reason, until)))
            return self.get(key)

    def unshelve(self, key: str, actor: str, reason: str) -> AlarmPublic:
        """Bring a shelved alarm back before its expiry (it notifies again if still active)."""
        with self.acting:
            match = self.get(key)
            if not match.shelved:
                raise NotShelved(f"alarm {key!r} is not shelved")
            now = self.clock()
            self._seal("alarm_unshelve", actor, {"greenhouse": match.greenhouse_id, "kind": match.kind,
                                                 "reason": reason}, now)

            def change(g: Group) -> None:
                g.shelved_by = g.shelved_until = g.shelve_reason = None

            self._apply(key, change, lambda s: s.add(self._action_row(match, "unshelve", actor, now, reason)))
            back = self.get(key)
            if back.active and not back.acknowledged:
                with self.lock:
                    notice = self._notice(key, self.groups[key], now, "unshelved")
                self._notify([notice])
            return back

    # ---- history -----------------------------------------------------------------------------
    def history(self, *, gh: str | None = None, kind: str | None = None, severity: Severity | None = None,
                since: datetime | None = None, until: datetime | None = None,
                state: HistoryState | None = None, limit: int = 200) -> list[AlarmEpisodePublic]:
        """Episodes, newest first, that overlap [since, until) and match every filter given; ``kind`` is a
        whole kind (``zone_dry:2``) or a code (``zone_dry``: every zone)."""
        if self.sessions is None:
            return []
        self.sweep()
        self.flush()
        e = AlarmEpisode
        q = select(e).order_by(e.raised_at.desc(), e.id.desc()).limit(limit)
        if gh is not None:
            q = q.where(e.greenhouse_id == gh)
        if kind is not None:
            q = q.where(or_(e.kind == kind, e.kind.startswith(kind + ":", autoescape=True)))
        if severity is not None:
            q = q.where(e.severity == severity)
        if since is not None:
            q = q.where(or_(e.cleared_at.is_(None), e.cleared_at >= since))
        if until is not None:
            q = q.where(e.raised_at < until)
        q = q.where({"active": e.cleared_at.is_(None), "cleared": e.cleared_at.is_not(None),
                     "acknowledged": e.acknowledged_by.is_not(None),
                     "unacknowledged": e.acknowledged_by.is_(None)}[state]) if state is not None else q
        with self.sessions() as s:
            return [AlarmEpisodePublic(alarm_id=r.group_id, greenhouse_id=r.greenhouse_id, kind=r.kind,
                                       severity=r.severity, title=describe(r.kind).title,
                                       raised_at=r.raised_at, last_at=r.last_at, count=r.count,
                                       cleared_at=r.cleared_at, acknowledged_by=r.acknowledged_by,
                                       acknowledged_at=r.acknowledged_at,
                                       ack_comment=r.ack_comment) for r in s.scalars(q)]

    def actions(self, key: str, limit: int = 200) -> list[AlarmActionPublic]:
        """The acknowledgements and shelvings of one alarm, newest first."""
        if self.sessions is None:
            return []
        q = (select(AlarmAction).where(AlarmAction.group_id == key)
             .order_by(AlarmAction.id.desc()).limit(limit))
        with self.sessions() as s:
            return [AlarmActionPublic(alarm_id=r.group_id, greenhouse_id=r.greenhouse_id, kind=r.kind,
                                      action=r.action, actor=r.actor, at=utc(r.at), comment=r.comment,  # type: ignore[arg-type]
                                      shelved_until=utc(r.shelved_until)) for r in s.scalars(q)]

    # ---- shared ------------------------------------------------------------------------------
    def _seal(self, kind: str, actor: str, payload: dict[str, Any], now: datetime) -> None:
        audit = getattr(self.runtime, "audit", None)
        if audit is not None:
            audit.store.append(ACCESS_CHAIN, kind, actor, payload, now)

    @staticmethod
    def _action_row(match: AlarmPublic, action: str, actor: str, now: datetime, comment: str,
                    until: datetime | None = None) -> AlarmAction:
        return AlarmAction(group_id=match.id, greenhouse_id=match.greenhouse_id, kind=match.kind,
                           action=action, actor=actor, at=now, comment=comment, shelved_until=until)

    def _apply(self, key: str, change: Callable[[Group], None], store: Callable[[Session], None]) -> None:
        """``change`` the group in memory, then store it with ``store``'s rows; undone if that fails."""
        with self.lock:
            g = self.groups[key]
            before = replace(g)
            episodes = [e for e in [g.episode, *(e for k, e in self._closed if k == key)] if e is not None]
            saved = [replace(e) for e in episodes]
            change(g)
            self._dirty.add(key)
        try:
            self.flush(store)
        except Exception:
            with self.lock:
                for f in fields(Group):
                    if f.name != "episode":
                        setattr(g, f.name, getattr(before, f.name))
                for e, old in zip(episodes, saved, strict=True):
                    e.ack_by, e.ack_at, e.ack_comment = old.ack_by, old.ack_at, old.ack_comment
            raise
        with self.lock:
            self.version += 1
