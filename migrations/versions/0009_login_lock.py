"""Accounts carry a login lock: failed logins from many addresses lock an account until a time.

Kept in the database, not in one replica's memory, so every replica refuses the same addresses,
the admin's Users page shows the lock and ``greentwin user unlock`` lifts it.

Revision ID: 0009_login_lock
Revises: 0008_cell_price
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_login_lock"
down_revision: str | Sequence[str] | None = "0008_cell_price"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``locked_until`` (null: not locked)."""
    with op.batch_alter_table("app_user") as batch:
        batch.add_column(sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Drop the lock column; every lock is lifted."""
    with op.batch_alter_table("app_user") as batch:
        batch.drop_column("locked_until")
