"""The policy registry (every ensemble the service may run, one promoted) and the retraining runs.

Revision ID: 0007_policy_registry
Revises: 0006_alarms
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007_policy_registry"
down_revision: str | Sequence[str] | None = "0006_alarms"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[object]:
    """JSON on SQLite, JSONB on PostgreSQL (matches ``app.models.JsonType``)."""
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    """Create both tables and the index that allows one promoted version only."""
    op.create_table(
        "policy_version",
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("parent", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("directory", sa.String(length=1024), nullable=False),
        sa.Column("data_from", sa.DateTime(timezone=True), nullable=True),
        sa.Column("data_to", sa.DateTime(timezone=True), nullable=True),
        sa.Column("twin_version", sa.String(length=64), nullable=True),
        sa.Column("config_hash", sa.String(length=64), nullable=True),
        sa.Column("calibration", _json(), nullable=True),
        sa.Column("metrics", _json(), nullable=True),
        sa.Column("git_commit", sa.String(length=64), nullable=True),
        sa.Column("note", sa.String(length=500), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("promoted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("promoted_by", sa.String(length=64), nullable=True),
        sa.CheckConstraint("status IN ('candidate', 'promoted', 'retired', 'rolled_back', 'refused')",
                           name=op.f("ck_policy_version_status")),
        sa.PrimaryKeyConstraint("version", name=op.f("pk_policy_version")),
    )
    op.create_index("uq_policy_version_promoted", "policy_version", ["status"], unique=True,
                    postgresql_where=sa.text("status = 'promoted'"),
                    sqlite_where=sa.text("status = 'promoted'"))
    op.create_table(
        "retrain_run",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("incumbent", sa.String(length=64), nullable=True),
        sa.Column("candidate", sa.String(length=64), nullable=True),
        sa.Column("reason", sa.String(length=500), nullable=False),
        sa.Column("summary", _json(), nullable=False),
        sa.CheckConstraint("status IN ('running', 'promoted', 'refused', 'failed')",
                           name=op.f("ck_retrain_run_status")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_retrain_run")),
    )


def downgrade() -> None:
    """Drop both tables (the registry's history goes with them)."""
    op.drop_table("retrain_run")
    op.drop_index("uq_policy_version_promoted", table_name="policy_version")
    op.drop_table("policy_version")
