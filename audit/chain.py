"""The per-greenhouse hash chain, in one import: sealing records, signed statements, verification.

The code lives in four small modules, each with one job; this one only gathers them so that
``from audit.chain import ...`` keeps working:

* :mod:`audit.canonical`: canonical JSON, the timestamp format, field checks;
* :mod:`audit.sealing`: :class:`AuditEntry`, :class:`SealedRecord`, the record hash, the
  writer :class:`AuditChain`;
* :mod:`audit.statements`: Ed25519 :class:`SignedCheckpoint` and purge :class:`Anchor`;
* :mod:`audit.verify`: :func:`verify_chain` and :func:`iter_verified`.

Everything here works on plain objects and iterables; storing them is :mod:`audit.store`'s job.
"""

from __future__ import annotations

from audit.canonical import GENESIS_HASH, canonical_json, iso_utc, iso_utc_now, parse_iso_utc
from audit.sealing import (
    AuditChain,
    AuditEntry,
    AuditEvent,
    SealedRecord,
    compute_record_hash,
    open_record,
    record_aad,
    seal_entry,
)
from audit.statements import (
    Anchor,
    SignedCheckpoint,
    sign_anchor,
    sign_checkpoint,
    verify_anchor,
    verify_checkpoint,
)
from audit.verify import VerifyResult, iter_verified, verify_chain

__all__ = [
    "GENESIS_HASH",
    "Anchor",
    "AuditChain",
    "AuditEntry",
    "AuditEvent",
    "SealedRecord",
    "SignedCheckpoint",
    "VerifyResult",
    "canonical_json",
    "compute_record_hash",
    "iso_utc",
    "iso_utc_now",
    "iter_verified",
    "open_record",
    "parse_iso_utc",
    "record_aad",
    "seal_entry",
    "sign_anchor",
    "sign_checkpoint",
    "verify_anchor",
    "verify_checkpoint",
    "verify_chain",
]
