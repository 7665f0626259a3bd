"""Does the audit trail hold every record the service's tables hold? ``greentwin audit verify`` asks.

Verifying each chain proves that what is in it is genuine, not that anything is in it: a chain
deleted whole, or events never sealed, verify as "nothing wrong". So the tables are the other
witness: every stored decision and mode change (by seq) and every answered command (by cmd_id)
must have its sealed record, and a registered greenhouse with records must have a chain. Rows
older than a purge (retention) are not asked for: their records were purged on purpose.

Each chain is read once: verified as it is walked, and what passed is what the rows are compared
with. A record that fails ends the walk; the chain's failure names it, and its greenhouse's rows
are not compared past the last good record (nothing there can be trusted to compare with).

A running service stores a row first and seals its record a few seconds later (the writer seals in
batches), so the newest rows are not in the chain yet. The chains and the tables are read in one
snapshot (REPEATABLE READ on PostgreSQL); a row the chain does not hold yet is then waited for, up to
:data:`SEAL_LAG_S` after the snapshot by this process's own clock, re-reading the chain's new records
(verified on from the head already checked). What is still unsealed then is missing. Nothing can hide
longer than one lag that way: the wait does not depend on anything a row says about itself (a row's
``ts`` is the edge box's clock, and written by whoever writes rows).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, select

from app.models import Decision, Greenhouse, ModeChange
from audit import AuditEntry, SealedRecord
from audit.store import AuditStore, GreenhouseVerifyResult

DECISION_KINDS = frozenset({"decision"})
MODE_KINDS = frozenset({"estop", "estop_reset", "mode_change"})
ACK_KINDS = frozenset({"command_ack"})
SHOWN = 10
"""Missing ids listed per kind; the counts say how many in all."""
SEAL_LAG_S = 30.0
"""How long after a row is stored its record may still be unsealed in a healthy service: twice the
writer's longest pause between seals while busy (``WriterConfig.audit_flush_busy_s``, 15 s)."""
POLL_S = 0.5
"""Pause between re-reads of the chains while rows wait for their records."""
KINDS = ("decision", "mode_change", "ack")


@dataclass
class Coverage:
    """What one greenhouse's tables hold that its audit chain does not."""

    greenhouse_id: str
    has_chain: bool
    rows: dict[str, int] = field(default_factory=dict)
    """Rows checked per kind (decision, mode_change, ack)."""
    missing: dict[str, list[str]] = field(default_factory=dict)
    """Ids (seq or cmd_id) per kind without an audit record."""
    broken_after: int | None = None
    """The chain fails after this seq: the rows were not compared with it."""
    sealed_meanwhile: int = 0
    """Rows that were not sealed yet when the tables were read, and were while verify waited."""

    @property
    def ok(self) -> bool:
        return (self.broken_after is None and not any(self.missing.values())
                and (self.has_chain or not any(self.rows.values())))

    def describe(self) -> str:
        """One line: what was checked, and what is missing."""
        if self.broken_after is not None:
            return (f"FAIL {self.greenhouse_id}: rows not compared with the trail past seq {self.broken_after}, "
                    "where its chain fails")
        counts = ", ".join(f"{n} {kind}s" for kind, n in self.rows.items())
        if self.sealed_meanwhile:
            counts += f"; {self.sealed_meanwhile} sealed while verifying"
        if self.ok:
            return f"ok   {self.greenhouse_id}: every record in the tables is in the trail ({counts})" if \
                self.has_chain else f"ok   {self.greenhouse_id}: no records and no chain yet"
        parts = [] if self.has_chain else ["no audit chain at all"]
        for kind, ids in self.missing.items():
            if ids:
                more = f" (+{len(ids) - SHOWN} more)" if len(ids) > SHOWN else ""
                parts.append(f"{len(ids)} of {self.rows[kind]} {kind}s without an audit record: "
                             f"{', '.join(ids[:SHOWN])}{more}")
        return f"MISSING {self.greenhouse_id}: " + "; ".join(parts)


@dataclass(frozen=True)
class TrailCheck:
    """Every chain's verification, and each registered greenhouse's tables against its chain."""

    chains: list[GreenhouseVerifyResult]
    coverage: list[Coverage]


@dataclass
class _Chain:
    """One chain as verified so far, and the ids its records name per kind."""

    greenhouse_id: str
    exists: bool
    result: GreenhouseVerifyResult
    ids: dict[str, set[str]] = field(default_factory=lambda: {kind: set() for kind in KINDS})
    first_ts: str | None = None
    anchor_ts: str | None = None

    @classmethod
    def walk(cls, store: AuditStore, conn: Connection, gh: str, exists: bool) -> _Chain:
        chain = cls(gh, exists, GreenhouseVerifyResult(True, 0, greenhouse_id=gh))
        anchor = store.latest_anchor(gh, conn)
        chain.anchor_ts = None if anchor is None else anchor.ts
        chain.result = store.verify_in(conn, gh, on_entry=chain._add)
        return chain

    def go_on(self, store: AuditStore, conn: Connection) -> None:
        """Verify and read the records sealed since the last walk, from its head on."""
        before = self.result
        r = store.verify_in(conn, self.greenhouse_id, on_entry=self._add, after=(before.head_seq, before.head_hash))
        self.exists = self.exists or r.records_checked > 0
        self.result = GreenhouseVerifyResult(r.ok, before.records_checked + r.records_checked, r.first_bad_seq,
                                             r.reason, r.head_seq, r.head_hash, self.greenhouse_id)

    def _add(self, record: SealedRecord, entry: AuditEntry) -> None:
        self.first_ts = self.first_ts or entry.ts
        payload = entry.payload
        if entry.kind in DECISION_KINDS:
            self.ids["decision"].add(str(payload.get("seq")))
        elif entry.kind in MODE_KINDS:
            self.ids["mode_change"].add(str(payload.get("seq")))
        elif entry.kind in ACK_KINDS:
            self.ids["ack"].add(str(payload.get("cmd_id")))


