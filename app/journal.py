"""Write-ahead journal: a decision is on disk before its command can act, without a database commit.

The control loop appends each micro-batch of decisions and mode changes to the active segment
(one write per batch) and only then publishes the commands. The writer process tails the
segments (:class:`JournalReader`): it fsyncs what it reads, stores the records in the database
(or the spool) with their explanations and audit events, and deletes a segment once it has
stored all of it and the loop has moved on to the next. The journal is thus both the queue
between the two processes and the recovery log: a crash never leaves an applied command without
its record, because at the next start whatever the journal still holds is stored (keyed by
greenhouse and seq, so nothing is doubled).

The write reaches the operating system before the command is published, which a killed process
cannot undo; a power cut before the writer's next round (a fraction of a second) can.
``sync_each=True`` closes that window too, at the price of an fsync on every batch's critical path.

A write that fails (a full disk, a file-size limit) raises, and the caller publishes nothing of
that batch. A short write leaves a torn frame: that segment is closed there and the next append
starts a new one, so the torn bytes are only ever the tail of a finished segment, which the
reader skips as it skips a crashed run's torn append (frames of the batch that were written
whole are stored: decided, never commanded).

Format: each entry is a frame, a 4-byte little-endian length and that many bytes of pickle
(protocol 5). Pickle, not JSON lines like the spool: the loop writes every decision here, and
turning ~150 floats per record into decimal text cost more than deciding it. The journal is
private to the service (its state directory, like the controller snapshots) and short-lived.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import struct
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from app.private_files import open_private, private_dir

log = logging.getLogger(__name__)

_SEGMENT = re.compile(r"journal-(\d{8})\.bin")
_LEN = struct.Struct("<I")


class JournalCorrupt(RuntimeError):
    """A frame that is neither complete nor a torn append at the very end of a segment."""


class JournalUnwritable(RuntimeError):
    """An operator's action could not be journaled (a full state directory): it is neither recorded
    nor applied, and the controller is as it was before."""


def segment_path(folder: Path, segment: int) -> Path:
    return folder / f"journal-{segment:08d}.bin"


def segments(folder: Path) -> list[int]:
    return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _SEGMENT.fullmatch(p.name)))


def encode(entries: Iterable[dict[str, Any]]) -> tuple[bytes, int]:
    """Frames for ``entries`` and how many there are."""
    frames = [pickle.dumps(e, protocol=5) for e in entries]
    return b"".join(_LEN.pack(len(f)) + f for f in frames), len(frames)


def decode(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """The complete frames at the start of ``data`` and the bytes they span (a partial frame waits)."""
    out, pos = [], 0
    while pos + _LEN.size <= len(data):
        (size,) = _LEN.unpack_from(data, pos)
        if pos + _LEN.size + size > len(data):
            break
        try:
            out.append(pickle.loads(data[pos + _LEN.size:pos + _LEN.size + size]))
        except Exception as exc:
            raise JournalCorrupt(f"journal frame at byte {pos} does not decode: {exc}") from exc
        pos += _LEN.size + size
    return out, pos


class DecisionJournal:
    """The control loop's side: append-only segments of frames (thread-safe)."""

    def __init__(self, folder: Path, *, rotate_every: int = 2000, sync_each: bool = False) -> None:
        if rotate_every < 1:
            raise ValueError("rotate_every must be >= 1")
        self.folder = Path(folder)
        private_dir(self.folder)
        self.rotate_every = rotate_every
        self.sync_each = sync_each
        self._lock = threading.Lock()
        self._recovered = segments(self.folder)
        self._next = (self._recovered[-1] + 1) if self._recovered else 1
        self._fh: Any = None
        self._in_active = 0
        self.appended = 0
        """Entries appended by this process (the writer reports how many it has stored)."""

    # ---- recovery (at start, before anything is appended) ---------------------------------------
    def recover(self) -> list[dict[str, Any]]:
        """Entries of the segments a previous run left, oldest first; a torn last frame (a crash
        mid-append: its batch was never published) is skipped."""
        out: list[dict[str, Any]] = []
        for segment in self._recovered:
            data = segment_path(self.folder, segment).read_bytes()
            entries, used = decode(data)
            if used < len(data):
                log.warning("journal segment %d ends in a torn append; its batch was never published",
                            segment)
            out += entries
        return out

    def discard_recovered(self) -> None:
        """Delete the recovered segments once their entries are stored elsewhere."""
        for segment in self._recovered:
            segment_path(self.folder, segment).unlink(missing_ok=True)
        self._recovered = []

    def keep_recovered(self) -> None:
        """Leave the recovered segments for the writer process to take over (their audit events are
        not all sealed yet); a torn last frame is cut off first, since the reader refuses one in a
        segment that is followed by another."""
        for segment in self._recovered:
            path = segment_path(self.folder, segment)
            data = path.read_bytes()
            _, used = decode(data)
            if used < len(data):
                os.truncate(path, used)
        self._recovered = []

    # ---- the control loop ------------------------------------------------------------------------
    def append(self, entries: Iterable[dict[str, Any]]) -> int:
        """Write ``entries`` (one write; fsync'd now only with ``sync_each``); returns how many.

        Raises ``OSError`` when they are not all on disk (nothing of the batch may be published)."""
        data, count = encode(entries)
        with self._lock:
            if self._fh is None or self._in_active >= self.rotate_every:
                self._rotate()
            fd = self._fh.fileno()
            written = 0
            try:
                while written < len(data):  # unbuffered: a failed write leaves nothing to flush later
                    written += os.write(fd, memoryview(data)[written:])
                if self.sync_each:
                    os.fsync(fd)
            except OSError:
                if written:  # a torn frame: this segment ends here, the next append starts another
                    self._fh.close()
                    self._fh = None
                raise
            self._in_active += count
            self.appended += count
        return count

    def _rotate(self) -> None:
        """Close the active segment (the reader moves on once the next one exists) and start one."""
        if self._fh is not None:
            os.fsync(self._fh.fileno())  # every rotate_every entries: rare enough for the loop
            self._fh.close()
            self._fh = None
        self._fh = open_private(segment_path(self.folder, self._next), "ab")
        self._next += 1
        self._in_active = 0

    def close(self) -> None:
        """fsync and close the active segment."""
        with self._lock:
            if self._fh is not None:
                os.fsync(self._fh.fileno())
                self._fh.close()
                self._fh = None


