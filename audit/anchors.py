"""Chain heads exported outside the database: a signed line per chain in an append-only file.

A checkpoint stored next to the records goes wherever the records go: whoever can rewrite or cut
a chain in the database (and hold the keys to recompute its hashes) can drop the checkpoints
with it. A head that left the database in time (a file the operator archives, a copy posted
elsewhere) cannot be taken back: verification against it finds a chain whose anchored record
is gone (cut) or is no longer the one that was anchored (rewritten), even when what is left
verifies on its own. Each line is a :class:`~audit.statements.SignedCheckpoint` and names the
signing key's id (:func:`~audit.crypto.signing_key_id`): after the signing key is rotated, the
lines signed before still verify against the retired key they name.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from audit.crypto import Signer, signing_key_id, verify_signature
from audit.statements import CHECKPOINT_TYPE, SignedCheckpoint, sign_checkpoint

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from audit.store import AuditStore

ANCHOR_FILE_NAME = "audit-anchors.jsonl"


def anchor_line(cp: SignedCheckpoint, key_id: str) -> dict[str, Any]:
    """The JSON object of one exported head (also what is posted to an anchoring URL); ``key_id`` is
    the id of the key that signed it."""
    return {"type": CHECKPOINT_TYPE, "greenhouse_id": cp.greenhouse_id, "seq": cp.seq,
            "head_hash": cp.head_hash, "ts": cp.ts, "key_id": key_id,
            "signature": base64.b64encode(cp.signature).decode()}


def sign_heads(signer: Signer, heads: Iterable[tuple[str, int, str]],
               now: datetime | None = None) -> list[SignedCheckpoint]:
    """A signed checkpoint for each (chain, seq, head_hash), e.g. :meth:`AuditStore.heads`."""
    return [sign_checkpoint(signer, gid, seq, head, now) for gid, seq, head in heads]


def append_anchors(path: Path, checkpoints: list[SignedCheckpoint], key_id: str) -> None:
    """Append one line per checkpoint (signed by the key ``key_id``) and fsync (owner-only file, opened
    for appending only)."""
    if not checkpoints:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(anchor_line(cp, key_id), separators=(",", ":")) + "\n"
                   for cp in checkpoints).encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        end = os.fstat(fd).st_size
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except OSError:  # a full disk: no torn line left behind to read as a forged anchor
            os.ftruncate(fd, end)
            raise
    finally:
        os.close(fd)


def read_anchors(path: Path, public_keys: Ed25519PublicKey | Sequence[Ed25519PublicKey],
                 ) -> tuple[dict[str, SignedCheckpoint], list[str]]:
    """The newest anchor of each chain (highest seq) and one problem per line that is not a valid,
    signed anchor (a forged or damaged line anchors nothing).

    ``public_keys``: the signing key's public key, then the retired ones. A line is checked against
    the key it names; one signed by a key that is none of these is a problem, not an anchor. Lines
    written before anchors named their key are checked against every key."""
    keys = [public_keys] if not isinstance(public_keys, Sequence) else list(public_keys)
    by_id = {signing_key_id(k): k for k in keys}
    latest: dict[str, SignedCheckpoint] = {}
    problems: list[str] = []
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if obj.get("type") != CHECKPOINT_TYPE:
                    raise ValueError(f"type {obj.get('type')!r}")
                cp = SignedCheckpoint(str(obj["greenhouse_id"]), int(obj["seq"]), str(obj["head_hash"]),
                                      str(obj["ts"]), base64.b64decode(obj["signature"], validate=True))
                key_id = obj.get("key_id")
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                problems.append(f"{path.name} line {n}: not an anchor ({exc})")
                continue
            if key_id is not None and str(key_id) not in by_id:
                problems.append(f"{path.name} line {n}: signed by key {str(key_id)[:16]!r}, "
                                f"neither the signing key nor a retired one "
                                f"({cp.greenhouse_id} seq {cp.seq})")
                continue
            key = keys if key_id is None else by_id[str(key_id)]
            if not verify_signature(key, cp.signature, cp.message()):
                problems.append(f"{path.name} line {n}: signature invalid ({cp.greenhouse_id} seq {cp.seq})")
                continue
            if cp.greenhouse_id not in latest or cp.seq >= latest[cp.greenhouse_id].seq:
                latest[cp.greenhouse_id] = cp
    return latest, problems


@dataclass(frozen=True)
class AnchorCheck:
    """One chain against its newest external anchor."""

    greenhouse_id: str
    seq: int
    anchored_at: str
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None

    def describe(self) -> str:
        if self.ok:
            return (f"ok   {self.greenhouse_id}: holds the head anchored at {self.anchored_at} "
                    f"(seq {self.seq})")
        return f"FAIL {self.greenhouse_id}: {self.problem} (anchored at {self.anchored_at})"


def check_anchors(store: AuditStore, anchors: dict[str, SignedCheckpoint]) -> list[AnchorCheck]:
    """Each anchored chain must still hold the anchored record, unchanged (or have purged it behind
    a signed purge anchor at or past it)."""
    out = []
    for gid, cp in sorted(anchors.items()):
        purged = store.latest_anchor(gid)
        record = store.record_at(gid, cp.seq)
        problem = None
        if purged is not None and purged.seq >= cp.seq:
            if purged.seq == cp.seq and purged.head_hash != cp.head_hash:
                problem = f"record seq {cp.seq} was purged under a head other than the anchored one"
        elif record is None:
            heads = {g: seq for g, seq, _ in store.heads()}
            now = f"the chain now ends at seq {heads[gid]}" if gid in heads else "the chain is gone"
            problem = f"chain cut: anchored record seq {cp.seq} is missing, {now}"
        elif record.record_hash != cp.head_hash:
            problem = f"chain rewritten: record seq {cp.seq} is not the anchored one (hash differs)"
        out.append(AnchorCheck(gid, cp.seq, cp.ts, problem))
    return out
