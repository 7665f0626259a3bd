"""What ``greentwin demo`` settles before it starts anything: its data directory, port, broker and
MQTT topic root. A start that cannot proceed raises :class:`DemoBlocked`, one line saying what to
do, instead of failing half-way with a traceback.

Several demos may share one broker (a site's Mosquitto, or the embedded broker the first demo
started). Each takes a topic root of its own unless ``GREENTWIN_MQTT_TOPIC_ROOT`` names one, so no
demo's service hears another demo's plants or commands them; and each needs a data directory of
its own (its SQLite database and keys), which it holds locked while it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import hashlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from wire.connection import MqttTarget, redact_url

DEFAULT_PORT = 8000
DEFAULT_MQTT_URL = "mqtt://127.0.0.1:1883"
DEMO_ROOT_PREFIX = "greentwin-demo-"
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost"})
"""Where the demo may start its embedded broker: this machine's loopback, as the demo's URL names it."""
LOCK_NAME = ".demo.lock"


class DemoBlocked(Exception):
    """The demo cannot start; the message is the one line to print."""


@dataclass
class DemoStart:
    """What the demo runs with, settled before anything is started."""

    data: Path
    url: str
    """The broker's URL as configured (may carry credentials: never printed as is)."""
    target: MqttTarget
    topic_root: str
    embedded: bool
    """True: nothing listens at ``target``, start the embedded broker there."""
    lock: IO[str]
    """The data directory's lock, held until the demo ends (closing it lets go)."""


def add_demo_arguments(demo: argparse.ArgumentParser) -> None:
    """``greentwin demo``'s options; the help names the broker the demo would use now."""
    broker = redact_url(os.environ.get("GREENTWIN_MQTT_URL") or DEFAULT_MQTT_URL)
    demo.description = (
        f"The service, two simulated greenhouses and the dashboard in one process. MQTT broker: {broker} "
        "(--mqtt-url, else GREENTWIN_MQTT_URL, else mqtt://127.0.0.1:1883); when nothing listens there and "
        "the URL names this machine (127.0.0.1, localhost) over plain mqtt://, the demo starts an embedded "
        "broker (amqtt) there, which stops with this demo. Topics are ROOT/<greenhouse>/<channel> with ROOT "
        f"GREENTWIN_MQTT_TOPIC_ROOT, else {DEMO_ROOT_PREFIX}<8 hex> of this host and the data directory, "
        "so demos sharing a broker never hear each other.")
    demo.add_argument("--port", type=int, default=DEFAULT_PORT,
                      help="the API and dashboard on 127.0.0.1:PORT")
    demo.add_argument("--mqtt-url", default=None, metavar="URL",
                      help=f"the MQTT broker (now: {broker}); mqtt://HOST:PORT or mqtts://")
    demo.add_argument("--speed", type=float, default=60.0, help="simulated seconds per wall second")
    demo.add_argument("--data-dir", default=None,
                      help=f"database, keys and retraining runs (default: demo-data, or demo-data-PORT for "
                           f"another --port than {DEFAULT_PORT}); one demo at a time per directory")
    demo.add_argument("--retrain-after", type=float, default=90.0, metavar="S",
                      help="first scheduled `greentwin retrain` this many seconds after start "
                           "(GREENTWIN_RETRAIN_EVERY_S=0: none)")


def default_data_dir(port: int) -> Path:
    """``demo-data``, or ``demo-data-PORT`` for a second demo on another port."""
    return Path("demo-data" if port == DEFAULT_PORT else f"demo-data-{port}")


def demo_topic_root(data: Path, host: str | None = None) -> str:
    """``greentwin-demo-<8 hex>`` of this host's name and the data directory: the same for every
    restart of one demo (its retained status topics are reused, not piled up on the broker), another
    for each other demo, which has another data directory or runs on another host."""
    key = f"{host or socket.gethostname()}:{data.resolve()}"
    return DEMO_ROOT_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:8]


