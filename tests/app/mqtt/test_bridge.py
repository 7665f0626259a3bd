"""MqttBridge against the real broker: edge validation, dedup, reconnect, status will, ack tracking."""

from __future__ import annotations

import asyncio
import json
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from app.mqtt.admission import RateLimit
from app.mqtt.bridge import MqttBridge
from app.mqtt.tracker import CommandTracker
from wire.connection import parse_mqtt_url
from wire.topics import (
    MAX_PAYLOAD_BYTES,
    Ack,
    Command,
    EstopEvent,
    Telemetry,
    ack_topic,
    command_topic,
    encode,
    estop_topic,
    telemetry_topic,
)

mqtt_mark = pytest.mark.mqtt


def _gh() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def _wait(pred: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def _telemetry(seq: int, *, boot: str = "b1", ts: datetime | None = None, zones: int = 2) -> dict[str, Any]:
    return {
        "ts": (ts or datetime.now(UTC)).isoformat(), "boot_id": boot, "seq": seq,
        "soil_vwc": [[0.2, None]] * zones, "air_temp_c": 20.0, "air_rh_pct": 50.0, "par_umol_m2_s": 0.0,
        "co2_ppm": 400.0, "leaf_temp_c": 19.5, "flow_l_min": 0.0, "pump_current_a": 0.0,
        "valve_open": [0] * zones, "pump_pct": 0.0, "light_pct": 0.0, "estop": False,
    }


def _command(zones: int = 2, **overrides: Any) -> Command:
    fields: dict[str, Any] = {"cmd_id": uuid.uuid4(), "ts": datetime.now(UTC), "seq": 1, "ttl_s": 30.0,
                              "mode": "auto", "valves": [1] + [0] * (zones - 1), "pump_pct": 50.0,
                              "light_pct": 0.0, "policy_version": "test"}
    fields.update(overrides)
    return Command(**fields)


class Raw:
    """A plain paho client for the test's side of the bus."""

    def __init__(self, host: str, port: int) -> None:
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"gt-raw-{uuid.uuid4().hex[:8]}")
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self._subacks: queue.Queue[int] = queue.Queue()
        self.client.on_message = lambda _c, _u, msg: self.messages.put(msg)
        self.client.on_subscribe = lambda _c, _u, mid, _rc, _p: self._subacks.put(mid)
        self.client.connect(host, port, keepalive=10)
        self.client.loop_start()

    def publish(self, topic: str, payload: bytes | str, retain: bool = False) -> None:
        self.client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(5)

    def subscribe(self, topic: str) -> None:
        _, mid = self.client.subscribe(topic, qos=1)
        assert self._subacks.get(timeout=5) == mid

    def next(self, topic: str, timeout: float = 5.0) -> mqtt.MQTTMessage:
        deadline = time.monotonic() + timeout
        while True:
            msg = self.messages.get(timeout=max(0.01, deadline - time.monotonic()))
            if msg.topic == topic:
                return msg

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def url(mqtt_available: tuple[str, int]) -> str:
    host, port = mqtt_available
    return f"mqtt://{host}:{port}"


@pytest.fixture
def raw(mqtt_available: tuple[str, int]) -> Iterator[Raw]:
    r = Raw(*mqtt_available)
    yield r
    r.close()


@pytest.fixture
def make_bridge(url: str, raw: Raw) -> Iterator[Callable[..., MqttBridge]]:
    """Started, subscribed bridges with a per-test status topic, closed and cleaned afterwards."""
    made: list[MqttBridge] = []

    def make(**kwargs: Any) -> MqttBridge:
        kwargs.setdefault("will_topic", f"greentwin/svc-{uuid.uuid4().hex[:10]}/status")
        bridge = MqttBridge(url, **kwargs)
        made.append(bridge)
        bridge.start()
        assert bridge.wait_ready(10), "bridge did not connect and subscribe"
        return bridge

    yield make
    for bridge in made:
        bridge.close()
        raw.publish(bridge.will_topic, b"", retain=True)  # clear the retained status


