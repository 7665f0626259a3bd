"""Sealed audit trail: audit_record, audit_checkpoint, audit_purge_token and append-only triggers.

The triggers are a second line of defence behind the hash chain: they stop ordinary sessions
(application bugs, an operator's stray ``UPDATE``) from changing the trail, while the chain and
the signed checkpoints catch whoever gets past them (a superuser can disable triggers).

* ``UPDATE`` (and ``TRUNCATE`` on PostgreSQL) is refused on both tables, always.
* ``DELETE`` is refused on ``audit_checkpoint`` always, and on ``audit_record`` unless the row is
  covered by a stored anchor (``kind = 'anchor' AND seq >= OLD.seq``) *and* the transaction holds
  the purge licence: ``SET LOCAL greentwin.audit_purge = 'on'`` on PostgreSQL (transaction-local,
  so it cannot leak into the next transaction of a pooled connection), a row in
  ``audit_purge_token`` for the greenhouse on SQLite (which cannot read session settings).

Check constraint names go through ``op.f()``, which marks them as final: a plain name would get
the naming convention's ``ck_<table>_`` prefix a second time.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ANCHOR_COVERS_OLD = (
    "EXISTS (SELECT 1 FROM audit_checkpoint a"
    " WHERE a.greenhouse_id = OLD.greenhouse_id AND a.kind = 'anchor' AND a.seq >= OLD.seq)"
)

_PG_UPGRADE = [
    """
    CREATE FUNCTION audit_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP;
    END
    $$
    """,
    f"""
    CREATE FUNCTION audit_record_purge_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF current_setting('greentwin.audit_purge', true) = 'on' AND {_ANCHOR_COVERS_OLD} THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'audit_record is append-only: DELETE refused outside a purge (greenhouse %, seq %)',
            OLD.greenhouse_id, OLD.seq;
    END
    $$
    """,
    """
    CREATE TRIGGER audit_record_no_update BEFORE UPDATE OR TRUNCATE ON audit_record
    FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()
    """,
    """
    CREATE TRIGGER audit_record_purge_only BEFORE DELETE ON audit_record
    FOR EACH ROW EXECUTE FUNCTION audit_record_purge_only()
    """,
    """
    CREATE TRIGGER audit_checkpoint_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_checkpoint
    FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()
    """,
]
_PG_DOWNGRADE = [
    "DROP TRIGGER IF EXISTS audit_checkpoint_append_only ON audit_checkpoint",
    "DROP TRIGGER IF EXISTS audit_record_purge_only ON audit_record",
    "DROP TRIGGER IF EXISTS audit_record_no_update ON audit_record",
    "DROP FUNCTION IF EXISTS audit_record_purge_only()",
    "DROP FUNCTION IF EXISTS audit_reject_change()",
]

_SQLITE_UPGRADE = [
    """
    CREATE TRIGGER audit_record_no_update BEFORE UPDATE ON audit_record
    BEGIN SELECT RAISE(ABORT, 'audit_record is append-only: UPDATE refused'); END
    """,
    f"""
    CREATE TRIGGER audit_record_purge_only BEFORE DELETE ON audit_record
    WHEN NOT (EXISTS (SELECT 1 FROM audit_purge_token t WHERE t.greenhouse_id = OLD.greenhouse_id)
              AND {_ANCHOR_COVERS_OLD})
    BEGIN SELECT RAISE(ABORT, 'audit_record is append-only: DELETE refused outside a purge'); END
    """,
    """
    CREATE TRIGGER audit_checkpoint_no_update BEFORE UPDATE ON audit_checkpoint
    BEGIN SELECT RAISE(ABORT, 'audit_checkpoint is append-only: UPDATE refused'); END
    """,
    """
    CREATE TRIGGER audit_checkpoint_no_delete BEFORE DELETE ON audit_checkpoint
    BEGIN SELECT RAISE(ABORT, 'audit_checkpoint is append-only: DELETE refused'); END
    """,
]
_SQLITE_DOWNGRADE = [
    "DROP TRIGGER IF EXISTS audit_checkpoint_no_delete",
    "DROP TRIGGER IF EXISTS audit_checkpoint_no_update",
    "DROP TRIGGER IF EXISTS audit_record_purge_only",
    "DROP TRIGGER IF EXISTS audit_record_no_update",
]


def _dialect() -> str:
    """Works online and in ``--sql`` (offline) mode."""
    return op.get_context().dialect.name


def upgrade() -> None:
    """Create the audit tables, then the triggers that keep them append-only."""
    op.create_table(
        "audit_record",
        sa.Column("greenhouse_id", sa.String(length=63), nullable=False),
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("ts", sa.String(length=32), nullable=False),
        sa.Column("ts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("key_id", sa.String(length=8), nullable=False),
        sa.Column("nonce", sa.LargeBinary(length=12), nullable=False),
        sa.Column("ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("prev_hash", sa.CHAR(length=64), nullable=False),
        sa.Column("record_hash", sa.CHAR(length=64), nullable=False),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_audit_record_seq_pos")),
        sa.PrimaryKeyConstraint("greenhouse_id", "seq", name="pk_audit_record"),
    )
    op.create_index(
        "ix_audit_record_greenhouse_id_ts_at", "audit_record", ["greenhouse_id", "ts_at"], unique=False
    )
    op.create_table(
        "audit_checkpoint",
        sa.Column("greenhouse_id", sa.String(length=63), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("head_hash", sa.CHAR(length=64), nullable=False),
        sa.Column("ts", sa.String(length=32), nullable=False),
        sa.Column("signature", sa.LargeBinary(length=64), nullable=False),
        sa.CheckConstraint("kind IN ('checkpoint', 'anchor')", name=op.f("ck_audit_checkpoint_kind")),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_audit_checkpoint_seq_pos")),
        sa.PrimaryKeyConstraint("greenhouse_id", "kind", "seq", name="pk_audit_checkpoint"),
    )
    op.create_table(
        "audit_purge_token",
        sa.Column("greenhouse_id", sa.String(length=63), nullable=False),
        sa.PrimaryKeyConstraint("greenhouse_id", name="pk_audit_purge_token"),
    )
    dialect = _dialect()
    statements = _PG_UPGRADE if dialect == "postgresql" else _SQLITE_UPGRADE if dialect == "sqlite" else []
    for sql in statements:
        op.execute(sql)


def downgrade() -> None:
    """Drop the triggers (and PostgreSQL functions) first, then the tables."""
    dialect = _dialect()
    statements = (
        _PG_DOWNGRADE if dialect == "postgresql" else _SQLITE_DOWNGRADE if dialect == "sqlite" else []
    )
    for sql in statements:
        op.execute(sql)
    op.drop_table("audit_purge_token")
    op.drop_table("audit_checkpoint")
    op.drop_index("ix_audit_record_greenhouse_id_ts_at", table_name="audit_record")
    op.drop_table("audit_record")
