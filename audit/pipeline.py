"""Seal ahead: the next chunk of a batch is sealed in a worker thread while the caller writes this one.

Sealing (canonical JSON, AES-GCM, SHA-256) and preparing the driver's input are CPU work in
Python; writing to PostgreSQL is mostly waiting on the server, with the GIL released.
Overlapping the two bounds a batch's time by the slower of them instead of their sum.

:class:`~audit.store.AuditStore` uses it with ``seal_ahead=N`` on PostgreSQL (and seals inline, as
one chunk, otherwise): the overlap needs a spare core, since two threads taking turns with the GIL
cost more CPU per record than one.

Order and durability do not change: one worker seals every chunk, in order, through the same
:class:`~audit.sealing.AuditChain`, so seqs and links are exactly those of a sequential
``append_many``; chunks reach the caller in that order; nothing here writes or commits. The
queue holds one chunk, so at most two chunks are sealed and not yet written. The worker lives
only inside the ``with`` block: leaving it (normally or by an exception) stops and joins it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any

from audit.sealing import AuditChain, AuditEvent, SealedRecord

DEFAULT_CHUNK = 100
"""Records per chunk: small enough to overlap early, large enough that a chunk's statement dominates."""

_Item = tuple[list[SealedRecord], Any]


def _identity(records: list[SealedRecord]) -> Any:
    return records


class SealAhead:
    """Iterate over ``(records, prepare(records))`` per chunk of ``events``, sealed one chunk ahead.

    A batch of at most ``chunk`` events is sealed inline (no thread). A sealing error is raised
    from the iteration at the chunk where it happened, after the earlier chunks were handed out;
    the chain's head has then moved past records the caller may not have stored, so the caller
    must discard the chain on any error (as :class:`~audit.store.AuditStore` does).
    """

    def __init__(
        self,
        chain: AuditChain,
        events: Sequence[AuditEvent],
        chunk: int = DEFAULT_CHUNK,
        prepare: Callable[[list[SealedRecord]], Any] = _identity,
    ) -> None:
        if type(chunk) is not int or chunk < 1:
            raise ValueError("chunk must be an int >= 1")
        self._chain = chain
        self._prepare = prepare
        self._chunks = [events[i : i + chunk] for i in range(0, len(events), chunk)]
        self._queue: queue.Queue[tuple[_Item | None, BaseException | None]] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> SealAhead:
        if len(self._chunks) > 1:
            self._thread = threading.Thread(
                target=self._work, name=f"audit-seal-{self._chain.greenhouse_id}", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        # The worker checks the flag before each chunk, so it puts at most one more item: free the slot.
        try:
            self._queue.get_nowait()
        except queue.Empty:
            pass
        thread.join()

    def __iter__(self) -> Iterator[_Item]:
        if self._thread is None:
            for chunk in self._chunks:
                yield self._seal(chunk)
            return
        for _ in self._chunks:
            item, error = self._queue.get()
            if error is not None:
                raise error
            assert item is not None
            yield item

    def _seal(self, chunk: Sequence[AuditEvent]) -> _Item:
        records = self._chain.append_many(chunk)
        return records, self._prepare(records)

    def _work(self) -> None:
        for chunk in self._chunks:
            if self._stop.is_set():
                return
            try:
                item = self._seal(chunk)
            except BaseException as exc:  # handed to the caller's thread, raised there
                self._queue.put((None, exc))
                return
            self._queue.put((item, None))
