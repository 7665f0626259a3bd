"""Operator settings of greenhouses and zones: display names, lamp control and budget, a version.

A zone gains a display name (none: "Zone N"); a greenhouse whether greentwin controls its lamps,
its own daily lamp-hour budget (none: the safety limits' cap) and ``settings_version``, which every
settings change raises, so each replica sees a change and each decision records what it used.

Revision ID: 0010_greenhouse_settings
Revises: 0009_login_lock
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_greenhouse_settings"
down_revision: str | Sequence[str] | None = "0009_login_lock"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the columns; existing greenhouses keep their behaviour (lamps ours, the limits' budget, version 1).

    Plain ``ADD COLUMN`` on every database: SQLite's batch mode would copy and drop the greenhouse table,
    and with foreign keys on, the drop would take every zone with it. Its checks are PostgreSQL's (SQLite
    adds no constraint to an existing table; the API refuses such values before any write)."""
    op.add_column("greenhouse", sa.Column("lamps_ours", sa.Boolean(), server_default=sa.true(),
                                          nullable=False))
    op.add_column("greenhouse", sa.Column("lamp_hours_per_day", sa.Float(), nullable=True))
    op.add_column("greenhouse", sa.Column("settings_version", sa.Integer(), server_default="1",
                                          nullable=False))
    op.add_column("zone", sa.Column("name", sa.String(length=200), nullable=True))
    if op.get_bind().dialect.name != "sqlite":
        op.create_check_constraint(op.f("ck_greenhouse_lamp_hours_range"), "greenhouse",
                                   "lamp_hours_per_day IS NULL OR (lamp_hours_per_day >= 0 AND "
                                   "lamp_hours_per_day <= 24)")
        op.create_check_constraint(op.f("ck_greenhouse_settings_version_pos"), "greenhouse",
                                   "settings_version >= 1")


def downgrade() -> None:
    """Drop the columns (``DROP COLUMN``, no table copy, as above): names, lamp settings and versions are
    lost, bands and caps stay."""
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint(op.f("ck_greenhouse_settings_version_pos"), "greenhouse", type_="check")
        op.drop_constraint(op.f("ck_greenhouse_lamp_hours_range"), "greenhouse", type_="check")
    with op.batch_alter_table("zone", recreate="never") as batch:
        batch.drop_column("name")
    with op.batch_alter_table("greenhouse", recreate="never") as batch:
        batch.drop_column("settings_version")
        batch.drop_column("lamp_hours_per_day")
        batch.drop_column("lamps_ours")