@mqtt_mark
def test_accepts_good_telemetry(make_bridge: Callable[..., MqttBridge], raw: Raw) -> None:
    gh = _gh()
    got: queue.Queue[tuple[str, Telemetry]] = queue.Queue()
    bridge = make_bridge(zones=2, on_telemetry=lambda g, t: got.put((g, t)),
                         known_greenhouses=lambda g: g == gh)
    raw.publish(telemetry_topic(gh), json.dumps(_telemetry(0)))
    name, tel = got.get(timeout=5)
    assert name == gh and tel.seq == 0 and tel.soil_vwc == [[0.2, None]] * 2
    assert bridge.stats["accepted"] >= 1


@mqtt_mark
def test_bad_payloads_are_counted_by_reason_and_never_reach_the_handler(
        make_bridge: Callable[..., MqttBridge], raw: Raw) -> None:
    gh = _gh()
    handled: list[int] = []
    rejected: list[str] = []
    bridge = make_bridge(zones=2, on_telemetry=lambda g, t: handled.append(t.seq) if g == gh else None,
                         on_reject=lambda g, reason, _d: rejected.append(reason) if g == gh else None,
                         max_age_s=60)
    old = datetime.now(UTC) - timedelta(minutes=5)
    sends: list[bytes | str] = [
        b"{not json", b"\xff\xfe", json.dumps({**_telemetry(1), "seq": "1"}),   # not_json, not_utf8, schema
        json.dumps(_telemetry(1, zones=3)),                                      # zone_count
        json.dumps(_telemetry(5)),                                               # accepted
        json.dumps(_telemetry(5)),                                               # duplicate
        json.dumps(_telemetry(3)),                                               # out_of_order
        json.dumps(_telemetry(6, ts=old)),                                       # stale
        json.dumps(_telemetry(0, boot="b2")),                                    # new boot: accepted
        json.dumps({**_telemetry(1, boot="b2"), "air_temp_c": 1e999}),           # non_finite
        json.dumps(_telemetry(9, boot="b1")),                                    # old_boot: a replay from
                                                                                 # before
        json.dumps({**_telemetry(2, boot="b2"), "valve_open": [0] * 65}),       # schema: longer than any list
    ]
    for payload in sends:
        raw.publish(telemetry_topic(gh), payload)
    expected = ["not_json", "not_utf8", "schema", "zone_count", "duplicate", "out_of_order", "stale",
                "non_finite",
                "old_boot", "schema"]
    assert _wait(lambda: len(rejected) >= len(expected) and len(handled) >= 2)
    assert rejected == expected
    assert handled == [5, 0]
    counts = bridge.stats["rejected"]
    assert all(counts[reason] >= 1 for reason in expected)


@mqtt_mark
def test_unknown_greenhouse_is_rejected(make_bridge: Callable[..., MqttBridge], raw: Raw) -> None:
    known, stranger = _gh(), _gh()
    handled: list[str] = []
    rejected: list[tuple[str | None, str]] = []
    make_bridge(zones=2, known_greenhouses=lambda g: g == known,
                on_telemetry=lambda g, _t: handled.append(g) if g in (known, stranger) else None,
                on_reject=lambda g, reason, _d: rejected.append((g, reason)) if g in (known, stranger)
                else None)
    raw.publish(telemetry_topic(stranger), json.dumps(_telemetry(0)))
    raw.publish(telemetry_topic(known), json.dumps(_telemetry(0)))
    assert _wait(lambda: handled == [known])
    assert rejected == [(stranger, "unknown_greenhouse")]


