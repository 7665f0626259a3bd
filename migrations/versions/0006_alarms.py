"""Alarm groups with their acknowledgements, so both survive a restart of the service.

Revision ID: 0006_alarms
Revises: 0005_trend_cells
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_alarms"
down_revision: str | Sequence[str] | None = "0005_trend_cells"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the alarm group table."""
    op.create_table(
        "alarm_group",
        sa.Column("id", sa.String(length=16), nullable=False),
        sa.Column("greenhouse_id", sa.String(length=63), nullable=False),
        sa.Column("kind", sa.String(length=200), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("acknowledged_by", sa.String(length=64), nullable=True),
        sa.Column("acknowledged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ack_through", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["greenhouse_id"], ["greenhouse.id"],
                                name=op.f("fk_alarm_group_greenhouse_id_greenhouse"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alarm_group")),
    )
    op.create_index(op.f("ix_alarm_group_greenhouse_id"), "alarm_group", ["greenhouse_id"])


def downgrade() -> None:
    """Drop the table and its index."""
    op.drop_index(op.f("ix_alarm_group_greenhouse_id"), table_name="alarm_group")
    op.drop_table("alarm_group")
