"""Do the service's tables hold what the audit trail sealed, no more and no other? ``audit verify`` asks.

Verifying each chain proves that what is in it is genuine, not that anything is in it: a chain
deleted whole, or events never sealed, verify as "nothing wrong"; nor that the tables the API and
the reports read still say what was sealed. So the tables are the other witness: every stored
decision and mode change (by seq) and every answered command (by cmd_id) must have its sealed
record, each row must hold what its record says, column by column (:mod:`app.audit_rows`), each
decision's ack status must be the one its last sealed command_ack gives, and a registered
greenhouse with records must have a chain. Rows older than a purge (retention) are not asked for:
their records were purged on purpose. Accounts and registrations are compared with the ``_access``
chain in the same snapshot (:mod:`app.access_coverage`).

Each chain is read once: verified as it is walked, and what passed is what the rows are compared
with. A record that fails ends the walk; the chain's failure names it, and its greenhouse's rows
are not compared past the last good record (nothing there can be trusted to compare with).

A running service stores a row first and seals its record a few seconds later (the writer seals in
batches), and an ack's status reaches its decision's row before its command_ack is sealed, so the
newest rows are not accounted for by the chain yet. The chains and the tables are read in one
snapshot (REPEATABLE READ on PostgreSQL); a row the chain does not account for yet (no record, or an
ack status the sealed acks do not give) is then judged again, as it is then, up to :data:`SEAL_LAG_S`
after the snapshot by this process's own clock, re-reading the chain's new records (verified on from
the head already checked). What is still unaccounted for then is reported. Nothing can hide longer
than one lag that way: the wait does not depend on anything a row says about itself (a row's ``ts``
is the edge box's clock, and written by whoever writes rows). A row whose sealed record says
otherwise is reported at once: no lag explains that.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, select

from app.access_coverage import AccessCoverage, check_access, listed
from app.audit_rows import (
    ACK_COLUMN,
    TABLES,
    Difference,
    SealedRow,
    as_datetime,
    aware,
    comparable,
    differing_columns,
    digest,
    one_per_row,
    sealed_row,
    stream_rows,
)
from app.audit_sink import ACCESS_CHAIN
from app.models import Greenhouse
from audit import AuditEntry, AuditError, SealedRecord, open_record
from audit.store import AuditStore, GreenhouseVerifyResult

DECISION_KINDS = frozenset({"decision"})
MODE_KINDS = frozenset({"estop", "estop_reset", "mode_change"})
ACK_KINDS = frozenset({"command_ack"})
SEAL_LAG_S = 30.0
"""How long after a row is stored its record may still be unsealed in a healthy service: twice the
writer's longest pause between seals while busy (``WriterConfig.audit_flush_busy_s``, 15 s)."""
POLL_S = 0.5
"""Pause between re-reads of the chains while rows wait for their records."""
KINDS = ("decision", "mode_change", "ack")


@dataclass
class Coverage:
    """What one greenhouse's tables hold that its audit chain does not, or holds otherwise."""

    greenhouse_id: str
    has_chain: bool
    rows: dict[str, int] = field(default_factory=dict)
    """Rows checked per kind (decision, mode_change, ack)."""
    missing: dict[str, list[str]] = field(default_factory=dict)
    """Ids (seq or cmd_id) per kind without an audit record."""
    differences: list[Difference] = field(default_factory=list)
    """Rows other than sealed, by seq: each with its first differing column."""
    broken_after: int | None = None
    """The chain fails after this seq: the rows were not compared with it."""
    sealed_meanwhile: int = 0
    """Rows that were not sealed yet when the tables were read, and were while verify waited."""

    @property
    def ok(self) -> bool:
        return (self.broken_after is None and not any(self.missing.values()) and not self.differences
                and (self.has_chain or not any(self.rows.values())))

    def describe(self) -> str:
        """A line per finding: what was checked and found as sealed, or what is missing or other than
        sealed."""
        if self.broken_after is not None:
            return (f"FAIL {self.greenhouse_id}: rows not compared with the trail "
                    f"past seq {self.broken_after}, where its chain fails")
        counts = ", ".join(f"{n} {kind}s" for kind, n in self.rows.items())
        if self.sealed_meanwhile:
            counts += f"; {self.sealed_meanwhile} sealed while verifying"
        if self.ok:
            return f"ok   {self.greenhouse_id}: every record in the tables is in the trail, as sealed " \
                f"({counts})" if self.has_chain else f"ok   {self.greenhouse_id}: no records and no chain yet"
        lines = []
        parts = [] if self.has_chain else ["no audit chain at all"]
        for kind, ids in self.missing.items():
            if ids:
                parts.append(f"{len(ids)} of {self.rows[kind]} {kind}s without an audit record: "
                             f"{listed(ids)}")
        if parts:
            lines.append(f"MISSING {self.greenhouse_id}: " + "; ".join(parts))
        if self.differences:
            first, *rest = self.differences
            n = len(self.differences)
            then = f"; then {listed([f'{d.table} seq {d.seq}' for d in rest])}" if rest else ""
            lines.append(f"DIFFERS {self.greenhouse_id}: " + (
                "1 row differs from its sealed record" if n == 1
                else f"{n} rows differ from their sealed records")
                + f": {first.describe()}{then}")
        return "\n".join(lines)


