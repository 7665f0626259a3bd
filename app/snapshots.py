"""Controller snapshots on disk: written atomically, in the background unless a latch depends on it.

A mode change writes its greenhouse's own file at once (``controller-<gh>.json``; an e-stop must
survive a crash). The periodic snapshots of every greenhouse go into one file
(``controllers.json``) on a background thread: one fsync per round instead of one per
greenhouse, and none on the control loop. At start each greenhouse takes whichever of its two
snapshots is newer (the higher ``seq``: every decision and mode change advances it).
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from app.private_files import open_private, private_dir

ALL = "controllers.json"


def _write_atomically(path: Path, data: str) -> None:
    tmp = path.with_suffix(".tmp")
    with open_private(tmp, "w") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class SnapshotStore:
    """Per-greenhouse files for mode changes, one shared file for the periodic rounds."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        private_dir(self.folder)
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._all: dict[str, Any] | None = None

    def path(self, gh: str) -> Path:
        return self.folder / f"controller-{gh}.json"

    def load(self, gh: str) -> dict[str, Any] | None:
        """The newer of the greenhouse's own snapshot and its entry in the last periodic round."""
        if self._all is None:
            shared = self.folder / ALL
            self._all = json.loads(shared.read_text()) if shared.exists() else {}
        own_path = self.path(gh)
        own = json.loads(own_path.read_text()) if own_path.exists() else None
        periodic = self._all.get(gh)
        candidates = [s for s in (own, periodic) if s is not None]
        return max(candidates, key=lambda s: int(s.get("seq", 0))) if candidates else None

    def save(self, gh: str, snapshot: dict[str, Any]) -> None:
        """Write one greenhouse's snapshot now; durable when this returns."""
        data = json.dumps(snapshot)
        with self._lock:
            _write_atomically(self.path(gh), data)

    def save_all_later(self, snapshots: dict[str, dict[str, Any]]) -> Future[None]:
        """Queue a periodic round (``snapshots`` must not be mutated afterwards); rounds stay in order."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshots")
        return self._pool.submit(self._save_all, snapshots)

    def _save_all(self, snapshots: dict[str, dict[str, Any]]) -> None:
        data = json.dumps(snapshots)
        with self._lock:
            _write_atomically(self.folder / ALL, data)

    def close(self) -> None:
        """Finish the queued rounds."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
