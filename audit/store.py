"""SQL storage for the audit chain (SQLite and PostgreSQL): append, stream, verify, purge.

:mod:`audit.chain` seals and verifies; this module only decides *where* things live and keeps
the in-process writer state (one :class:`~audit.chain.AuditChain` per greenhouse) in step with
the database:

* appends seal and insert inside one transaction under a per-greenhouse lock; if the insert
  fails the cached chain is dropped and the next append resumes from the newest *stored*
  record, so a failed write can never fork the chain;
* records go in with the fastest bulk path of the database (:mod:`audit.bulk`: COPY on
  PostgreSQL, one executemany on SQLite). Optionally (``seal_ahead``), on PostgreSQL a long
  batch is written in chunks while a worker thread seals the next one (:mod:`audit.pipeline`);
  a batch is one transaction either way, and :meth:`AuditStore.append_many` returns only after
  its commit;
* every ``checkpoint_every``-th seq gets a signed checkpoint in the same transaction, so a
  rewritten history or a truncated tail is caught even by someone holding the AES keys;
* records are read back in seq order through a server-side cursor (``yield_per``), so verifying
  millions of records needs constant memory;
* nothing updates or deletes, except :meth:`AuditStore.purge`, which signs an anchor, deletes
  the records it covers under the trigger's licence (see migration 0002) and records itself.

Writers in several processes (the service, its replicas, ``greentwin user add``) are safe but not
coordinated: each caches the heads it wrote, so an append after another process's hits the primary key
on the seq the other took. The store then resumes that chain from the stored head and seals the batch
again (``race_retries`` times); an ``IntegrityError`` with no newer stored head (a refusal, not a race)
is raised at once. :meth:`AuditStore.append_in` seals inside the caller's transaction, so a row change
and its record commit together or not at all.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Engine, delete, func, insert, select, text, union
from sqlalchemy.exc import IntegrityError

from audit.bulk import bulk_writer
from audit.chain import (
    Anchor,
    AuditChain,
    AuditEntry,
    AuditEvent,
    SealedRecord,
    SignedCheckpoint,
    VerifyResult,
    iso_utc,
    open_record,
    sign_anchor,
    sign_checkpoint,
    verify_chain,
)
from audit.crypto import Keyring, Signer
from audit.errors import AuditChainMoved, AuditTamperError
from audit.pipeline import SealAhead
from audit.tables import AuditCheckpoint, AuditPurgeToken, AuditRecord

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

log = logging.getLogger(__name__)

MIN_RETENTION_DAYS = 180
"""Records younger than this are never purged, whatever the caller asks for."""
PURGE_KIND = "purge"
"""``kind`` of the audit entry each purge appends, so purges are themselves on the record."""
PURGE_SETTING = "greentwin.audit_purge"
"""PostgreSQL setting the delete trigger reads; set transaction-locally by the purge only."""
_STREAM_BATCH = 1000
_T = TypeVar("_T")

_RECORD_COLUMNS = (
    AuditRecord.greenhouse_id,
    AuditRecord.seq,
    AuditRecord.ts,
    AuditRecord.kind,
    AuditRecord.actor,
    AuditRecord.key_id,
    AuditRecord.nonce,
    AuditRecord.ciphertext,
    AuditRecord.prev_hash,
    AuditRecord.record_hash,
)


def _sealed(row: Sequence[Any]) -> SealedRecord:
    """A row of ``_RECORD_COLUMNS`` as the record it stores (the columns are the record's fields, in
    order)."""
    return SealedRecord(*row)


_STATEMENT_COLUMNS = (
    AuditCheckpoint.greenhouse_id,
    AuditCheckpoint.seq,
    AuditCheckpoint.head_hash,
    AuditCheckpoint.ts,
    AuditCheckpoint.signature,
)


@dataclass(frozen=True, slots=True)
class GreenhouseVerifyResult(VerifyResult):
    """A :class:`~audit.chain.VerifyResult` that says which greenhouse it is about."""

    greenhouse_id: str = ""


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """What one greenhouse's purge did: the anchor it signed, rows removed, the entry it appended."""

    greenhouse_id: str
    anchor: Anchor
    records_deleted: int
    record: SealedRecord


