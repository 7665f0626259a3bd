"""Alarm operations: acknowledgement comments and shelving on alarm groups, the history of alarm
episodes, every operator action on an alarm, per-greenhouse alarm thresholds and per-user
notification preferences.

Revision ID: 0011_alarm_operations
Revises: 0010_greenhouse_settings
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011_alarm_operations"
down_revision: str | Sequence[str] | None = "0010_greenhouse_settings"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
SEVERITIES = "'info', 'warning', 'critical'"


def _gh_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["greenhouse_id"], ["greenhouse.id"],
                                   name=op.f(f"fk_{table}_greenhouse_id_greenhouse"), ondelete="CASCADE")


def upgrade() -> None:
    """Add the group columns (existing groups: not shelved, no comment) and the four tables."""
    with op.batch_alter_table("alarm_group") as batch:
        batch.add_column(sa.Column("ack_comment", sa.String(length=500), nullable=True))
        batch.add_column(sa.Column("shelved_by", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("shelved_until", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("shelve_reason", sa.String(length=500), nullable=True))
    op.create_table(
        "alarm_episode",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("group_id", sa.String(length=16), nullable=False),
        sa.Column("greenhouse_id", sa.String(length=63), nullable=False),
        sa.Column("kind", sa.String(length=200), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("raised_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("cleared_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("acknowledged_by", sa.String(length=64), nullable=True),
        sa.Column("acknowledged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ack_comment", sa.String(length=500), nullable=True),
        sa.CheckConstraint(f"severity IN ({SEVERITIES})", name=op.f("ck_alarm_episode_severity")),
        _gh_fk("alarm_episode"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alarm_episode")),
    )
    op.create_index(op.f("ix_alarm_episode_group_id"), "alarm_episode", ["group_id"])
    op.create_index(op.f("ix_alarm_episode_greenhouse_id"), "alarm_episode", ["greenhouse_id"])
    op.create_index(op.f("ix_alarm_episode_raised_at"), "alarm_episode", ["raised_at"])
    op.create_table(
        "alarm_action",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("group_id", sa.String(length=16), nullable=False),
        sa.Column("greenhouse_id", sa.String(length=63), nullable=False),
        sa.Column("kind", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("comment", sa.String(length=500), nullable=False),
        sa.Column("shelved_until", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("action IN ('ack', 'shelve', 'unshelve')", name=op.f("ck_alarm_action_action")),
        _gh_fk("alarm_action"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alarm_action")),
    )
    op.create_index(op.f("ix_alarm_action_group_id"), "alarm_action", ["group_id"])
    op.create_index(op.f("ix_alarm_action_greenhouse_id"), "alarm_action", ["greenhouse_id"])
    op.create_table(
        "alarm_threshold",
        sa.Column("greenhouse_id", sa.String(length=63), nullable=False),
        sa.Column("values", JSON, nullable=False),
        sa.Column("updated_by", sa.String(length=64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        _gh_fk("alarm_threshold"),
        sa.PrimaryKeyConstraint("greenhouse_id", name=op.f("pk_alarm_threshold")),
    )
    op.create_table(
        "notification_pref",
        sa.Column("username", sa.String(length=48), nullable=False),
        sa.Column("email", sa.String(length=254), nullable=True),
        sa.Column("email_enabled", sa.Boolean(), nullable=False),
        sa.Column("webhook_url", sa.String(length=2000), nullable=True),
        sa.Column("webhook_enabled", sa.Boolean(), nullable=False),
        sa.Column("min_severity", sa.String(length=16), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(f"min_severity IN ({SEVERITIES})", name=op.f("ck_notification_pref_min_severity")),
        sa.ForeignKeyConstraint(["username"], ["app_user.username"],
                                name=op.f("fk_notification_pref_username_app_user")),
        sa.PrimaryKeyConstraint("username", name=op.f("pk_notification_pref")),
    )


def downgrade() -> None:
    """Drop the tables and the group columns (shelving and comments are lost; acknowledgements stay)."""
    op.drop_table("notification_pref")
    op.drop_table("alarm_threshold")
    op.drop_index(op.f("ix_alarm_action_greenhouse_id"), table_name="alarm_action")
    op.drop_index(op.f("ix_alarm_action_group_id"), table_name="alarm_action")
    op.drop_table("alarm_action")
    op.drop_index(op.f("ix_alarm_episode_raised_at"), table_name="alarm_episode")
    op.drop_index(op.f("ix_alarm_episode_greenhouse_id"), table_name="alarm_episode")
    op.drop_index(op.f("ix_alarm_episode_group_id"), table_name="alarm_episode")
    op.drop_table("alarm_episode")
    with op.batch_alter_table("alarm_group") as batch:
        batch.drop_column("shelve_reason")
        batch.drop_column("shelved_until")
        batch.drop_column("shelved_by")
        batch.drop_column("ack_comment")
