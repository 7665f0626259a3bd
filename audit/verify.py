"""Verification of one greenhouse's chain: links, hashes, decryption, checkpoints and anchor.

Two layers of evidence are checked in one streaming pass: ``record_hash`` over the ciphertext
and envelope (no keys needed) and, with a keyring, decryption that proves the content and
that the envelope matches it. Signed checkpoints catch a rehashed suffix or a cut tail; an
anchor moves the starting point past purged records.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from audit.canonical import GENESIS_HASH, encode_str
from audit.crypto import Keyring, PublicKeys, SealedBox, open_box, verify_signature
from audit.errors import AuditKeyError, AuditTamperError
from audit.sealing import AuditEntry, SealedRecord, compute_record_hash, record_aad
from audit.statements import Anchor, SignedCheckpoint

_ENTRY_KEYS = frozenset({"greenhouse_id", "seq", "ts", "kind", "actor", "payload"})


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
    enc = encode_str
    head = (f'{{"actor":{enc(record.actor)},"greenhouse_id":{enc(record.greenhouse_id)},'
            f'"kind":{enc(record.kind)},"payload":{{')
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
        public_key: PublicKeys | None,
        *,
        want_entries: bool,
        after: tuple[int, str] | None = None,
    ) -> None:
        self._want_entries = want_entries
        self._checkpoints = sorted(checkpoints, key=lambda cp: cp.seq)
        if (self._checkpoints or anchor is not None) and public_key is None:
            raise ValueError("checkpoints and anchors can only be verified with public_key")
        if after is not None and anchor is not None:
            raise ValueError("a walk starts after an anchor or after a verified head, not both")
        self._after = after
        self._keyring = keyring
        self._public_key = public_key
        self._anchor = anchor
        self._next_cp = 0
        self.greenhouse_id: str | None = None
        self.seq = 0
        self.head = GENESIS_HASH
        self.checked = 0

    def start(self) -> None:
        if self._after is not None:
            # The head was verified by an earlier walk, with the checkpoints up to it.
            self.seq, self.head = self._after
            while self._next_cp < len(self._checkpoints) and self._checkpoints[self._next_cp].seq <= self.seq:
                self._next_cp += 1
            return
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
    def _pk(self) -> PublicKeys:
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
        aad = record_aad(record.greenhouse_id, seq, record.ts, record.prev_hash)
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
    public_key: PublicKeys | None = None,
    on_entry: Callable[[SealedRecord, AuditEntry], None] | None = None,
    after: tuple[int, str] | None = None,
) -> VerifyResult:
    """Check one greenhouse's records, in seq order, in a single streaming pass.

    Without a keyring only links, hashes and signatures are checked (tampering by
    someone who rehashes the chain is then caught only by checkpoints). Tampering is
    reported in the result, never raised; ``ValueError`` means the call itself is
    wrong (checkpoints or anchor without ``public_key``, ``on_entry`` without a keyring).

    ``on_entry`` is handed each record that passed, with its decrypted entry, as the walk goes:
    whoever reads the content too needs no second pass, and never sees a record past the first bad one.
    ``after`` (seq, record_hash) goes on from a head an earlier walk verified: ``records`` are the ones
    after it, and the first must link to it.
    """
    if on_entry is not None and keyring is None:
        raise ValueError("on_entry needs a keyring to decrypt")
    walker = _Walker(keyring, checkpoints, anchor, public_key, want_entries=on_entry is not None, after=after)
    try:
        walker.start()
        for record in records:
            entry = walker.step(record)
            if on_entry is not None:
                assert entry is not None  # a keyring is present, so every record is decrypted
                on_entry(record, entry)
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
    public_key: PublicKeys | None = None,
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