def _statement_row(kind: str, st: SignedCheckpoint | Anchor) -> dict[str, Any]:
    return {
        "greenhouse_id": st.greenhouse_id,
        "kind": kind,
        "seq": st.seq,
        "head_hash": st.head_hash,
        "ts": st.ts,
        "signature": st.signature,
    }


class AuditStore:
    """The audit trail of every greenhouse in one database; share one instance per process.

    ``keyring`` seals and opens records, ``signer`` signs checkpoints and anchors (its public
    key verifies them, and ``retired_keys`` those signed before the signing key was rotated).
    Thread-safe: writes to one greenhouse are serialised.

    ``seal_ahead=N`` seals batches longer than N records one chunk of N ahead of the write, in a
    worker thread that lives for that call only, where the database leaves the GIL free while it
    works (PostgreSQL). It pays only with a spare CPU core: on a host whose cores are busy it costs
    CPU (two threads taking turns with the GIL) and gains no throughput, so it is off by default
    (``bench/audit_append.py --seal-ahead N`` measures both).
    """

    def __init__(
        self,
        engine: Engine,
        keyring: Keyring,
        signer: Signer,
        *,
        checkpoint_every: int = 1000,
        seal_ahead: int | None = None,
        retired_keys: Sequence[Ed25519PublicKey] = (),
    ) -> None:
        if type(checkpoint_every) is not int or checkpoint_every < 1:
            raise ValueError("checkpoint_every must be an int >= 1")
        if seal_ahead is not None and (type(seal_ahead) is not int or seal_ahead < 1):
            raise ValueError("seal_ahead must be None or an int >= 1")
        self._bulk = bulk_writer(engine.dialect)
        self._seal_ahead = seal_ahead if self._bulk.overlaps else None
        self._engine = engine
        self._keyring = keyring
        self._signer = signer
        # Checkpoints signed before the signing key was rotated verify with the key they were signed with.
        self._verify_keys = (signer.public_key, *retired_keys)
        self._checkpoint_every = checkpoint_every
        self._chains: dict[str, AuditChain] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    @property
    def keyring(self) -> Keyring:
        return self._keyring

    @keyring.setter
    def keyring(self, keyring: Keyring) -> None:
        """Switch keys (after :meth:`Keyring.rotate`); old keys must stay in it to verify old records."""
        with self._locks_guard:
            self._keyring = keyring
            for chain in self._chains.values():
                chain.keyring = keyring

    @property
    def signer(self) -> Signer:
        """The checkpoint and anchor signing key (another process rebuilds the same store with it)."""
        return self._signer

    @property
    def verify_keys(self) -> tuple[Ed25519PublicKey, ...]:
        """Every key that signed a statement about the chains: the signer's, then the retired ones."""
        return self._verify_keys

    # -- writing ----------------------------------------------------------------------

    race_retries = 8
    """Times one append is sealed again after another writer took its seq (then the race is raised)."""
    sealed_change_retries = 40
    """The same for :meth:`append_in`, whose record carries a change that is lost with it: a busy chain
    (the service sealing acknowledgements every few milliseconds) can take a slow process's seq many
    times over, so it tries longer, waiting a growing, per-process staggered while between tries."""

    def append(
        self,
        greenhouse_id: str,
        kind: str,
        actor: str,
        payload: Mapping[str, Any],
        ts: str | datetime | None = None,
        *,
        after_seq: int | None = None,
    ) -> SealedRecord:
        """Seal and store one entry (its own transaction); ``ts`` defaults to now."""
        [record] = self.append_many(greenhouse_id, [AuditEvent(kind, actor, payload, ts)],
                                    after_seq=after_seq)
        return record

    def append_many(
        self, greenhouse_id: str, events: Iterable[AuditEvent], *, after_seq: int | None = None
    ) -> list[SealedRecord]:
        """Seal and store a batch in one transaction: all stored, or none and the chain unmoved.

        Returns after the commit, so every returned record is durable. All database work runs
        in the calling thread; with ``seal_ahead`` a worker seals the next chunk meanwhile and is
        joined before this returns. A seq taken by another writer meanwhile is sealed again after
        its record. ``after_seq`` makes the append conditional, for a record decided on what the
        chain held (read with :meth:`head_seq` before the decision): it is stored only right after
        that seq, and :class:`~audit.errors.AuditChainMoved` is raised when another writer appended
        first, whether before this transaction read the head or while it waited on the insert.
        """
        events = list(events)
        if not events:
            return []

        def write(conn: Connection) -> list[SealedRecord]:
            if after_seq is not None:  # the head as stored in this transaction, never this process's cache
                self._chains.pop(greenhouse_id, None)
                stored = self._chain(conn, greenhouse_id).head_seq
                if stored != after_seq:
                    raise AuditChainMoved(greenhouse_id, after_seq, stored)
            records: list[SealedRecord] = []
            chunk = self._seal_ahead or len(events)
            with SealAhead(self._chain(conn, greenhouse_id), events, chunk, self._bulk.prepare) as sealed:
                for chunk_records, prepared in sealed:
                    self._bulk.write(conn, prepared)
                    self._checkpoint_records(conn, chunk_records)
                    records += chunk_records
            return records

        with self._lock(greenhouse_id):
            if after_seq is None:
                return self._write_racing([greenhouse_id], write, retries=self.race_retries)
            try:
                return self._write_racing([greenhouse_id], write, retries=0)
            except IntegrityError as exc:  # another writer's insert of the same seq committed first
                if not self._moved_since({greenhouse_id: after_seq}):
                    raise
                raise AuditChainMoved(greenhouse_id, after_seq, self.head_seq(greenhouse_id)) from exc

    def append_batches(self, batches: Mapping[str, Iterable[AuditEvent]]) -> dict[str, list[SealedRecord]]:
        """Seal and store several greenhouses' batches in one transaction: all stored, or none.

        One commit for a whole flush of the service's writer instead of one per greenhouse: the
        commit (fsync) is what a batch costs, whatever its size. Locks are taken in name order
        so that two callers never wait on each other crosswise.
        """
        todo = {gh: list(events) for gh, events in sorted(batches.items())}
        todo = {gh: events for gh, events in todo.items() if events}
        if not todo:
            return {}

        def write(conn: Connection) -> dict[str, list[SealedRecord]]:
            out = {gh: self._chain(conn, gh).append_many(events) for gh, events in todo.items()}
            self._insert(conn, [r for recs in out.values() for r in recs])
            return out

        with contextlib.ExitStack() as held:
            for gh in todo:
                held.enter_context(self._lock(gh))
            return self._write_racing(list(todo), write, retries=self.race_retries)

    def append_in(self, conn: Connection, greenhouse_id: str,
                  events: Iterable[AuditEvent]) -> list[SealedRecord]:
        """Seal and insert a batch inside the caller's open transaction: it commits with the caller's
        own changes, or neither does (the caller commits or rolls back).

        For changes that must not exist unsealed (who may do what). The head is read from the
        database in that transaction, never from this process's cache, and a seq another writer
        takes first, even one whose transaction commits while this insert waits on it, is sealed
        again after its record under a savepoint, leaving the caller's changes in place. On SQLite
        the caller should have written its change first, so that the savepoint nests in its
        transaction. No lock of this store is held after the insert, so the caller may take its time
        to commit without blocking this process's other writers on a lock they cannot see.
        """
        events = list(events)
        if not events:
            return []
        self._chains.pop(greenhouse_id, None)  # the stored head moves past any cached one at the commit
        stagger = 0.5 + (os.getpid() % 97) / 97.0  # writers that collided do not retry in step
        for attempt in range(self.sealed_change_retries + 1):
            if attempt:
                time.sleep(min(0.05, 0.001 * 1.5 ** attempt) * stagger)
            chain = AuditChain.resume(greenhouse_id, self._keyring, self._stored_head(conn, greenhouse_id))
            records = chain.append_many(events)
            try:
                with conn.begin_nested():
                    self._insert(conn, records)
            except IntegrityError:
                last = attempt == self.sealed_change_retries
                if last or not self._moved(conn, {greenhouse_id: records[0].seq - 1}):
                    raise
                log.info("another writer took seq %d of %s; sealing again after it", records[0].seq,
                         greenhouse_id)
                continue
            return records
        raise AssertionError("unreachable")

    def _write_racing(self, chain_ids: Sequence[str], write: Callable[[Connection], _T], *,
                      retries: int) -> _T:
        """Run ``write`` in a transaction of its own (the caller holds the chains' locks). When it fails,
        the cached heads are dropped (they may have moved past records that were not stored); when it
        failed on a seq another writer took, it runs again on the stored heads, up to ``retries`` times."""
        for attempt in range(retries + 1):
            sealed_on: dict[str, int] = {}
            try:
                with self._engine.begin() as conn:
                    for gh in chain_ids:
                        sealed_on[gh] = self._chain(conn, gh).head_seq
                    return write(conn)
            except IntegrityError:
                for gh in chain_ids:
                    self._chains.pop(gh, None)
                if attempt == retries or not self._moved_since(sealed_on):
                    raise
                log.info("another writer appended to %s meanwhile; sealing again after its records",
                         ", ".join(chain_ids))
            except BaseException:
                for gh in chain_ids:
                    self._chains.pop(gh, None)
                raise
        raise AssertionError("unreachable")

    def _moved_since(self, sealed_on: Mapping[str, int]) -> bool:
        with self._engine.connect() as conn:
            return self._moved(conn, sealed_on)

    def _moved(self, conn: Connection, sealed_on: Mapping[str, int]) -> bool:
        """Whether a stored head is past the seq a batch was sealed on: another writer won the race."""
        for gh, seq in sealed_on.items():
            head = self._stored_head(conn, gh)
            if head is not None and head.seq > seq:
                return True
        return False

    def head_seq(self, greenhouse_id: str) -> int:
        """The seq of the newest stored record of one chain (its anchor's after a full purge; 0 before
        the first): what a conditional append (``after_seq``) is decided on."""
        with self._engine.connect() as conn:
            head = self._stored_head(conn, greenhouse_id)
        return 0 if head is None else head.seq

    def tail_records(self, greenhouse_id: str, count: int) -> list[SealedRecord]:
        """The newest ``count`` stored records of one chain, oldest first."""
        if count < 1:
            return []
        with self._engine.connect() as conn:
            rows = conn.execute(
                select(*_RECORD_COLUMNS)
                .where(AuditRecord.greenhouse_id == greenhouse_id)
                .order_by(AuditRecord.seq.desc())
                .limit(count)
            ).all()
        return [_sealed(row) for row in reversed(rows)]

    def last_record_of(self, greenhouse_id: str, kinds: Iterable[str]) -> SealedRecord | None:
        """The newest stored record of one of ``kinds`` (the kind is in the clear envelope)."""
        with self._engine.connect() as conn:
            row = conn.execute(
                select(*_RECORD_COLUMNS)
                .where(AuditRecord.greenhouse_id == greenhouse_id, AuditRecord.kind.in_(list(kinds)))
                .order_by(AuditRecord.seq.desc())
                .limit(1)
            ).first()
        return None if row is None else _sealed(row)

    def tail_entries(self, greenhouse_id: str, count: int) -> list[AuditEntry]:
        """The newest ``count`` records of one chain, decrypted (oldest first).

        What a restarted writer asks to know which journaled events are sealed already; each
        record is authenticated by its AEAD tag, the chain itself is :meth:`verify`'s job.
        """
        return [open_record(self._keyring, r) for r in self.tail_records(greenhouse_id, count)]

    def checkpoint(self, greenhouse_id: str) -> SignedCheckpoint | None:
        """Sign the current stored head now (e.g. at shutdown), so a truncated tail is detectable."""
        with self._lock(greenhouse_id), self._engine.begin() as conn:
            last = self._last_record(conn, greenhouse_id)
            if last is None:
                return None
            exists = conn.scalar(
                select(func.count()).where(
                    AuditCheckpoint.greenhouse_id == greenhouse_id,
                    AuditCheckpoint.kind == "checkpoint",
                    AuditCheckpoint.seq == last.seq,
                )
            )
            cp = sign_checkpoint(self._signer, greenhouse_id, last.seq, last.record_hash)
            if not exists:
                conn.execute(insert(AuditCheckpoint), [_statement_row("checkpoint", cp)])
            return cp

    def _lock(self, greenhouse_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(greenhouse_id, threading.Lock())

    def _chain(self, conn: Connection, greenhouse_id: str) -> AuditChain:
        """The cached writer, or one resumed from the newest stored record (or anchor)."""
        chain = self._chains.get(greenhouse_id)
        if chain is None:
            chain = AuditChain.resume(greenhouse_id, self._keyring, self._stored_head(conn, greenhouse_id))
            self._chains[greenhouse_id] = chain
        return chain

    def _stored_head(self, conn: Connection, greenhouse_id: str) -> SealedRecord | Anchor | None:
        """The newest stored record, else the anchor over a fully purged chain, else None (genesis)."""
        last = self._last_record(conn, greenhouse_id)
        return last if last is not None else self._latest_anchor(conn, greenhouse_id)

    def _insert(self, conn: Connection, records: list[SealedRecord]) -> None:
        self._bulk.insert(conn, records)
        self._checkpoint_records(conn, records)

    def _checkpoint_records(self, conn: Connection, records: list[SealedRecord]) -> None:
        """Sign and store a checkpoint for every ``checkpoint_every``-th seq among ``records``."""
        every = self._checkpoint_every
        cps = [
            sign_checkpoint(self._signer, r.greenhouse_id, r.seq, r.record_hash)
            for r in records
            if r.seq % every == 0
        ]
        if cps:
            conn.execute(insert(AuditCheckpoint), [_statement_row("checkpoint", cp) for cp in cps])

    # -- reading ----------------------------------------------------------------------

    def greenhouse_ids(self, conn: Connection | None = None) -> list[str]:
        """Every greenhouse with records or signed statements (a fully deleted trail still shows up);
        read on ``conn`` when given (a caller's snapshot), else on a connection of its own."""
        stmt = union(select(AuditRecord.greenhouse_id), select(AuditCheckpoint.greenhouse_id))
        if conn is not None:
            return sorted(conn.scalars(stmt))
        with self._engine.connect() as own:
            return sorted(own.scalars(stmt))

    def iter_records(self, greenhouse_id: str, *, from_seq: int | None = None) -> Iterator[SealedRecord]:
        """Stream stored records in seq order, from ``from_seq`` and never below the latest anchor."""
        with self._engine.connect() as conn:
            anchor = self._latest_anchor(conn, greenhouse_id)
            after = anchor.seq if anchor is not None else 0
            if from_seq is not None:
                after = max(after, from_seq - 1)
            yield from self._stream(conn, greenhouse_id, after=after)

    def heads(self) -> list[tuple[str, int, str]]:
        """(chain, seq, record_hash) of every chain's newest stored record, by chain id."""
        newest = (select(AuditRecord.greenhouse_id, func.max(AuditRecord.seq).label("seq"))
                  .group_by(AuditRecord.greenhouse_id).subquery())
        stmt = (select(AuditRecord.greenhouse_id, AuditRecord.seq, AuditRecord.record_hash)
                .join(newest, (AuditRecord.greenhouse_id == newest.c.greenhouse_id)
                      & (AuditRecord.seq == newest.c.seq))
                .order_by(AuditRecord.greenhouse_id))
        with self._engine.connect() as conn:
            return [(gid, int(seq), str(h)) for gid, seq, h in conn.execute(stmt)]

    def record_at(self, greenhouse_id: str, seq: int) -> SealedRecord | None:
        """The stored record ``seq`` of one chain (None when it is not there)."""
        with self._engine.connect() as conn:
            row = conn.execute(select(*_RECORD_COLUMNS).where(AuditRecord.greenhouse_id == greenhouse_id,
                                                              AuditRecord.seq == seq)).first()
        return None if row is None else _sealed(row)

    def latest_anchor(self, greenhouse_id: str, conn: Connection | None = None) -> Anchor | None:
        """The newest purge anchor: verification of what remains starts from it (read on ``conn`` when
        given)."""
        if conn is not None:
            return self._latest_anchor(conn, greenhouse_id)
        with self._engine.connect() as own:
            return self._latest_anchor(own, greenhouse_id)

    def checkpoints(self, greenhouse_id: str) -> list[SignedCheckpoint]:
        """Every stored signed checkpoint, in seq order."""
        with self._engine.connect() as conn:
            return self._checkpoints(conn, greenhouse_id)

    @staticmethod
    def _stream(
        conn: Connection, greenhouse_id: str, *, after: int = 0, upto: int | None = None
    ) -> Iterator[SealedRecord]:
        stmt = select(*_RECORD_COLUMNS).where(
            AuditRecord.greenhouse_id == greenhouse_id, AuditRecord.seq > after
        )
        if upto is not None:
            stmt = stmt.where(AuditRecord.seq <= upto)
        # Per statement: ``Connection.execution_options`` would switch the connection itself to streaming.
        result = conn.execute(stmt.order_by(AuditRecord.seq), execution_options={"yield_per": _STREAM_BATCH})
        try:
            for row in result:
                yield _sealed(row)
        finally:
            result.close()

    @staticmethod
    def _last_record(conn: Connection, greenhouse_id: str) -> SealedRecord | None:
        row = conn.execute(
            select(*_RECORD_COLUMNS)
            .where(AuditRecord.greenhouse_id == greenhouse_id)
            .order_by(AuditRecord.seq.desc())
            .limit(1)
        ).first()
        return None if row is None else _sealed(row)

    @staticmethod
    def _latest_anchor(conn: Connection, greenhouse_id: str) -> Anchor | None:
        row = conn.execute(
            select(*_STATEMENT_COLUMNS)
            .where(AuditCheckpoint.greenhouse_id == greenhouse_id, AuditCheckpoint.kind == "anchor")
            .order_by(AuditCheckpoint.seq.desc())
            .limit(1)
        ).first()
        return None if row is None else Anchor(*row)

    @staticmethod
    def _checkpoints(conn: Connection, greenhouse_id: str) -> list[SignedCheckpoint]:
        rows = conn.execute(
            select(*_STATEMENT_COLUMNS)
            .where(AuditCheckpoint.greenhouse_id == greenhouse_id, AuditCheckpoint.kind == "checkpoint")
            .order_by(AuditCheckpoint.seq)
        )
        return [SignedCheckpoint(*row) for row in rows]

    # -- verification -----------------------------------------------------------------

    def verify(self, greenhouse_id: str | None = None) -> list[GreenhouseVerifyResult]:
        """Verify one greenhouse's chain, or every greenhouse's (sorted by id), in one streaming pass each.

        Starts at the latest anchor, checks every stored checkpoint, decrypts every record.
        """
        ids = [greenhouse_id] if greenhouse_id is not None else self.greenhouse_ids()
        return [self._verify_one(gid) for gid in ids]

    def _verify_one(self, greenhouse_id: str) -> GreenhouseVerifyResult:
        with self._engine.connect() as conn:
            return self.verify_in(conn, greenhouse_id)

    def verify_in(
        self,
        conn: Connection,
        greenhouse_id: str,
        *,
        on_entry: Callable[[SealedRecord, AuditEntry], None] | None = None,
        after: tuple[int, str] | None = None,
    ) -> GreenhouseVerifyResult:
        """:meth:`verify` of one chain, read on ``conn``: inside a caller's snapshot, the chain as it was
        when the tables compared with it were read. ``on_entry`` gets each record that passed with its
        entry; ``after`` (seq, record_hash) checks only the records after a head verified before."""
        r = self._verify_range(conn, greenhouse_id, on_entry=on_entry, after=after)
        return GreenhouseVerifyResult(r.ok, r.records_checked, r.first_bad_seq, r.reason, r.head_seq,
                                      r.head_hash, greenhouse_id)

    def _verify_range(
        self,
        conn: Connection,
        greenhouse_id: str,
        upto: int | None = None,
        *,
        on_entry: Callable[[SealedRecord, AuditEntry], None] | None = None,
        after: tuple[int, str] | None = None,
    ) -> VerifyResult:
        anchor = None if after is not None else self._latest_anchor(conn, greenhouse_id)
        checkpoints = self._checkpoints(conn, greenhouse_id)
        if upto is not None:
            # Checkpoints past ``upto`` would read as a truncated tail when verifying a prefix.
            checkpoints = [cp for cp in checkpoints if cp.seq <= upto]
        start = after[0] if after is not None else anchor.seq if anchor is not None else 0
        return verify_chain(
            self._stream(conn, greenhouse_id, after=start, upto=upto),
            self._keyring,
            checkpoints=checkpoints,
            anchor=anchor,
            public_key=self._verify_keys,
            on_entry=on_entry,
            after=after,
        )

    # -- retention --------------------------------------------------------------------

    def purge(
        self,
        older_than_days: float,
        *,
        now: datetime | None = None,
        retention_days: float = MIN_RETENTION_DAYS,
        actor: str = "system:retention",
    ) -> list[PurgeResult]:
        """Delete each greenhouse's oldest records (the longest prefix older than the cutoff).

        Per greenhouse, in one transaction: verify the prefix (a broken chain is never
        anchored, which would launder tampering), sign and store an anchor over its last
        record, delete the prefix, append a ``purge`` entry. Greenhouses with nothing old
        enough are skipped. Raises ``ValueError`` below the retention floor of 180 days and
        :class:`AuditTamperError` (before deleting anything there) for a chain that fails.
        """
        if retention_days < MIN_RETENTION_DAYS:
            raise ValueError(f"retention_days must be at least {MIN_RETENTION_DAYS}, got {retention_days}")
        if older_than_days < retention_days:
            raise ValueError(
                f"refusing to purge records younger than the {retention_days}-day retention "
                f"(older_than_days={older_than_days})"
            )
        now = datetime.now(UTC) if now is None else now
        iso_utc(now)  # refuses naive datetimes
        cutoff = now.astimezone(UTC) - timedelta(days=older_than_days)
        results = []
        for gid in self.greenhouse_ids():
            result = self._purge_one(gid, cutoff, now, older_than_days, actor)
            if result is not None:
                results.append(result)
        return results

    def _purge_one(
        self, greenhouse_id: str, cutoff: datetime, now: datetime, older_than_days: float, actor: str
    ) -> PurgeResult | None:
        with self._lock(greenhouse_id):
            try:
                with self._engine.begin() as conn:
                    return self._purge_in(conn, greenhouse_id, cutoff, now, older_than_days, actor)
            except BaseException:
                self._chains.pop(greenhouse_id, None)
                raise

    def _purge_in(
        self,
        conn: Connection,
        greenhouse_id: str,
        cutoff: datetime,
        now: datetime,
        older_than_days: float,
        actor: str,
    ) -> PurgeResult | None:
        old_anchor = self._latest_anchor(conn, greenhouse_id)
        floor = old_anchor.seq if old_anchor is not None else 0
        in_chain = (AuditRecord.greenhouse_id == greenhouse_id, AuditRecord.seq > floor)
        first_kept = conn.scalar(
            select(func.min(AuditRecord.seq)).where(*in_chain, AuditRecord.ts_at >= cutoff)
        )
        upto = (
            first_kept - 1
            if first_kept is not None
            else conn.scalar(select(func.max(AuditRecord.seq)).where(*in_chain))
        )
        if upto is None or upto <= floor:
            return None
        checked = self._verify_range(conn, greenhouse_id, upto)
        if not checked.ok or checked.head_seq != upto:
            raise AuditTamperError(
                f"refusing to purge: {checked.reason or 'chain ends early'}",
                greenhouse_id=greenhouse_id,
                seq=checked.first_bad_seq if checked.first_bad_seq is not None else checked.head_seq + 1,
            )
        anchor = sign_anchor(self._signer, greenhouse_id, upto, checked.head_hash, ts=now)
        conn.execute(insert(AuditCheckpoint), [_statement_row("anchor", anchor)])
        self._grant_delete(conn, greenhouse_id, True)
        deleted = conn.execute(
            delete(AuditRecord).where(AuditRecord.greenhouse_id == greenhouse_id, AuditRecord.seq <= upto)
        ).rowcount
        self._grant_delete(conn, greenhouse_id, False)
        payload = {
            "purged_through_seq": upto,
            "records_deleted": deleted,
            "older_than_days": older_than_days,
            "cutoff": iso_utc(cutoff),
            "anchor_head_hash": anchor.head_hash,
        }
        records = self._chain(conn, greenhouse_id).append_many([AuditEvent(PURGE_KIND, actor, payload, now)])
        self._insert(conn, records)
        return PurgeResult(greenhouse_id, anchor, deleted, records[0])

    @staticmethod
    def _grant_delete(conn: Connection, greenhouse_id: str, on: bool) -> None:
        """Open or close the delete trigger's licence for this transaction only (see migration 0002)."""
        dialect = conn.dialect.name
        if dialect == "postgresql":
            conn.execute(
                text("SELECT set_config(:name, :value, true)"),
                {"name": PURGE_SETTING, "value": "on" if on else "off"},
            )
        elif dialect == "sqlite":
            if on:
                conn.execute(insert(AuditPurgeToken), [{"greenhouse_id": greenhouse_id}])
            else:
                conn.execute(delete(AuditPurgeToken).where(AuditPurgeToken.greenhouse_id == greenhouse_id))
