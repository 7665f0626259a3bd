"""Accepted telemetry waits here for the next micro-batch, in arrival order per greenhouse.

Every greenhouse that reported while the previous batch was being decided is decided together
(one Kalman pass, one ensemble forward). The batch yields to the event loop between its stages,
so e-stops and operator actions never wait behind it; a decision is never split by a yield
between its finish and its publication, so an e-stop comes either before a decision (which then
sees the latch) or after its command.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime

from control import ControlDecision, DecisionBatch, GreenhouseController, Pending
from control.outlook import Outlook
from wire.topics import Telemetry

log = logging.getLogger(__name__)

MAX_BATCH = 64
"""Greenhouses decided together at most; more waiting go to the next batch."""
MAX_WAITING = 64
"""Messages one greenhouse may have waiting; beyond it the oldest is shed (the newest matters most)."""
CHUNK = 16
"""Greenhouses finished (journaled, published) between two chances for an e-stop to run."""

Emit = Callable[[list[ControlDecision], list[float]], None]
"""Journals and publishes finished decisions, given when each one's telemetry arrived."""
Shed = Callable[[str, str], None]
"""Told (greenhouse, reason) of each message dropped unseen."""


class Intake:
    """The queue between the bridge and the controllers, and the loop that decides its batches."""

    def __init__(self, controllers: dict[str, GreenhouseController], emit: Emit, max_batch: int = MAX_BATCH,
                 max_waiting: int = MAX_WAITING, on_shed: Shed | None = None,
                 outlook: Callable[[datetime | None], Outlook | None] = lambda newest: None) -> None:
        if max_waiting < 1:
            raise ValueError("max_waiting must be >= 1")
        self.controllers = controllers
        self.emit = emit
        self.max_batch = max_batch
        self.max_waiting = max_waiting
        self.on_shed = on_shed
        self.outlook = outlook
        """The site's outlook for a batch, given its newest telemetry time: every decision of a batch is
        made on the same one."""
        self.shed = 0
        """Messages dropped because their greenhouse's queue was full."""
        self.stopping = False
        self.in_flight: frozenset[str] = frozenset()
        """Greenhouses in the batch being decided: half a decision is not a state to snapshot."""
        self.batches = 0
        """Micro-batches decided so far (with :attr:`decided`, the mean batch size)."""
        self.decided = 0
        self._inbox: dict[str, deque[tuple[Telemetry, float]]] = {}
        self._ready: deque[str] = deque()
        self._drainer: asyncio.Task[None] | None = None

    def put(self, gh: str, tel: Telemetry) -> None:
        """Queue for the next micro-batch; starts deciding if nothing is (on the event loop)."""
        if self.stopping:
            return
        queue = self._inbox.setdefault(gh, deque())
        if not queue:
            self._ready.append(gh)
        elif len(queue) >= self.max_waiting:  # gh stays ready: its queue is still not empty
            queue.popleft()
            self.shed += 1
            if self.on_shed is not None:
                self.on_shed(gh, "inbox_full")
        queue.append((tel, time.perf_counter()))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.get_running_loop().create_task(self._drain())

    @property
    def waiting(self) -> int:
        """Telemetry messages accepted and not yet decided."""
        return sum(len(q) for q in self._inbox.values())

    def close(self) -> None:
        """Take no more telemetry; what waits is dropped once the batch in progress is done."""
        self.stopping = True

    async def drained(self) -> None:
        """Wait for the batch in progress to finish (after :meth:`close`)."""
        if self._drainer is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._drainer

    async def _drain(self) -> None:
        """Decide batches until no telemetry waits: one message per greenhouse per batch, FIFO."""
        while self._ready and not self.stopping:
            items: list[Pending] = []
            arrived: list[float] = []
            newest = max((q[-1][0].ts for q in self._inbox.values() if q), default=None)
            outlook = self.outlook(newest)
            taken: list[str] = []
            while self._ready and len(taken) < self.max_batch:
                gh = self._ready.popleft()
                tel, at = self._inbox[gh].popleft()
                taken.append(gh)
                try:  # staged settings come into force here: bad ones cost this message alone
                    items.append(self.controllers[gh].pending(tel, outlook))
                    arrived.append(at)
                except Exception:
                    log.exception("decision for %s failed", gh)
            for gh in taken:  # greenhouses with more waiting queue up again, behind this batch
                if self._inbox[gh]:
                    self._ready.append(gh)
            await self.decide(items, arrived)
            await asyncio.sleep(0)

    async def decide(self, items: list[Pending], arrived: list[float]) -> None:
        """One micro-batch, yielding between stages so e-stops and operator actions are not held up."""
        self.in_flight = frozenset(i.setup.gh for i in items)
        when = {i.setup.gh: at for i, at in zip(items, arrived, strict=True)}
        batch = DecisionBatch(items, strict=False)
        try:
            batch.begin()
            batch.estimate()
            await asyncio.sleep(0)
            for lo in range(0, len(batch), CHUNK):
                batch.observe(lo, lo + CHUNK)
                await asyncio.sleep(0)
            batch.propose()
            await asyncio.sleep(0)
            for lo in range(0, len(batch), CHUNK):
                decisions = []
                for i in range(lo, min(lo + CHUNK, len(batch))):
                    try:
                        decisions.append(batch.finish(i))
                    except Exception:  # one greenhouse's bad message must not cost the others theirs
                        log.exception("decision for %s failed", batch.steps[i].setup.gh)
                self.emit(decisions, [when[d.greenhouse_id] for d in decisions])
                await asyncio.sleep(0)
            self.batches += 1
            self.decided += len(batch)
        finally:
            self.in_flight = frozenset()
            for item, exc in batch.failed:
                log.error("decision for %s failed: %r", item.setup.gh, exc, exc_info=exc)
