"""Exceptions of the audit trail.

::

    AuditError                  base: catch this to handle every audit failure
    ├── AuditTamperError        authentication or chain check failed (names the record)
    ├── AuditKeyError           key material missing, malformed or unknown
    └── AuditChainMoved         a conditional append found the chain past the head it was decided on

Messages never contain key bytes, so they are safe to log.
"""

from __future__ import annotations


class AuditError(Exception):
    """Base class, so callers can handle every audit failure in one place."""


class AuditTamperError(AuditError):
    """Authenticated data failed its check: the trail can no longer be trusted from ``seq`` on.

    ``greenhouse_id`` and ``seq`` name the first bad record; they are ``None`` when
    the failure was found outside a chain (a bare :func:`audit.crypto.open_box`).
    """

    def __init__(self, reason: str, *, greenhouse_id: str | None = None, seq: int | None = None) -> None:
        self.reason = reason
        self.greenhouse_id = greenhouse_id
        self.seq = seq
        super().__init__(self._message())

    def _message(self) -> str:
        if self.greenhouse_id is None and self.seq is None:
            return f"audit data failed verification: {self.reason}"
        return (f"audit record greenhouse={self.greenhouse_id!r} seq={self.seq} "
                f"failed verification: {self.reason}")

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only arguments need a custom reduce to survive pickling (multiprocessing, logging queues).
        return (_rebuild_tamper_error, (self.reason, self.greenhouse_id, self.seq))


def _rebuild_tamper_error(reason: str, greenhouse_id: str | None, seq: int | None) -> AuditTamperError:
    """Pickle helper for :class:`AuditTamperError`."""
    return AuditTamperError(reason, greenhouse_id=greenhouse_id, seq=seq)


class AuditKeyError(AuditError):
    """Key material is missing, malformed or unknown; the message names key ids, never key bytes."""


class AuditChainMoved(AuditError):
    """A conditional append (``after_seq``) found the stored chain past the head its record was decided
    on: another writer appended meanwhile. The caller reads the chain again and decides again."""

    def __init__(self, greenhouse_id: str, expected_seq: int, stored_seq: int) -> None:
        self.greenhouse_id = greenhouse_id
        self.expected_seq = expected_seq
        self.stored_seq = stored_seq
        super().__init__(f"audit chain {greenhouse_id!r} moved from seq {expected_seq} to {stored_seq} "
                         "before the record decided on it was sealed")

    def __reduce__(self) -> tuple[object, ...]:
        return (AuditChainMoved, (self.greenhouse_id, self.expected_seq, self.stored_seq))
