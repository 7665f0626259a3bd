"""The shipped broker config (deploy/mosquitto.conf + deploy/mosquitto/acl) on a real Mosquitto.

Only file locations and listener ports are rewritten for the test (a private broker on free
ports, a CA made here); every access rule is the shipped one. Mosquitto drops a publish the ACL
refuses without telling the publisher, so each refusal is proven by a subscriber with the right
to read that topic seeing nothing, next to a control message it does see.
"""

from __future__ import annotations

import logging
import os
import queue
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from app.mqtt.bridge import MqttBridge
from plantsim.sim import PlantSim
from tests.app.mqtt.broker_pki import TestCA
from tests.app.procs import MOSQUITTO, Mosquitto, free_port, running, wait_until
from wire.connection import TlsFiles, make_client, parse_mqtt_url
from wire.topics import Ack, Command, command_topic, telemetry_topic

pytestmark = [pytest.mark.mqtt]

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
SERVICE_USER = "greentwin-service"
GH_A, GH_B = "gh-a", "gh-b"
PASSWORDS = {SERVICE_USER: "service-pw-1", GH_A: "gh-a-pw-2", GH_B: "gh-b-pw-3"}


@dataclass
class Site:
    broker: Mosquitto
    tls_port: int
    ca: TestCA
    folder: Path

    def plain(self, user: str | None) -> str:
        creds = f"{user}:{PASSWORDS[user]}@" if user else ""
        return f"mqtt://{creds}127.0.0.1:{self.broker.port}"

    @property
    def tls_url(self) -> str:
        return f"mqtts://127.0.0.1:{self.tls_port}"

    def tls_files(self, cn: str) -> TlsFiles:
        issued = self.ca.issue(cn)
        return TlsFiles(self.ca.ca_file, issued.cert, issued.key)


def deployed_config(folder: Path, plain_port: int, tls_port: int, ca: TestCA) -> str:
    """deploy/mosquitto.conf with this test's file locations and ports; the rules unchanged."""
    server = ca.issue("broker", server=True)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    paths = {"password_file": folder / "passwd", "acl_file": DEPLOY / "mosquitto" / "acl",
             "persistence_location": f"{folder / 'data'}/", "cafile": ca.ca_file, "certfile": server.cert,
             "keyfile": server.key}
    listeners = {"1883": plain_port, "8883": tls_port}
    out = []
    for line in (DEPLOY / "mosquitto.conf").read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition(" ")
        if key in paths:
            line = f"{key} {paths[key]}"
        elif key == "listener":
            line = f"listener {listeners[value.strip()]} 127.0.0.1"
        out.append(line)
    if os.geteuid() == 0:  # mosquitto started as root drops to user "mosquitto", who cannot read tmp_path
        out.append("user root")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    if not Path(MOSQUITTO).exists():
        pytest.skip(f"mosquitto not installed at {MOSQUITTO}")
    folder = tmp_path_factory.mktemp("broker")
    passwd = folder / "passwd"
    for user, pw in PASSWORDS.items():  # the recipe in deploy/README.md
        subprocess.run(["mosquitto_passwd", "-b", *([] if passwd.exists() else ["-c"]), str(passwd), user,
                        pw],
                       check=True, capture_output=True)
    ca = TestCA(folder / "pki")
    plain_port, tls_port = free_port(), free_port()
    broker = Mosquitto(folder, plain_port, config=deployed_config(folder, plain_port, tls_port, ca))
    with running(broker):
        wait_until(lambda: _port_open(tls_port), 10, "the TLS listener")
        yield Site(broker, tls_port, ca, folder)


