"""``greentwin db downgrade`` past the audit trail's migration: refused unless confirmed, and recorded.

Dropping the audit tables erases the trail the service exists to keep, so it takes an explicit
flag with a reason, and before anything is dropped the confirmation, who gave it and every
chain's head (seq and hash) go to an owner-only JSON-lines file that outlives the database:
whoever later finds a trail gone can see when, by whom, and what it ended with.
"""

from __future__ import annotations

import getpass
import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic.script import ScriptDirectory
from sqlalchemy import text

from app.core.db import alembic_config, current_revisions, make_engine
from app.private_files import create_private

AUDIT_REVISION = "0002"
"""The migration that creates the audit trail's tables: a downgrade past it drops them."""
DROPS_FILE = "audit-trail-drops.jsonl"


class AuditTrailDropRefused(RuntimeError):
    """A downgrade would drop the audit tables and was not confirmed."""


def _lower(script: ScriptDirectory, heads: tuple[str, ...], revision: str) -> str:
    """The target of a downgrade; ``-N`` counts from the database's revision (Alembic's own
    resolution counts from the scripts' head, which is wrong for a database behind it)."""
    if (m := re.fullmatch(r"-(\d+)", revision)) is None:
        return revision
    current = list(heads)
    for _ in range(int(m.group(1))):
        current = [d for h in current for d in _down(script, h)]
    return current[0] if current else "base"


def _down(script: ScriptDirectory, revision: str) -> list[str]:
    down = script.get_revision(revision).down_revision
    return [] if down is None else [down] if isinstance(down, str) else list(down)


def drops_audit_trail(url: str, revision: str) -> bool:
    """Would ``db downgrade revision`` on ``url`` undo the audit trail's migration?"""
    engine = make_engine(url)
    try:
        heads = tuple(sorted(current_revisions(engine)))
    finally:
        engine.dispose()
    if not heads:
        return False
    script = ScriptDirectory.from_config(alembic_config(url))
    undone = {r.revision for r in script.iterate_revisions(heads, _lower(script, heads, revision))}
    return AUDIT_REVISION in undone


def _chain_heads(url: str) -> list[dict[str, Any]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text(
                "SELECT r.greenhouse_id, r.seq, r.record_hash FROM audit_record r JOIN (SELECT "
                "greenhouse_id, MAX(seq) AS seq FROM audit_record GROUP BY greenhouse_id) h ON "
                "h.greenhouse_id = r.greenhouse_id AND h.seq = r.seq ORDER BY r.greenhouse_id"))
            return [{"greenhouse_id": g, "seq": int(s), "record_hash": h} for g, s, h in rows]
    finally:
        engine.dispose()


def record_drop(url: str, revision: str, reason: str, state_dir: Path) -> dict[str, Any]:
    """Refuse an empty reason; append the confirmation and the chain heads (fsync'd); return it."""
    if len(reason.strip()) < 3:
        raise AuditTrailDropRefused("--drop-audit-trail needs a reason (at least 3 characters); it is "
                                    "recorded")
    entry = {"at": datetime.now(UTC).isoformat(), "by": getpass.getuser(), "reason": reason.strip(),
             "database": make_engine(url).url.render_as_string(hide_password=True), "to_revision": revision,
             "chain_heads": _chain_heads(url)}
    path = state_dir / DROPS_FILE
    create_private(path)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, separators=(",", ":")) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return entry
