"""Every few minutes, each audit chain's head leaves the database: signed, to a file and a URL.

The service's part of :mod:`audit.anchors`: a task on the event loop exports the heads that moved
since its last export (reads and signing off the loop), and once more at shutdown after the
writer sealed the rest. A failed export is logged and retried at the next round; it never stops
the service, and a failed POST never keeps the file from being written.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx

from app.core.config import Settings
from app.deadletter import UNAVAILABLE, reason_of
from audit.anchors import ANCHOR_FILE_NAME, anchor_line, append_anchors, sign_heads
from audit.store import AuditStore

log = logging.getLogger(__name__)


def anchor_path(settings: Settings, state_dir: Path) -> Path:
    """Where the service appends its anchors (and where ``audit verify`` looks by default)."""
    return settings.audit_anchor_file or state_dir / ANCHOR_FILE_NAME


class HeadAnchoring:
    """Exports chain heads that moved; ``run`` does it every ``every_s`` seconds until cancelled."""

    def __init__(self, store: AuditStore, path: Path, every_s: float, url: str | None = None) -> None:
        self.store = store
        self.path = path
        self.every_s = every_s
        self.url = url
        self._exported: dict[str, int] = {}

    @classmethod
    def from_settings(cls, settings: Settings, store: AuditStore, state_dir: Path) -> HeadAnchoring:
        return cls(store, anchor_path(settings, state_dir), settings.audit_anchor_every_min * 60.0,
                   settings.audit_anchor_url)

    def anchor_now(self) -> int:
        """Export every head that moved since the last export; returns how many (blocking I/O)."""
        moved = [h for h in self.store.heads() if self._exported.get(h[0]) != h[1]]
        checkpoints = sign_heads(self.store.signer, moved)
        append_anchors(self.path, checkpoints, self.store.signer.key_id)
        for cp in checkpoints:
            self._exported[cp.greenhouse_id] = cp.seq
        if checkpoints and self.url:
            self._post([anchor_line(cp, self.store.signer.key_id) for cp in checkpoints])
        if checkpoints:
            log.info("audit anchors: %d chain heads exported to %s", len(checkpoints), self.path)
        return len(checkpoints)

    def _post(self, lines: list[dict[str, object]]) -> None:
        assert self.url is not None
        try:
            httpx.post(self.url, json={"anchors": lines}, timeout=10.0).raise_for_status()
        except httpx.HTTPError as exc:  # the file has them; the next export posts the newer heads
            where = httpx.URL(self.url).copy_with(username=None, password=None)  # never log a credential
            log.warning("audit anchors: POST to %s failed: %s", where, type(exc).__name__)

    async def run(self) -> None:
        """Rounds until cancelled: the first at start, then every ``every_s``."""
        while True:
            try:
                await asyncio.to_thread(self.anchor_now)
            except UNAVAILABLE as exc:  # the database is away: the next round exports what moved meanwhile
                log.warning("audit anchors: database unavailable (%s); next export in %g s", reason_of(exc),
                            self.every_s)
            except OSError as exc:  # a full disk: the heads not written are exported at the next round
                log.warning("audit anchors: %s not written (%s); next export in %g s", self.path,
                            exc.strerror or exc, self.every_s)
            except Exception:  # noqa: BLE001 - the next round retries; anchoring must never stop the service
                log.exception("audit anchors: export failed")
            await asyncio.sleep(self.every_s)