def _port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Client:
    """A paho client that records connect results, subscription results and messages."""

    def __init__(self, url: str, tls: TlsFiles | None = None) -> None:
        self.connack: queue.Queue[Any] = queue.Queue()
        self.subacks: queue.Queue[list[Any]] = queue.Queue()
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        target = parse_mqtt_url(url)
        self.client = make_client(target, f"gt-acl-{uuid.uuid4().hex[:8]}", f"gt-acl/{uuid.uuid4().hex}", tls)
        self.client.will_clear()
        self.client.on_connect = lambda _c, _u, _f, rc, _p: self.connack.put(rc)
        self.client.on_subscribe = lambda _c, _u, _m, rcs, _p: self.subacks.put(list(rcs))
        self.client.on_message = lambda _c, _u, msg: self.messages.put(msg)
        self.client.connect_async(target.host, target.port, keepalive=10)
        self.client.loop_start()

    def connected(self, timeout: float = 5.0) -> bool:
        try:
            return not self.connack.get(timeout=timeout).is_failure
        except queue.Empty:
            return False

    def subscribe(self, topic: str) -> bool:
        """True when the broker granted the subscription."""
        self.client.subscribe(topic, qos=1)
        return not any(rc.is_failure for rc in self.subacks.get(timeout=5))

    def publish(self, topic: str, payload: bytes) -> None:
        self.client.publish(topic, payload, qos=1).wait_for_publish(5)

    def received(self, timeout: float) -> list[tuple[str, bytes]]:
        got = []
        try:
            while True:
                msg = self.messages.get(timeout=timeout)
                got.append((msg.topic, bytes(msg.payload)))
        except queue.Empty:
            return got

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def clients() -> Iterator[list[Client]]:
    made: list[Client] = []
    yield made
    for c in made:
        c.close()


def _client(clients: list[Client], url: str, tls: TlsFiles | None = None) -> Client:
    c = Client(url, tls)
    clients.append(c)
    return c


def test_anonymous_and_wrong_passwords_are_refused(site: Site, clients: list[Client]) -> None:
    assert not _client(clients, site.plain(None)).connected()
    wrong = f"mqtt://{GH_A}:not-the-password@127.0.0.1:{site.broker.port}"
    assert not _client(clients, wrong).connected()
    assert _client(clients, site.plain(GH_A)).connected()  # the control: right credentials get in


def test_tls_listener_refuses_a_client_without_a_certificate(site: Site, clients: list[Client]) -> None:
    no_cert = TlsFiles(site.ca.ca_file)
    assert not _client(clients, site.tls_url, no_cert).connected()
    other_ca = TestCA(site.folder / f"rogue-{uuid.uuid4().hex[:6]}")  # a certificate the site CA did not sign
    rogue = other_ca.issue(GH_A)
    assert not _client(clients, site.tls_url, TlsFiles(site.ca.ca_file, rogue.cert, rogue.key)).connected()
    assert _client(clients, site.tls_url, site.tls_files(GH_A)).connected()


def test_an_edge_box_cannot_publish_for_another_greenhouse(site: Site, clients: list[Client]) -> None:
    service = _client(clients, site.plain(SERVICE_USER))
    edge_a = _client(clients, site.plain(GH_A))
    assert service.connected() and edge_a.connected()
    assert service.subscribe("greentwin/+/telemetry") and service.subscribe("greentwin/+/estop")
    edge_a.publish(telemetry_topic(GH_B), b'{"forged": true}')
    edge_a.publish(f"greentwin/{GH_B}/estop", b'{"forged": true}')
    edge_a.publish(telemetry_topic(GH_A), b'{"own": true}')  # the control message
    assert service.received(1.0) == [(telemetry_topic(GH_A), b'{"own": true}')]


def test_only_the_service_publishes_commands(site: Site, clients: list[Client]) -> None:
    service = _client(clients, site.plain(SERVICE_USER))
    edge_a = _client(clients, site.plain(GH_A))
    edge_b = _client(clients, site.plain(GH_B))
    assert service.connected() and edge_a.connected() and edge_b.connected()
    assert edge_a.subscribe(command_topic(GH_A))
    edge_b.publish(command_topic(GH_A), b'{"from": "gh-b"}')
    edge_a.publish(command_topic(GH_A), b'{"from": "gh-a itself"}')
    service.publish(command_topic(GH_A), b'{"from": "service"}')
    assert edge_a.received(1.0) == [(command_topic(GH_A), b'{"from": "service"}')]


