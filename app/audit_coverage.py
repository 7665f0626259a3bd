"""Does the audit trail hold every record the service's tables hold? ``greentwin audit verify`` asks.

Verifying each chain proves that what is in it is genuine, not that anything is in it: a chain
deleted whole, or events never sealed, verify as "nothing wrong". So the tables are the other
witness: every stored decision and mode change (by seq) and every answered command (by cmd_id)
must have its sealed record, and a registered greenhouse with records must have a chain. Rows
older than a purge (retention) are not asked for: their records were purged on purpose.

Each chain is read once: verified as it is walked, and what passed is what the rows are compared
with. A record that fails ends the walk; the chain's failure names it, and its greenhouse's rows
are not compared past the last good record (nothing there can be trusted to compare with).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app.models import Decision, Greenhouse, ModeChange
from audit import AuditEntry, SealedRecord
from audit.store import AuditStore, GreenhouseVerifyResult
from audit.verify import verify_chain

DECISION_KINDS = frozenset({"decision"})
MODE_KINDS = frozenset({"estop", "estop_reset", "mode_change"})
ACK_KINDS = frozenset({"command_ack"})
SHOWN = 10
"""Missing ids listed per kind; the counts say how many in all."""


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
class _Sealed:
    """The ids a chain's records name, per kind (what the tables' rows are looked up in)."""

    ids: dict[str, set[str]] = field(default_factory=lambda: {"decision": set(), "mode_change": set(), "ack": set()})
    first_ts: str | None = None

    def add(self, record: SealedRecord, entry: AuditEntry) -> None:
        self.first_ts = self.first_ts or entry.ts
        payload = entry.payload
        if entry.kind in DECISION_KINDS:
            self.ids["decision"].add(str(payload.get("seq")))
        elif entry.kind in MODE_KINDS:
            self.ids["mode_change"].add(str(payload.get("seq")))
        elif entry.kind in ACK_KINDS:
            self.ids["ack"].add(str(payload.get("cmd_id")))


def check_trail(engine: Engine, store: AuditStore, greenhouse_id: str | None = None) -> TrailCheck:
    """Verify every chain (or one greenhouse's) and compare each registered greenhouse's tables with it."""
    with Session(engine) as session:
        registered = [gh for gh in session.scalars(select(Greenhouse.id).order_by(Greenhouse.id))
                      if greenhouse_id in (None, gh)]
    # One greenhouse asked for by name is answered even when it has no chain (0 records).
    chain_ids = store.greenhouse_ids() if greenhouse_id is None else [greenhouse_id]
    chains, sealed = [], {}
    for gh in chain_ids:
        result, sealed[gh] = _walk(store, gh)
        chains.append(result)
    ok = {r.greenhouse_id: r for r in chains}
    coverage = []
    for gh in registered:
        result = ok.get(gh)
        if result is not None and not result.ok:
            coverage.append(Coverage(gh, True, broken_after=result.head_seq))
        else:
            coverage.append(_compare(engine, store, gh, sealed.get(gh)))
    return TrailCheck(chains, coverage)


def check_coverage(engine: Engine, store: AuditStore, greenhouse_id: str | None = None) -> list[Coverage]:
    """Compare the tables with the trail for one registered greenhouse, or all of them (by id)."""
    return check_trail(engine, store, greenhouse_id).coverage


def _walk(store: AuditStore, gh: str) -> tuple[GreenhouseVerifyResult, _Sealed]:
    """One verified pass over a chain, collecting what its records name as it goes."""
    sealed = _Sealed()
    anchor = store.latest_anchor(gh)
    r = verify_chain(store.iter_records(gh), store.keyring, checkpoints=store.checkpoints(gh), anchor=anchor,
                     public_key=store.verify_keys, on_entry=sealed.add)
    return GreenhouseVerifyResult(r.ok, r.records_checked, r.first_bad_seq, r.reason, r.head_seq, r.head_hash,
                                  gh), sealed


def _compare(engine: Engine, store: AuditStore, gh: str, sealed: _Sealed | None) -> Coverage:
    has_chain = sealed is not None
    sealed = sealed or _Sealed()
    anchor = store.latest_anchor(gh) if has_chain else None
    # After a purge, only rows from the oldest remaining record on are asked for.
    since = None if anchor is None else _as_datetime(sealed.first_ts or anchor.ts)
    with Session(engine) as session:
        rows = {
            "decision": _ids(session, select(Decision.seq, Decision.ts).where(Decision.greenhouse_id == gh), since),
            "mode_change": _ids(session, select(ModeChange.seq, ModeChange.ts).where(ModeChange.greenhouse_id == gh),
                                since),
            "ack": _ids(session, select(Decision.cmd_id, Decision.ts).where(
                Decision.greenhouse_id == gh, Decision.cmd_id.is_not(None), Decision.ack_status.is_not(None),
                Decision.ack_status != "pending"), since),
        }
    return Coverage(gh, has_chain, {k: len(v) for k, v in rows.items()},
                    {k: [i for i in v if i not in sealed.ids[k]] for k, v in rows.items()})


def _ids(session: Session, stmt: object, since: datetime | None) -> list[str]:
    out: Iterable[tuple[object, datetime]] = session.execute(stmt)  # type: ignore[call-overload]
    return [str(i) for i, ts in out if since is None or _aware(ts) >= since]


def _aware(ts: datetime) -> datetime:
    """SQLite hands back naive UTC datetimes."""
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def _as_datetime(ts: str | datetime) -> datetime:
    return _aware(ts if isinstance(ts, datetime) else datetime.fromisoformat(ts))