def listening(host: str, port: int) -> bool:
    """True when something accepts TCP connections at ``host:port`` (within half a second)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.settimeout(0.5)
        try:
            return s.connect_ex((host, port)) == 0
        except OSError:  # a name that does not resolve
            return False


def check_port_free(port: int, host: str = "127.0.0.1") -> None:
    """The API's port can be bound, else :class:`DemoBlocked` saying how to pick another."""
    if not 0 < port < 65536:
        raise DemoBlocked(f"--port {port} is not a TCP port (1-65535)")
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no obstacle
        try:
            s.bind((host, port))
        except OSError as exc:
            what = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror})"
            raise DemoBlocked(f"port {port} on {host} {what}: pick another, e.g. `make demo PORT={port + 1}` "
                              f"or `greentwin demo --port {port + 1}`") from None


def hold_data_dir(data: Path) -> IO[str]:
    """Make ``data`` and lock it for this process, else :class:`DemoBlocked` naming the holder."""
    try:
        data.mkdir(parents=True, exist_ok=True)
        lock = open(data / LOCK_NAME, "a+")  # noqa: SIM115 - held open for the demo's life
    except OSError as exc:
        raise DemoBlocked(f"cannot use {data} as the demo's data directory ({exc.strerror}): "
                          "give a writable --data-dir") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        holder = lock.read().strip() or "?"
        lock.close()
        raise DemoBlocked(f"{data} is in use by another demo (pid {holder}): give this one its own "
                          "--data-dir (a demo on another --port gets demo-data-PORT)") from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def plan_broker(url: str, target: MqttTarget) -> bool:
    """True when the demo must start the embedded broker at ``target``; :class:`DemoBlocked` when
    nothing answers there and the demo cannot stand one up."""
    if listening(target.host, target.port):
        return False
    where = f"{redact_url(url)} ({target.host}:{target.port})"
    if target.tls:
        raise DemoBlocked(f"no MQTT broker answers at {where}, and the embedded broker speaks plain "
                          "mqtt:// only: start the broker, or give --mqtt-url mqtt://127.0.0.1:PORT")
    if target.host not in LOCAL_HOSTS:
        raise DemoBlocked(f"no MQTT broker answers at {where}: start it, or give --mqtt-url "
                          "mqtt://127.0.0.1:PORT for an embedded one on this machine")
    return True


def prepare_demo(args: argparse.Namespace) -> DemoStart:
    """Port, data directory, the settings the demo runs with (set in the environment, where the
    service and the retraining job read them) and its broker; nothing is started yet."""
    from pydantic import ValidationError

    from app.core.config import Settings

    check_port_free(args.port)
    data = Path(args.data_dir) if args.data_dir else default_data_dir(args.port)
    lock = hold_data_dir(data)
    try:
        if args.mqtt_url:
            os.environ["GREENTWIN_MQTT_URL"] = args.mqtt_url
        os.environ.setdefault("GREENTWIN_ENVIRONMENT", "demo")
        os.environ["GREENTWIN_DATABASE_URL"] = f"sqlite:///{(data / 'greentwin.sqlite3').resolve()}"
        os.environ.setdefault("GREENTWIN_MQTT_TOPIC_ROOT", demo_topic_root(data))
        # The simulated plants run `speed` times faster than the wall clock, so their timestamps run
        # ahead of it by design: the edge clock-skew check would refuse them after a minute.
        os.environ.setdefault("GREENTWIN_MAX_CLOCK_SKEW_S", str(10 * 365 * 86400))
        # The nightly job, shortly after start and then every half hour, so it visibly runs end to end.
        os.environ.setdefault("GREENTWIN_RETRAIN_EVERY_S", "1800")
        os.environ.setdefault("GREENTWIN_RETRAIN_DIR", str((data / "retrain").resolve()))
        os.environ.setdefault("GREENTWIN_POLICY_POLL_S", "10")
        try:
            settings = Settings()
        except ValidationError as exc:  # names the setting, never its value (hide_input_in_errors)
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            message = str(first["msg"]).removeprefix("Value error, ")
            raise DemoBlocked(f"GREENTWIN_{loc.upper()}: {message}" if loc else message) from None
        target = settings.mqtt_target()
        embedded = plan_broker(settings.mqtt_url, target)
    except BaseException:
        lock.close()
        raise
    return DemoStart(data=data, url=settings.mqtt_url, target=target, topic_root=settings.mqtt_topic_root,
                     embedded=embedded, lock=lock)
