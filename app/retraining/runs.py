"""A run's folder and its database row: resumable stages, and the summary the API shows.

``<retrain_dir>/runs/<run id>/<stage>.json`` marks a finished stage with its result (written
atomically); ``<retrain_dir>/CURRENT`` names the run in progress, so a rerun after a crash
continues it at its first unfinished stage. The ``retrain_run`` row mirrors the summary.
"""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.models import RetrainRun
from app.retraining import STAGES
from wire.fields import REASON_MAX_LEN


def plain(obj: Any) -> Any:
    """JSON-safe: non-finite floats become None (PostgreSQL's JSONB refuses NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    if isinstance(obj, datetime):
        return obj.isoformat()
    if isinstance(obj, Path):
        return str(obj)
    return obj


class RunDir:
    """One run's folder: which stages are done, what they produced, and how often it was started."""

    def __init__(self, root: Path, run_id: str) -> None:
        self.root = root
        self.run_id = run_id
        self.path = root / "runs" / run_id
        self.path.mkdir(parents=True, exist_ok=True)

    @classmethod
    def current(cls, root: Path) -> RunDir | None:
        """The unfinished run named by ``CURRENT``, if any."""
        pointer = root / "CURRENT"
        if pointer.exists():
            run_id = pointer.read_text(encoding="utf-8").strip()
            if run_id and (root / "runs" / run_id).is_dir():
                return cls(root, run_id)
        return None

    @classmethod
    def new(cls, root: Path, now: datetime) -> RunDir:
        """A new run, named by its start time (a suffix where that name is taken), made current."""
        root.mkdir(parents=True, exist_ok=True)
        base = run_id = now.strftime("%Y%m%dT%H%M%SZ")
        n = 1
        while (root / "runs" / run_id).exists():
            n += 1
            run_id = f"{base}-{n}"
        run = cls(root, run_id)
        run._write_info({"started_at": now.isoformat(), "attempts": 0})
        _atomic_write(root / "CURRENT", run_id)
        return run

    @classmethod
    def current_or_new(cls, root: Path, now: datetime) -> tuple[RunDir, bool]:
        """The unfinished run named by ``CURRENT`` (resumed: True), or a new one."""
        root.mkdir(parents=True, exist_ok=True)
        run = cls.current(root)
        return (run, True) if run is not None else (cls.new(root, now), False)

    def info(self) -> dict[str, Any]:
        """``started_at`` (aware datetime) and ``attempts`` (how often the run was started)."""
        path = self.path / "run.json"
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        started = data.get("started_at")
        if started is None:  # a folder from before run.json: its name is its start time
            started = datetime.strptime(self.run_id[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).isoformat()
        return {"started_at": datetime.fromisoformat(started), "attempts": int(data.get("attempts", 0))}

    def count_attempt(self) -> int:
        """Book one more start of this run (a crash cannot book its own failure); the count."""
        info = self.info()
        attempts = info["attempts"] + 1
        self._write_info({"started_at": info["started_at"].isoformat(), "attempts": attempts})
        return attempts

    def _write_info(self, data: dict[str, Any]) -> None:
        _atomic_write(self.path / "run.json", json.dumps(data, sort_keys=True))

    def result(self, stage: str) -> dict[str, Any] | None:
        path = self.path / f"{stage}.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def finish(self, stage: str, result: dict[str, Any]) -> dict[str, Any]:
        data = plain(result)
        _atomic_write(self.path / f"{stage}.json", json.dumps(data, indent=1, sort_keys=True))
        return data  # type: ignore[no-any-return]

    def done(self) -> list[str]:
        return [s for s in STAGES if (self.path / f"{s}.json").exists()]

    def close(self) -> None:
        """The run is over (promoted, refused, abandoned): the next run is a new one."""
        pointer = self.root / "CURRENT"
        if pointer.exists() and pointer.read_text(encoding="utf-8").strip() == self.run_id:
            pointer.unlink()


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def record_run(sessions: sessionmaker[Session], run_id: str, *, status: str, summary: dict[str, Any],
               incumbent: str | None = None, candidate: str | None = None, reason: str = "",
               finished: bool = False) -> None:
    """Insert or update the run's row."""
    now = datetime.now(UTC)
    with sessions() as s, s.begin():
        row = s.get(RetrainRun, run_id)
        if row is None:
            row = RetrainRun(id=run_id, started_at=now, status=status, summary={}, reason="")
            s.add(row)
        row.status, row.summary, row.reason = status, plain(summary), reason[:REASON_MAX_LEN]
        row.incumbent = incumbent or row.incumbent
        row.candidate = candidate or row.candidate
        row.finished_at = now if finished else None


def abandon_run(sessions: sessionmaker[Session], run_id: str, reason: str, now: datetime) -> None:
    """Close an unfinished run's row as failed for good, its summary saying why (its stages kept)."""
    with sessions() as s, s.begin():
        row = s.get(RetrainRun, run_id)
        if row is None:
            row = RetrainRun(id=run_id, started_at=now, status="failed", summary={}, reason="")
            s.add(row)
        row.status = "failed"
        row.summary = {**(row.summary or {}), "abandoned": reason}
        row.reason = f"abandoned: {reason}"[:REASON_MAX_LEN]
        row.finished_at = now


def last_run(sessions: sessionmaker[Session]) -> dict[str, Any] | None:
    """The newest run as the API shows it."""
    with sessions() as s:
        row = s.scalar(select(RetrainRun).order_by(RetrainRun.started_at.desc()).limit(1))
        if row is None:
            return None
        return plain({"id": row.id, "status": row.status, "started_at": row.started_at,
                      "finished_at": row.finished_at, "incumbent": row.incumbent, "candidate": row.candidate,
                      "reason": row.reason, "summary": row.summary})