class JournalReader:
    """The writer's side: the entries appended since the last read, in order, across segments."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._segment: int | None = None
        self._offset = 0
        self._consumed: list[int] = []

    def read(self) -> list[dict[str, Any]]:
        """New complete entries (fsync'd first); a frame still being written waits for the next read."""
        out: list[dict[str, Any]] = []
        while True:
            present = segments(self.folder)
            if self._segment is None:
                if not present:
                    return out
                self._segment, self._offset = present[0], 0
            later = [s for s in present if s > self._segment]  # listed before reading: see below
            with segment_path(self.folder, self._segment).open("rb") as fh:
                os.fsync(fh.fileno())
                fh.seek(self._offset)
                data = fh.read()
            entries, used = decode(data)
            out += entries
            self._offset += used
            if not later:
                return out
            # The loop created a later segment, so it had finished writing this one before: what
            # was read is all of it. Bytes left over are a torn append (a crashed run, or a write
            # that failed on a full disk); the loop published nothing of that batch.
            if used < len(data):
                log.warning("journal segment %d ends in a torn append of %d bytes; its batch was never "
                            "published", self._segment, len(data) - used)
            self._consumed.append(self._segment)
            self._segment, self._offset = later[0], 0

    def delete_consumed(self, *, including_current: bool = False) -> None:
        """Delete the segments read to the end, once their entries are stored; at shutdown (the loop
        has closed the journal) also the current one if nothing in it is left unread."""
        if including_current and self._segment is not None:
            path = segment_path(self.folder, self._segment)
            if path.exists() and path.stat().st_size == self._offset:
                self._consumed.append(self._segment)
                self._segment, self._offset = None, 0
        for segment in self._consumed:
            segment_path(self.folder, segment).unlink(missing_ok=True)
        self._consumed = []
