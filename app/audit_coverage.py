"""Does the audit trail hold every record the service's tables hold? ``greentwin audit verify`` asks.

Verifying each chain proves that what is in it is genuine, not that anything is in it: a chain
deleted whole, or events never sealed, verify as "nothing wrong". So the tables are the other
witness: every stored decision and mode change (by seq) and every answered command (by cmd_id)
must have its sealed record, and a registered greenhouse with records must have a chain. Rows
older than a purge (retention) are not asked for: their records were purged on purpose.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app.models import Decision, Greenhouse, ModeChange
from audit import open_record
from audit.store import AuditStore

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

    @property
    def ok(self) -> bool:
        return not any(self.missing.values()) and (self.has_chain or not any(self.rows.values()))

    def describe(self) -> str:
        """One line: what was checked, and what is missing."""
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


def check_coverage(engine: Engine, store: AuditStore, greenhouse_id: str | None = None) -> list[Coverage]:
    """Compare the tables with the trail for one registered greenhouse, or all of them (by id)."""
    with Session(engine) as session:
        ids = list(session.scalars(select(Greenhouse.id).order_by(Greenhouse.id)))
    chains = set(store.greenhouse_ids())
    return [_one(engine, store, gh, gh in chains) for gh in ids if greenhouse_id in (None, gh)]


def _one(engine: Engine, store: AuditStore, gh: str, has_chain: bool) -> Coverage:
    sealed: dict[str, set[str]] = {"decision": set(), "mode_change": set(), "ack": set()}
    first_ts: str | None = None
    for record in store.iter_records(gh) if has_chain else ():
        entry = open_record(store.keyring, record)
        first_ts = first_ts or entry.ts
        payload = entry.payload
        if entry.kind in DECISION_KINDS:
            sealed["decision"].add(str(payload.get("seq")))
        elif entry.kind in MODE_KINDS:
            sealed["mode_change"].add(str(payload.get("seq")))
        elif entry.kind in ACK_KINDS:
            sealed["ack"].add(str(payload.get("cmd_id")))
    anchor = store.latest_anchor(gh) if has_chain else None
    # After a purge, only rows from the oldest remaining record on are asked for.
    since = None if anchor is None else _as_datetime(first_ts or anchor.ts)
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
                    {k: [i for i in v if i not in sealed[k]] for k, v in rows.items()})


def _ids(session: Session, stmt: object, since: datetime | None) -> list[str]:
    out: Iterable[tuple[object, datetime]] = session.execute(stmt)  # type: ignore[call-overload]
    return [str(i) for i, ts in out if since is None or _aware(ts) >= since]


def _aware(ts: datetime) -> datetime:
    """SQLite hands back naive UTC datetimes."""
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def _as_datetime(ts: str | datetime) -> datetime:
    return _aware(ts if isinstance(ts, datetime) else datetime.fromisoformat(ts))
