"""The live stream's events, built once per page and shared by every open stream of that page.

The streams run on the event loop that also runs the control loop. Each open dashboard used to
poll on its own: every second it fingerprinted what its page shows (the overview: every
greenhouse) and built the event when that had changed, so fifty open pages meant fifty
fingerprints a second and an overview built again for each overview stream whose fingerprint
differed by a decision. A :class:`Topic` (one greenhouse's page, or the overview) does that once a
second for all of its streams, and builds the overview a greenhouse at a time, handing the loop
back in between, so a decision waits behind at most one greenhouse's row, never a whole overview.
The topics take turns (one lock per feed): fifty pages opened together poll in the same instant,
and their builds would otherwise run back to back in one turn of the loop while a decision waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from app.api import live_state

if TYPE_CHECKING:
    from app.api.dashboard import Dashboard

log = logging.getLogger(__name__)

POLL_S = 1.0
KEEPALIVE_S = 5.0


class Topic:
    """The latest event of one page and its version; streams wait on :attr:`changed`."""

    def __init__(self) -> None:
        self.version = 0
        self.text = ""
        self.key: tuple[Any, ...] | None = None
        self.built = -math.inf
        self.streams = 0
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def publish(self, text: str, key: tuple[Any, ...], at: float) -> None:
        self.text, self.key, self.built = text, key, at
        self.version += 1
        self.changed.set()
        self.changed = asyncio.Event()

    async def next(self, version: int) -> None:
        """Return once a version after ``version`` is out: within the feed's keep-alive, as its task
        publishes at least that often (no timer per stream: fifty streams, fifty fewer tasks a second)."""
        if self.version == version:
            await self.changed.wait()


class LiveFeed:
    """One :class:`Topic` per page with open streams; its task ends with the page's last stream."""

    def __init__(self, dash: Dashboard, poll_s: float = POLL_S, keepalive_s: float = KEEPALIVE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.dash = dash
        self.poll_s = poll_s
        self.keepalive_s = keepalive_s
        self.clock = clock
        self.topics: dict[str | None, Topic] = {}
        self.builds = 0
        """Events built so far (all topics): what the streams cost the loop, for tests and metrics."""
        self._turn = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def subscribe(self, gh: str | None) -> AsyncIterator[Topic]:
        """The topic of a greenhouse page (``gh``) or of the overview (None), its first event built."""
        topic = self.topics.get(gh)
        if topic is None:
            topic = self.topics[gh] = Topic()
            topic.task = asyncio.create_task(self._run(gh, topic), name=f"live-feed-{gh or 'overview'}")
        topic.streams += 1
        try:
            if topic.version == 0:
                await self._refresh_logged(gh, topic)
            yield topic
        finally:
            topic.streams -= 1
            if topic.streams == 0 and self.topics.get(gh) is topic:
                del self.topics[gh]
                if topic.task is not None:
                    topic.task.cancel()

    def key(self, gh: str | None) -> tuple[Any, ...]:
        """Cheap fingerprint of what the page shows: an event goes out only when it changes."""
        runtime, dash = self.dash.runtime, self.dash
        ghs = [gh] if gh is not None else sorted(runtime.controllers)
        return tuple((live_state.change_key(runtime, g), dash.edge(g).state, dash.alarms.unacknowledged(g))
                     for g in ghs)

    async def refresh(self, gh: str | None, topic: Topic) -> None:
        """Build and publish the page's event when what it shows changed, or the keep-alive is due
        (a quiet page's ages must still move, and its streams show they are alive)."""
        key, now = self.key(gh), self.clock()
        if key == topic.key and now - topic.built < self.keepalive_s:
            return
        self.builds += 1
        if gh is not None:
            text = f"event: live\ndata: {self.dash.live(gh).model_dump_json()}\n\n"
        else:
            rows = []
            for g in sorted(self.dash.runtime.controllers):
                rows.append(self.dash.summary(g).model_dump_json())
                await asyncio.sleep(0)  # the loop's turn: a decision waits for one row at most
            text = f"event: overview\ndata: [{','.join(rows)}]\n\n"
        topic.publish(text, key, now)

    async def _run(self, gh: str | None, topic: Topic) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            async with self._turn:
                await self._refresh_logged(gh, topic)
                await asyncio.sleep(0)  # hold the turn over one pass of the loop, so its I/O comes first

    async def _refresh_logged(self, gh: str | None, topic: Topic) -> None:
        try:
            await self.refresh(gh, topic)
        except Exception:  # the streams get their last event again as keep-alive; the next second retries
            log.exception("live feed of %s: building the event failed", gh or "the overview")
            now = self.clock()
            if topic.version and topic.key is not None and now - topic.built >= self.keepalive_s:
                topic.publish(topic.text, topic.key, now)
