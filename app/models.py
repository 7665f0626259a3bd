"""Service tables: greenhouses and zones (configuration), control decisions and mode changes (history),
and the API's users with their roles. The sealed audit trail's tables belong to :mod:`audit.tables`;
:data:`SCHEMA` names both metadatas, the whole schema the migrations build.

``Decision`` and ``ModeChange`` are append-only records until the sealed audit store takes them
over; the only later write is a decision's ``ack_status`` when the edge box answers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    UniqueConstraint,
    func,
    text,
    true,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.alarm_models import AlarmGroup  # noqa: F401  (re-exported; the alarm tables join the schema)
from app.auth.roles import ROLES
from app.core.db import Base, UtcDateTime
from audit.tables import AuditBase
from audit.wording import LANGUAGES
from wire.fields import ACTOR_MAX_LEN, NAME_MAX_LEN, REASON_MAX_LEN

SOIL_TYPES = ("sand", "loam", "clay")
MODES = ("auto", "manual", "estop")
ACK_STATUSES = ("pending", "applied", "rejected", "expired", "timeout")
# No wider than the audit trail's chain key (``audit.tables.CHAIN_ID_MAX_LEN``): every greenhouse has a chain.
GH_ID_MAX_LEN = 63
# "operator:" + name must fit the 64-character actor columns of decisions and mode changes.
USERNAME_MAX_LEN = 48

# JSON on SQLite, JSONB (indexable, compact) on PostgreSQL.
JsonType = JSON().with_variant(JSONB(), "postgresql")
# SQLite only auto-increments an ``INTEGER PRIMARY KEY``; PostgreSQL gets 64-bit ids.
BigId = BigInteger().with_variant(Integer(), "sqlite")

SCHEMA: tuple[MetaData, ...] = (Base.metadata, AuditBase.metadata)
"""Every table the migrations manage: the service's and the audit trail's (Alembic's targets)."""


def _in(column: str, values: tuple[str, ...]) -> str:
    """SQL ``IN`` check text for a closed set of short string values."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Greenhouse(Base):
    """One greenhouse; its id is the slug used in MQTT topics (``greentwin/<id>/...``)."""

    __tablename__ = "greenhouse"
    __table_args__ = (
        CheckConstraint("zones >= 1 AND zones <= 64", name="zones_range"),
        CheckConstraint("lamp_hours_per_day IS NULL OR "
                        "(lamp_hours_per_day >= 0 AND lamp_hours_per_day <= 24)",
                        name="lamp_hours_range"),
        CheckConstraint("settings_version >= 1", name="settings_version_pos"),
    )

    id: Mapped[str] = mapped_column(String(GH_ID_MAX_LEN), primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_MAX_LEN))
    zones: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, server_default=func.now())
    # Whether greentwin commands the lamps (else the site's climate computer runs them).
    lamps_ours: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    # The greenhouse's own daily lamp-hour budget; null: the safety limits' cap. Never above that cap.
    lamp_hours_per_day: Mapped[float | None] = mapped_column(Float)
    # Raised by every settings change (app.greenhouse_settings): replicas see it, decisions record it.
    settings_version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")

    zone_rows: Mapped[list[Zone]] = relationship(
        back_populates="greenhouse", cascade="all, delete-orphan", order_by="Zone.index"
    )


class Zone(Base):
    """Irrigation zone settings the safety layer and the policies read (VWC in m3/m3)."""

    __tablename__ = "zone"
    __table_args__ = (
        CheckConstraint(_in("soil_type", SOIL_TYPES), name="soil_type"),
        CheckConstraint("zone_index >= 0", name="zone_index_nonneg"),
        CheckConstraint(
            "target_low_vwc >= 0 AND target_low_vwc < target_high_vwc AND target_high_vwc <= saturation_vwc"
            " AND saturation_vwc <= 1",
            name="vwc_order",
        ),
        CheckConstraint("daily_water_cap_l > 0", name="water_cap_pos"),
    )

    greenhouse_id: Mapped[str] = mapped_column(
        ForeignKey("greenhouse.id", ondelete="CASCADE"), primary_key=True
    )
    index: Mapped[int] = mapped_column("zone_index", Integer, primary_key=True)
    soil_type: Mapped[str] = mapped_column(String(8))
    target_low_vwc: Mapped[float] = mapped_column(Float)
    target_high_vwc: Mapped[float] = mapped_column(Float)
    saturation_vwc: Mapped[float] = mapped_column(Float)
    daily_water_cap_l: Mapped[float] = mapped_column(Float)
    # Display name; null: "Zone N", numbered from 1 (audit.labels).
    name: Mapped[str | None] = mapped_column(String(NAME_MAX_LEN))

    greenhouse: Mapped[Greenhouse] = relationship(back_populates="zone_rows")


class Decision(Base):
    """One control step: what was seen, what each ensemble member wanted, what was sent, and why."""

    __tablename__ = "decision"
    __table_args__ = (
        UniqueConstraint("greenhouse_id", "seq"),
        CheckConstraint("seq >= 0", name="seq_nonneg"),
        CheckConstraint(_in("mode", MODES), name="mode"),
        CheckConstraint(f"ack_status IS NULL OR {_in('ack_status', ACK_STATUSES)}", name="ack_status"),
        CheckConstraint("confidence >= 0 AND confidence <= 1", name="confidence_range"),
        Index(None, "greenhouse_id", "ts"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    # RESTRICT: history must outlive nothing; a greenhouse with decisions cannot be deleted.
    greenhouse_id: Mapped[str] = mapped_column(ForeignKey("greenhouse.id", ondelete="RESTRICT"))
    seq: Mapped[int] = mapped_column(BigInteger)
    ts: Mapped[datetime] = mapped_column(UtcDateTime)
    actor: Mapped[str] = mapped_column(String(ACTOR_MAX_LEN))
    mode: Mapped[str] = mapped_column(String(8))
    telemetry: Mapped[dict[str, Any]] = mapped_column(JsonType)
    estimate: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    member_actions: Mapped[list[Any]] = mapped_column(JsonType)
    voted: Mapped[dict[str, Any]] = mapped_column(JsonType)
    clipped: Mapped[dict[str, Any]] = mapped_column(JsonType)
    rules_fired: Mapped[list[Any]] = mapped_column(JsonType)
    reward_terms: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    confidence: Mapped[float] = mapped_column(Float)
    explanation: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    # Null when the step sent nothing (e.g. stale telemetry held the actuators).
    cmd_id: Mapped[str | None] = mapped_column(String(36), unique=True)
    ack_status: Mapped[str | None] = mapped_column(String(16))


class ModeChange(Base):
    """Who switched a greenhouse between auto, manual and e-stop, when and why."""

    __tablename__ = "mode_change"
    __table_args__ = (
        UniqueConstraint("greenhouse_id", "seq"),
        CheckConstraint("seq >= 0", name="seq_nonneg"),
        CheckConstraint(f"from_mode IS NULL OR {_in('from_mode', MODES)}", name="from_mode"),
        CheckConstraint(_in("to_mode", MODES), name="to_mode"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    greenhouse_id: Mapped[str] = mapped_column(ForeignKey("greenhouse.id", ondelete="RESTRICT"))
    seq: Mapped[int] = mapped_column(BigInteger)
    ts: Mapped[datetime] = mapped_column(UtcDateTime)
    actor: Mapped[str] = mapped_column(String(ACTOR_MAX_LEN))
    # Null for the first mode a greenhouse is put in.
    from_mode: Mapped[str | None] = mapped_column(String(8))
    to_mode: Mapped[str] = mapped_column(String(8))
    reason: Mapped[str] = mapped_column(String(REASON_MAX_LEN), default="")


# -- API users (app.auth) ----------------------------------------------------------------------
# ``app_user``: ``user`` is a reserved word in PostgreSQL.


class User(Base):
    """Someone who logs in to the API; never deleted, only disabled, so audit actors stay resolvable."""

    __tablename__ = "app_user"
    __table_args__ = (CheckConstraint(_in("language", LANGUAGES), name="language"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(String(USERNAME_MAX_LEN), unique=True)
    # Argon2id PHC string: algorithm, parameters and salt travel with the hash.
    password_hash: Mapped[str] = mapped_column(String(255))
    # Tokens carry the epoch they were issued in; logging out bumps it, revoking every token issued before.
    token_epoch: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, server_default=func.now())
    last_login_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # Null while the account may log in.
    disabled_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # Set when failed logins from many addresses reach the account's limit (app.auth.lockout):
    # until then, addresses that failed on it are refused. An admin may lift it earlier.
    locked_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    # The language the pages and the API's sentences are in for this user (audit.wording.LANGUAGES).
    language: Mapped[str] = mapped_column(String(8), default="en", server_default="en")

    role_rows: Mapped[list[UserRole]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="UserRole.role"
    )

    @property
    def roles(self) -> frozenset[str]:
        return frozenset(r.role for r in self.role_rows)


class UserRole(Base):
    """One role held by one user; a user may hold several."""

    __tablename__ = "app_user_role"
    __table_args__ = (CheckConstraint(_in("role", ROLES), name="role"),)

    user_id: Mapped[int] = mapped_column(ForeignKey("app_user.id", ondelete="CASCADE"), primary_key=True)
    role: Mapped[str] = mapped_column(String(16), primary_key=True)


# -- leases (app.leases): which replica controls which greenhouse ---------------------------------


class GreenhouseLease(Base):
    """The one replica allowed to command a greenhouse until ``expires_at``; the token grows with
    every change of holder, so the edge box can refuse a replica that lost the lease."""

    __tablename__ = "greenhouse_lease"
    __table_args__ = (CheckConstraint("fencing_token >= 0", name="fencing_token_nonneg"),)

    greenhouse_id: Mapped[str] = mapped_column(ForeignKey("greenhouse.id", ondelete="CASCADE"),
                                               primary_key=True)
    # Null while nobody holds it (never taken, or released to rebalance).
    holder: Mapped[str | None] = mapped_column(String(128))
    fencing_token: Mapped[int] = mapped_column(BigInteger, default=0)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class ServiceReplica(Base):
    """A running replica's heartbeat: the live ones share the greenhouses between them."""

    __tablename__ = "service_replica"

    holder: Mapped[str] = mapped_column(String(128), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime)


# -- Dashboard (app.api) -----------------------------------------------------------------------


class TrendCell(Base):
    """Sums of a greenhouse's trend channels over one fixed cell of time (``app.api.trend_rollup``).

    ``sums``/``counts`` follow the channel order moisture per zone, then the scalar readings;
    a count leaves out missing readings, so a mean is sum/count. A page's trends read a few hundred
    of these instead of decoding ten thousand decision documents. ``price_sum``/``price_count`` do the
    same for the all-in price of its hour each decision recorded (a count of 0: none recorded), so the
    dashboard prices lamp energy as the decisions saw it, a day-ahead feed's price included.
    """

    __tablename__ = "trend_cell"

    greenhouse_id: Mapped[str] = mapped_column(ForeignKey("greenhouse.id", ondelete="CASCADE"),
                                               primary_key=True)
    # Five-minute cells counted from 2000-01-01 UTC: a page reads thousands, integers need no parsing.
    cell: Mapped[int] = mapped_column(Integer, primary_key=True)
    decisions: Mapped[int] = mapped_column(Integer)
    sums: Mapped[list[float]] = mapped_column(JSON)
    counts: Mapped[list[int]] = mapped_column(JSON)
    price_sum: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    price_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class TrendProgress(Base):
    """How far the trend cells have taken in the decision table: the highest decision id rolled up."""

    __tablename__ = "trend_progress"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    last_decision_id: Mapped[int] = mapped_column(BigInteger)


# -- policy registry (app.registry) and nightly retraining runs (app.retraining) ---------------

POLICY_STATUSES = ("candidate", "promoted", "retired", "rolled_back", "refused")
RUN_STATUSES = ("running", "promoted", "refused", "failed")


class PolicyVersion(Base):
    """One policy ensemble the service may run; exactly one is ``promoted`` (a partial unique index).

    ``retired`` was promoted and replaced by a newer promotion (a rollback goes back to the newest
    retired one); ``rolled_back`` was promoted and taken back.
    """

    __tablename__ = "policy_version"
    __table_args__ = (
        CheckConstraint(_in("status", POLICY_STATUSES), name="status"),
        Index("uq_policy_version_promoted", "status", unique=True,
              postgresql_where=text("status = 'promoted'"), sqlite_where=text("status = 'promoted'")),
    )

    version: Mapped[str] = mapped_column(String(64), primary_key=True)
    parent: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    directory: Mapped[str] = mapped_column(String(1024))
    data_from: Mapped[datetime | None] = mapped_column(UtcDateTime)
    data_to: Mapped[datetime | None] = mapped_column(UtcDateTime)
    twin_version: Mapped[str | None] = mapped_column(String(64))
    config_hash: Mapped[str | None] = mapped_column(String(64))
    calibration: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    metrics: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    git_commit: Mapped[str | None] = mapped_column(String(64))
    note: Mapped[str] = mapped_column(String(REASON_MAX_LEN), default="")
    """Why: the gate's verdict, who promoted or rolled back."""
    created_at: Mapped[datetime] = mapped_column(UtcDateTime)
    promoted_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    promoted_by: Mapped[str | None] = mapped_column(String(ACTOR_MAX_LEN))


class RetrainRun(Base):
    """One ``greentwin retrain`` run: its window, stages done, outcome and summary (shown by the API)."""

    __tablename__ = "retrain_run"
    __table_args__ = (CheckConstraint(_in("status", RUN_STATUSES), name="status"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    status: Mapped[str] = mapped_column(String(16))
    incumbent: Mapped[str | None] = mapped_column(String(64))
    candidate: Mapped[str | None] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(String(REASON_MAX_LEN), default="")
    summary: Mapped[dict[str, Any]] = mapped_column(JsonType)