def test_an_edge_box_reads_only_its_own_commands(site: Site, clients: list[Client]) -> None:
    service = _client(clients, site.plain(SERVICE_USER))
    edge_a = _client(clients, site.plain(GH_A))
    assert service.connected() and edge_a.connected()
    # Mosquitto 2.0 may grant the subscription itself; the ACL is enforced on every delivery.
    for topic in (command_topic(GH_B), "greentwin/+/command", "greentwin/#", "#"):
        edge_a.subscribe(topic)
    service.publish(command_topic(GH_B), b'{"for": "gh-b"}')
    service.publish(command_topic(GH_A), b'{"for": "gh-a"}')
    got = edge_a.received(1.0)
    assert (command_topic(GH_B), b'{"for": "gh-b"}') not in got
    assert (command_topic(GH_A), b'{"for": "gh-a"}') in got  # the control: its own arrive


def test_the_service_and_an_edge_box_work_end_to_end_over_tls(site: Site) -> None:
    """Telemetry in, a command out and its ack back, both sides with client certificates."""
    telemetry: queue.Queue[str] = queue.Queue()
    acks: queue.Queue[tuple[str, Ack]] = queue.Queue()
    bridge = MqttBridge(site.tls_url, tls=site.tls_files(SERVICE_USER), zones=6,
                        on_telemetry=lambda gh, _t: telemetry.put(gh), on_ack=lambda gh, a: acks.put((gh, a)))
    sim = PlantSim(site.tls_url, [GH_A], tls=site.tls_files(GH_A), zones=6)
    with bridge, sim:
        assert bridge.wait_ready(10), "the service connected and subscribed over TLS"
        sim.step_once()
        assert telemetry.get(timeout=10) == GH_A
        cmd = Command(cmd_id=uuid.uuid4(), ts=datetime.now(UTC), seq=1, ttl_s=30.0, mode="auto",
                      valves=[0] * 6, pump_pct=0.0, light_pct=0.0, policy_version="test")
        bridge.publish_command(GH_A, cmd)
        gh, ack = acks.get(timeout=10)
        assert (gh, ack.cmd_id, ack.status) == (GH_A, cmd.cmd_id, "applied")
        assert len(bridge.tracker) == 0


def test_a_refused_connection_never_logs_the_password(site: Site, caplog: pytest.LogCaptureFixture) -> None:
    secret = "wrong-but-still-secret-7f3a"
    caplog.set_level(logging.DEBUG)
    bridge = MqttBridge(f"mqtt://{SERVICE_USER}:{secret}@127.0.0.1:{site.broker.port}", zones=6)
    with bridge:
        wait_until(lambda: "refused" in caplog.text, 10, "the broker's refusal in the log")
        assert not bridge.wait_ready(0.5)
    assert secret not in caplog.text and repr(bridge.target).count(secret) == 0


@pytest.mark.slow
def test_greentwin_serve_runs_over_tls_with_its_client_certificate(site: Site, tmp_path: Path) -> None:
    """The real service process, configured only through its settings, decides for an edge box
    that speaks to it through the shipped broker config over TLS."""
    from app.cli import db as db_cli
    from app.services.greenhouses import add_greenhouse
    from tests.app.procs import AuditKeys, Service, service_env

    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, GH_A, zones=6, soil="loam")
    files = site.tls_files(SERVICE_USER)
    env = service_env(database_url=url, mqtt_url=site.tls_url, keys=AuditKeys.generate(tmp_path / "keys"),
                      policy_dir=tmp_path / "no-policy",
                      extra={"GREENTWIN_MQTT_CA_FILE": str(files.ca_file),
                             "GREENTWIN_MQTT_CERT_FILE": str(files.cert_file),
                             "GREENTWIN_MQTT_KEY_FILE": str(files.key_file)})
    service = Service(tmp_path, env)
    sim = PlantSim(site.tls_url, [GH_A], tls=site.tls_files(GH_A), zones=6)
    try:
        service.start()
        wait_until(lambda: service.readyz()["ready"], 30, "the service connected over TLS",
                   context=service.tail)
        assert sim.start(10)
        for k in range(1, 4):
            sim.step_once()
            wait_until(lambda k=k: service.decisions(GH_A) >= k, 30, f"decision {k}", context=service.tail)
        wait_until(lambda: sim.state[GH_A].applied_count >= 1, 10, "a command applied by the edge box")
    finally:
        sim.close()
        service.stop()
    assert "refused" not in service.output()
