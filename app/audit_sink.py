"""Every decision and mode change into the sealed audit trail, batched off the control path.

Events queue per greenhouse and are sealed with ``AuditStore.append_many`` (one transaction per
batch) by the writer process; a failed batch stays queued and is retried, so a database hiccup
delays audit records but never drops them while the process lives. An event that can never be
sealed (its payload has no canonical form, or the database refuses it flush after flush) is
dead-lettered with an alarm, so it cannot hold up its greenhouse's chain for ever.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.exc import DBAPIError

from app.core.config import Settings
from app.deadletter import UNAVAILABLE, DeadLetters, reason_of
from app.private_files import open_private, private_dir
from audit import AuditEvent, Keyring, Signer, open_record
from audit.errors import AuditChainMoved, AuditKeyError
from audit.store import AuditStore

log = logging.getLogger(__name__)

ACCESS_CHAIN = "_access"
"""The chain of service-level records (privileged logins, user management, key changes); no
greenhouse id can name it (ids start with ``[a-z0-9]``)."""


def service_audit_keys(settings: Settings, state_dir: Path) -> tuple[Keyring, Signer]:
    """The configured keys; the demo generates and keeps its own; otherwise refuse to start."""
    from app.audit_keys import load_keyring, load_signer

    keyring, signer = load_keyring(settings), load_signer(settings)
    if keyring is not None and signer is not None:
        return keyring, signer
    if settings.environment != "demo":
        raise AuditKeyError("audit keys are not configured (GREENTWIN_AUDIT_KEYS or GREENTWIN_AUDIT_KEY, and "
                            "GREENTWIN_AUDIT_SIGNING_KEY): the service does not start without them outside "
                            "demo mode")
    folder = state_dir / "audit-keys"
    private_dir(folder)
    ring_path, pem_path = folder / "keyring.json", folder / "signing-key.pem"
    if keyring is None:
        if ring_path.exists():
            keyring = Keyring.from_file(ring_path)
        else:
            keyring = Keyring.generate()
            with open_private(ring_path, "w") as fh:
                fh.write(keyring.to_json())
    if signer is None:
        if pem_path.exists():
            signer = Signer.from_pem(pem_path.read_bytes())
        else:
            signer = Signer.generate()
            with open_private(pem_path, "wb") as fh:
                fh.write(signer.to_pem())
    log.warning("demo mode: audit keys generated and kept in %s (GREENTWIN_AUDIT_KEYS=$(cat %s), "
                "GREENTWIN_AUDIT_SIGNING_KEY=%s to verify)", folder, ring_path, pem_path)
    return keyring, signer


def record_key_in_use(store: AuditStore, now: datetime | None = None) -> str | None:
    """Record a change of the current audit key: ``key_rotation`` when the service starts with
    another current key than the newest service-level record was sealed with, ``key_in_use`` on
    a trail that has none yet. Rotation itself happens offline (``greentwin audit keygen
    --rotate``); this makes it visible in the trail. Returns the record's kind, or None."""
    current = store.keyring.current_key_id
    head = store.head_seq(ACCESS_CHAIN)
    [last] = store.tail_records(ACCESS_CHAIN, 1) or [None]
    if last is not None and last.key_id == current:
        return None
    kind = "key_in_use" if last is None else "key_rotation"
    payload = {"from_key_id": None if last is None else last.key_id, "to_key_id": current,
               "key_ids": list(store.keyring.key_ids)}
    store.append(ACCESS_CHAIN, kind, "system", payload, now, after_seq=head)  # record_at_start reads again
    log.info("audit %s: current key %s (was %s)", kind, current, payload["from_key_id"])
    return kind


START_RECORD_TRIES = 8
"""Times a start-up record is decided again while other replicas keep appending to the access chain."""


def record_at_start(record: Callable[..., str | None], store: AuditStore, *args: Any) -> str | None:
    """Run a start-up ``record_*`` again while another replica starting at the same moment appends to
    the access chain first. Those records depend on what the chain held, so each is sealed only right
    after the head it was decided on (``after_seq``); a later try reads the other replica's records
    (usually leaving nothing to record)."""
    for attempt in range(START_RECORD_TRIES):
        try:
            return record(store, *args)
        except AuditChainMoved as moved:
            if attempt == START_RECORD_TRIES - 1:
                raise
            log.info("another replica appended to the access chain at the same moment (%s); "
                     "reading its records", moved)
    raise AssertionError("unreachable")


POLICY_KINDS = ("policy_in_use", "policy_change")


def record_policy_in_force(store: AuditStore, versions: list[str], now: datetime | None = None,
                           actor: str = "system") -> str | None:
    """Record which policy versions the service decides with, when they differ from the last record:
    ``policy_change`` (from and to), or ``policy_in_use`` on a trail that has none yet. A promotion
    or rollback that swaps ``GREENTWIN_POLICY_DIR`` shows in the trail from the first start on it.
    Returns the record's kind, or None."""
    current = sorted(set(versions))
    head = store.head_seq(ACCESS_CHAIN)
    newest = store.last_record_of(ACCESS_CHAIN, POLICY_KINDS)
    last = None if newest is None else open_record(store.keyring, newest)
    if last is not None and last.payload.get("to_versions") == current:
        return None
    kind = "policy_in_use" if last is None else "policy_change"
    store.append(ACCESS_CHAIN, kind, actor,
                 {"from_versions": None if last is None else last.payload.get("to_versions"),
                  "to_versions": current},
                 now, after_seq=head)  # record_at_start reads again
    log.info("audit %s: policy %s", kind, ", ".join(current))
    return kind


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=lambda o: o.isoformat() if isinstance(o, datetime) else str(o)))


