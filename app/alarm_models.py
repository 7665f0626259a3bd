"""The alarm tables: groups with their acknowledgement and shelving, the history of episodes, every
operator action on an alarm, per-greenhouse thresholds and per-user notification preferences.

:mod:`app.models` imports this module, so these tables are part of the schema the migrations build.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, CheckConstraint, ForeignKey, Integer, String
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base, UtcDateTime
from wire.fields import ACTOR_MAX_LEN, REASON_MAX_LEN

ALARM_ACTIONS = ("ack", "shelve", "unshelve")
SEVERITY_LEVELS = ("info", "warning", "critical")
KIND_MAX_LEN = 200
EMAIL_MAX_LEN = 254
URL_MAX_LEN = 2000

_Json = JSON().with_variant(JSONB(), "postgresql")
_BigId = BigInteger().with_variant(Integer(), "sqlite")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class AlarmGroup(Base):
    """Occurrences of one alarm kind in one greenhouse, the latest acknowledgement of them and its shelving.

    Kept so that alarms, who acknowledged them and who shelved them survive a restart; an
    acknowledgement covers the occurrences up to ``ack_through``; a shelved group stays out of the
    active list and sends no notification until ``shelved_until``.
    """

    __tablename__ = "alarm_group"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    greenhouse_id: Mapped[str] = mapped_column(ForeignKey("greenhouse.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(KIND_MAX_LEN))
    first_at: Mapped[datetime] = mapped_column(UtcDateTime)
    last_at: Mapped[datetime] = mapped_column(UtcDateTime)
    count: Mapped[int] = mapped_column(BigInteger)
    acknowledged_by: Mapped[str | None] = mapped_column(String(64))
    acknowledged_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    ack_through: Mapped[datetime | None] = mapped_column(UtcDateTime)
    ack_comment: Mapped[str | None] = mapped_column(String(REASON_MAX_LEN))
    shelved_by: Mapped[str | None] = mapped_column(String(ACTOR_MAX_LEN))
    shelved_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    shelve_reason: Mapped[str | None] = mapped_column(String(REASON_MAX_LEN))


class AlarmEpisode(Base):
    """One spell of an alarm: from the occurrence that raised it to the moment it cleared (null: active)."""

    __tablename__ = "alarm_episode"
    __table_args__ = (CheckConstraint(_in("severity", SEVERITY_LEVELS), name="severity"),)

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    group_id: Mapped[str] = mapped_column(String(16), index=True)
    greenhouse_id: Mapped[str] = mapped_column(ForeignKey("greenhouse.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(KIND_MAX_LEN))
    severity: Mapped[str] = mapped_column(String(16))
    raised_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    last_at: Mapped[datetime] = mapped_column(UtcDateTime)
    count: Mapped[int] = mapped_column(BigInteger)
    cleared_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    acknowledged_by: Mapped[str | None] = mapped_column(String(ACTOR_MAX_LEN))
    acknowledged_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    ack_comment: Mapped[str | None] = mapped_column(String(REASON_MAX_LEN))


class AlarmAction(Base):
    """An operator's acknowledgement, shelving or unshelving of an alarm, with who and why (also sealed)."""

    __tablename__ = "alarm_action"
    __table_args__ = (CheckConstraint(_in("action", ALARM_ACTIONS), name="action"),)

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    group_id: Mapped[str] = mapped_column(String(16), index=True)
    greenhouse_id: Mapped[str] = mapped_column(ForeignKey("greenhouse.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(KIND_MAX_LEN))
    action: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str] = mapped_column(String(ACTOR_MAX_LEN))
    at: Mapped[datetime] = mapped_column(UtcDateTime)
    comment: Mapped[str] = mapped_column(String(REASON_MAX_LEN), default="")
    shelved_until: Mapped[datetime | None] = mapped_column(UtcDateTime)


class AlarmThreshold(Base):
    """A greenhouse's alarm limits that differ from the defaults
    (:class:`app.alarms.conditions.Thresholds`)."""

    __tablename__ = "alarm_threshold"

    greenhouse_id: Mapped[str] = mapped_column(ForeignKey("greenhouse.id", ondelete="CASCADE"),
                                               primary_key=True)
    values: Mapped[dict[str, Any]] = mapped_column(_Json)
    updated_by: Mapped[str] = mapped_column(String(ACTOR_MAX_LEN))
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)


class NotificationPref(Base):
    """How one user wants to hear of alarms: which channels, from which severity up."""

    __tablename__ = "notification_pref"
    __table_args__ = (CheckConstraint(_in("min_severity", SEVERITY_LEVELS), name="min_severity"),)

    username: Mapped[str] = mapped_column(ForeignKey("app_user.username"), primary_key=True)
    email: Mapped[str | None] = mapped_column(String(EMAIL_MAX_LEN))
    email_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    webhook_url: Mapped[str | None] = mapped_column(String(URL_MAX_LEN))
    webhook_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    min_severity: Mapped[str] = mapped_column(String(16), default="critical")
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)