@dataclass(frozen=True)
class TrailCheck:
    """Every chain's verification, each registered greenhouse's tables against its chain, and the accounts
    and registrations against the access chain (None when one greenhouse was asked for)."""

    chains: list[GreenhouseVerifyResult]
    coverage: list[Coverage]
    access: AccessCoverage | None = None


@dataclass
class _Chain:
    """One chain as verified so far, and what its records say the rows hold."""

    greenhouse_id: str
    exists: bool
    result: GreenhouseVerifyResult
    rows: dict[str, dict[int, list[SealedRow]]] = field(default_factory=lambda: {t: {} for t in TABLES})
    """Per table, each seq's sealed records (one, unless an event was sealed twice after a crash)."""
    acks: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Per command, the chain seq and status of the last command_ack sealed for it."""
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
        r = store.verify_in(conn, self.greenhouse_id, on_entry=self._add,
                            after=(before.head_seq, before.head_hash))
        self.exists = self.exists or r.records_checked > 0
        self.result = GreenhouseVerifyResult(r.ok, before.records_checked + r.records_checked,
                                             r.first_bad_seq, r.reason, r.head_seq, r.head_hash,
                                             self.greenhouse_id)

    def _add(self, record: SealedRecord, entry: AuditEntry) -> None:
        self.first_ts = self.first_ts or entry.ts
        payload = entry.payload
        table = "decision" if entry.kind in DECISION_KINDS else \
            "mode_change" if entry.kind in MODE_KINDS else None
        seq = payload.get("seq")
        if table is not None and type(seq) is int:
            self.rows[table].setdefault(seq, []).append(sealed_row(table, record.seq, payload))
        elif entry.kind in ACK_KINDS and isinstance(payload.get("status"), str):
            self.acks[str(payload.get("cmd_id"))] = (record.seq, payload["status"])


@dataclass
class _Waiting:
    """A row its chain does not account for yet: maybe the writer's lag, so judged again until it is over."""

    unsealed: bool
    ack: Difference | None
    """The row's ack status is not what the sealed acks say (``sealed`` None: no command_ack at all)."""
    cmd_id: str | None = None


