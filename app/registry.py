"""The policy registry: every ensemble the service may run, and which one it runs.

Exactly one version is ``promoted`` at a time: a partial unique index refuses a second one, and
every change of the promoted version (promote, rollback) runs in one transaction that first
takes a lock (a transaction-scoped advisory lock on PostgreSQL, SQLite's write lock), so two
promotions at once serialise instead of failing half-way. The running service polls
:func:`promoted` and swaps ensembles when it changes (:mod:`app.policy_watch`).

An empty registry adopts the ensemble the service is configured with (``GREENTWIN_POLICY_DIR``,
the shipped one by default) as its first promoted version, so a fresh installation has a
version to roll back to from the first promotion on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select, text, update
from sqlalchemy.orm import Session, sessionmaker

from app.models import PolicyVersion
from wire.fields import ACTOR_MAX_LEN, REASON_MAX_LEN

log = logging.getLogger(__name__)

PROMOTION_LOCK_KEY = 0x67726E7470726F6D
"""Advisory lock key of promotions on PostgreSQL ("grntprom")."""


class RegistryError(ValueError):
    """A registry operation that cannot be done (unknown version, nothing to roll back to)."""


@dataclass(frozen=True)
class VersionInfo:
    """A registry row as plain data (safe to use after its session closed)."""

    version: str
    parent: str | None
    status: str
    directory: str
    created_at: datetime
    promoted_at: datetime | None
    promoted_by: str | None
    note: str
    metrics: dict[str, Any] | None
    calibration: dict[str, Any] | None
    data_from: datetime | None
    data_to: datetime | None
    twin_version: str | None
    config_hash: str | None
    git_commit: str | None

    @classmethod
    def of(cls, row: PolicyVersion) -> VersionInfo:
        return cls(row.version, row.parent, row.status, row.directory, row.created_at, row.promoted_at,
                   row.promoted_by, row.note, row.metrics, row.calibration, row.data_from, row.data_to,
                   row.twin_version, row.config_hash, row.git_commit)

    def as_dict(self) -> dict[str, Any]:
        return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in self.__dict__.items()}


def manifest_version(directory: Path) -> str:
    """The ``policy_version`` of the ensemble in ``directory`` (ValueError when there is none)."""
    try:
        doc = json.loads((Path(directory) / "ensemble.json").read_text(encoding="utf-8"))
        return str(doc["policy_version"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RegistryError(f"no readable ensemble in {directory}: {exc}") from exc


@contextmanager
def _promotion(sessions: sessionmaker[Session]) -> Iterator[Session]:
    """One transaction holding the promotion lock; committed on success, rolled back on error."""
    with sessions() as s, s.begin():
        if s.get_bind().dialect.name == "postgresql":
            s.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PROMOTION_LOCK_KEY - (1 << 63)})
        else:  # SQLite: take the database's write lock now, not at the first UPDATE
            s.execute(text("UPDATE policy_version SET status = status WHERE 0"))
        yield s


def ensure_seeded(sessions: sessionmaker[Session], policy_dir: Path) -> VersionInfo | None:
    """The promoted version; an empty registry first adopts the ensemble in ``policy_dir``.
    None when the registry is empty and ``policy_dir`` holds no ensemble (the expert serves)."""
    current = promoted(sessions)
    if current is not None:
        return current
    try:
        version = manifest_version(policy_dir)
    except RegistryError:
        return None
    with _promotion(sessions) as s:
        if s.scalar(select(PolicyVersion.version).limit(1)) is None:
            now = datetime.now(UTC)
            s.add(PolicyVersion(version=version, parent=None, status="promoted",
                                directory=str(Path(policy_dir).resolve()),
                                note="adopted: the configured ensemble of a new registry", created_at=now,
                                promoted_at=now, promoted_by="system"))
            log.info("policy registry: adopted %s from %s as the promoted version", version, policy_dir)
    return promoted(sessions)


def promoted(sessions: sessionmaker[Session]) -> VersionInfo | None:
    with sessions() as s:
        row = s.scalar(select(PolicyVersion).where(PolicyVersion.status == "promoted"))
        return None if row is None else VersionInfo.of(row)


def get(sessions: sessionmaker[Session], version: str) -> VersionInfo | None:
    with sessions() as s:
        row = s.get(PolicyVersion, version)
        return None if row is None else VersionInfo.of(row)


def list_versions(sessions: sessionmaker[Session], limit: int = 50) -> list[VersionInfo]:
    """Newest first."""
    with sessions() as s:
        rows = s.scalars(select(PolicyVersion)
                         .order_by(PolicyVersion.created_at.desc(), PolicyVersion.version)
                         .limit(limit)).all()
        return [VersionInfo.of(r) for r in rows]


def add_candidate(sessions: sessionmaker[Session], version: str, directory: Path, *, parent: str | None,
                  status: str = "candidate", **fields: Any) -> VersionInfo:
    """Register a trained ensemble (``fields``: data window, twin version, calibration, metrics...).
    Registering the same version again updates its row unless it is or was promoted."""
    if status not in ("candidate", "refused"):
        raise RegistryError(f"a new version is a candidate or refused, not {status!r}")
    with sessions() as s, s.begin():
        row = s.get(PolicyVersion, version)
        if row is None:
            row = PolicyVersion(version=version, created_at=datetime.now(UTC))
            s.add(row)
        elif row.status not in ("candidate", "refused"):
            raise RegistryError(f"{version} is already {row.status}")
        row.parent, row.status, row.directory = parent, status, str(Path(directory).resolve())
        for key, value in fields.items():
            if key == "note":
                value = str(value)[:REASON_MAX_LEN]
            setattr(row, key, value)
        s.flush()
        return VersionInfo.of(row)


def mark(sessions: sessionmaker[Session], version: str, status: str, note: str) -> None:
    """Set a non-promoted version's status (``refused`` by the gate) and why."""
    with sessions() as s, s.begin():
        s.execute(update(PolicyVersion)
                  .where(PolicyVersion.version == version, PolicyVersion.status != "promoted")
                  .values(status=status, note=note[:REASON_MAX_LEN]))


