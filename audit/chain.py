"""The per-greenhouse hash chain: sealing records, signed checkpoints and anchors, verification.

Each :class:`AuditEntry` is sealed with AES-256-GCM into a :class:`SealedRecord` and
linked to its predecessor by hash. Two layers of evidence result:

* ``record_hash`` covers the *ciphertext* and the cleartext envelope, so anyone can
  check the chain's links without keys (e.g. an off-site auditor);
* decryption with the keyring proves the content and that the envelope matches it.

A hash chain alone can be rebuilt by anyone who rewrites a suffix of it; signed
:class:`SignedCheckpoint` objects (Ed25519) pin ``(seq, head_hash)`` so that such a
rewrite, or a truncated tail, is detected even without the AES keys. An
:class:`Anchor` is a signed statement that records up to ``seq`` were purged on
purpose; verification of what remains starts from it instead of from genesis.

Everything here works on plain objects and iterables; storing them is the caller's job.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any

from audit.crypto import Keyring, SealedBox, Signer, open_box, seal, verify_signature
from audit.errors import AuditKeyError, AuditTamperError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

GENESIS_HASH = "0" * 64
"""``prev_hash`` of the first record of every greenhouse."""

_CHECKPOINT_TYPE = "greentwin.audit.checkpoint.v1"
_ANCHOR_TYPE = "greentwin.audit.anchor.v1"
_ENTRY_KEYS = frozenset({"greenhouse_id", "seq", "ts", "kind", "actor", "payload"})
_HEX64 = re.compile(r"[0-9a-f]{64}")
_TS_FORMAT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00", re.ASCII)
# The string encoder JSONEncoder(ensure_ascii=False) itself uses, for the hand-written fast paths.
_encode_str = encode_basestring
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# -- canonical forms ----------------------------------------------------------------


def canonical_json(obj: Any) -> bytes:
    """Deterministic UTF-8 JSON (sorted keys, no whitespace), so hashes and AAD are reproducible.

    Raises ``ValueError`` for NaN/Infinity (and lone surrogates), ``TypeError`` for
    values JSON cannot hold. Use string keys only: like :mod:`json`, other keys are
    turned into strings.
    """
    return _ENCODER.encode(obj).encode("utf-8")


def iso_utc(dt: datetime) -> str:
    """Format an aware datetime as ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00``: one spelling per instant."""
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError("naive datetime: audit timestamps need a time zone")
    return dt.astimezone(UTC).isoformat(timespec="microseconds")


def iso_utc_now() -> str:
    """The current time in the audit timestamp format."""
    return iso_utc(datetime.now(UTC))


def parse_iso_utc(ts: str) -> datetime:
    """Parse an audit timestamp, refusing any other spelling of the same instant."""
    if not isinstance(ts, str) or _TS_FORMAT.fullmatch(ts) is None:
        raise ValueError(f"timestamp {ts!r} is not YYYY-MM-DDTHH:MM:SS.ffffff+00:00")
    return datetime.fromisoformat(ts)


def _coerce_ts(ts: str | datetime | None) -> str:
    if ts is None:
        return iso_utc_now()
    if isinstance(ts, datetime):
        return iso_utc(ts)
    parse_iso_utc(ts)
    return ts


def _require_text(name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")


def _require_hash(name: str, value: object) -> None:
    if not isinstance(value, str) or _HEX64.fullmatch(value) is None:
        raise ValueError(f"{name} must be 64 lowercase hex characters")


def _require_seq(value: object, minimum: int) -> None:
    if type(value) is not int or value < minimum:
        raise ValueError(f"seq must be an int >= {minimum}")


def _as_bytes(obj: object, name: str) -> None:
    # DB drivers hand bytea back as memoryview (psycopg2) or bytearray; hashing and equality want bytes.
    value = getattr(obj, name)
    if isinstance(value, bytearray | memoryview):
        object.__setattr__(obj, name, bytes(value))


# -- records --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """The cleartext of one audit record: what happened, when, and who did it."""

    greenhouse_id: str
    seq: int
    ts: str
    kind: str
    actor: str
    payload: dict[str, Any] = field(hash=False)

    def __post_init__(self) -> None:
        _require_text("greenhouse_id", self.greenhouse_id)
        _require_seq(self.seq, 1)
        parse_iso_utc(self.ts)
        _require_text("kind", self.kind)
        _require_text("actor", self.actor)
        if not isinstance(self.payload, dict):
            raise ValueError("payload must be a dict")

    def to_json_dict(self) -> dict[str, Any]:
        """The object whose canonical JSON is sealed."""
        return {
            "greenhouse_id": self.greenhouse_id,
            "seq": self.seq,
            "ts": self.ts,
            "kind": self.kind,
            "actor": self.actor,
            "payload": self.payload,
        }


@dataclass(frozen=True, slots=True)
class SealedRecord:
    """One stored audit record: cleartext envelope, AES-GCM box and chain links.

    Every field is needed for verification; store all ten.
    """

    greenhouse_id: str
    seq: int
    ts: str
    kind: str
    actor: str
    key_id: str
    nonce: bytes
    ciphertext: bytes
    prev_hash: str
    record_hash: str

    def __post_init__(self) -> None:
        _as_bytes(self, "nonce")
        _as_bytes(self, "ciphertext")


def _aad(greenhouse_id: str, seq: int, ts: str, prev_hash: str) -> bytes:
    """Bind a ciphertext to its place in the chain, so it cannot be moved to another slot."""
    return canonical_json({"greenhouse_id": greenhouse_id, "seq": seq, "ts": ts, "prev_hash": prev_hash})


def compute_record_hash(record: SealedRecord) -> str:
    """SHA-256 hex of the canonical JSON of every field of ``record`` except ``record_hash``.

    The hashed object is ``{greenhouse_id, seq, ts, kind, actor, key_id, nonce,
    ciphertext, prev_hash}`` with ``nonce`` and ``ciphertext`` in standard base64.
    """
    r = record
    if type(r.seq) is not int or not all(
        type(v) is str for v in (r.greenhouse_id, r.ts, r.kind, r.actor, r.key_id, r.prev_hash)
    ):
        return hashlib.sha256(canonical_json(_hashed_fields(r))).hexdigest()
    # Fast path, byte-identical to canonical_json(_hashed_fields(r)) (keys written in sorted
    # order): it skips re-scanning the ~2.7 KB base64 text for characters to escape, as base64
    # has none. This is about a third of the cost of sealing and of key-less verification.
    enc = _encode_str
    data = b"".join(
        (
            f'{{"actor":{enc(r.actor)},"ciphertext":"'.encode(),
            binascii.b2a_base64(r.ciphertext, newline=False),
            f'","greenhouse_id":{enc(r.greenhouse_id)},"key_id":{enc(r.key_id)},"kind":{enc(r.kind)},"nonce":"'.encode(),
            binascii.b2a_base64(r.nonce, newline=False),
            f'","prev_hash":{enc(r.prev_hash)},"seq":{r.seq},"ts":{enc(r.ts)}}}'.encode(),
        )
    )
    return hashlib.sha256(data).hexdigest()


def _hashed_fields(record: SealedRecord) -> dict[str, Any]:
    """The object whose canonical JSON ``record_hash`` is the SHA-256 of (reference form)."""
    return {
        "greenhouse_id": record.greenhouse_id,
        "seq": record.seq,
        "ts": record.ts,
        "kind": record.kind,
        "actor": record.actor,
        "key_id": record.key_id,
        "nonce": base64.b64encode(record.nonce).decode("ascii"),
        "ciphertext": base64.b64encode(record.ciphertext).decode("ascii"),
        "prev_hash": record.prev_hash,
    }


def seal_entry(keyring: Keyring, entry: AuditEntry, prev_hash: str) -> SealedRecord:
    """Seal ``entry`` as the successor of the record whose hash is ``prev_hash``."""
    _require_hash("prev_hash", prev_hash)
    aad = _aad(entry.greenhouse_id, entry.seq, entry.ts, prev_hash)
    box = seal(keyring, canonical_json(entry.to_json_dict()), aad)
    record = SealedRecord(
        greenhouse_id=entry.greenhouse_id,
        seq=entry.seq,
        ts=entry.ts,
        kind=entry.kind,
        actor=entry.actor,
        key_id=box.key_id,
        nonce=box.nonce,
        ciphertext=box.ciphertext,
        prev_hash=prev_hash,
        record_hash="",
    )
    # The hash covers every other field, so it is filled in last on the otherwise finished record.
    object.__setattr__(record, "record_hash", compute_record_hash(record))
    return record


# -- writer ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """Something to record, before the chain gives it a seq; input of :meth:`AuditChain.append_many`."""

    kind: str
    actor: str
    payload: Mapping[str, Any]
    ts: str | datetime | None = None


class AuditChain:
    """Writer state of one greenhouse's chain: the seq and hash of its newest record.

    Thread-safe within a process (appends are serialised). The head moves as soon as
    a record is sealed: if storing it then fails, discard this object and build a new
    one with :meth:`resume` from the newest *stored* record, or the chain forks.
    """

    def __init__(
        self, greenhouse_id: str, keyring: Keyring, head_seq: int = 0, head_hash: str = GENESIS_HASH
    ) -> None:
        _require_text("greenhouse_id", greenhouse_id)
        _require_seq(head_seq, 0)
        _require_hash("head_hash", head_hash)
        if head_seq == 0 and head_hash != GENESIS_HASH:
            raise ValueError("an empty chain must start at GENESIS_HASH")
        self._greenhouse_id = greenhouse_id
        self._keyring = keyring
        self._head_seq = head_seq
        self._head_hash = head_hash
        self._lock = threading.Lock()

    @classmethod
    def resume(cls, greenhouse_id: str, keyring: Keyring, last: SealedRecord | Anchor | None) -> AuditChain:
        """Continue after the newest stored record (or the anchor, if everything was purged; None: genesis)."""
        if last is None:
            return cls(greenhouse_id, keyring)
        if last.greenhouse_id != greenhouse_id:
            raise ValueError("last record belongs to another greenhouse")
        head_hash = last.head_hash if isinstance(last, Anchor) else last.record_hash
        return cls(greenhouse_id, keyring, last.seq, head_hash)

    def __repr__(self) -> str:
        return f"AuditChain({self._greenhouse_id!r}, head_seq={self._head_seq}, head_hash={self._head_hash[:12]}...)"

    @property
    def greenhouse_id(self) -> str:
        return self._greenhouse_id

    @property
    def head_seq(self) -> int:
        """Seq of the newest record (0 before the first)."""
        return self._head_seq

    @property
    def head_hash(self) -> str:
        """``record_hash`` of the newest record (GENESIS_HASH before the first)."""
        return self._head_hash

    @property
    def keyring(self) -> Keyring:
        return self._keyring

    @keyring.setter
    def keyring(self, keyring: Keyring) -> None:
        """Switch keys (after :meth:`Keyring.rotate`); later records use its current key."""
        with self._lock:
            self._keyring = keyring

    def _seal(
        self,
        seq: int,
        prev_hash: str,
        kind: str,
        actor: str,
        payload: Mapping[str, Any],
        ts: str | datetime | None,
    ) -> SealedRecord:
        if not isinstance(payload, Mapping):
            raise TypeError("payload must be a mapping")
        entry = AuditEntry(self._greenhouse_id, seq, _coerce_ts(ts), kind, actor, dict(payload))
        return seal_entry(self._keyring, entry, prev_hash)

    def append(
        self, kind: str, actor: str, payload: Mapping[str, Any], *, ts: str | datetime | None = None
    ) -> SealedRecord:
        """Seal one entry as the next record; ``ts`` defaults to now."""
        with self._lock:
            record = self._seal(self._head_seq + 1, self._head_hash, kind, actor, payload, ts)
            self._head_seq, self._head_hash = record.seq, record.record_hash
        return record

    def append_many(self, events: Iterable[AuditEvent]) -> list[SealedRecord]:
        """Seal a batch in order; all or nothing (a bad event leaves the head unmoved)."""
        with self._lock:
            seq, head = self._head_seq, self._head_hash
            records: list[SealedRecord] = []
            for ev in events:
                record = self._seal(seq + 1, head, ev.kind, ev.actor, ev.payload, ev.ts)
                records.append(record)
                seq, head = record.seq, record.record_hash
            self._head_seq, self._head_hash = seq, head
        return records


# -- checkpoints and anchors ----------------------------------------------------------


def _statement(kind: str, greenhouse_id: str, seq: int, head_hash: str, ts: str) -> bytes:
    # The type tag keeps a checkpoint from being replayed as an anchor (which would license a purge).
    return canonical_json(
        {"type": kind, "greenhouse_id": greenhouse_id, "seq": seq, "head_hash": head_hash, "ts": ts}
    )


@dataclass(frozen=True, slots=True)
class SignedCheckpoint:
    """A signed claim "the chain of ``greenhouse_id`` had ``head_hash`` at ``seq``"; pins history."""

    greenhouse_id: str
    seq: int
    head_hash: str
    ts: str
    signature: bytes

    def __post_init__(self) -> None:
        _as_bytes(self, "signature")

    def message(self) -> bytes:
        """The bytes the signature covers."""
        return _statement(_CHECKPOINT_TYPE, self.greenhouse_id, self.seq, self.head_hash, self.ts)


@dataclass(frozen=True, slots=True)
class Anchor:
    """A signed claim "records 1..``seq`` were purged; record ``seq`` had ``head_hash``"."""

    greenhouse_id: str
    seq: int
    head_hash: str
    ts: str
    signature: bytes

    def __post_init__(self) -> None:
        _as_bytes(self, "signature")

    def message(self) -> bytes:
        """The bytes the signature covers."""
        return _statement(_ANCHOR_TYPE, self.greenhouse_id, self.seq, self.head_hash, self.ts)


def _check_statement_fields(greenhouse_id: str, seq: int, head_hash: str) -> None:
    _require_text("greenhouse_id", greenhouse_id)
    _require_seq(seq, 1)
    _require_hash("head_hash", head_hash)


def sign_checkpoint(
    signer: Signer, greenhouse_id: str, seq: int, head_hash: str, ts: str | datetime | None = None
) -> SignedCheckpoint:
    """Sign the chain head ``(seq, head_hash)``; ``ts`` (signing time) defaults to now."""
    _check_statement_fields(greenhouse_id, seq, head_hash)
    ts = _coerce_ts(ts)
    sig = signer.sign(_statement(_CHECKPOINT_TYPE, greenhouse_id, seq, head_hash, ts))
    return SignedCheckpoint(greenhouse_id, seq, head_hash, ts, sig)


def verify_checkpoint(public_key: Ed25519PublicKey, cp: SignedCheckpoint) -> None:
    """Raise :class:`AuditTamperError` unless ``cp`` carries a valid signature."""
    if not verify_signature(public_key, cp.signature, cp.message()):
        raise AuditTamperError("checkpoint signature invalid", greenhouse_id=cp.greenhouse_id, seq=cp.seq)


def sign_anchor(
    signer: Signer, greenhouse_id: str, seq: int, head_hash: str, ts: str | datetime | None = None
) -> Anchor:
    """Authorise a purge of records ``1..seq``; ``head_hash`` is the ``record_hash`` of record ``seq``."""
    _check_statement_fields(greenhouse_id, seq, head_hash)
    ts = _coerce_ts(ts)
    sig = signer.sign(_statement(_ANCHOR_TYPE, greenhouse_id, seq, head_hash, ts))
    return Anchor(greenhouse_id, seq, head_hash, ts, sig)


def verify_anchor(public_key: Ed25519PublicKey, anchor: Anchor) -> None:
    """Raise :class:`AuditTamperError` unless ``anchor`` carries a valid signature."""
    if not verify_signature(public_key, anchor.signature, anchor.message()):
        raise AuditTamperError("anchor signature invalid", greenhouse_id=anchor.greenhouse_id, seq=anchor.seq)


# -- verification ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """Outcome of :func:`verify_chain`.

    ``records_checked`` counts records that passed every check; ``first_bad_seq`` is
    the seq where the evidence first fails (for a missing record: the missing seq).
    ``head_seq``/``head_hash`` describe the last record that passed (or the start point).
    """

    ok: bool
    records_checked: int
    first_bad_seq: int | None = None
    reason: str | None = None
    head_seq: int = 0
    head_hash: str = GENESIS_HASH


def _envelope_matches(plaintext: bytes, record: SealedRecord) -> bool:
    """Cheap sufficient check that an authenticated plaintext carries ``record``'s envelope.

    The writer seals canonical JSON with sorted keys, so the plaintext must read
    ``{"actor":..,"greenhouse_id":..,"kind":..,"payload":{..},"seq":..,"ts":..}``.
    Comparing the fixed head and tail with the envelope skips parsing the payload,
    which dominates verification; a False answer only means "parse and compare".
    """
    enc = _encode_str
    head = f'{{"actor":{enc(record.actor)},"greenhouse_id":{enc(record.greenhouse_id)},"kind":{enc(record.kind)},"payload":{{'
    tail = f'}},"seq":{record.seq},"ts":{enc(record.ts)}}}'
    return plaintext.startswith(head.encode()) and plaintext.endswith(tail.encode())


class _Broken(Exception):
    """Internal: the walk found its first bad record."""

    def __init__(self, seq: int, reason: str, *, missing_key: bool = False) -> None:
        super().__init__(reason)
        self.seq = seq
        self.reason = reason
        self.missing_key = missing_key


class _Walker:
    """One pass over a chain; shared by :func:`verify_chain` and :func:`iter_verified`."""

    def __init__(
        self,
        keyring: Keyring | None,
        checkpoints: Iterable[SignedCheckpoint],
        anchor: Anchor | None,
        public_key: Ed25519PublicKey | None,
        *,
        want_entries: bool,
    ) -> None:
        self._want_entries = want_entries
        self._checkpoints = sorted(checkpoints, key=lambda cp: cp.seq)
        if (self._checkpoints or anchor is not None) and public_key is None:
            raise ValueError("checkpoints and anchors can only be verified with public_key")
        self._keyring = keyring
        self._public_key = public_key
        self._anchor = anchor
        self._next_cp = 0
        self.greenhouse_id: str | None = None
        self.seq = 0
        self.head = GENESIS_HASH
        self.checked = 0

    def start(self) -> None:
        anchor = self._anchor
        if anchor is None:
            return
        if not verify_signature(self._pk, anchor.signature, anchor.message()):
            raise _Broken(anchor.seq, "anchor signature invalid")
        self.greenhouse_id, self.seq, self.head = anchor.greenhouse_id, anchor.seq, anchor.head_hash
        # Checkpoints below the anchor describe purged records; one *at* the anchor must agree with it.
        while self._next_cp < len(self._checkpoints) and self._checkpoints[self._next_cp].seq < anchor.seq:
            self._next_cp += 1
        self._apply_checkpoints(anchor.seq, anchor.head_hash)

    @property
    def _pk(self) -> Ed25519PublicKey:
        assert self._public_key is not None  # guaranteed by __init__
        return self._public_key

    def _apply_checkpoints(self, seq: int, head_hash: str) -> None:
        cps = self._checkpoints
        while self._next_cp < len(cps) and cps[self._next_cp].seq == seq:
            cp = cps[self._next_cp]
            self._next_cp += 1
            if not verify_signature(self._pk, cp.signature, cp.message()):
                raise _Broken(seq, "checkpoint signature invalid")
            if cp.greenhouse_id != self.greenhouse_id:
                raise _Broken(seq, f"checkpoint is for greenhouse {cp.greenhouse_id!r}")
            if cp.head_hash != head_hash:
                raise _Broken(seq, "record_hash differs from the signed checkpoint's head hash")

    def step(self, record: SealedRecord) -> AuditEntry | None:
        """Check ``record`` as the successor of the last good one; return its entry when decrypted."""
        seq = self.seq + 1
        try:
            entry = self._check(record, seq)
        except (TypeError, ValueError, AttributeError) as exc:
            raise _Broken(seq, f"malformed record ({type(exc).__name__})") from None
        self._apply_checkpoints(seq, record.record_hash)
        self.seq, self.head = seq, record.record_hash
        self.checked += 1
        return entry

    def _check(self, record: SealedRecord, seq: int) -> AuditEntry | None:
        if self.greenhouse_id is None:
            self.greenhouse_id = record.greenhouse_id
        elif record.greenhouse_id != self.greenhouse_id:
            raise _Broken(seq, f"record belongs to greenhouse {record.greenhouse_id!r}")
        if record.seq != seq:
            if record.seq > seq:
                raise _Broken(seq, f"record {seq} missing (next record found has seq {record.seq})")
            raise _Broken(seq, f"expected seq {seq}, found seq {record.seq} (reordered or duplicated)")
        if record.prev_hash != self.head:
            raise _Broken(seq, "prev_hash does not link to the previous record")
        if compute_record_hash(record) != record.record_hash:
            raise _Broken(seq, "record_hash does not match the record")
        if self._keyring is None:
            return None
        return self._decrypt(record, seq, self._keyring)

    def _decrypt(self, record: SealedRecord, seq: int, keyring: Keyring) -> AuditEntry | None:
        box = SealedBox(record.key_id, record.nonce, record.ciphertext)
        aad = _aad(record.greenhouse_id, seq, record.ts, record.prev_hash)
        try:
            plaintext = open_box(keyring, box, aad)
        except AuditKeyError:
            raise _Broken(seq, f"unknown key id {record.key_id!r}", missing_key=True) from None
        except AuditTamperError as exc:
            raise _Broken(seq, f"decryption failed: {exc.reason}") from None
        if not self._want_entries and _envelope_matches(plaintext, record):
            return None
        doc = json.loads(plaintext)
        if not isinstance(doc, dict) or doc.keys() != _ENTRY_KEYS:
            raise _Broken(seq, "decrypted content is not an audit entry")
        for name in ("greenhouse_id", "seq", "ts", "kind", "actor"):
            if doc[name] != getattr(record, name):
                raise _Broken(seq, f"envelope {name} differs from the encrypted entry")
        return AuditEntry(**doc)

    def finish(self) -> None:
        """After the last record: a signed checkpoint beyond it means the tail was cut off."""
        for cp in self._checkpoints[self._next_cp :]:
            if not verify_signature(self._pk, cp.signature, cp.message()):
                raise _Broken(cp.seq, "checkpoint signature invalid")
            if self.greenhouse_id is not None and cp.greenhouse_id != self.greenhouse_id:
                raise _Broken(cp.seq, f"checkpoint is for greenhouse {cp.greenhouse_id!r}")
            raise _Broken(
                self.seq + 1, f"chain truncated: signed checkpoint at seq {cp.seq}, records end at {self.seq}"
            )


def verify_chain(
    records: Iterable[SealedRecord],
    keyring: Keyring | None,
    *,
    checkpoints: Iterable[SignedCheckpoint] = (),
    anchor: Anchor | None = None,
    public_key: Ed25519PublicKey | None = None,
) -> VerifyResult:
    """Check one greenhouse's records, in seq order, in a single streaming pass.

    Without a keyring only links, hashes and signatures are checked (tampering by
    someone who rehashes the chain is then caught only by checkpoints). Tampering is
    reported in the result, never raised; ``ValueError`` means the call itself is
    wrong (checkpoints or anchor without ``public_key``).
    """
    walker = _Walker(keyring, checkpoints, anchor, public_key, want_entries=False)
    try:
        walker.start()
        for record in records:
            walker.step(record)
        walker.finish()
    except _Broken as bad:
        return VerifyResult(False, walker.checked, bad.seq, bad.reason, walker.seq, walker.head)
    return VerifyResult(True, walker.checked, None, None, walker.seq, walker.head)


def iter_verified(
    records: Iterable[SealedRecord],
    keyring: Keyring,
    *,
    checkpoints: Iterable[SignedCheckpoint] = (),
    anchor: Anchor | None = None,
    public_key: Ed25519PublicKey | None = None,
) -> Iterator[AuditEntry]:
    """Yield decrypted entries as they pass the checks of :func:`verify_chain`.

    Raises :class:`AuditTamperError` at the first bad record (or
    :class:`AuditKeyError` when its key id is not in ``keyring``). Entries already
    yielded were genuine, but a later failure (e.g. truncation found at the end) still
    means the export as a whole is not trustworthy: commit nothing until exhausted.
    """
    if keyring is None:
        raise ValueError("iter_verified needs a keyring to decrypt")
    walker = _Walker(keyring, checkpoints, anchor, public_key, want_entries=True)
    return _iter_walk(walker, records)


def _iter_walk(walker: _Walker, records: Iterable[SealedRecord]) -> Iterator[AuditEntry]:
    try:
        walker.start()
        for record in records:
            entry = walker.step(record)
            assert entry is not None  # a keyring is present, so every record is decrypted
            yield entry
        walker.finish()
    except _Broken as bad:
        if bad.missing_key:
            raise AuditKeyError(f"greenhouse={walker.greenhouse_id!r} seq={bad.seq}: {bad.reason}") from None
        raise AuditTamperError(bad.reason, greenhouse_id=walker.greenhouse_id, seq=bad.seq) from None
