"""Real processes for reliability tests: a private Mosquitto, ``greentwin serve``, ``greentwin plant-sim``.

Each process writes its output to a log file (never a pipe that could fill up and block it), is
started on a free port, and is stopped (SIGTERM, then SIGKILL) by whoever started it, so a
failing test never leaves a broker or a service behind. :class:`CuttableProxy` stands between
the service and PostgreSQL and can drop every connection and refuse new ones on demand.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from prometheus_client.parser import text_string_to_metric_families

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
# Generous: on a busy two-core machine the service's imports alone can take several seconds.
START_TIMEOUT_S = 90.0


def free_port() -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, *, interval: float = 0.1,
               context: Callable[[], str] | None = None) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned); AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = f"\n{context()}" if context is not None else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{extra}")
        time.sleep(interval)


def _listening(port: int) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return f"({path.name}: no output)"
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return f"--- last {min(lines, len(text))} lines of {path.name} ---\n" + "\n".join(text[-lines:])


class Proc:
    """A child process in its own session whose stdout and stderr go to ``log``."""

    def __init__(self, argv: list[str], log: Path, env: Mapping[str, str] | None = None) -> None:
        self.argv, self.log, self.env = argv, log, dict(env) if env is not None else None
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)

    @property
    def pid(self) -> int:
        assert self.popen is not None, "not started"
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> int:
        """SIGKILL, as a crash or the OOM killer would: no clean-up runs. Returns the exit status."""
        assert self.popen is not None, "not started"
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        return self.popen.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Safe to call twice."""
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=10)

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 40) -> str:
        return _tail(self.log, lines)


class Mosquitto(Proc):
    """A private broker on 127.0.0.1:``port``; ``restart`` reuses the port, as a rebooted broker would."""

    def __init__(self, folder: Path, port: int | None = None, extra_config: str = "", *,
                 config: str | None = None) -> None:
        self.port = port or free_port()
        folder.mkdir(parents=True, exist_ok=True)
        conf = folder / "mosquitto.conf"
        text = config if config is not None else (f"listener {self.port} 127.0.0.1\nallow_anonymous true\n"
                                                  f"{extra_config}")
        conf.write_text(text, encoding="utf-8")
        super().__init__([MOSQUITTO, "-c", str(conf)], folder / "mosquitto.log")

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self) -> None:
        super().start()
        wait_until(lambda: _listening(self.port) or not self.alive, 10, f"mosquitto on port {self.port}")
        if not self.alive:
            raise RuntimeError(f"mosquitto exited at start\n{self.tail()}")

    def restart(self) -> None:
        """Start again on the same port (after :meth:`kill` or :meth:`stop`)."""
        self.start()


def service_env(*, database_url: str, mqtt_url: str, keys: AuditKeys, policy_dir: Path,
                extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``greentwin`` child: no inherited ``GREENTWIN_*``, only what the test sets."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENTWIN_")}
    env.update({"GREENTWIN_DATABASE_URL": database_url, "GREENTWIN_MQTT_URL": mqtt_url,
                "GREENTWIN_ENVIRONMENT": "dev", "GREENTWIN_POLICY_DIR": str(policy_dir),
                "GREENTWIN_AUDIT_KEYS": keys.keyring_json,
                "GREENTWIN_AUDIT_SIGNING_KEY": str(keys.signing_pem),
                "GREENTWIN_SECRET_KEY": keys.api_secret, "GREENTWIN_METRICS_TOKEN": keys.metrics_token,
                "PYTHONUNBUFFERED": "1",
                # The plant simulator runs many times faster than the wall clock: its timestamps
                # run ahead by design, past the default edge clock-skew bound.
                "GREENTWIN_MAX_CLOCK_SKEW_S": str(365 * 86400)})
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class AuditKeys:
    """Test secrets, handed to the service the way production does: audit keyring JSON, signing key
    PEM file, and the API's token signing secret."""

    keyring_json: str
    signing_pem: Path
    api_secret: str

    @classmethod
    def generate(cls, folder: Path) -> AuditKeys:
        from audit.crypto import Keyring, Signer

        folder.mkdir(parents=True, exist_ok=True)
        pem = folder / "audit-signing-key.pem"
        pem.write_bytes(Signer.generate().to_pem())
        return cls(Keyring.generate().to_json(), pem, secrets.token_urlsafe(32))

    @property
    def metrics_token(self) -> str:
        """The bearer token ``/metrics`` is read with (derived, so the keys stay three)."""
        return "metrics-" + self.api_secret

    def open(self) -> tuple[Any, Any]:
        """(Keyring, Signer) for verifying what the service sealed."""
        from audit.crypto import Keyring, Signer

        return Keyring.from_json(self.keyring_json), Signer.from_pem(self.signing_pem.read_bytes())