@dataclass
class _Rows:
    """One registered greenhouse's rows against its chain: counted, matched, and those still waited for."""

    store: AuditStore
    chain: _Chain
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    waiting: dict[tuple[str, int], _Waiting] = field(default_factory=dict)
    differences: list[Difference] = field(default_factory=list)

    @classmethod
    def read(cls, store: AuditStore, conn: Connection, chain: _Chain) -> _Rows:
        out = cls(store, chain)
        # After a purge, rows older than the oldest remaining record are not asked for: by their seq, below
        # every remaining row record's (their records went first), as well as by the ts they give themselves.
        since = None if chain.anchor_ts is None else as_datetime(chain.first_ts or chain.anchor_ts)
        floor = min((seq for sealed in chain.rows.values() for seq in sealed), default=None)
        for table in TABLES:
            for row in stream_rows(conn, table, chain.greenhouse_id):
                if since is not None and aware(row["ts"]) < since and (floor is None or row["seq"] < floor):
                    continue
                out.counts[table] += 1
                if table == "decision" and row[ACK_COLUMN] not in (None, "pending"):
                    out.counts["ack"] += 1
                waiting = out._judge(table, row, compare_content=True)
                if waiting is not None:
                    out.waiting[(table, int(row["seq"]))] = waiting
        return out

    @property
    def pending(self) -> int:
        return len(self.waiting)

    def recheck(self, conn: Connection) -> None:
        """Judge the waited-for rows again, as they are now, against the chain as it is now."""
        still: dict[tuple[str, int], _Waiting] = {}
        for table in TABLES:
            seqs = [seq for t, seq in self.waiting if t == table]
            for chunk in range(0, len(seqs), 500):
                for row in stream_rows(conn, table, self.chain.greenhouse_id, seqs[chunk:chunk + 500]):
                    key = (table, int(row["seq"]))
                    waiting = self._judge(table, row, compare_content=self.waiting[key].unsealed)
                    if waiting is not None:
                        still[key] = waiting
        self.waiting = still

    def _judge(self, table: str, row: Mapping[str, Any], *, compare_content: bool) -> _Waiting | None:
        """Compare ``row`` with what its chain sealed; what may still be the writer's lag is returned."""
        sealed = self.chain.rows[table].get(int(row["seq"]))
        if sealed and compare_content and not any(s.digest == digest(table, row) for s in sealed):
            self.differences += self._differences(table, row, sealed[0])
        ack = self._ack_difference(row, sealed) if table == "decision" else None
        if sealed and ack is None:
            return None
        return _Waiting(not sealed, ack, None if ack is None else str(row["cmd_id"]))

    def _ack_difference(self, row: Mapping[str, Any], sealed: list[SealedRow] | None) -> Difference | None:
        """The row's ack status against the last sealed command_ack, or the sealed decision's own before
        any."""
        stored, cmd = row[ACK_COLUMN], row["cmd_id"]
        last = self.chain.acks.get(str(cmd)) if cmd is not None else None
        if last is not None:
            expected, by = last[1], f"command_ack, chain seq {last[0]}"
        elif stored not in (None, "pending"):
            expected, by = None, "no command_ack"
        else:
            expected, by = (sealed[0].ack_status if sealed else stored), ""
        if stored == expected:
            return None
        return Difference("decision", self.chain.greenhouse_id, int(row["seq"]), ACK_COLUMN,
                          stored, expected, by)

    def _differences(self, table: str, row: Mapping[str, Any], sealed: SealedRow) -> list[Difference]:
        """Each column where ``row`` is not its record, read again from the chain (it passed the walk)."""
        gh, seq = self.chain.greenhouse_id, int(row["seq"])
        record = self.store.record_at(gh, sealed.chain_seq)
        try:
            if record is None:
                raise AuditError("gone from the chain")
            payload = open_record(self.store.keyring, record).payload
        except AuditError as exc:
            return [Difference(table, gh, seq, "record", "the row", f"unreadable now: {exc}")]
        return [Difference(table, gh, seq, c, comparable(table, c, row.get(c)),
                           comparable(table, c, payload.get(c)))
                for c in differing_columns(table, row, payload)]

    def coverage(self, waited_for: int) -> Coverage:
        chain, result = self.chain, self.chain.result
        if not result.ok:
            return Coverage(chain.greenhouse_id, True, broken_after=result.head_seq)
        missing: dict[str, list[str]] = {kind: [] for kind in KINDS}
        differences = list(self.differences)
        for (table, seq), w in sorted(self.waiting.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            if w.unsealed:
                missing[table].append(str(seq))
            if w.ack is not None and w.ack.sealed is None:
                missing["ack"].append(str(w.cmd_id))
            elif w.ack is not None:
                differences.append(w.ack)
        return Coverage(chain.greenhouse_id, chain.exists, dict(self.counts), missing,
                        one_per_row(differences), sealed_meanwhile=waited_for - self.pending)


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
        # Who may do what is the whole site's: checked unless one greenhouse was asked for.
        access = check_access(conn, store) if greenhouse_id in (None, ACCESS_CHAIN) else None
        chains = {gh: _Chain(gh, gh in stored, access.chain) if access is not None and gh == ACCESS_CHAIN
                  else _Chain.walk(store, conn, gh, gh in stored) for gh in chain_ids}
        rows = {gh: _Rows.read(store, conn, chains[gh]) for gh in registered if chains[gh].result.ok}
    unsealed = {gh: r.pending for gh, r in rows.items()}
    _wait_for_seals(engine, store, list(rows.values()), deadline)
    coverage = [rows[gh].coverage(unsealed[gh]) if gh in rows else _Rows(store, chains[gh]).coverage(0)
                for gh in registered]
    shown = [c.result for c in chains.values() if c.exists or greenhouse_id is not None]
    return TrailCheck(shown, coverage, None if access is None else access.coverage)


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
                if g.chain.result.ok:
                    g.recheck(conn)
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
