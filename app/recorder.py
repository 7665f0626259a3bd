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
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from app.models import Decision, ModeChange

log = logging.getLogger(__name__)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, datetime):
        return {"__dt__": obj.isoformat()}
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _json_hook(obj: dict[str, Any]) -> Any:
    return datetime.fromisoformat(obj["__dt__"]) if set(obj) == {"__dt__"} else obj


class DecisionRecorder:
    """Writes decision and mode-change rows; spools them locally while the database is down."""

    def __init__(self, session_factory: sessionmaker[Session], spool_path: Path) -> None:
        self.sessions = session_factory
        self.spool_path = Path(spool_path)
        self.spool_path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    @property
    def spooled(self) -> int:
        if not self.spool_path.exists():
            return 0
        with self.spool_path.open("rb") as fh:
            return sum(1 for line in fh if line.strip())

    def record_decision(self, row: dict[str, Any]) -> bool:
        """True if written to the database, False if spooled."""
        return self._write("decision", row)

    def record_mode_change(self, row: dict[str, Any]) -> bool:
        return self._write("mode_change", row)

    def _write(self, kind: str, row: dict[str, Any]) -> bool:
        with self._lock:
            if self.spool_path.exists() and self.spooled:
                # Keep the order: while older records wait in the spool, new ones queue behind them.
                self._spool(kind, row)
                return False
            try:
                self._insert(kind, row)
                return True
            except OperationalError as exc:
                log.warning("database unavailable, spooling %s %s/%s: %s", kind, row.get("greenhouse_id"),
                            row.get("seq"), exc.__class__.__name__)
                self._spool(kind, row)
                return False

    def _insert(self, kind: str, row: dict[str, Any]) -> None:
        model = Decision if kind == "decision" else ModeChange
        with self.sessions.begin() as session:
            session.add(model(**row))

    def _spool(self, kind: str, row: dict[str, Any]) -> None:
        line = json.dumps({"kind": kind, "row": row}, default=_json_default, separators=(",", ":"))
        with self.spool_path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def flush_spool(self) -> int:
        """Write spooled records to the database in order; returns how many were inserted.

        A record already present (same greenhouse and seq) is skipped, so a crash during a
        flush cannot double anything. Stops at the first database error and keeps the rest.
        """
        with self._lock:
            if not self.spool_path.exists():
                return 0
            lines = [ln for ln in self.spool_path.read_text(encoding="utf-8").splitlines() if ln.strip()]
            inserted = 0
            for i, line in enumerate(lines):
                item = json.loads(line, object_hook=_json_hook)
                model = Decision if item["kind"] == "decision" else ModeChange
                row = item["row"]
                try:
                    with self.sessions.begin() as session:
                        exists = session.scalar(select(model.id).where(model.greenhouse_id == row["greenhouse_id"],
                                                                        model.seq == row["seq"]))
                        if exists is None:
                            session.add(model(**row))
                            inserted += 1
                except IntegrityError:
                    continue  # written concurrently by another path: already there
                except OperationalError:
                    self._rewrite(lines[i:])
                    return inserted
            self.spool_path.unlink()
            return inserted

    def _rewrite(self, lines: list[str]) -> None:
        tmp = self.spool_path.with_suffix(".tmp")
        tmp.write_text("".join(ln + "\n" for ln in lines), encoding="utf-8")
        os.replace(tmp, self.spool_path)
