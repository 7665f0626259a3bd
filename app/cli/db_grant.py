"""``greentwin db grant --role NAME``: exactly the rights the service needs, on PostgreSQL.

Migrations run as the owner role; the service connects as a restricted role. A role that may
UPDATE or DELETE audit rows could rewrite or cut the trail (the triggers refuse both, but a
role with DELETE can open the purge licence itself), so the restricted role gets SELECT and
INSERT on every table, UPDATE and DELETE only on the tables listed here, and nothing on the
schema. A decision is sealed as it is inserted, so only the column written after that (its ack
status, :func:`app.recorder._apply_acks`) may be updated; ``audit verify`` compares it with the
sealed acks. Rerun it after every ``db upgrade`` (a new table is readable and insertable at once
through the owner's default privileges, see ``deploy/postgres/10-roles.sql``, but gets no more).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, inspect, text
from sqlalchemy.sql.compiler import IdentifierPreparer

from app.core.db import make_engine

UPDATES: dict[str, tuple[str, ...]] = {
    "decision": ("UPDATE (ack_status)",),         # the command's ack status, nothing that was sealed
    "greenhouse": ("UPDATE",),                    # its settings (name, lamps, version), sealed as they change
    "zone": ("UPDATE",),                          # its settings (band, cap, soil, name), sealed as they
                                                  # change
    "app_user": ("UPDATE",),                      # password, disabling, last login, token epoch
    "app_user_role": ("UPDATE", "DELETE"),        # role changes
    "alarm_group": ("UPDATE",),                   # acknowledging, shelving, counting repeats
    "alarm_episode": ("UPDATE",),                 # counting repeats, clearing, acknowledging
    "alarm_threshold": ("UPDATE",),               # a greenhouse's alarm limits changed
    "notification_pref": ("UPDATE",),             # a user's notification choices changed
    "greenhouse_lease": ("UPDATE",),              # taking and renewing a lease
    "service_replica": ("UPDATE", "DELETE"),      # heartbeats; expired replicas go
    "trend_cell": ("UPDATE", "DELETE"),           # the newest cells are rewritten
    "trend_progress": ("UPDATE",),
    "policy_version": ("UPDATE",),                # promotion, rollback, retiring the replaced one
    "retrain_run": ("UPDATE",),                   # a run's stages and verdict as it goes
}
"""Service tables whose rows change after they are written, and how."""

READ_ONLY = ("alembic_version", "audit_purge_token")
"""Read, never written by the service: the schema's revision and the purge licence (owner only)."""

AUDIT_TABLES = ("audit_record", "audit_checkpoint")
"""Append-only: SELECT and INSERT, whatever else changes."""


@dataclass(frozen=True)
class Grant:
    """What one table ended up with for the role."""

    table: str
    privileges: tuple[str, ...]


def table_privileges(table: str) -> tuple[str, ...]:
    """The privileges the service's role gets on ``table``."""
    if table in READ_ONLY:
        return ("SELECT",)
    if table in AUDIT_TABLES:
        return ("SELECT", "INSERT")
    return ("SELECT", "INSERT", *UPDATES.get(table, ()))


def grant_statements(engine: Engine, role: str) -> list[tuple[str, Grant | None]]:
    """The SQL that leaves ``role`` with exactly :func:`table_privileges` on every current table."""
    quote = IdentifierPreparer(engine.dialect).quote
    r = quote(role)
    out: list[tuple[str, Grant | None]] = [(f"GRANT USAGE ON SCHEMA public TO {r}", None),
                                           (f"REVOKE CREATE ON SCHEMA public FROM {r}", None)]
    for table in sorted(inspect(engine).get_table_names(schema="public")):
        privileges = table_privileges(table)
        t = quote(table)
        out.append((f"REVOKE ALL ON TABLE {t} FROM {r}", None))
        out.append((f"GRANT {', '.join(privileges)} ON TABLE {t} TO {r}", Grant(table, privileges)))
    # Sequences back the service's own id columns (users, alarms); reading and drawing only.
    out.append((f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {r}", None))
    out.append((f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {r}", None))
    return out


def grant(url: str, role: str) -> list[Grant]:
    """Apply the service's rights for ``role`` as the connecting (owner) role; returns them per table."""
    engine = make_engine(url)
    try:
        if engine.dialect.name != "postgresql":
            raise ValueError("db grant is for PostgreSQL (SQLite has no roles)")
        with engine.connect() as conn:
            exists = conn.scalar(text("SELECT count(*) FROM pg_roles WHERE rolname = :r"), {"r": role})
        if not exists:
            raise ValueError(f"role {role!r} does not exist (create it first: deploy/postgres/10-roles.sql)")
        statements = grant_statements(engine, role)
        with engine.begin() as conn:
            for sql, _ in statements:
                conn.execute(text(sql))
        return [g for _, g in statements if g is not None]
    finally:
        engine.dispose()
