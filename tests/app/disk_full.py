"""A full disk without root: a file-size limit (``RLIMIT_FSIZE``) on this process or on a child.

A write past the limit fails with EFBIG the way a write to a full disk fails with ENOSPC (a short
write first when part of it fits); Python ignores SIGXFSZ, so the process lives on. The limit is
per file, not per directory: every file the process writes is full at once.
"""

from __future__ import annotations

import resource
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def disk_full_at(limit: int, pid: int = 0) -> Iterator[None]:
    """Files of process ``pid`` (0: this one) cannot grow past ``limit`` bytes until the block ends."""
    old = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, old[1]))
    try:
        yield
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, old)
