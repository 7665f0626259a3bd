"""The live streams' shared events: built once per page for all of its streams, on the app's own loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.live_feed import LiveFeed
from app.cli import db as db_cli
from app.core.config import Settings
from app.main import create_app
from app.services.greenhouses import add_greenhouse
from wire.topics import Telemetry


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("feed")
    url = f"sqlite:///{root / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    for gh in ("gh1", "gh2"):
        add_greenhouse(url, gh, zones=2, soil="loam")
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", policy_dir=root / "no-policy",
                        environment="demo", secret_key="live-feed-secret-" + "4c" * 16)
    with TestClient(create_app(settings, state_dir=root / "state")) as c:
        yield c


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _telemetry(seq: int) -> Telemetry:
    return Telemetry(ts=datetime.now(UTC), boot_id="feed", seq=seq, soil_vwc=[[0.24, 0.24]] * 2,
                     air_temp_c=21.0, air_rh_pct=70.0, par_umol_m2_s=100.0, co2_ppm=500.0, leaf_temp_c=21.0,
                     flow_l_min=0.0, pump_current_a=0.0, valve_open=[0, 0], pump_pct=0.0, light_pct=0.0,
                     estop=False)


def test_streams_of_a_page_share_one_event_built_once_per_change(client: TestClient) -> None:
    app: Any = client.app
    dash = app.state.dashboard
    clock = Clock()
    feed = LiveFeed(dash, poll_s=3600.0, keepalive_s=5.0, clock=clock)  # refreshed by hand below

    async def open_streams() -> tuple[int, int, str, int]:
        async with feed.subscribe(None) as a, feed.subscribe(None) as b, feed.subscribe("gh1") as c:
            assert a is b and a is not c and set(feed.topics) == {None, "gh1"}
            first = (feed.builds, a.version)
            await feed.refresh(None, a)
            assert (feed.builds, a.version) == first, "nothing changed, keep-alive not due: no new event"
            clock.now += 5.0
            await feed.refresh(None, a)
            assert a.version == first[1] + 1, "the keep-alive refreshes the ages"
            return first[0], a.version, a.text, len(feed.topics)

    builds, version, text, topics = client.portal.call(open_streams)  # type: ignore[union-attr]
    assert builds == 2 and version == 2 and topics == 2, "one build per page, however many streams"
    assert text.startswith("event: overview\ndata: [") and '"id":"gh1"' in text and '"id":"gh2"' in text
    assert feed.topics == {}, "the last stream closed: the page's task is gone"

    runtime = app.state.runtime

    async def a_decision_changes_the_page() -> tuple[int, int]:
        async with feed.subscribe("gh1") as topic:
            before = topic.version
            runtime.on_telemetry("gh1", _telemetry(1))
            deadline = time.monotonic() + 20
            while "gh1" not in runtime.dispatch.observations and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            waiter = asyncio.create_task(topic.next(before))
            await feed.refresh("gh1", topic)
            await asyncio.wait_for(waiter, 1.0)  # a waiting stream wakes at once
            return before, topic.version

    before, after = client.portal.call(a_decision_changes_the_page)  # type: ignore[union-attr]
    assert after == before + 1



def test_pages_polled_together_build_in_separate_turns_of_the_loop(client: TestClient,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages whose polls fall due together must not build back to back in one turn of the loop: a
    decision arriving meanwhile would wait for all of them. The polls are released by one event, so
    they wake in the same turn; each build must then see the loop turn in between."""
    app: Any = client.app
    dash = app.state.dashboard
    poll_s = 987.0  # only the feed sleeps this long: its polls wait on `due` instead
    feed = LiveFeed(dash, poll_s=poll_s, keepalive_s=0.0)  # every poll builds
    real_sleep, real_live, real_summary = asyncio.sleep, dash.live, dash.summary
    due: list[asyncio.Event] = []
    turns, seen = [0], []

    async def sleep(delay: float, result: Any = None) -> Any:
        if delay == poll_s:
            await due[0].wait()
            return result
        return await real_sleep(delay, result)

    def record(build: Any) -> Any:
        def wrapped(gh: str) -> Any:
            seen.append(turns[0])
            return build(gh)
        return wrapped

    async def run() -> None:
        due.append(asyncio.Event())

        async def ticker() -> None:  # one increment per turn of the loop
            while True:
                turns[0] += 1
                await real_sleep(0)
        tick = asyncio.create_task(ticker())
        try:
            async with feed.subscribe("gh1"), feed.subscribe("gh2"), feed.subscribe(None):
                await real_sleep(0.05)  # every topic's task is waiting for its poll
                seen.clear()
                due[0].set()  # all polls due in the same instant: the waiting ones wake ...
                due[0].clear()  # ... and the next polls wait again
                for _ in range(200):
                    await real_sleep(0)
                    if len(seen) >= 4:
                        break
        finally:
            tick.cancel()

    monkeypatch.setattr(asyncio, "sleep", sleep)
    monkeypatch.setattr(dash, "live", record(real_live))
    monkeypatch.setattr(dash, "summary", record(real_summary))
    client.portal.call(run)  # type: ignore[union-attr]
    assert len(seen) >= 4, "every page built after its poll (gh1, gh2 and the overview's two rows)"
    pages = seen[:2] + seen[2:3]  # the two greenhouse pages, then the overview's first row
    assert len(set(pages)) == len(pages), f"pages built in one turn of the loop: turns {seen}"