@mqtt_mark
def test_handlers_run_on_the_asyncio_loop(url: str, raw: Raw) -> None:
    gh = _gh()

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()

        def on_telemetry(g: str, _t: Telemetry) -> None:
            if g == gh and not done.done():
                done.set_result(threading.get_ident())

        bridge = MqttBridge(url, zones=2, loop=loop, on_telemetry=on_telemetry,
                            will_topic=f"greentwin/svc-{uuid.uuid4().hex[:10]}/status")
        bridge.start()
        try:
            assert await asyncio.to_thread(bridge.wait_ready, 10)
            await asyncio.to_thread(raw.publish, telemetry_topic(gh), json.dumps(_telemetry(0)))
            return await asyncio.wait_for(done, 5), threading.get_ident()
        finally:
            await asyncio.to_thread(bridge.close)
            raw.publish(bridge.will_topic, b"", retain=True)

    handler_thread, loop_thread = asyncio.run(main())
    assert handler_thread == loop_thread


@mqtt_mark
def test_subscriptions_survive_a_forced_reconnect(make_bridge: Callable[..., MqttBridge], raw: Raw,
                                                  mqtt_available: tuple[str, int]) -> None:
    gh = _gh()
    got: queue.Queue[int] = queue.Queue()
    bridge = make_bridge(zones=2, on_telemetry=lambda g, t: got.put(t.seq) if g == gh else None)
    # Another client with the same id takes the session over: the broker drops the bridge, as on a
    # network blip.
    thief = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=bridge.client_id)
    thief.connect(*mqtt_available, keepalive=10)
    thief.loop_start()
    assert _wait(lambda: not bridge.connected)
    thief.disconnect()
    thief.loop_stop()
    assert _wait(lambda: bridge.stats["reconnects"] >= 1 and bridge.wait_ready(0), timeout=10)
    assert bridge.reconnects == bridge.stats["reconnects"]
    raw.publish(telemetry_topic(gh), json.dumps(_telemetry(0)))
    assert got.get(timeout=5) == 0


@mqtt_mark
def test_status_is_online_retained_and_the_will_says_offline(make_bridge: Callable[..., MqttBridge], raw: Raw,
                                                             mqtt_available: tuple[str, int]) -> None:
    bridge = make_bridge()
    watcher = Raw(*mqtt_available)
    try:
        watcher.subscribe(bridge.will_topic)
        first = watcher.next(bridge.will_topic)
        assert (first.payload, first.retain) == (b"online", True)
        # Crash: drop the socket without DISCONNECT and hold off the reconnect; the broker sends the will.
        bridge.client.reconnect_delay_set(min_delay=30, max_delay=30)
        sock = bridge.client.socket()
        assert isinstance(sock, socket.socket)
        sock.shutdown(socket.SHUT_RDWR)
        assert watcher.next(bridge.will_topic).payload == b"offline"
    finally:
        watcher.close()
    late = Raw(*mqtt_available)
    try:
        late.subscribe(bridge.will_topic)
        msg = late.next(bridge.will_topic)
        assert (msg.payload, msg.retain) == (b"offline", True)
    finally:
        late.close()


@mqtt_mark
def test_close_publishes_offline(make_bridge: Callable[..., MqttBridge],
                                 mqtt_available: tuple[str, int]) -> None:
    bridge = make_bridge()
    bridge.close()
    late = Raw(*mqtt_available)
    try:
        late.subscribe(bridge.will_topic)
        msg = late.next(bridge.will_topic)
        assert (msg.payload, msg.retain) == (b"offline", True)
    finally:
        late.close()


@mqtt_mark
def test_command_goes_out_qos1_unretained_and_an_ack_resolves_it(make_bridge: Callable[..., MqttBridge],
                                                                 raw: Raw) -> None:
    gh = _gh()
    acks: queue.Queue[Ack] = queue.Queue()
    bridge = make_bridge(zones=2, on_ack=lambda g, a: acks.put(a) if g == gh else None)
    raw.subscribe(command_topic(gh))
    cmd = _command()
    bridge.publish_command(gh, cmd).wait_for_publish(5)
    msg = raw.next(command_topic(gh))
    assert (msg.qos, msg.retain) == (1, False)
    assert Command.model_validate_json(msg.payload) == cmd
    assert len(bridge.tracker) == 1
    raw.publish(ack_topic(gh), encode(Ack(cmd_id=cmd.cmd_id, ts=datetime.now(UTC), status="applied")))
    assert acks.get(timeout=5).cmd_id == cmd.cmd_id
    assert len(bridge.tracker) == 0


