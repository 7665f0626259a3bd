"""The sealed audit trail's tables, on a metadata of their own so any service can host the trail.

Append-only: migration 0002 installs triggers that refuse UPDATE, and DELETE outside a purge.
No foreign key to any service table: the trail must outlive (and not depend on) configuration
rows. Constraint and index names are spelled out (they are the ones migration 0002 creates), so
the tables need no naming convention from the host and autogenerate finds nothing to change.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    CHAR,
    BigInteger,
    CheckConstraint,
    DateTime,
    Index,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

CHAIN_ID_MAX_LEN = 63
"""Width of the chain key (a greenhouse id, or a reserved chain name such as the access log's)."""
STATEMENT_KINDS = ("checkpoint", "anchor")
"""``audit_checkpoint.kind``: a periodic signed checkpoint, or the anchor a purge leaves behind."""


class AuditBase(DeclarativeBase):
    """Declarative base of the audit tables; ``AuditBase.metadata`` is one of Alembic's targets."""

    metadata = MetaData()


class AuditRecord(AuditBase):
    """One ``audit.SealedRecord``; every column but ``ts_at`` feeds the record hash, so none may change."""

    __tablename__ = "audit_record"
    __table_args__ = (
        PrimaryKeyConstraint("greenhouse_id", "seq", name="pk_audit_record"),
        CheckConstraint("seq >= 1", name="ck_audit_record_seq_pos"),
        Index("ix_audit_record_greenhouse_id_ts_at", "greenhouse_id", "ts_at"),
    )

    greenhouse_id: Mapped[str] = mapped_column(String(CHAIN_ID_MAX_LEN))
    seq: Mapped[int] = mapped_column(BigInteger, autoincrement=False)
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


class AuditCheckpoint(AuditBase):
    """A signed checkpoint or purge anchor of one greenhouse's chain; never changed or deleted."""

    __tablename__ = "audit_checkpoint"
    __table_args__ = (
        PrimaryKeyConstraint("greenhouse_id", "kind", "seq", name="pk_audit_checkpoint"),
        CheckConstraint(f"kind IN ({', '.join(repr(k) for k in STATEMENT_KINDS)})",
                        name="ck_audit_checkpoint_kind"),
        CheckConstraint("seq >= 1", name="ck_audit_checkpoint_seq_pos"),
    )

    greenhouse_id: Mapped[str] = mapped_column(String(CHAIN_ID_MAX_LEN))
    kind: Mapped[str] = mapped_column(String(10))
    seq: Mapped[int] = mapped_column(BigInteger, autoincrement=False)
    head_hash: Mapped[str] = mapped_column(CHAR(64))
    ts: Mapped[str] = mapped_column(String(32))
    signature: Mapped[bytes] = mapped_column(LargeBinary(64))


class AuditPurgeToken(AuditBase):
    """SQLite's stand-in for PostgreSQL's ``SET LOCAL``: a row exists only inside a purge transaction.

    SQLite triggers cannot read session state, so the purge inserts a row here, deletes the
    purged records (the trigger checks for the row) and deletes the row before committing.
    Unused on PostgreSQL, where the trigger reads the ``greentwin.audit_purge`` setting.
    """

    __tablename__ = "audit_purge_token"
    __table_args__ = (PrimaryKeyConstraint("greenhouse_id", name="pk_audit_purge_token"),)

    greenhouse_id: Mapped[str] = mapped_column(String(CHAIN_ID_MAX_LEN))
