"""One controlling replica per greenhouse: leases in the database, fencing tokens on commands.

Several service replicas share one database and one broker. A replica commands a greenhouse only
while it holds that greenhouse's lease (``greenhouse_lease``): each round it renews what it holds,
gives back what exceeds its fair share (greenhouses / live replicas, from ``service_replica``
heartbeats) and takes free or expired leases up to that share, each with one guarded UPDATE
(``WHERE holder IS NULL OR expired OR holder = me``), so two replicas can never both win one.
The fencing token grows at every change of holder; commands carry it and the edge box refuses a
lower one than it has seen, so a replica that lost its lease (paused, cut off) cannot command.

Locally a lease counts only until ``ttl - renew`` after the round that renewed it began: a
replica whose database went away stops commanding before any other replica can take over. A
replica that was alone at its last good round keeps commanding through a database outage (as the
single-replica service always did, spooling its records): nobody could take its leases, and a
replica started meanwhile takes them with a higher token, which the edge boxes then enforce.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, case, func, literal, literal_column, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from app.core.db import UtcDateTime
from app.metrics import Metrics
from app.models import GreenhouseLease, ModeChange, ServiceReplica
from control import GreenhouseController

log = logging.getLogger(__name__)
L = GreenhouseLease


def default_holder(state_dir: Path) -> str:
    """Host and state directory: a restarted replica is the same holder and takes its leases back
    at once (its journal and snapshots are there), while two replicas never share a state directory."""
    digest = hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:12]
    return f"{socket.gethostname()[:100]}:{digest}"


@dataclass(frozen=True)
class Round:
    """What one round changed: leases gained (token by greenhouse, not yet active) and lost."""

    gained: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    live_replicas: int = 1
    started: float = 0.0


class LeaseBook:
    """This replica's leases: the database side (``round``, blocking) and the local view (``token``)."""

    def __init__(self, sessions: sessionmaker[Session], holder: str, *, ttl_s: float, renew_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not holder or len(holder) > 128:
            raise ValueError(f"lease holder must be 1-128 characters, got {holder!r}")
        if not 0 < renew_s * 2 <= ttl_s:
            raise ValueError(f"renew period {renew_s:g} s must be at most half the lease ({ttl_s:g} s)")
        self.sessions = sessions
        self.holder = holder
        self.ttl_s = ttl_s
        self.renew_s = renew_s
        self.clock = clock
        self._leases: dict[str, tuple[int, float]] = {}  # gh -> (token, valid until on self.clock)
        self._lock = threading.Lock()
        self._rows: set[str] = set()
        self._alone = False

    # ---- local view (any thread) --------------------------------------------------------------
    def token(self, gh: str) -> int | None:
        """The fencing token to command ``gh`` with, or None if this replica must not command it."""
        with self._lock:
            lease = self._leases.get(gh)
        if lease is None or (not self._alone and self.clock() >= lease[1]):
            return None
        return lease[0]

    def held(self) -> dict[str, int]:
        """Greenhouses this replica may command now, with their tokens."""
        now = self.clock()
        with self._lock:
            return {gh: tok for gh, (tok, until) in self._leases.items() if self._alone or now < until}

    def activate(self, gained: dict[str, int], started: float) -> None:
        """Start commanding what a round gained (once the runtime has caught up with its state)."""
        with self._lock:
            for gh, tok in gained.items():
                self._leases[gh] = (tok, self._valid_until(started))

    def _valid_until(self, started: float) -> float:
        return started + self.ttl_s - self.renew_s

    # ---- database side (blocking: call off the event loop) ------------------------------------
    def round(self, greenhouses: list[str]) -> Round:
        """Heartbeat, renew, give back the surplus, take up to the fair share: one transaction."""
        started = self.clock()
        with self.sessions.begin() as s:
            now, expires = self._times(s)
            self._ensure_rows(s, greenhouses)
            self._heartbeat(s, expires)
            # Dead replicas' rows go (a restarted pod often has a new name); a slow one writes its own again.
            s.execute(ServiceReplica.__table__.delete().where(ServiceReplica.expires_at < now))
            live = s.scalar(select(func.count()).select_from(ServiceReplica)
                            .where(ServiceReplica.expires_at > now)) or 1
            share = math.ceil(len(greenhouses) / live)
            with self._lock:
                mine = list(self._leases)
            renewed: dict[str, int] = {}
            if mine:
                rows = s.execute(update(L).where(L.greenhouse_id.in_(mine), L.holder == self.holder)
                                 .values(expires_at=expires).returning(L.greenhouse_id, L.fencing_token))
                renewed = {gh: int(tok) for gh, tok in rows}
            surplus = sorted(renewed, key=self._rank)[share:]
            lost = [gh for gh in mine if gh not in renewed] + surplus
            self._drop(lost)  # stop commanding before the commit lets anyone else take them
            if surplus:
                s.execute(update(L).where(L.greenhouse_id.in_(surplus), L.holder == self.holder)
                          .values(holder=None, expires_at=now))
            kept = {gh: tok for gh, tok in renewed.items() if gh not in surplus}
            gained = self._take(s, greenhouses, kept, share - len(kept), now, expires)
        with self._lock:
            for gh, tok in kept.items():
                self._leases[gh] = (tok, self._valid_until(started))
            self._alone = live <= 1
        return Round(gained, lost, int(live), started)

    def release_all(self) -> None:
        """A clean stop: give every lease back and leave, so the others take over at once."""
        self._drop(list(self._leases))
        with self.sessions.begin() as s:
            now, _ = self._times(s)
            s.execute(update(L).where(L.holder == self.holder).values(holder=None, expires_at=now))
            s.execute(ServiceReplica.__table__.delete().where(ServiceReplica.holder == self.holder))

    def _take(self, s: Session, greenhouses: list[str], kept: dict[str, int], want: int,
              now: ColumnElement[Any], expires: ColumnElement[Any]) -> dict[str, int]:
        """Free, expired or already ours (a restart) leases, up to ``want``; the token grows on a new
        holder."""
        if want <= 0:
            return {}
        takeable = or_(L.holder.is_(None), L.expires_at < now, L.holder == self.holder)
        free = s.scalars(select(L.greenhouse_id).where(L.greenhouse_id.in_(greenhouses), takeable)).all()
        pick = sorted((gh for gh in free if gh not in kept), key=self._rank)[:want]
        if not pick:
            return {}
        rows = s.execute(update(L).where(L.greenhouse_id.in_(pick), takeable)
                         .values(holder=self.holder, expires_at=expires,
                                 fencing_token=case((L.holder == self.holder, L.fencing_token),
                                                    else_=L.fencing_token + 1))
                         .returning(L.greenhouse_id, L.fencing_token))
        return {gh: int(tok) for gh, tok in rows}

    def _drop(self, ghs: list[str]) -> None:
        with self._lock:
            for gh in ghs:
                self._leases.pop(gh, None)

    def _rank(self, gh: str) -> str:
        """Each replica prefers a different order, so two of them rarely race for the same lease."""
        return hashlib.sha256(f"{self.holder}/{gh}".encode()).hexdigest()

    def _times(self, s: Session) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
        """(now, now + ttl): the database's clock where replicas share it, else this process's."""
        if s.get_bind().dialect.name == "postgresql":
            # A literal interval, not a bound one: psycopg2 and psycopg 3 type parameters differently.
            return func.now(), func.now() + literal_column(f"interval '{float(self.ttl_s)!r} seconds'")
        wall = datetime.now(UTC)
        return (literal(wall, UtcDateTime()),
                literal(datetime.fromtimestamp(wall.timestamp() + self.ttl_s, UTC), UtcDateTime()))

    def _insert(self, s: Session, table: Any) -> Any:
        return (postgresql if s.get_bind().dialect.name == "postgresql" else sqlite).insert(table)

    def _ensure_rows(self, s: Session, greenhouses: list[str]) -> None:
        missing = [gh for gh in greenhouses if gh not in self._rows]
        if missing:
            s.execute(self._insert(s, L.__table__).values(
                [{"greenhouse_id": gh, "holder": None, "fencing_token": 0, "expires_at": None}
                 for gh in missing]
            ).on_conflict_do_nothing())
            self._rows.update(missing)

    def _heartbeat(self, s: Session, expires: ColumnElement[Any]) -> None:
        stmt = self._insert(s, ServiceReplica.__table__).values(holder=self.holder, expires_at=expires)
        s.execute(stmt.on_conflict_do_update(index_elements=["holder"], set_={"expires_at": expires}))


def seq_floor(token: int) -> int:
    """Where a tenure's sequence numbers start: ``(token - 1) * 2**32``. The previous holder's writer
    may still be storing its last records when the lease moves, so reading the newest recorded seq
    is not enough; tenures with disjoint ranges can never collide (token 1, a lone replica: from 0)."""
    return (max(token, 1) - 1) << 32


def catch_up(ctl: GreenhouseController, recorded_seq: int, last_mode: str | None, token: int) -> None:
    """A greenhouse taken over from another replica: continue after its records and its tenure's
    floor (never reuse a seq) and honour an e-stop it latched; this process's controller state may
    be older than both. A latch is never lifted here: a reset made under another replica is made
    again under this one."""
    ctl.continue_after(max(recorded_seq, seq_floor(token)))
    if last_mode == "estop" and not ctl.estop_latched:
        log.warning("controller %s: taken over with an e-stop latched by its previous holder", ctl.gh)
        ctl.adopt_estop()


def last_mode(sessions: sessionmaker[Session], gh: str) -> str | None:
    """The latest recorded mode change of ``gh`` (None if it never had one)."""
    with sessions() as s:
        mode: str | None = s.scalar(select(ModeChange.to_mode).where(ModeChange.greenhouse_id == gh)
                                    .order_by(ModeChange.seq.desc()).limit(1))
        return mode


class LeaseKeeper:
    """The runtime's side: a round every ``renew_s``; a gained greenhouse is caught up with its
    records before it is commanded, a lost one is not commanded from the moment it is lost."""

    def __init__(self, book: LeaseBook, controllers: dict[str, GreenhouseController],
                 recorded_seq: Callable[[str], int], metrics: Metrics) -> None:
        self.book = book
        self.controllers = controllers
        self.recorded_seq = recorded_seq
        self.metrics = metrics
        self.rounds_failed = 0

    async def step(self) -> Round:
        """One round; the database work runs off the event loop, the catch-up on it."""
        rnd = await asyncio.to_thread(self.book.round, list(self.controllers))
        for gh in rnd.lost:
            log.warning("lease on %s lost: no longer commanding it", gh)
            self.metrics.lease_token.labels(gh).set(0)
            self.metrics.lease_changes.labels("lost").inc()
        if rnd.gained:
            facts = await asyncio.to_thread(self._facts, list(rnd.gained))
            for gh, (seq, mode) in facts.items():
                catch_up(self.controllers[gh], seq, mode, rnd.gained[gh])
            self.book.activate(rnd.gained, rnd.started)
            for gh, tok in rnd.gained.items():
                self.metrics.lease_token.labels(gh).set(tok)
                self.metrics.lease_changes.labels("gained").inc()
            log.info("leases gained: %s (%d live replicas)",
                     ", ".join(f"{gh}@{tok}" for gh, tok in sorted(rnd.gained.items())), rnd.live_replicas)
        return rnd

    def _facts(self, ghs: list[str]) -> dict[str, tuple[int, str | None]]:
        return {gh: (self.recorded_seq(gh), last_mode(self.book.sessions, gh)) for gh in ghs}

    async def run(self) -> None:
        """Rounds until cancelled; a failed round (database away) is retried, and meanwhile the
        leases run out locally, so this replica stops commanding before another can take over."""
        while True:
            await asyncio.sleep(self.book.renew_s)
            try:
                await self.step()
            except Exception as exc:  # noqa: BLE001 - the keeper must outlive a database outage
                self.rounds_failed += 1
                log.warning("lease round failed (%s); holding %d leases until they run out",
                            type(exc).__name__, len(self.book.held()))
            held = self.book.held()
            for gh in self.controllers:
                if gh not in held:
                    self.metrics.lease_token.labels(gh).set(0)

    def release(self) -> None:
        """Give every lease back (a clean stop); a failure only delays the take-over to the expiry."""
        try:
            self.book.release_all()
        except Exception as exc:  # noqa: BLE001
            log.warning("could not release the leases (%s); they expire in %g s", exc, self.book.ttl_s)
