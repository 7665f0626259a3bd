"""Service tables: greenhouses and zones (configuration), control decisions and mode changes (history),
the sealed audit trail, and the API's users with their roles.

``Decision`` and ``ModeChange`` are append-only records until the sealed audit store takes them
over; the only later write is a decision's ``ack_status`` when the edge box answers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    CHAR,
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.auth.roles import ROLES
from app.core.db import Base

SOIL_TYPES = ("sand", "loam", "clay")
MODES = ("auto", "manual", "estop")
ACK_STATUSES = ("pending", "applied", "rejected", "expired", "timeout")
GH_ID_MAX_LEN = 63
AUDIT_STATEMENT_KINDS = ("checkpoint", "anchor")
# "operator:" + name must fit the 64-character actor columns of decisions and mode changes.
USERNAME_MAX_LEN = 48

# JSON on SQLite, JSONB (indexable, compact) on PostgreSQL.
JsonType = JSON().with_variant(JSONB(), "postgresql")
# SQLite only auto-increments an ``INTEGER PRIMARY KEY``; PostgreSQL gets 64-bit ids.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def _in(column: str, values: tuple[str, ...]) -> str:
    """SQL ``IN`` check text for a closed set of short string values."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Greenhouse(Base):
    """One greenhouse; its id is the slug used in MQTT topics (``greentwin/<id>/...``)."""

    __tablename__ = "greenhouse"
    __table_args__ = (
        CheckConstraint("zones >= 1 AND zones <= 64", name="zones_range"),
    )

    id: Mapped[str] = mapped_column(String(GH_ID_MAX_LEN), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    zones: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

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
    ts: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    actor: Mapped[str] = mapped_column(String(64))
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
    ts: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    actor: Mapped[str] = mapped_column(String(64))
    # Null for the first mode a greenhouse is put in.
    from_mode: Mapped[str | None] = mapped_column(String(8))
    to_mode: Mapped[str] = mapped_column(String(8))
    reason: Mapped[str] = mapped_column(String(500), default="")


# -- sealed audit trail (audit.store) ---------------------------------------------------------
# Append-only: migration 0002 installs triggers that refuse UPDATE, and DELETE outside a purge.
# No foreign key to ``greenhouse``: the trail must outlive (and not depend on) configuration rows.


class AuditRecord(Base):
    """One ``audit.SealedRecord``; every column but ``ts_at`` feeds the record hash, so none may change."""

    __tablename__ = "audit_record"
    __table_args__ = (
        CheckConstraint("seq >= 1", name="seq_pos"),
        Index(None, "greenhouse_id", "ts_at"),
    )

    greenhouse_id: Mapped[str] = mapped_column(String(GH_ID_MAX_LEN), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    # The exact text that was hashed and bound into the AAD; ``ts_at`` is the same instant for queries.
    ts: Mapped[str] = mapped_column(String(32))
    ts_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    kind: Mapped[str] = mapped_column(String(64))
    actor: Mapped[str] = mapped_column(String(200))
    key_id: Mapped[str] = mapped_column(String(8))
    nonce: Mapped[bytes] = mapped_column(LargeBinary(12))
    ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    prev_hash: Mapped[str] = mapped_column(CHAR(64))
    record_hash: Mapped[str] = mapped_column(CHAR(64))


class AuditCheckpoint(Base):
    """A signed checkpoint or purge anchor of one greenhouse's chain; never changed or deleted."""

    __tablename__ = "audit_checkpoint"
    __table_args__ = (
        CheckConstraint(_in("kind", AUDIT_STATEMENT_KINDS), name="kind"),
        CheckConstraint("seq >= 1", name="seq_pos"),
    )

    greenhouse_id: Mapped[str] = mapped_column(String(GH_ID_MAX_LEN), primary_key=True)
    kind: Mapped[str] = mapped_column(String(10), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    head_hash: Mapped[str] = mapped_column(CHAR(64))
    ts: Mapped[str] = mapped_column(String(32))
    signature: Mapped[bytes] = mapped_column(LargeBinary(64))


class AuditPurgeToken(Base):
    """SQLite's stand-in for PostgreSQL's ``SET LOCAL``: a row exists only inside a purge transaction.

    SQLite triggers cannot read session state, so the purge inserts a row here, deletes the
    purged records (the trigger checks for the row) and deletes the row before committing.
    Unused on PostgreSQL, where the trigger reads the ``greentwin.audit_purge`` setting.
    """

    __tablename__ = "audit_purge_token"

    greenhouse_id: Mapped[str] = mapped_column(String(GH_ID_MAX_LEN), primary_key=True)


# -- API users (app.auth) ----------------------------------------------------------------------
# ``app_user``: ``user`` is a reserved word in PostgreSQL.


class User(Base):
    """Someone who logs in to the API; never deleted, only disabled, so audit actors stay resolvable."""

    __tablename__ = "app_user"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    username: Mapped[str] = mapped_column(String(USERNAME_MAX_LEN), unique=True)
    # Argon2id PHC string: algorithm, parameters and salt travel with the hash.
    password_hash: Mapped[str] = mapped_column(String(255))
    # Tokens carry the epoch they were issued in; logging out bumps it, revoking every token issued before.
    token_epoch: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    last_login_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Null while the account may log in.
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

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
