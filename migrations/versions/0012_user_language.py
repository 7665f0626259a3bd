"""Accounts carry a language: the one the dashboard and the API's sentences are in for that user.

Revision ID: 0012_user_language
Revises: 0011_alarm_operations
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_user_language"
down_revision: str | Sequence[str] | None = "0011_alarm_operations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``language`` (existing accounts: English, as the pages were).

    Plain ``ADD COLUMN`` on every database: SQLite's batch mode would copy and drop ``app_user``, and with
    foreign keys on, the drop would take every role row with it. The check is PostgreSQL's (SQLite adds no
    constraint to an existing table; the API refuses other languages before any write)."""
    op.add_column("app_user", sa.Column("language", sa.String(length=8), server_default="en", nullable=False))
    if op.get_bind().dialect.name != "sqlite":
        op.create_check_constraint(op.f("ck_app_user_language"), "app_user", "language IN ('en', 'zh-Hans')")


def downgrade() -> None:
    """Drop the column (``DROP COLUMN``, no table copy, as above): every account reads English again."""
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint(op.f("ck_app_user_language"), "app_user", type_="check")
    with op.batch_alter_table("app_user", recreate="never") as batch:
        batch.drop_column("language")
