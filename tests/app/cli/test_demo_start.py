"""``greentwin demo``'s start: its port, data directory, broker and topic root settled first, each
failure one line; demos sharing a broker kept apart by their topic roots (on the real broker)."""

from __future__ import annotations

import argparse
import os
import queue
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from app.api.edge_status import EdgeStatusWatcher
from app.cli.demo_start import (
    DemoBlocked,
    check_port_free,
    default_data_dir,
    demo_topic_root,
    hold_data_dir,
    plan_broker,
    prepare_demo,
)
from app.mqtt.bridge import MqttBridge
from plantsim.sim import PlantSim
from tests.app.procs import wait_until
from wire.connection import parse_mqtt_url
from wire.topics import Command, Telemetry, service_status_topic, status_topic, validate_topic_root

ZONES = 3


def _free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def clean_env() -> Iterator[None]:
    """No GREENTWIN_* from the caller, and none of what prepare_demo sets left behind."""
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("GREENTWIN_")]:
        del os.environ[key]
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_topic_root_is_stable_per_demo_and_differs_between_demos(tmp_path: Path) -> None:
    a, b = tmp_path / "demo-data", tmp_path / "demo-data-8001"
    root = demo_topic_root(a, host="box-1")
    assert validate_topic_root(root) == root and root.startswith("greentwin-demo-")
    assert demo_topic_root(a, host="box-1") == root  # a restart keeps its topics
    assert demo_topic_root(Path(os.path.relpath(a)), host="box-1") == root  # however the directory is spelled
    assert len({root, demo_topic_root(b, host="box-1"), demo_topic_root(a, host="box-2")}) == 3


def test_a_second_demo_gets_its_own_data_directory() -> None:
    assert default_data_dir(8000) == Path("demo-data")
    assert default_data_dir(8001) == Path("demo-data-8001")


def test_a_port_in_use_is_one_line_naming_another(tmp_path: Path) -> None:
    with closing(socket.socket()) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(DemoBlocked,
                           match=rf"port {port} on 127\.0\.0\.1 is in use.*PORT={port + 1}") as caught:
            check_port_free(port)
    assert "\n" not in str(caught.value)
    check_port_free(port)  # free again
    with pytest.raises(DemoBlocked, match="not a TCP port"):
        check_port_free(70000)


def test_one_demo_per_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "d"
    held = hold_data_dir(data)
    try:
        with pytest.raises(DemoBlocked, match=rf"in use by another demo \(pid {os.getpid()}\).*--data-dir"):
            hold_data_dir(data)
    finally:
        held.close()
    hold_data_dir(data).close()  # let go when the first demo ends


def test_the_embedded_broker_only_where_the_demo_can_stand_one_up() -> None:
    with closing(socket.socket()) as broker:
        broker.bind(("127.0.0.1", 0))
        broker.listen()
        port = broker.getsockname()[1]
        url = f"mqtt://127.0.0.1:{port}"
        assert plan_broker(url, parse_mqtt_url(url)) is False  # something listens: use it
    closed = _free_port()
    for url in (f"mqtt://127.0.0.1:{closed}", f"mqtt://localhost:{closed}"):
        assert plan_broker(url, parse_mqtt_url(url)) is True
    tls = f"mqtts://127.0.0.1:{closed}"
    with pytest.raises(DemoBlocked, match="plain mqtt:// only"):
        plan_broker(tls, parse_mqtt_url(tls))
    remote = "mqtt://user:hunter2@192.0.2.1:1883"  # TEST-NET-1: never answers
    with pytest.raises(DemoBlocked,
                       match=r"no MQTT broker answers at mqtt://user:\*\*\*@192\.0\.2\.1:1883") as caught:
        plan_broker(remote, parse_mqtt_url(remote))
    assert "hunter2" not in str(caught.value)


def test_prepare_takes_the_url_and_a_root_of_its_own(tmp_path: Path, clean_env: None) -> None:
    closed = _free_port()
    args = argparse.Namespace(port=_free_port(), mqtt_url=f"mqtt://127.0.0.1:{closed}",
                              data_dir=str(tmp_path / "a"), speed=60.0, retrain_after=90.0)
    start = prepare_demo(args)
    try:
        assert start.target.port == closed and start.embedded is True
        assert start.topic_root == demo_topic_root(tmp_path / "a")
        assert os.environ["GREENTWIN_DATABASE_URL"].endswith(
            str((tmp_path / "a" / "greentwin.sqlite3").resolve()))
    finally:
        start.lock.close()