@mqtt_mark
def test_an_ack_that_arrives_before_publish_returns_still_resolves_the_command(
        make_bridge: Callable[..., MqttBridge]) -> None:
    """On a fast link (TCP_NODELAY, edge box next door) the ack can beat ``publish``'s return."""
    gh = _gh()
    acks: queue.Queue[Ack] = queue.Queue()
    bridge = make_bridge(zones=2, on_ack=lambda g, a: acks.put(a) if g == gh else None)
    cmd = _command()
    real_publish = bridge.client.publish

    def publish_acked_at_once(topic: str, payload: bytes, **kw: Any) -> mqtt.MQTTMessageInfo:
        info = real_publish(topic, payload, **kw)
        ack = mqtt.MQTTMessage(topic=ack_topic(gh).encode())
        ack.payload = encode(Ack(cmd_id=cmd.cmd_id, ts=datetime.now(UTC), status="applied"))
        bridge.inbound.on_ack_msg(bridge.client, None, ack)  # delivered by the network thread meanwhile
        return info

    bridge.client.publish = publish_acked_at_once  # type: ignore[method-assign]
    bridge.publish_command(gh, cmd)
    assert acks.get(timeout=5).cmd_id == cmd.cmd_id
    assert len(bridge.tracker) == 0 and bridge.tracker.expired() == []


@mqtt_mark
def test_unacked_command_expires_and_is_retried_with_the_same_id(make_bridge: Callable[..., MqttBridge],
                                                                 raw: Raw) -> None:
    gh = _gh()
    bridge = make_bridge(zones=2, ack_timeout_s=0.2, max_attempts=2)
    raw.subscribe(command_topic(gh))
    cmd = _command()
    bridge.publish_command(gh, cmd)
    assert bridge.tracker.expired() == []
    time.sleep(0.25)
    (overdue,) = bridge.overdue_commands()
    assert overdue.cmd_id == cmd.cmd_id and overdue.attempts == 1
    assert bridge.overdue_commands() == []  # reported once, not on every poll
    assert bridge.can_retry(overdue) and bridge.retry(overdue) is not None
    first, second = raw.next(command_topic(gh)), raw.next(command_topic(gh))
    assert first.payload == second.payload  # same cmd_id: the edge box applies it at most once
    time.sleep(0.25)
    (again,) = bridge.overdue_commands()
    assert again.attempts == 2 and not bridge.can_retry(again) \
        and bridge.retry(again) is None  # attempts used up


@mqtt_mark
def test_an_ack_on_another_greenhouses_topic_resolves_nothing(make_bridge: Callable[..., MqttBridge],
                                                              raw: Raw) -> None:
    """A compromised or confused edge box must not silence another greenhouse's ack time-out."""
    gh, other = _gh(), _gh()
    acks: queue.Queue[tuple[str, Ack]] = queue.Queue()
    bridge = make_bridge(zones=2, on_ack=lambda g, a: acks.put((g, a)))
    cmd = _command()
    bridge.publish_command(gh, cmd).wait_for_publish(5)
    raw.publish(ack_topic(other), encode(Ack(cmd_id=cmd.cmd_id, ts=datetime.now(UTC), status="rejected")))
    assert _wait(lambda: bridge.stats["rejected"].get("foreign_ack", 0) == 1)
    assert len(bridge.tracker) == 1 and acks.empty()  # still pending, nothing delivered for `other`
    raw.publish(ack_topic(gh), encode(Ack(cmd_id=cmd.cmd_id, ts=datetime.now(UTC), status="applied")))
    assert acks.get(timeout=5)[0] == gh and len(bridge.tracker) == 0


