"""Signed statements about a chain: checkpoints that pin its head, anchors that license a purge.

A hash chain alone can be rebuilt by anyone who rewrites a suffix of it; a
:class:`SignedCheckpoint` (Ed25519) pins ``(seq, head_hash)`` so that such a rewrite, or a
truncated tail, is detected even without the AES keys. An :class:`Anchor` is a signed
statement that records up to ``seq`` were purged on purpose; verification of what remains
starts from it instead of from genesis.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar, TypeVar

from audit.canonical import bytes_field, canonical_json, coerce_ts, require_hash, require_seq, require_text
from audit.crypto import Signer, verify_signature
from audit.errors import AuditTamperError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

CHECKPOINT_TYPE = "greentwin.audit.checkpoint.v1"
ANCHOR_TYPE = "greentwin.audit.anchor.v1"


def _statement(kind: str, greenhouse_id: str, seq: int, head_hash: str, ts: str) -> bytes:
    # The type tag keeps a checkpoint from being replayed as an anchor (which would license a purge).
    return canonical_json(
        {"type": kind, "greenhouse_id": greenhouse_id, "seq": seq, "head_hash": head_hash, "ts": ts}
    )


@dataclass(frozen=True, slots=True)
class _Statement:
    """A signed claim about one chain head; the subclass's ``TYPE`` tag is part of what is signed."""

    TYPE: ClassVar[str]
    greenhouse_id: str
    seq: int
    head_hash: str
    ts: str
    signature: bytes

    def __post_init__(self) -> None:
        bytes_field(self, "signature")

    def message(self) -> bytes:
        """The bytes the signature covers."""
        return _statement(self.TYPE, self.greenhouse_id, self.seq, self.head_hash, self.ts)


@dataclass(frozen=True, slots=True)
class SignedCheckpoint(_Statement):
    """A signed claim "the chain of ``greenhouse_id`` had ``head_hash`` at ``seq``"; pins history."""

    TYPE: ClassVar[str] = CHECKPOINT_TYPE


@dataclass(frozen=True, slots=True)
class Anchor(_Statement):
    """A signed claim "records 1..``seq`` were purged; record ``seq`` had ``head_hash``"."""

    TYPE: ClassVar[str] = ANCHOR_TYPE


S = TypeVar("S", bound=_Statement)


def _sign(cls: type[S], signer: Signer, greenhouse_id: str, seq: int, head_hash: str,
          ts: str | datetime | None) -> S:
    require_text("greenhouse_id", greenhouse_id)
    require_seq(seq, 1)
    require_hash("head_hash", head_hash)
    ts = coerce_ts(ts)
    return cls(greenhouse_id, seq, head_hash, ts,
               signer.sign(_statement(cls.TYPE, greenhouse_id, seq, head_hash, ts)))


def _verify(public_key: Ed25519PublicKey, st: _Statement, what: str) -> None:
    if not verify_signature(public_key, st.signature, st.message()):
        raise AuditTamperError(f"{what} signature invalid", greenhouse_id=st.greenhouse_id, seq=st.seq)


def sign_checkpoint(
    signer: Signer, greenhouse_id: str, seq: int, head_hash: str, ts: str | datetime | None = None
) -> SignedCheckpoint:
    """Sign the chain head ``(seq, head_hash)``; ``ts`` (signing time) defaults to now."""
    return _sign(SignedCheckpoint, signer, greenhouse_id, seq, head_hash, ts)


def verify_checkpoint(public_key: Ed25519PublicKey, cp: SignedCheckpoint) -> None:
    """Raise :class:`AuditTamperError` unless ``cp`` carries a valid signature."""
    _verify(public_key, cp, "checkpoint")


def sign_anchor(
    signer: Signer, greenhouse_id: str, seq: int, head_hash: str, ts: str | datetime | None = None
) -> Anchor:
    """Authorise a purge of records ``1..seq``; ``head_hash`` is the ``record_hash`` of record ``seq``."""
    return _sign(Anchor, signer, greenhouse_id, seq, head_hash, ts)


def verify_anchor(public_key: Ed25519PublicKey, anchor: Anchor) -> None:
    """Raise :class:`AuditTamperError` unless ``anchor`` carries a valid signature."""
    _verify(public_key, anchor, "anchor")