def _demo(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENTWIN_")} | (env_extra or {})
    return subprocess.run([sys.executable, "-m", "app.cli", "demo", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_help_names_the_broker_it_would_use_without_its_password() -> None:
    done = _demo("--help", env_extra={"GREENTWIN_MQTT_URL": "mqtt://svc:s3cret@broker.site:1884"})
    text = " ".join(done.stdout.split())  # argparse wraps lines
    assert done.returncode == 0 and "MQTT broker: mqtt://svc:***@broker.site:1884" in text \
        and "s3cret" not in text
    assert "--mqtt-url" in text and "embedded broker" in text and "greentwin-demo-" in text
    plain = " ".join(_demo("--help").stdout.split())
    assert "MQTT broker: mqtt://127.0.0.1:1883" in plain


def test_a_start_that_cannot_proceed_says_why_in_one_line(tmp_path: Path) -> None:
    """As a process: exit 2, one line on stderr, no traceback, nothing started."""
    port, closed = _free_port(), _free_port()
    held = hold_data_dir(tmp_path / "held")
    try:
        cases: list[tuple[list[str], dict[str, str], str]] = [
            (["--mqtt-url", "mqtt://192.0.2.1:1883"], {}, "no MQTT broker answers at mqtt://192.0.2.1:1883"),
            (["--mqtt-url", f"http://127.0.0.1:{closed}"], {}, "unsupported MQTT URL scheme 'http'"),
            (["--data-dir", str(tmp_path / "held")], {}, f"in use by another demo (pid {os.getpid()})"),
            ([], {"GREENTWIN_MQTT_TOPIC_ROOT": "site/a"},
             "GREENTWIN_MQTT_TOPIC_ROOT: invalid MQTT topic root"),
        ]
        for extra, env, expected in cases:
            argv = ["--port", str(port), "--data-dir", str(tmp_path / uuid.uuid4().hex), *extra]
            done = _demo(*argv, env_extra=env)
            lines = done.stderr.strip().splitlines()
            assert done.returncode == 2 and len(lines) == 1, (extra, done.stderr)
            assert lines[0].startswith("error: ") and expected in lines[0], lines[0]
        with closing(socket.socket()) as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            done = _demo("--port", str(busy.getsockname()[1]), "--data-dir", str(tmp_path / "p"))
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "is in use" in done.stderr
    finally:
        held.close()


# --- on the real broker: two demos' worth of service and plants, one broker --------------------------


class _Demo:
    """A demo's MQTT side: its service bridge, its edge status watcher and its plant ``gh1``."""

    def __init__(self, url: str, root: str, seed: int) -> None:
        self.root = root
        self.telemetry: queue.Queue[Telemetry] = queue.Queue()
        self.bridge = MqttBridge(url, zones=ZONES, known_greenhouses=lambda g: g == "gh1", topic_root=root,
                                 on_telemetry=lambda _g, t: self.telemetry.put(t), max_future_s=3600.0)
        self.edge = EdgeStatusWatcher(url, topic_root=root)
        self.sim = PlantSim(url, ["gh1"], zones=ZONES, dt_s=60, seed=seed, topic_root=root)

    def start(self) -> None:
        self.bridge.start()
        self.edge.start()
        assert self.bridge.wait_ready(10) and self.sim.start(10)

    def close(self) -> None:
        self.sim.close()
        self.bridge.close()
        self.edge.stop()


@pytest.fixture
def two_demos(mqtt_available: tuple[str, int], tmp_path: Path) -> Iterator[tuple[_Demo, _Demo]]:
    host, port = mqtt_available
    url = f"mqtt://{host}:{port}"
    tag = uuid.uuid4().hex[:6]  # runs of this test never meet either
    roots = [demo_topic_root(tmp_path / f"demo-data-{n}", host=f"test-{tag}") for n in (1, 2)]
    demos = (_Demo(url, roots[0], seed=1), _Demo(url, roots[1], seed=2))
    try:
        for d in demos:
            d.start()
        yield demos
    finally:
        for d in demos:
            d.close()
        cleaner = mqtt.Client(CallbackAPIVersion.VERSION2)
        cleaner.connect(host, port)
        cleaner.loop_start()
        for root in roots:  # the retained status messages
            for name in (status_topic("gh1", root), service_status_topic(root)):
                cleaner.publish(name, b"", qos=1, retain=True).wait_for_publish(5)
        cleaner.disconnect()
        cleaner.loop_stop()


@pytest.mark.mqtt
def test_demos_on_one_broker_hear_only_their_own_plants(two_demos: tuple[_Demo, _Demo]) -> None:
    """Both demos have a greenhouse ``gh1``: each service sees its own plant's telemetry and status,
    and its commands reach its own plant only."""
    a, b = two_demos
    assert a.root != b.root
    sent_a = a.sim.step_once()["gh1"]
    assert a.telemetry.get(timeout=5) == sent_a
    sent_b = b.sim.step_once()["gh1"]
    assert b.telemetry.get(timeout=5) == sent_b
    time.sleep(0.5)  # anything crossing over would have arrived by now
    assert a.telemetry.empty() and b.telemetry.empty()
    assert a.bridge.inbound.snapshot()["accepted"] == 1 == b.bridge.inbound.snapshot()["accepted"]

    command = Command(cmd_id=uuid.uuid4(), ts=datetime.now(UTC), seq=1, ttl_s=30.0, mode="auto",
                      valves=[1, 0, 1], pump_pct=60.0, light_pct=0.0, policy_version="test")
    a.bridge.publish_command("gh1", command)
    wait_until(lambda: a.sim.state["gh1"].applied_count == 1, 5.0, "demo a's plant applying its command",
               interval=0.02)
    time.sleep(0.5)
    assert b.sim.state["gh1"].applied_count == 0
    wait_until(lambda: a.edge.get("gh1").state == "online" and b.edge.get("gh1").state == "online", 5.0,
               "both demos seeing their own gh1 online", interval=0.02)
    a.sim.close()
    wait_until(lambda: a.edge.get("gh1").state == "offline", 5.0, "demo a seeing its gh1 go offline",
               interval=0.02)
    assert b.edge.get("gh1").state == "online"