class Service(Proc):
    """``greentwin serve`` on a free port, with its API reachable through :meth:`get` / :meth:`post`."""

    def __init__(self, folder: Path, env: Mapping[str, str], name: str = "serve") -> None:
        self.port = free_port()
        self.state_dir = folder / "state"
        argv = [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port),
                "--state-dir", str(self.state_dir)]
        super().__init__(argv, folder / f"{name}.log", env)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10.0)

    def start(self) -> None:
        self.launch()
        self.wait_started()

    def launch(self) -> None:
        """Start the process without waiting (the caller can prepare its test meanwhile)."""
        super().start()

    def wait_started(self) -> None:
        """Until the API answers; RuntimeError with the log if the service exited instead."""
        wait_until(self._answers, START_TIMEOUT_S, f"greentwin serve on port {self.port}", interval=0.1,
                   context=self.tail)
        if not self.alive:
            raise RuntimeError(f"greentwin serve exited at start\n{self.tail()}")

    def _answers(self) -> bool:
        if not self.alive:
            return True  # start() reports the exit
        try:
            return self.http.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def stop(self, timeout: float = 15.0) -> None:
        super().stop(timeout)
        self.http.close()

    def readyz(self) -> dict[str, Any]:
        body: dict[str, Any] = self.http.get("/readyz").json()
        return body

    def decisions(self, gh: str) -> int:
        """Decisions this process made for ``gh`` (``greentwin_decisions_total``, every actor)."""
        return int(self.metric("greentwin_decisions_total", greenhouse=gh))

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """Every sample of ``/metrics`` as {(name, labels): value}, read with Prometheus' own parser
        (with the metrics token, as Prometheus scrapes)."""
        token = (self.env or {}).get("GREENTWIN_METRICS_TOKEN", "")
        r = self.http.get("/metrics", headers={"Authorization": f"Bearer {token}"} if token else None)
        r.raise_for_status()
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(r.text) for s in family.samples}

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        want = set(labels.items())
        return sum(v for (n, lab), v in self.metrics().items() if n == name and want <= lab)


def plant_sim_argv(mqtt_url: str, greenhouses: list[str], *, speed: float, seed: int = 0) -> list[str]:
    """``greentwin plant-sim`` (one step of 60 simulated seconds every ``60 / speed`` wall seconds)."""
    return [sys.executable, "-m", "app.cli", "plant-sim", "--greenhouses", ",".join(greenhouses),
            "--speed", str(speed), "--dt-s", "60", "--seed", str(seed), "--mqtt-url", mqtt_url]


@dataclass(frozen=True)
class Observed:
    """One message seen by :class:`MqttObserver`."""

    topic: str
    payload: bytes


class MqttObserver:
    """A plain MQTT client that records what it sees on ``topics`` (what an operator's tool would see)."""

    def __init__(self, port: int, topics: list[str]) -> None:
        self.messages: list[Observed] = []
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2,
                                  client_id=f"gt-observer-{uuid.uuid4().hex[:8]}")
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *_a: self._subscribed.set()
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()
        self.client.subscribe([(t, 1) for t in topics])
        if not self._subscribed.wait(10):
            self.close()
            raise RuntimeError(f"observer could not subscribe on port {port}")

    def _on_message(self, _c: Any, _u: Any, msg: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.messages.append(Observed(msg.topic, bytes(msg.payload)))

    def seen(self, suffix: str = "") -> list[Observed]:
        with self._lock:
            return [m for m in self.messages if m.topic.endswith(suffix)]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def publish_all(port: int, messages: list[tuple[str, bytes]], timeout: float = 120.0) -> None:
    """Publish in order at QoS 1 from one client and wait until the broker has acknowledged every one."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"gt-publisher-{uuid.uuid4().hex[:8]}")
    client.max_inflight_messages_set(100)
    client.connect("127.0.0.1", port, keepalive=60)
    client.loop_start()
    try:
        infos = [client.publish(topic, payload, qos=1) for topic, payload in messages]
        deadline = time.monotonic() + timeout
        for info in infos:
            info.wait_for_publish(max(0.1, deadline - time.monotonic()))
        assert all(info.is_published() for info in infos), "broker acknowledged every message"
    finally:
        client.disconnect()
        client.loop_stop()


class CuttableProxy:
    """A TCP forwarder 127.0.0.1:``port`` -> ``upstream`` that can be cut and restored.

    ``cut`` closes every forwarded connection at once and answers new ones with a reset, as a
    database host that crashed or vanished from the network would; ``restore`` forwards again.
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._cut = False
        self._closed = threading.Event()
        self.accepted = 0
        self.refused = 0
        self._thread = threading.Thread(target=self._accept_loop, name="pg-proxy", daemon=True)
        self._thread.start()

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            _close(a)
            _close(b)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self._thread.join(timeout=5)
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                cut = self._cut
            if cut:
                self.refused += 1
                _reset(conn)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _reset(conn)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._pairs.append((conn, upstream))
                self.accepted += 1
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            with contextlib.suppress(OSError):  # either side cut: the proxy's whole point
                while chunk := src.recv(65536):
                    dst.sendall(chunk)
        finally:
            _close(src)
            _close(dst)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0): the client sees the connection refused at once."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


P = TypeVar("P", bound=Proc)


@contextlib.contextmanager
def running(proc: P) -> Iterator[P]:
    """Start ``proc`` and always stop it, whatever the test does."""
    try:
        proc.start()
        yield proc
    finally:
        proc.stop()
