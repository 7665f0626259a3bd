"""Encrypted, tamper-evident audit trail (storage-independent core).

:mod:`audit.crypto` owns keys and primitives (AES-256-GCM, Ed25519); :mod:`audit.canonical`
the canonical encodings; :mod:`audit.sealing` records and the chain writer;
:mod:`audit.statements` signed checkpoints and anchors; :mod:`audit.verify` verification
(:mod:`audit.chain` gathers those four); :mod:`audit.errors` the exceptions. Storage is
optional and separate: :mod:`audit.tables` (the tables, on their own SQLAlchemy metadata) and
:mod:`audit.store` (append, verify, purge over any SQLAlchemy engine); nothing here knows the
service that hosts the trail.
"""

from __future__ import annotations

from audit.chain import (
    GENESIS_HASH,
    Anchor,
    AuditChain,
    AuditEntry,
    AuditEvent,
    SealedRecord,
    SignedCheckpoint,
    VerifyResult,
    canonical_json,
    compute_record_hash,
    iso_utc,
    iso_utc_now,
    iter_verified,
    open_record,
    parse_iso_utc,
    seal_entry,
    sign_anchor,
    sign_checkpoint,
    verify_anchor,
    verify_chain,
    verify_checkpoint,
)
from audit.crypto import (
    DEFAULT_KEYS_ENV,
    Keyring,
    SealedBox,
    Signer,
    key_id_for,
    load_public_key,
    open_box,
    seal,
    verify_signature,
)
from audit.errors import AuditChainMoved, AuditError, AuditKeyError, AuditTamperError

__all__ = [
    "DEFAULT_KEYS_ENV",
    "GENESIS_HASH",
    "Anchor",
    "AuditChain",
    "AuditEntry",
    "AuditChainMoved",
    "AuditError",
    "AuditEvent",
    "AuditKeyError",
    "AuditTamperError",
    "Keyring",
    "SealedBox",
    "SealedRecord",
    "SignedCheckpoint",
    "Signer",
    "VerifyResult",
    "canonical_json",
    "compute_record_hash",
    "iso_utc",
    "iso_utc_now",
    "iter_verified",
    "open_record",
    "key_id_for",
    "load_public_key",
    "open_box",
    "parse_iso_utc",
    "seal",
    "seal_entry",
    "sign_anchor",
    "sign_checkpoint",
    "verify_anchor",
    "verify_chain",
    "verify_checkpoint",
    "verify_signature",
]