@dataclass
class _Rows:
    """One registered greenhouse's rows (their ids per kind) and those its chain does not hold yet."""

    chain: _Chain
    rows: dict[str, list[str]]
    waiting: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def read(cls, conn: Connection, chain: _Chain) -> _Rows:
        gh = chain.greenhouse_id
        # After a purge, only rows from the oldest remaining record on are asked for.
        since = None if chain.anchor_ts is None else _as_datetime(chain.first_ts or chain.anchor_ts)
        rows = {
            "decision": _ids(conn, select(Decision.seq, Decision.ts).where(Decision.greenhouse_id == gh), since),
            "mode_change": _ids(conn, select(ModeChange.seq, ModeChange.ts).where(ModeChange.greenhouse_id == gh),
                                since),
            "ack": _ids(conn, select(Decision.cmd_id, Decision.ts).where(
                Decision.greenhouse_id == gh, Decision.cmd_id.is_not(None), Decision.ack_status.is_not(None),
                Decision.ack_status != "pending"), since),
        }
        found = cls(chain, rows, dict(rows))
        found.recheck()
        return found

    @property
    def pending(self) -> int:
        return sum(len(ids) for ids in self.waiting.values())

    def recheck(self) -> None:
        """Drop from the waiting rows those whose record the chain now holds."""
        self.waiting = {kind: [i for i in ids if i not in self.chain.ids[kind]] for kind, ids in self.waiting.items()}

    def coverage(self, waited_for: int) -> Coverage:
        chain, result = self.chain, self.chain.result
        if not result.ok:
            return Coverage(chain.greenhouse_id, True, broken_after=result.head_seq)
        return Coverage(chain.greenhouse_id, chain.exists, {k: len(v) for k, v in self.rows.items()}, self.waiting,
                        sealed_meanwhile=waited_for - self.pending)


def check_trail(engine: Engine, store: AuditStore, greenhouse_id: str | None = None, *,
                seal_lag_s: float | None = None) -> TrailCheck:
    """Verify every chain (or one greenhouse's) and compare each registered greenhouse's tables with it,
    giving rows newer than their chain up to ``seal_lag_s`` (default :data:`SEAL_LAG_S`) to be sealed."""
    deadline = time.monotonic() + (SEAL_LAG_S if seal_lag_s is None else seal_lag_s)
    with snapshot(engine) as conn:
        registered = [gh for gh in conn.scalars(select(Greenhouse.id).order_by(Greenhouse.id))
                      if greenhouse_id in (None, gh)]
        stored = store.greenhouse_ids(conn)
        # One greenhouse asked for by name is answered even when it has no chain (0 records).
        chain_ids = sorted({*stored, *registered}) if greenhouse_id is None else [greenhouse_id]
        chains = {gh: _Chain.walk(store, conn, gh, gh in stored) for gh in chain_ids}
        rows = {gh: _Rows.read(conn, chains[gh]) for gh in registered if chains[gh].result.ok}
    unsealed = {gh: r.pending for gh, r in rows.items()}
    _wait_for_seals(engine, store, list(rows.values()), deadline)
    coverage = [rows[gh].coverage(unsealed[gh]) if gh in rows else _Rows(chains[gh], {}).coverage(0)
                for gh in registered]
    shown = [c.result for c in chains.values() if c.exists or greenhouse_id is not None]
    return TrailCheck(shown, coverage)


def check_coverage(engine: Engine, store: AuditStore, greenhouse_id: str | None = None, *,
                   seal_lag_s: float | None = None) -> list[Coverage]:
    """Compare the tables with the trail for one registered greenhouse, or all of them (by id)."""
    return check_trail(engine, store, greenhouse_id, seal_lag_s=seal_lag_s).coverage


def _wait_for_seals(engine: Engine, store: AuditStore, greenhouses: list[_Rows], deadline: float) -> None:
    """Re-read the chains of greenhouses with rows not sealed yet until all are, or the lag is over
    (at least once: a long first pass may end after the lag, by when all should be sealed)."""
    polled = False
    while waiting := [g for g in greenhouses if g.pending and g.chain.result.ok]:
        left = deadline - time.monotonic()
        if left <= 0 and polled:
            return
        time.sleep(min(POLL_S, max(left, 0.0)))
        with snapshot(engine) as conn:
            for g in waiting:
                g.chain.go_on(store, conn)
                g.recheck()
        polled = True


@contextlib.contextmanager
def snapshot(engine: Engine) -> Iterator[Connection]:
    """One connection whose reads all see the same moment: a read-only REPEATABLE READ transaction on
    PostgreSQL. SQLite reads on one connection; what a moment's difference shows there is waited for."""
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
        with conn.begin():
            yield conn


def _ids(conn: Connection, stmt: object, since: datetime | None) -> list[str]:
    return [str(i) for i, ts in conn.execute(stmt) if since is None or _aware(ts) >= since]  # type: ignore[call-overload]


def _aware(ts: datetime) -> datetime:
    """SQLite hands back naive UTC datetimes."""
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def _as_datetime(ts: str | datetime) -> datetime:
    return _aware(ts if isinstance(ts, datetime) else datetime.fromisoformat(ts))
