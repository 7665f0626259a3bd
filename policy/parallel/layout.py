"""One shared-memory segment per vector twin: named numpy views, a per-row seqlock, row checksums.

Workers write and the learner reads without taking a lock:

* **Double buffering.** Step ``k`` (the first reset is step 0) is written into slot ``k % 2``,
  so the learner can keep using the views of step ``k`` while the workers write step ``k + 1``.
* **Seqlock per (slot, row).** The row's owner sets ``seq`` to ``2k + 1`` before writing step
  ``k`` and to ``2k + 2`` after. A reader that sees the same even value before and after copying
  a row has a whole row; an odd or changed value means "being written, read again". This relies
  on stores and loads staying in program order, as they do on x86-64.
* **Checksum per (slot, row)** over the observation bits, reward, flags, step and global
  instance id, written inside the seqlock: a reader can prove it never accepted a torn, stale
  or misplaced row.

Only the learner creates and unlinks segments (workers attach), so a worker crash never leaks
one; the learner's resource tracker unlinks it if the learner itself is killed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any, NamedTuple

import numpy as np

SEGMENT_PREFIX = "greentwin_"
"""Segment names are ``greentwin_<learner pid>_<random>`` (under /dev/shm on Linux)."""
SHM_DIR = "/dev/shm"
_ALIGN = 64  # one cache line per array start
_MASK64 = (1 << 64) - 1
_K_STEP = np.uint64(0x9E3779B97F4A7C15)
_K_ID = np.uint64(0xC2B2AE3D27D4EB4F)


@dataclass(frozen=True)
class Layout:
    """Sizes that fix a segment's layout: B instances, D observation and A action columns, W workers."""

    num_instances: int
    obs_dim: int
    act_dim: int
    num_workers: int

    def fields(self) -> tuple[tuple[str, tuple[int, ...], np.dtype[Any]], ...]:
        """(name, shape, dtype) of every array, in segment order. Per-step arrays have two slots."""
        b, d, a, w = self.num_instances, self.obs_dim, self.act_dim, self.num_workers
        f32, u8, i64 = np.dtype(np.float32), np.dtype(np.bool_), np.dtype(np.int64)
        return (
            ("actions", (b, a), f32),  # learner writes, workers read
            ("obs", (2, b, d), f32),
            ("final_obs", (2, b, d), f32),  # pre-reset observation (equals obs where not done)
            ("reward", (2, b), f32),
            ("terminated", (2, b), u8),
            ("truncated", (2, b), u8),
            ("rebuilt", (2, b), u8),  # the row's instance was rebuilt (worker error or restart) this step
            ("checksum", (2, b), np.dtype(np.uint64)),
            ("seq", (2, b), i64),
            ("episode", (b,), i64),  # each instance's current episode number (restarts continue from it)
            ("heartbeat", (w,), np.dtype(np.float64)),  # time.monotonic() of each worker's last sign of life
        )

    def offsets(self) -> tuple[dict[str, int], int]:
        """Byte offset of every array and the segment size."""
        out, pos = {}, 0
        for name, shape, dtype in self.fields():
            pos = -(-pos // _ALIGN) * _ALIGN
            out[name] = pos
            pos += int(np.prod(shape)) * dtype.itemsize
        return out, max(pos, 1)


class _Segment(shared_memory.SharedMemory):
    """A SharedMemory whose ``close`` leaves the mapping to views still in use instead of failing.

    The views (numpy arrays made with ``frombuffer``, torch tensors over them) keep the mapping
    alive through the buffer's memoryview; it is unmapped when the last of them goes.
    """

    def close(self) -> bool:  # type: ignore[override]
        try:
            super().close()
        except BufferError:
            if self._fd >= 0:  # what the parent would have done after unmapping
                os.close(self._fd)
                self._fd = -1
            return False
        return True


class SharedBuffers:
    """Named views of one segment; the learner creates it, workers attach to it by name."""

    actions: np.ndarray
    obs: np.ndarray
    final_obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    rebuilt: np.ndarray
    checksum: np.ndarray
    seq: np.ndarray
    episode: np.ndarray
    heartbeat: np.ndarray

    def __init__(self, layout: Layout, shm: _Segment, owner: bool) -> None:
        self.layout = layout
        self._shm = shm
        self._mapped = True
        self.owner = owner
        self.name = shm.name
        offsets, _ = layout.offsets()
        # frombuffer holds a buffer export on the mapping, so it cannot be unmapped under a live
        # view (np.ndarray(buffer=...) holds none, and reading such a view after close() crashes).
        root = np.frombuffer(shm.buf, dtype=np.uint8)
        for field, shape, dtype in layout.fields():
            start = offsets[field]
            size = int(np.prod(shape)) * dtype.itemsize
            setattr(self, field, root[start:start + size].view(dtype).reshape(shape))

    @classmethod
    def create(cls, layout: Layout) -> SharedBuffers:
        """A new zero-filled segment owned by this process (which must unlink it)."""
        _, size = layout.offsets()
        if os.path.isdir(SHM_DIR):
            st = os.statvfs(SHM_DIR)
            free = st.f_bavail * st.f_frsize
            if size > free:
                raise MemoryError(f"the shared buffers need {size / 2**20:.1f} MiB but {SHM_DIR} has "
                                  f"{free / 2**20:.1f} MiB free: use fewer instances or enlarge {SHM_DIR}")
        name = f"{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(6)}"
        return cls(layout, _Segment(name=name, create=True, size=size), owner=True)

    @classmethod
    def attach(cls, layout: Layout, name: str) -> SharedBuffers:
        """Map an existing segment (a worker's view; it never unlinks)."""
        shm = _Segment(name=name)
        _, size = layout.offsets()
        if shm.size < size:
            shm.close()
            raise ValueError(f"segment {name} holds {shm.size} bytes, the layout needs {size}")
        return cls(layout, shm, owner=False)

    def close(self) -> bool:
        """Drop this process's mapping; False while someone still holds a view (it goes with the last one)."""
        if not self._mapped:
            return True
        self._mapped = False
        for field, _, _ in self.layout.fields():
            self.__dict__.pop(field, None)
        return self._shm.close()

    def unlink(self) -> None:
        """Remove the segment's name (owner only; idempotent). Memory goes once the last mapping does."""
        if not self.owner:
            raise RuntimeError("only the creating process unlinks a segment")
        with contextlib.suppress(FileNotFoundError):
            self._shm.unlink()  # also unregisters it from the resource tracker


def segment_exists(name: str) -> bool:
    """Whether a segment of this name is still present (Linux: an entry in /dev/shm)."""
    if os.path.isdir(SHM_DIR):
        return os.path.exists(os.path.join(SHM_DIR, name))
    try:
        shm = shared_memory.SharedMemory(name=name)
    except FileNotFoundError:
        return False
    shm.close()
    return True


# ---- checksums ------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _weights(n: int) -> np.ndarray:
    """``n`` distinct odd 32-bit multipliers (splitmix64 of the column index): a changed value always
    changes the weighted sum, because odd numbers are invertible modulo 2**32."""
    out = []
    for i in range(n):
        z = (i + 1) * 0x9E3779B97F4A7C15 & _MASK64
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK64
        out.append(((z ^ (z >> 31)) & 0xFFFFFFFF) | 1)
    return np.array(out, dtype=np.uint32)


def row_checksum(obs: np.ndarray, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                 step: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """uint64 checksum per row of (observation bits, reward bits, flags) keyed by step and global id.

    The weighted sum runs in uint32 (wrapping by design): a quarter of the memory traffic of
    64-bit lanes, which keeps it near 1 % of a twin step.
    """
    n, d = obs.shape
    w = _weights(d + 2)
    c = np.ascontiguousarray(obs, dtype=np.float32).view(np.uint32) @ w[:d]
    c += np.ascontiguousarray(reward, dtype=np.float32).view(np.uint32) * w[d]
    c += (terminated.astype(np.uint32) * np.uint32(2) + truncated.astype(np.uint32)) * w[d + 1]
    key = (np.asarray(ids, dtype=np.uint64) * _K_ID
           + np.broadcast_to(np.asarray(step, dtype=np.uint64), (n,)) * _K_STEP)
    return c.astype(np.uint64) ^ key


# ---- writing (one owner per row range) ------------------------------------------------------
def publish_rows(buf: SharedBuffers, step: int, lo: int, hi: int, obs: np.ndarray, final_obs: np.ndarray,
                 reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, rebuilt: bool) -> None:
    """Write step ``step`` of rows ``lo:hi`` into slot ``step % 2`` inside the rows' seqlock."""
    slot = step % 2
    seq = buf.seq[slot, lo:hi]
    seq[...] = 2 * step + 1
    buf.obs[slot, lo:hi] = obs
    buf.final_obs[slot, lo:hi] = final_obs
    buf.reward[slot, lo:hi] = reward
    buf.terminated[slot, lo:hi] = terminated
    buf.truncated[slot, lo:hi] = truncated
    buf.rebuilt[slot, lo:hi] = rebuilt
    ids = np.arange(lo, hi, dtype=np.int64)
    buf.checksum[slot, lo:hi] = row_checksum(buf.obs[slot, lo:hi], buf.reward[slot, lo:hi],
                                             buf.terminated[slot, lo:hi], buf.truncated[slot, lo:hi],
                                             np.full(hi - lo, step, dtype=np.int64), ids)
    seq[...] = 2 * step + 2


# ---- reading without a lock -----------------------------------------------------------------
class RowCopy(NamedTuple):
    """Whole rows copied out of the shared buffers (shapes [B, D] or [B])."""

    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    checksum: np.ndarray
    step: np.ndarray
    """int64 step each row belongs to; -1 where no complete row was available."""


def read_slot(buf: SharedBuffers, slot: int, max_tries: int = 1000) -> tuple[RowCopy, int]:
    """Seqlock-consistent copy of every row of one slot, and how many row reads had to be retried."""
    b = buf.layout.num_instances
    out = RowCopy(np.zeros((b, buf.layout.obs_dim), np.float32), np.zeros(b, np.float32),
                  np.zeros(b, np.bool_), np.zeros(b, np.bool_), np.zeros(b, np.uint64),
                  np.full(b, -1, np.int64))
    pending, retries = np.arange(b), 0
    for _ in range(max_tries):
        before = buf.seq[slot, pending]  # fancy indexing copies
        obs, reward = buf.obs[slot, pending], buf.reward[slot, pending]
        term, trunc, checksum = (buf.terminated[slot, pending], buf.truncated[slot, pending],
                                 buf.checksum[slot, pending])
        after = buf.seq[slot, pending]
        ok = (before == after) & (before % 2 == 0) & (before > 0)
        empty = (before == after) & (before == 0)  # never written: nothing to read
        rows = pending[ok]
        out.obs[rows], out.reward[rows], out.terminated[rows] = obs[ok], reward[ok], term[ok]
        out.truncated[rows], out.checksum[rows], out.step[rows] = trunc[ok], checksum[ok], before[ok] // 2 - 1
        pending = pending[~(ok | empty)]
        if pending.size == 0:
            break
        retries += int(pending.size)
    return out, retries


def read_newest(buf: SharedBuffers, max_tries: int = 1000) -> tuple[RowCopy, int]:
    """Per row, the newest complete step found in either slot (copies), and the retry count."""
    a, ra = read_slot(buf, 0, max_tries)
    b, rb = read_slot(buf, 1, max_tries)
    pick_b = b.step > a.step
    return RowCopy(*(np.where(pick_b[:, None] if x.ndim == 2 else pick_b, y, x)
                     for x, y in zip(a, b, strict=True))), ra + rb


def verify_rows(rows: RowCopy) -> np.ndarray:
    """True per row whose checksum matches its contents, step and position (rows never read count as
    valid)."""
    ids = np.arange(rows.step.shape[0], dtype=np.int64)
    expected = row_checksum(rows.obs, rows.reward, rows.terminated, rows.truncated, np.maximum(rows.step, 0),
                            ids)
    return (expected == rows.checksum) | (rows.step < 0)
