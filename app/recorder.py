"""Durable decision recording: the database when it answers, a local append-only spool when not.

A decision is never dropped: if the insert fails for a database reason the record goes to a
JSON-lines spool file (fsync'd before returning), and :meth:`DecisionRecorder.flush_spool`
writes spooled records back once the database is reachable. Records are keyed by
(greenhouse, seq) and cmd_id, both unique, so a replay after a crash inserts each record at
most once: none lost, none doubled.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.deadletter import UNAVAILABLE, DeadLetters, count_lines, reason_of
from app.models import Decision, ModeChange
from app.private_files import open_private

log = logging.getLogger(__name__)



def _json_default(obj: Any) -> Any:
    if isinstance(obj, datetime):
        return {"__dt__": obj.isoformat()}
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _json_hook(obj: dict[str, Any]) -> Any:
    return datetime.fromisoformat(obj["__dt__"]) if set(obj) == {"__dt__"} else obj


class DecisionRecorder:
    """Writes decision and mode-change rows; spools them locally while the database is down."""

    def __init__(self, session_factory: sessionmaker[Session], spool_path: Path, *,
                 dead_letters: DeadLetters | None = None) -> None:
        self.sessions = session_factory
        self.spool_path = Path(spool_path)
        self.spool_path.parent.mkdir(parents=True, exist_ok=True)
        self.dead_letters = dead_letters or DeadLetters(self.spool_path.parent / "dead-letter.jsonl")
        self._lock = threading.Lock()

    @property
    def spooled(self) -> int:
        return count_lines(self.spool_path)

    def last_seq(self, greenhouse_id: str) -> int:
        """Highest seq recorded for a greenhouse, in the database or still in the spool (0 if none).

        A restarted controller continues after it: its snapshot is periodic, so after a crash it can
        lag behind what was already recorded, and reusing a seq would collide with a record.
        """
        with self._lock:
            with self.sessions() as session:
                best = max(session.scalar(select(func.max(m.seq))
                                          .where(m.greenhouse_id == greenhouse_id)) or 0
                           for m in (Decision, ModeChange))
            if self.spool_path.exists():
                for line in self.spool_path.read_text(encoding="utf-8").splitlines():
                    item = json.loads(line, object_hook=_json_hook) if line.strip() else None
                    if item is None or item["kind"] == "ack":  # an ack has no seq
                        continue
                    if item["row"]["greenhouse_id"] == greenhouse_id:
                        best = max(best, int(item["row"]["seq"]))
            return int(best)

    def recent_commands(self, greenhouses: Collection[str],
                        limit: int = 32) -> list[tuple[str, str, str | None]]:
        """(greenhouse, cmd_id, ack status) of each greenhouse's ``limit`` newest stored decisions, in one
        query: acks of commands an earlier run sent still match one after a restart (empty when the
        database cannot say)."""
        newest = func.row_number().over(partition_by=Decision.greenhouse_id, order_by=Decision.seq.desc())
        ranked = (select(Decision.greenhouse_id, Decision.cmd_id, Decision.ack_status, newest.label("rank"))
                  .where(Decision.greenhouse_id.in_(list(greenhouses)), Decision.cmd_id.is_not(None))
                  .subquery())
        try:
            with self.sessions() as session:
                rows = session.execute(select(ranked.c.greenhouse_id, ranked.c.cmd_id, ranked.c.ack_status)
                                       .where(ranked.c.rank <= limit)).all()
        except UNAVAILABLE:
            return []
        return [(gh, str(cmd_id), status) for gh, cmd_id, status in rows]

    def record_decision(self, row: dict[str, Any]) -> bool:
        """True if written to the database, False if spooled."""
        return self._write("decision", row)

    def record_mode_change(self, row: dict[str, Any]) -> bool:
        return self._write("mode_change", row)

    def _write(self, kind: str, row: dict[str, Any]) -> bool:
        return self.record_many([(kind, row)])

    def record_many(self, items: Sequence[tuple[str, dict[str, Any]]]) -> bool:
        """Group commit: every row in one transaction (True), or all spooled with one fsync (False).

        The same rules as one record at a time: order kept behind an existing spool, the spool
        when the database is down. A row already stored (same greenhouse and seq, e.g. a journal
        replayed after a crash) is skipped, never doubled.
        """
        if not items:
            return True
        with self._lock:
            if self.spool_path.exists() and self.spooled:
                self._spool_many(items)
                return False
            try:
                try:
                    self._insert_many(items)
                except UNAVAILABLE:
                    raise
                except Exception:  # a stored row (replay) or a refused one: find it, row by row
                    self._insert_each(items)
                return True
            except UNAVAILABLE as exc:
                log.warning("database unavailable, spooling %d records: %s", len(items),
                            exc.__class__.__name__)
                self._spool_many(items)
                return False

    def stored_keys(self, kind: str, keys: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
        """The (greenhouse, seq) pairs among ``keys`` that the database already holds."""
        model = Decision if kind == "decision" else ModeChange
        wanted = set(keys)
        found: set[tuple[str, int]] = set()
        with self.sessions() as session:
            for gh in {g for g, _ in wanted}:
                seqs = [q for g, q in wanted if g == gh]
                found |= {(gh, int(q)) for q in session.scalars(
                    select(model.seq).where(model.greenhouse_id == gh, model.seq.in_(seqs)))}
        return found

    def _insert_many(self, items: Sequence[tuple[str, dict[str, Any]]]) -> None:
        with self.sessions.begin() as session:
            start = 0
            for end in range(1, len(items) + 1):  # consecutive runs of one kind, in order
                if end == len(items) or items[end][0] != items[start][0]:
                    rows = [row for _, row in items[start:end]]
                    if items[start][0] == "ack":
                        _apply_acks(session, rows)
                    else:
                        model = Decision if items[start][0] == "decision" else ModeChange
                        session.execute(insert(model), rows)
                    start = end

    def _insert_each(self, items: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """One transaction per row: rows already stored are skipped, refused ones dead-lettered."""
        for kind, row in items:
            try:
                self._insert_once(kind, row)
            except UNAVAILABLE:
                raise
            except Exception as exc:
                self.dead_letters.add(str(row.get("greenhouse_id")), kind, reason_of(exc), row)

    def _insert_once(self, kind: str, row: dict[str, Any]) -> bool:
        """Insert ``row`` unless its (greenhouse, seq) is stored (an ack is applied again: idempotent)."""
        with self.sessions.begin() as session:
            if kind == "ack":
                _apply_acks(session, [row])
                return False
            model = Decision if kind == "decision" else ModeChange
            exists = session.scalar(select(model.id).where(model.greenhouse_id == row["greenhouse_id"],
                                                            model.seq == row["seq"]))
            if exists is None:
                session.add(model(**row))
            return exists is None

    def _spool_many(self, items: Sequence[tuple[str, dict[str, Any]]]) -> None:
        lines = "".join(json.dumps({"kind": k, "row": r}, default=_json_default, separators=(",", ":")) + "\n"
                        for k, r in items)
        with open_private(self.spool_path) as fh:
            fh.write(lines)
            fh.flush()
            os.fsync(fh.fileno())

    def flush_spool(self) -> int:
        """Write spooled records to the database in order; returns how many were inserted.

        A record already present (same greenhouse and seq) is skipped, so a crash during a
        flush cannot double anything. Stops when the database goes away and keeps the rest; a
        record the database refuses is dead-lettered.
        """
        with self._lock:
            if not self.spool_path.exists():
                return 0
            lines = [ln for ln in self.spool_path.read_text(encoding="utf-8").splitlines() if ln.strip()]
            inserted = 0
            for i, line in enumerate(lines):
                item = json.loads(line, object_hook=_json_hook)
                try:
                    inserted += self._insert_once(item["kind"], item["row"])
                except UNAVAILABLE:
                    self._rewrite(lines[i:])
                    return inserted
                except Exception as exc:  # never to be stored: quarantined, the spool goes on
                    self.dead_letters.add(str(item["row"].get("greenhouse_id")), item["kind"], reason_of(exc),
                                          item["row"])
            self.spool_path.unlink()
            return inserted

    def _rewrite(self, lines: list[str]) -> None:
        tmp = self.spool_path.with_suffix(".tmp")
        with open_private(tmp, "w") as fh:
            fh.write("".join(ln + "\n" for ln in lines))
        os.replace(tmp, self.spool_path)


def _apply_acks(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Set each acked decision's ``ack_status`` (the one later write a decision row takes). A command
    with no decision row (an e-stop's) changes nothing here; its ack is still in the audit trail."""
    for row in rows:
        session.execute(update(Decision).where(Decision.cmd_id == row["cmd_id"], Decision.greenhouse_id
                                               == row["greenhouse_id"]).values(ack_status=row["status"]))
