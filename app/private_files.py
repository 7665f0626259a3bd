"""Files in the service's state directory are the service user's alone.

The journal, the spool, the dead letters and the snapshots hold telemetry, operator names and
controller state; the demo's keys sit there too. Each is created owner-only (0600) from the
start, not narrowed afterwards, and the state directory itself is 0700.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) if missing and make it owner-only."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    os.chmod(path, DIR_MODE)
    return path


def open_private(path: Path, mode: str = "a", encoding: str | None = "utf-8") -> IO[Any]:
    """``open(path, mode)`` for "a", "w" or "ab"/"wb", creating the file owner-only (an existing
    file is narrowed to owner-only too)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode.startswith("a") else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return os.fdopen(fd, mode, encoding=None if "b" in mode else encoding)


def create_private(path: Path) -> None:
    """Create ``path`` (and its folder) owner-only, if missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    open_private(path, "ab").close()