def promote(sessions: sessionmaker[Session], version: str, actor: str, note: str = "") -> VersionInfo:
    """Make ``version`` the promoted one (the previous one becomes ``retired``), atomically."""
    with _promotion(sessions) as s:
        row = s.get(PolicyVersion, version)
        if row is None:
            raise RegistryError(f"unknown policy version {version!r} (see `greentwin policy list`)")
        if row.status == "promoted":
            return VersionInfo.of(row)
        if not (Path(row.directory) / "ensemble.json").exists():
            raise RegistryError(f"{version}: no ensemble at {row.directory}")
        s.execute(update(PolicyVersion).where(PolicyVersion.status == "promoted").values(status="retired"))
        s.flush()
        _set_promoted(row, actor, note or f"promoted by {actor}")
        s.flush()
        return VersionInfo.of(row)


def rollback(sessions: sessionmaker[Session], actor: str, note: str = "") -> tuple[VersionInfo, VersionInfo]:
    """Take back the promoted version (``rolled_back``) and promote again the one it replaced (the
    newest ``retired``). Returns (taken back, promoted again)."""
    with _promotion(sessions) as s:
        current = s.scalar(select(PolicyVersion).where(PolicyVersion.status == "promoted"))
        if current is None:
            raise RegistryError("no promoted version to roll back")
        previous = s.scalar(select(PolicyVersion).where(PolicyVersion.status == "retired")
                            .order_by(PolicyVersion.promoted_at.desc()).limit(1))
        if previous is None:
            raise RegistryError(f"{current.version} has no earlier promoted version to roll back to")
        current.status = "rolled_back"
        current.note = (note or f"rolled back by {actor}")[:REASON_MAX_LEN]
        s.flush()
        _set_promoted(previous, actor, note or f"promoted again by {actor} (rollback of {current.version})")
        s.flush()
        return VersionInfo.of(current), VersionInfo.of(previous)


def _set_promoted(row: PolicyVersion, actor: str, note: str) -> None:
    row.status = "promoted"
    row.promoted_at = datetime.now(UTC)
    row.promoted_by = actor[:ACTOR_MAX_LEN]
    row.note = note[:REASON_MAX_LEN]
