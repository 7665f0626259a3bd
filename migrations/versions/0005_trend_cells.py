"""Trend cells: the dashboard's history rolled up into fixed cells of time, and how far the roll-up got.

Filled by the service from the decision table (``app.api.trend_rollup``); nothing to backfill here:
the service takes in existing decisions in the background and serves from them meanwhile.

Revision ID: 0005_trend_cells
Revises: 0004_leases
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_trend_cells"
down_revision: str | Sequence[str] | None = "0004_leases"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the cell and progress tables."""
    op.create_table(
        "trend_cell",
        sa.Column("greenhouse_id", sa.String(length=63), nullable=False),
        sa.Column("cell", sa.Integer(), nullable=False),
        sa.Column("decisions", sa.Integer(), nullable=False),
        sa.Column("sums", sa.JSON(), nullable=False),
        sa.Column("counts", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["greenhouse_id"], ["greenhouse.id"],
                                name=op.f("fk_trend_cell_greenhouse_id_greenhouse"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("greenhouse_id", "cell", name=op.f("pk_trend_cell")),
    )
    op.create_table(
        "trend_progress",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("last_decision_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trend_progress")),
    )


def downgrade() -> None:
    """Drop both tables."""
    op.drop_table("trend_progress")
    op.drop_table("trend_cell")
