"""Greenhouse leases and replica heartbeats: greenhouse_lease, service_replica.

Several service replicas share one database; each greenhouse is commanded by the one replica
holding its lease, and the fencing token lets the edge box refuse a replica that lost it.

Revision ID: 0004_leases
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_leases"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the lease and heartbeat tables (rows appear as replicas start)."""
    op.create_table(
        "greenhouse_lease",
        sa.Column("greenhouse_id", sa.String(length=63), nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=True),
        sa.Column("fencing_token", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("fencing_token >= 0", name=op.f("ck_greenhouse_lease_fencing_token_nonneg")),
        sa.ForeignKeyConstraint(["greenhouse_id"], ["greenhouse.id"],
                                name=op.f("fk_greenhouse_lease_greenhouse_id_greenhouse"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("greenhouse_id", name=op.f("pk_greenhouse_lease")),
    )
    op.create_table(
        "service_replica",
        sa.Column("holder", sa.String(length=128), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("holder", name=op.f("pk_service_replica")),
    )


def downgrade() -> None:
    """Drop both tables."""
    op.drop_table("service_replica")
    op.drop_table("greenhouse_lease")
