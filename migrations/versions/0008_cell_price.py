"""Trend cells keep the price each decision recorded for its hour (sum and count, like the channels).

The roll-up's progress is reset so the service rebuilds every cell from the decision table in the
background, recorded prices included; until then a cell without one is priced at the tariff, and
history reads average the decisions themselves (as on a first start after 0005).

Revision ID: 0008_cell_price
Revises: 0007_policy_registry
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_cell_price"
down_revision: str | Sequence[str] | None = "0007_policy_registry"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the price columns (0: none recorded) and have the roll-up start over."""
    with op.batch_alter_table("trend_cell") as batch:
        batch.add_column(sa.Column("price_sum", sa.Float(), server_default="0", nullable=False))
        batch.add_column(sa.Column("price_count", sa.Integer(), server_default="0", nullable=False))
    op.execute(sa.text("DELETE FROM trend_progress"))


def downgrade() -> None:
    """Drop the price columns; the cells' channels stay as they are."""
    with op.batch_alter_table("trend_cell") as batch:
        batch.drop_column("price_count")
        batch.drop_column("price_sum")