@mqtt_mark
def test_an_ack_flood_reaches_no_handler_and_the_real_answer_is_delivered_once(
        make_bridge: Callable[..., MqttBridge], raw: Raw, caplog: pytest.LogCaptureFixture) -> None:
    """One edge credential floods its ack topic: acks for commands nobody sent are counted and dropped
    (nothing to seal), repeats of an answer already heard too, and past the box's rate the rest is
    shed unparsed; the log stays a few lines. The real ack of a real command still gets through once."""
    gh = _gh()
    acks: queue.Queue[Ack] = queue.Queue()
    bridge = make_bridge(zones=2, on_ack=lambda g, a: acks.put(a) if g == gh else None,
                         event_rate_limit=RateLimit(rate_per_s=20.0, burst=400))
    cmd = _command()
    bridge.publish_command(gh, cmd).wait_for_publish(5)
    real = encode(Ack(cmd_id=cmd.cmd_id, ts=datetime.now(UTC), status="applied"))
    raw.publish(ack_topic(gh), real)
    assert acks.get(timeout=5).cmd_id == cmd.cmd_id
    flood = [encode(Ack(cmd_id=uuid.uuid4(), ts=datetime.now(UTC), status="applied")) for _ in range(600)]
    with caplog.at_level("WARNING", logger="app.mqtt.bridge"):
        for k, payload in enumerate(flood):
            raw.client.publish(ack_topic(gh), real if k % 10 == 0 else payload, qos=1)
        raw.publish(ack_topic(gh), real)
        assert _wait(lambda: sum(bridge.stats["rejected"].values()) + bridge.stats["shed"] >= 601, timeout=15)
    stats = bridge.stats
    assert stats["rejected"]["unknown_command"] > 0 and stats["rejected"]["duplicate"] > 0 \
        and stats["shed"] > 0
    assert acks.empty(), "no flooded or repeated ack reached the handler"
    assert len([r for r in caplog.records if r.name == "app.mqtt.bridge"]) <= 12, "the flood flooded the log"


@mqtt_mark
def test_a_retained_estop_press_is_not_a_new_press_at_every_connect(make_bridge: Callable[..., MqttBridge],
                                                                    raw: Raw) -> None:
    """The broker hands a retained message to every new subscription: a press a box published
    retained an hour ago must not latch the greenhouse again at each restart or reconnect."""
    gh = _gh()
    an_hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    raw.publish(estop_topic(gh), json.dumps({"ts": an_hour_ago, "pressed": True, "source": "panel"}),
                retain=True)
    presses: queue.Queue[EstopEvent] = queue.Queue()
    try:
        bridge = make_bridge(zones=2, on_estop=lambda g, e: presses.put(e) if g == gh else None)
        assert _wait(lambda: bridge.stats["rejected"].get("retained", 0) == 1)
        assert presses.empty(), "the retained press was taken as a new one"
        live = EstopEvent(ts=datetime.now(UTC), pressed=True, source="panel")
        raw.publish(estop_topic(gh), encode(live))  # a real press still gets through at once
        assert presses.get(timeout=5).ts == live.ts
    finally:
        raw.publish(estop_topic(gh), b"", retain=True)


@mqtt_mark
def test_one_boxs_refused_telemetry_does_not_hold_up_another_greenhouses(
        make_bridge: Callable[..., MqttBridge], raw: Raw) -> None:
    """Valid JSON under the size cap that the schema refuses (14,000 lists where 64 zones fit) cost the
    bridge's one network thread ~0.2 s each to validate (101 of them held another greenhouse's telemetry
    back 19 s); a list longer than any payload holds is now refused before the schema runs, and past the
    box's byte budget nothing is parsed at all. What is left is reading 5.6 MB off the socket."""
    hostile_gh, gh = _gh(), _gh()
    hostile = ('{"soil_vwc": [' + ",".join(["[0]"] * 14000) + "]}").encode()
    assert len(hostile) <= MAX_PAYLOAD_BYTES
    arrived: dict[int, float] = {}
    bridge = make_bridge(zones=2,
                         on_telemetry=lambda g, t: arrived.setdefault(t.seq, time.monotonic()) if g == gh
                         else None)
    for _ in range(100):  # 5.6 MB on the hostile box's own topic
        raw.client.publish(telemetry_topic(hostile_gh), hostile, qos=1)
    raw.publish(telemetry_topic(hostile_gh), hostile)
    sent = time.monotonic()
    raw.publish(telemetry_topic(gh), json.dumps(_telemetry(2)))
    assert _wait(lambda: 2 in arrived, timeout=30)
    assert arrived[2] - sent < 5.0, \
        f"{gh}'s telemetry waited {arrived[2] - sent:.1f} s behind refused messages"
    assert _wait(lambda: bridge.stats["rejected"].get("schema", 0) + bridge.stats["shed"] >= 101)


