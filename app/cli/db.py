"""Database migrations behind ``greentwin db ...`` (registering greenhouses is
:mod:`app.services.greenhouses`').

Plain functions returning values (never printing), so the CLI formats output and tests call them directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command

from app.core.config import get_settings
from app.core.db import alembic_config, current_revisions, make_engine


def _url(url: str | None) -> str:
    """Explicit URL, else ``GREENTWIN_DATABASE_URL`` / the settings default."""
    return url if url is not None else get_settings().database_url


resolve_url = _url


def upgrade(url: str | None = None, revision: str = "head") -> None:
    """Migrate the database forward to ``revision``."""
    command.upgrade(alembic_config(_url(url)), revision)


def downgrade(url: str | None = None, revision: str = "-1", *, drop_audit_trail: str | None = None,
              state_dir: Path = Path("state")) -> dict[str, Any] | None:
    """Migrate the database back to ``revision`` (one step by default; ``"base"`` drops everything).

    Past the audit trail's migration only with ``drop_audit_trail`` (the reason), which is recorded
    with the chains' heads in ``state_dir`` first (:mod:`app.cli.db_guard`); returns that record.
    """
    from app.cli.db_guard import AuditTrailDropRefused, drops_audit_trail, record_drop

    url = _url(url)
    record = None
    if drops_audit_trail(url, revision):
        if drop_audit_trail is None:
            raise AuditTrailDropRefused(
                f"downgrading to {revision!r} drops the audit trail's tables; refused without "
                "--drop-audit-trail REASON (the reason, who and the chains' heads are recorded)")
        record = record_drop(url, revision, drop_audit_trail, state_dir)
    command.downgrade(alembic_config(url), revision)
    return record


def current(url: str | None = None) -> str | None:
    """The database's revision id, or None when it was never migrated."""
    engine = make_engine(_url(url))
    try:
        revisions = current_revisions(engine)
    finally:
        engine.dispose()
    return ",".join(sorted(revisions)) or None
