"""Alarms grouped for operators, with their state, acknowledgements and shelving, kept in the database.

This module keeps the groups and their episodes; :mod:`app.api.alarm_book` adds the operators' actions.

The runtime raises an alarm per occurrence (a failed valve alarms at every decision; a watched
condition once, when it is raised), so the list groups occurrences by greenhouse and kind. A group
is *active* while its watched condition holds (:mod:`app.alarms.watch`), or, for an event kind, for
a while after its last occurrence (:data:`app.alarms.catalogue.EVENT_ACTIVE_S`). Each spell from
the occurrence that raised it to its clearing is an *episode*, the history the API filters.

An acknowledgement covers the occurrences up to its moment: a new one afterwards makes the group
unacknowledged again, so a recurring fault never hides behind an old acknowledgement. A shelved
group is left out of the list of open alarms and sends no notification until its expiry; then it
comes back (and notifies, if it is still active and unacknowledged). Every acknowledgement,
shelving and unshelving is sealed into the access chain of the audit trail with the operator's name
and why, then stored before it counts.

New occurrences are folded in on demand (every open live stream asks for the counts every second)
and by the book's own thread every couple of seconds, which also closes the episodes of alarms
gone inactive, brings shelved alarms back and writes the changes behind, so no stream ever waits
on the database.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.alarm_models import AlarmEpisode, AlarmGroup
from app.alarms.catalogue import EVENT_ACTIVE_S, describe, is_watched
from app.alarms.notify import Notice, Notifier
from app.api.alarm_schemas import AlarmPublic
from app.api.alarm_state import Episode, Group, alarm_id
from app.runtime import Alarm, Runtime

log = logging.getLogger(__name__)

ROUND_S = 2.0
WATCH_GRACE_S = 30.0
"""A watched kind's occurrence counts as active this long before the watch has judged it (the
decision path raises a failed valve before the next round of :mod:`app.alarms.watch`)."""

class UnknownAlarm(LookupError):
    pass


class AlarmGroups:
    """Folds the runtime's alarms into groups and episodes; keeps who acknowledged and shelved what
    (``sessions``: in the database); hands raised alarms to the ``notifier``."""

    def __init__(self, runtime: Runtime, sessions: sessionmaker[Session] | None = None,
                 notifier: Notifier | None = None, clock: Callable[[], datetime] | None = None) -> None:
        self.runtime = runtime
        self.sessions = sessions
        self.notifier = notifier
        self.clock = clock or (lambda: datetime.now(UTC))
        self.lock = threading.Lock()
        self.acting = threading.Lock()
        """One operator action at a time: two clicks at once seal one record."""
        self.groups: dict[str, Group] = {}
        self._dirty: set[str] = set()
        self._closed: list[tuple[str, Episode]] = []
        """Episodes closed and not written yet (the group has moved on)."""
        self._last_folded: Alarm | None = None
        self._cache: tuple[tuple[Any, ...], list[AlarmPublic]] | None = None
        self.version = 0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._flushing = threading.Lock()
        if sessions is not None:
            with sessions() as s:
                for r in s.scalars(select(AlarmGroup)):
                    self.groups[r.id] = Group.of(r)
                for e in s.scalars(select(AlarmEpisode).where(AlarmEpisode.cleared_at.is_(None))
                                   .order_by(AlarmEpisode.id)):
                    if (g := self.groups.get(e.group_id)) is not None:
                        g.episode = Episode.of(e)

    # ---- state -------------------------------------------------------------------------------
    def _tracker(self) -> Any:
        watch = getattr(getattr(self.runtime, "housekeeping", None), "process_alarms", None)
        return None if watch is None else watch.tracker

    def active(self, g: Group, now: datetime) -> bool:
        """Whether the group's alarm is active now (see the module docstring)."""
        tracker = self._tracker()
        if tracker is not None and is_watched(g.kind):
            if tracker.is_active(g.gh, g.kind):
                return True
            cleared = tracker.cleared_at.get((g.gh, g.kind))
            return ((cleared is None or cleared < g.last_at)
                    and (now - g.last_at).total_seconds() < WATCH_GRACE_S)
        return (now - g.last_at).total_seconds() < EVENT_ACTIVE_S

    def _cleared_at(self, g: Group, now: datetime) -> datetime:
        tracker = self._tracker()
        if tracker is not None and is_watched(g.kind):
            return min(now, tracker.cleared_at.get((g.gh, g.kind), now))
        return min(now, g.last_at + timedelta(seconds=EVENT_ACTIVE_S))

    # ---- reading -----------------------------------------------------------------------------
    def list(self, gh: str | None = None, *, shelved: bool = False,
             active: bool | None = None) -> list[AlarmPublic]:
        """Groups, unacknowledged first, then newest first: the shelved ones with ``shelved``, else the
        others; ``active`` picks active (True) or inactive (False) ones."""
        now = self.clock()
        alarms = self.runtime.alarms
        key = (len(alarms), id(alarms[-1]) if alarms else 0, self.version, int(now.timestamp()))
        cache = self._cache
        if cache is None or cache[0] != key:
            self.fold()
            with self.lock:
                out = [g.public(k, self.active(g, now), now) for k, g in self.groups.items()]
            out.sort(key=lambda a: (a.acknowledged, -a.last_at.timestamp()))
            cache = (key, out)
            self._cache = cache
        return [a for a in cache[1] if (gh is None or a.greenhouse_id == gh) and a.shelved == shelved
                and (active is None or a.active == active)]

    def get(self, key: str) -> AlarmPublic:
        """One group as the list shows it, shelved or not; :class:`UnknownAlarm` if there is none."""
        self.fold()
        now = self.clock()
        with self.lock:
            g = self.groups.get(key)
            if g is None:
                raise UnknownAlarm(f"no current alarm with id {key!r}")
            return g.public(key, self.active(g, now), now)

    def unacknowledged(self, gh: str) -> int:
        """Open (unshelved, unacknowledged) groups of a greenhouse, without building the list: every open
        live stream asks every second, and a failing valve adds an occurrence at every decision."""
        alarms = self.runtime.alarms
        if alarms and alarms[-1] is not self._last_folded:
            self.fold()
        now = self.clock()
        with self.lock:
            return sum(1 for g in self.groups.values()
                       if g.gh == gh and not g.acknowledged and not g.shelved(now))

    # ---- folding -----------------------------------------------------------------------------
    def fold(self) -> None:
        """Count the occurrences after the last one folded (the runtime's list only grows at its end)."""
        alarms = list(self.runtime.alarms)
        notices: list[Notice] = []
        with self.lock:
            start = 0
            if self._last_folded is not None:
                start = next((i + 1 for i in range(len(alarms) - 1, -1, -1)
                              if alarms[i] is self._last_folded), 0)
            for alarm in alarms[start:]:
                if (notice := self._fold_one(alarm)) is not None:
                    notices.append(notice)
            if alarms:
                self._last_folded = alarms[-1]
            dirty = bool(self._dirty)
        self._notify(notices)
        if dirty:
            self._wake.set()

    def _fold_one(self, alarm: Alarm) -> Notice | None:
        key = alarm_id(alarm.greenhouse_id, alarm.kind)
        g = self.groups.get(key)
        self._dirty.add(key)
        if g is None:
            g = self.groups[key] = Group(alarm.greenhouse_id, alarm.kind, alarm.ts, alarm.ts, 0)
        elif g.episode is not None and not is_watched(g.kind) and \
                (alarm.ts - g.last_at).total_seconds() >= EVENT_ACTIVE_S:  # went quiet before this one
            self._close(key, g, g.last_at + timedelta(seconds=EVENT_ACTIVE_S))
        g.last_at, g.count = max(g.last_at, alarm.ts), g.count + 1
        if g.episode is not None:
            g.episode.last_at, g.episode.count = max(g.episode.last_at, alarm.ts), g.episode.count + 1
            return None
        g.episode = Episode(alarm.ts, alarm.ts, 1)
        return None if g.shelved(self.clock()) else self._notice(key, g, alarm.ts, "raised")

    def _close(self, key: str, g: Group, at: datetime) -> None:
        assert g.episode is not None
        g.episode.cleared_at = max(at, g.episode.raised_at)
        self._closed.append((key, g.episode))
        g.episode = None

    @staticmethod
    def _notice(key: str, g: Group, at: datetime, event: Any) -> Notice:
        t = describe(g.kind)
        return Notice(key, g.gh, g.kind, t.severity, t.title, t.description, t.action, at, event)

    def _notify(self, notices: list[Notice]) -> None:
        if self.notifier is not None:
            for n in notices:
                self.notifier.submit(n)

    def sweep(self) -> None:
        """Close the episodes of alarms gone inactive; bring back shelved alarms whose time is up."""
        self.fold()
        now = self.clock()
        notices: list[Notice] = []
        with self.lock:
            for key, g in self.groups.items():
                if g.episode is not None and not self.active(g, now):
                    self._close(key, g, self._cleared_at(g, now))
                    self._dirty.add(key)
                    self.version += 1
                if g.shelved_until is not None and g.shelved_until <= now:
                    g.shelved_by = g.shelved_until = g.shelve_reason = None
                    self._dirty.add(key)
                    self.version += 1
                    if self.active(g, now) and not g.acknowledged:
                        notices.append(self._notice(key, g, now, "unshelved"))
        self._notify(notices)

    # ---- storage -----------------------------------------------------------------------------
    def start(self) -> None:
        """The book's round: fold, sweep and write behind every :data:`ROUND_S`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._rounds, name="alarm-book", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def _rounds(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(ROUND_S)
            self._wake.clear()
            try:
                self.sweep()
                self.flush()
            except Exception as exc:  # the database is back later: the groups stay dirty until then
                log.warning("storing alarms failed (%s: %s)", exc.__class__.__name__, exc)
            self._stop.wait(0.2)  # at most a few writes a second however fast occurrences come

    def flush(self, extra: Callable[[Session], None] | None = None) -> None:
        """Write the groups and episodes changed since the last write (kept dirty if the write fails),
        and ``extra``'s rows in the same transaction."""
        if self.sessions is None:
            return
        with self._flushing:
            self._flush(extra)

    def _flush(self, extra: Callable[[Session], None] | None) -> None:
        with self.lock:
            keys, self._dirty = self._dirty, set()
            closed, self._closed = self._closed, []
            units = {k: [self.groups[k].row(k)] for k in keys}
            episodes: list[tuple[str, Episode]] = [*closed, *((k, self.groups[k].episode) for k in keys
                                                             if self.groups[k].episode is not None)]  # type: ignore[misc]
        if not units and not episodes and extra is None:
            return  # nothing changed: no round trip
        try:
            self._write(units, episodes, extra)
        except IntegrityError:  # one row refused (a greenhouse gone): store the others, drop that one
            for k, rows in units.items():
                try:
                    self._write({k: rows}, [(key, e) for key, e in episodes if key == k], None)
                except IntegrityError as exc:
                    log.warning("alarm %s of %s not stored: %s", rows[0].kind, rows[0].greenhouse_id,
                                exc.__class__.__name__)
            if extra is not None:
                self._write({}, [], extra)
        except Exception:
            with self.lock:
                self._dirty |= keys
                self._closed = closed + self._closed
            raise

    def _write(self, units: dict[str, list[AlarmGroup]], episodes: list[tuple[str, Episode]],
               extra: Callable[[Session], None] | None) -> None:
        assert self.sessions is not None
        fresh: list[tuple[Episode, AlarmEpisode]] = []
        with self.sessions.begin() as s:
            for rows in units.values():
                for row in rows:
                    s.merge(row)
            for key, ep in episodes:
                g = self.groups[key]
                row = ep.row(key, g.gh, g.kind)
                if ep.row_id is None:
                    s.add(row)
                    fresh.append((ep, row))
                else:
                    s.merge(row)
            if extra is not None:
                s.flush()  # the episodes first: extra may update them
                extra(s)
            s.flush()
            ids = [(ep, row.id) for ep, row in fresh]
        for ep, row_id in ids:
            ep.row_id = row_id