def test_a_byte_budget_takes_what_each_message_costs() -> None:
    """The bridge's telemetry budget per greenhouse counts bytes: big payloads run it down sooner."""
    budget = RateLimit(rate_per_s=1000.0, burst=4000)
    assert [budget.allow("gh", 0.0, 1500) for _ in range(3)] == [True, True, False]
    assert budget.allow("other", 0.0, 4000)  # each greenhouse has its own
    assert not budget.allow("gh", 0.4, 1500) and budget.allow("gh", 0.5, 1500)  # 1,000 bytes/s come back


def test_the_tracker_tells_first_answers_from_repeats_unknown_and_foreign_commands() -> None:
    tracker = CommandTracker(ack_timeout_s=10)
    cmd = _command()
    tracker.record("gh1", cmd)
    assert tracker.match("gh2", cmd.cmd_id, "applied") == "foreign"
    assert tracker.match("gh1", uuid.uuid4(), "applied") == "unknown"
    assert tracker.match("gh1", cmd.cmd_id, "applied") == "first"
    assert tracker.match("gh1", cmd.cmd_id, "applied") == "repeat"
    assert tracker.match("gh1", cmd.cmd_id, "expired") == "first"  # another answer is news
    # A command an earlier run sent (read back from the stored decisions at start) still matches.
    earlier, answered = uuid.uuid4(), uuid.uuid4()
    tracker.remember("gh1", earlier)
    tracker.remember("gh1", answered, "applied")
    assert tracker.match("gh1", earlier, "applied") == "first"
    assert tracker.match("gh1", answered, "applied") == "repeat"


def test_command_tracker_resolves_only_the_owning_greenhouse() -> None:
    tracker = CommandTracker(ack_timeout_s=10)
    cmd = _command()
    tracker.record("gh1", cmd)
    assert tracker.resolve("gh2", cmd.cmd_id) is None and len(tracker) == 1
    assert tracker.owner(cmd.cmd_id) == "gh1"
    assert tracker.resolve("gh1", cmd.cmd_id) is not None and len(tracker) == 0
    assert tracker.owner(cmd.cmd_id) == "gh1"  # remembered after the ack: a late foreign ack is still foreign


def test_command_tracker_times_out_and_limits_retries() -> None:
    now = [100.0]
    tracker = CommandTracker(ack_timeout_s=10, max_attempts=2, clock=lambda: now[0])
    a, b = _command(), _command()
    tracker.record("gh1", a)
    tracker.record("gh1", b)
    assert tracker.expired(now=109.9) == []
    assert tracker.resolve("gh1", a.cmd_id) is not None
    (lost,) = tracker.expired(now=110.0)
    assert lost.cmd_id == b.cmd_id and tracker.can_retry(lost)
    again = tracker.record("gh1", b, now=111.0)
    assert again.attempts == 2 and not tracker.can_retry(again)
    assert tracker.resolve("gh1", uuid.uuid4()) is None
    assert [p.cmd_id for p in tracker.expired(now=121.0)] == [b.cmd_id]
    assert len(tracker) == 0


def test_parse_mqtt_url() -> None:
    t = parse_mqtt_url("mqtts://user:p%40ss@broker.example:9000")
    assert (t.host, t.port, t.tls, t.username, t.password) == ("broker.example", 9000, True, "user", "p@ss")
    assert parse_mqtt_url("mqtt://127.0.0.1").port == 1883
    with pytest.raises(ValueError):
        parse_mqtt_url("http://127.0.0.1")