class AuditSink:
    """Per-greenhouse queues of audit events, sealed in batches."""

    max_attempts = 5
    """Flushes in a row that the database may refuse one event before it is dead-lettered (a refusal
    that passes, a full disk say, must not cost a record; one that never passes must not stall)."""

    def __init__(self, store: AuditStore, dead_letters: DeadLetters | None = None) -> None:
        self.store = store
        self.dead_letters = dead_letters
        self._queues: dict[str, list[AuditEvent]] = defaultdict(list)
        self._lock = threading.Lock()
        self._refusals: dict[str, int] = {}
        self.last_seal_at: float | None = None
        """Wall-clock time of the last flush that sealed something."""
        self._waiting_since: float | None = None

    def add(self, greenhouse_id: str, kind: str, actor: str, payload: dict[str, Any], ts: datetime) -> None:
        with self._lock:
            self._queues[greenhouse_id].append(AuditEvent(kind, actor, _jsonable(payload), ts))
            if self._waiting_since is None:
                self._waiting_since = time.time()

    @property
    def pending(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._queues.values())

    @property
    def waiting_since(self) -> float | None:
        """Wall-clock time since which events have been waiting without the queue ever emptying."""
        with self._lock:
            return self._waiting_since

    def discard_pending(self) -> int:
        """Forget the queued events (they are still journaled; another sealer takes them over)."""
        with self._lock:
            count = sum(len(q) for q in self._queues.values())
            self._queues = defaultdict(list)
            self._waiting_since = None
        return count

    def flush(self) -> int:
        """Seal everything queued, all greenhouses in one transaction; returns how many records were
        stored. If that fails, each greenhouse is tried alone, so one bad chain cannot hold up the
        others; failed batches stay queued, in order."""
        with self._lock:
            batches = {gh: q for gh, q in self._queues.items() if q}
            self._queues = defaultdict(list)
        if not batches:
            return 0
        try:
            self.store.append_batches(batches)
            stored = sum(len(q) for q in batches.values())
        except Exception as exc:
            log.warning("audit flush of %d greenhouses in one transaction failed (%s); trying one by one",
                        len(batches), exc.__class__.__name__)
            stored = sum(self._flush_one(gh, events) for gh, events in batches.items())
        with self._lock:
            if stored:
                self.last_seal_at = time.time()
            if not any(self._queues.values()):
                self._waiting_since = None
        return stored

    def _flush_one(self, gh: str, events: list[AuditEvent]) -> int:
        """One greenhouse's batch; if refused, event by event up to the one that fails (kept with the
        rest, in order, unless it is dead-lettered). Returns how many were sealed."""
        try:
            self.store.append_many(gh, events)
            self._refusals.pop(gh, None)
            return len(events)
        except UNAVAILABLE as exc:
            return self._keep(gh, events, exc)
        except Exception:
            pass
        stored = 0
        for i, event in enumerate(events):
            try:
                self.store.append_many(gh, [event])
                self._refusals.pop(gh, None)
                stored += 1
            except Exception as exc:
                if not self._give_up(gh, event, exc):
                    return stored + self._keep(gh, events[i:], exc)
        return stored

    def _keep(self, gh: str, events: list[AuditEvent], exc: BaseException) -> int:
        log.warning("audit batch for %s not stored yet (%s); %d events kept", gh, exc.__class__.__name__,
                    len(events))
        with self._lock:
            self._queues[gh][:0] = events
        return 0

    def _give_up(self, gh: str, event: AuditEvent, exc: BaseException) -> bool:
        """Dead-letter ``event`` if it can never be sealed: True if it was."""
        if isinstance(exc, UNAVAILABLE) or self.dead_letters is None:
            return False
        # An error raised before the database saw the event (no canonical form) repeats for ever.
        refusals = self.max_attempts if not isinstance(exc, DBAPIError) else self._refusals.get(gh, 0) + 1
        if refusals < self.max_attempts:
            self._refusals[gh] = refusals
            return False
        self._refusals.pop(gh, None)
        self.dead_letters.add(gh, f"audit:{event.kind}", reason_of(exc),
                              {"kind": event.kind, "actor": event.actor, "payload": event.payload,
                               "ts": event.ts})
        return True

    def close(self) -> None:
        """Final flush and a signed checkpoint of every chain head (a cut tail becomes detectable)."""
        self.flush()
        for gh in self.store.greenhouse_ids():
            try:
                self.store.checkpoint(gh)
            except Exception:
                log.exception("could not sign the final checkpoint for %s", gh)
