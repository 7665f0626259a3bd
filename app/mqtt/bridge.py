"""MQTT bridge between the edge boxes and the control service.

Runs paho's network thread, validates every inbound payload at the edge (a bad one is logged,
counted by reason and dropped, it never reaches a handler or raises out of a paho callback),
drops duplicate / out-of-order / stale telemetry, and tracks which commands still await an ack.
Handlers run on the asyncio loop when one is given, so service code never touches paho's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal
from urllib.parse import unquote, urlsplit
from uuid import UUID

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from pydantic import BaseModel

from app.mqtt.topics import (
    Ack,
    Command,
    EstopEvent,
    PayloadError,
    Telemetry,
    command_topic,
    encode,
    parse_payload,
    parse_telemetry,
    parse_topic,
    subscription,
)
from twin.config import DEFAULT_ZONES

logger = logging.getLogger(__name__)

SERVICE_STATUS_TOPIC: Final = "greentwin/service/status"
ONLINE: Final = b"online"
OFFLINE: Final = b"offline"
QOS: Final = 1
RECONNECT_MIN_S: Final = 1
RECONNECT_MAX_S: Final = 30

# Bridge-level reasons on top of topics.REASON_CODES (payload errors).
BridgeReason = Literal["bad_topic", "unknown_greenhouse", "duplicate", "out_of_order", "stale"]

TelemetryHandler = Callable[[str, Telemetry], Any]
AckHandler = Callable[[str, Ack], Any]
EstopHandler = Callable[[str, EstopEvent], Any]
RejectHandler = Callable[[str | None, str, str], Any]


# --- connection helpers (shared with the plant simulator) -------------------------------------


@dataclass(frozen=True)
class MqttTarget:
    """Where and how to connect, parsed from ``mqtt[s]://[user[:pass]@]host[:port]``."""

    host: str
    port: int
    tls: bool
    username: str | None = None
    password: str | None = None


def parse_mqtt_url(url: str) -> MqttTarget:
    """Parse a broker URL; ValueError for schemes we cannot honour (rather than silently going plain-text)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("mqtt", "tcp"):
        tls, default_port = False, 1883
    elif scheme in ("mqtts", "ssl"):
        tls, default_port = True, 8883
    else:
        raise ValueError(f"unsupported MQTT URL scheme {parts.scheme!r} in {url!r}: use mqtt:// or mqtts://")
    if not parts.hostname:
        raise ValueError(f"MQTT URL {url!r} has no host")
    return MqttTarget(
        host=parts.hostname,
        port=parts.port or default_port,
        tls=tls,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
    )


def no_delay(client: mqtt.Client, userdata: Any, sock: Any) -> None:
    """``on_socket_open``: send each MQTT packet at once (TCP_NODELAY).

    With Nagle's algorithm a small packet waits for the ACK of the previous one, and the peer
    delays that ACK by up to 40 ms: every telemetry -> command round trip paid it. paho leaves
    the option unset; the broker needs ``set_tcp_nodelay true`` for its side (deploy/mosquitto.conf).
    """
    with contextlib.suppress(OSError, AttributeError):  # websockets or a non-TCP transport
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def make_client(target: MqttTarget, client_id: str, will_topic: str) -> mqtt.Client:
    """A VERSION2 client with a retained ``offline`` will, capped exponential reconnect back-off and
    no Nagle delay."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311, clean_session=True)
    client.on_socket_open = no_delay
    if target.username is not None:
        client.username_pw_set(target.username, target.password)
    if target.tls:
        client.tls_set()
    client.will_set(will_topic, OFFLINE, qos=QOS, retain=True)
    client.reconnect_delay_set(min_delay=RECONNECT_MIN_S, max_delay=RECONNECT_MAX_S)
    return client


# --- pending-ack tracking -----------------------------------------------------------------------


@dataclass
class PendingCommand:
    """One published command awaiting its ack; ``attempts`` counts publications of this cmd_id."""

    gh: str
    command: Command
    sent_at: float
    attempts: int = 1

    @property
    def cmd_id(self) -> UUID:
        return self.command.cmd_id


class CommandTracker:
    """Commands published but not yet acknowledged.

    ``expired`` hands each overdue command back exactly once per publication (no repeated alarms);
    the caller alarms and may re-publish the same cmd_id (the edge box applies it at most once)
    until ``max_attempts`` publications have been made. Thread-safe: acks arrive on paho's thread.
    """

    def __init__(self, ack_timeout_s: float = 10.0, max_attempts: int = 3,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ack_timeout_s <= 0 or max_attempts < 1:
            raise ValueError("ack_timeout_s must be > 0 and max_attempts >= 1")
        self.ack_timeout_s = ack_timeout_s
        self.max_attempts = max_attempts
        self._clock = clock
        self._pending: dict[UUID, PendingCommand] = {}
        self._attempts: dict[UUID, int] = {}
        self._lock = threading.Lock()

    def record(self, gh: str, command: Command, now: float | None = None) -> PendingCommand:
        """Note a publication; publishing a cmd_id again (a retry) bumps its attempt count."""
        sent = self._clock() if now is None else now
        with self._lock:
            attempts = self._attempts.get(command.cmd_id, 0) + 1
            self._attempts[command.cmd_id] = attempts
            entry = PendingCommand(gh=gh, command=command, sent_at=sent, attempts=attempts)
            self._pending[command.cmd_id] = entry
            return entry

    def resolve(self, cmd_id: UUID) -> PendingCommand | None:
        """An ack (of any status) arrived; None if the command was unknown or already given up on."""
        with self._lock:
            self._attempts.pop(cmd_id, None)
            return self._pending.pop(cmd_id, None)

    def expired(self, now: float | None = None) -> list[PendingCommand]:
        """Remove and return commands with no ack within ``ack_timeout_s`` of their last publication."""
        t = self._clock() if now is None else now
        with self._lock:
            overdue = [p for p in self._pending.values() if t - p.sent_at >= self.ack_timeout_s]
            for p in overdue:
                del self._pending[p.cmd_id]
                if p.attempts >= self.max_attempts:
                    self._attempts.pop(p.cmd_id, None)  # given up: forget it entirely
            return overdue

    def can_retry(self, entry: PendingCommand) -> bool:
        """Whether another publication of this cmd_id is still allowed."""
        return entry.attempts < self.max_attempts

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)


# --- the bridge ---------------------------------------------------------------------------------


@dataclass
class _Stats:
    accepted: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    reconnects: int = 0


class MqttBridge:
    """The service's MQTT connection: validated telemetry/acks/e-stops in, commands out.

    Subscriptions are (re)made in ``on_connect`` because the session is clean: after a reconnect
    the broker has forgotten them. The service's own status topic holds a retained ``online``
    while connected and the broker's retained ``offline`` will after an unclean loss.
    """

    def __init__(
        self,
        url: str,
        *,
        client_id: str | None = None,
        will_topic: str = SERVICE_STATUS_TOPIC,
        on_telemetry: TelemetryHandler | None = None,
        on_ack: AckHandler | None = None,
        on_estop: EstopHandler | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        zones: int | Callable[[str], int] = DEFAULT_ZONES,
        max_age_s: float = 120.0,
        known_greenhouses: Callable[[str], bool] | None = None,
        ack_timeout_s: float = 10.0,
        max_attempts: int = 3,
        on_reject: RejectHandler | None = None,
        wall_clock: Callable[[], float] = time.time,
        keepalive: int = 30,
    ) -> None:
        self.target = parse_mqtt_url(url)
        self.client_id = client_id or f"greentwin-service-{uuid.uuid4().hex[:8]}"
        self.will_topic = will_topic
        self.on_telemetry = on_telemetry
        self.on_ack = on_ack
        self.on_estop = on_estop
        self.on_reject = on_reject
        self.loop = loop
        self.max_age_s = max_age_s
        self.known_greenhouses = known_greenhouses
        self.tracker = CommandTracker(ack_timeout_s=ack_timeout_s, max_attempts=max_attempts)
        self.keepalive = keepalive
        self._zones = zones
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._stats = _Stats()
        self._last_seen: dict[str, tuple[str, int]] = {}  # gh -> (boot_id, last accepted seq)
        self._connects = 0
        self._sub_mid: int | None = None
        self._ready = threading.Event()
        self._started = False

        self.client = make_client(self.target, self.client_id, will_topic)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_subscribe = self._on_subscribe
        self.client.message_callback_add(subscription("telemetry"), self._on_telemetry_msg)
        self.client.message_callback_add(subscription("ack"), self._on_ack_msg)
        self.client.message_callback_add(subscription("estop"), self._on_estop_msg)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Connect in the background; paho's thread keeps retrying until the broker answers."""
        if self._started:
            return
        self._started = True
        self.client.connect_async(self.target.host, self.target.port, keepalive=self.keepalive)
        self.client.loop_start()

    def wait_ready(self, timeout: float = 10.0) -> bool:
        """Block until connected *and* subscribed (the broker acknowledged the filters)."""
        return self._ready.wait(timeout)

    @property
    def connected(self) -> bool:
        return self.client.is_connected()

    def close(self, timeout: float = 2.0) -> None:
        """Mark the service offline (a clean disconnect suppresses the will), then stop the thread."""
        if not self._started:
            return
        self._started = False
        try:
            if self.client.is_connected():
                info = self.client.publish(self.will_topic, OFFLINE, qos=QOS, retain=True)
                info.wait_for_publish(timeout)
        except (RuntimeError, ValueError) as exc:
            logger.warning("could not publish offline status on close: %s", exc)
        self.client.disconnect()
        self.client.loop_stop()
        self._ready.clear()

    def __enter__(self) -> MqttBridge:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def stats(self) -> dict[str, Any]:
        """Snapshot: ``accepted``, ``rejected`` {reason: count}, ``reconnects``."""
        with self._lock:
            return {"accepted": self._stats.accepted, "rejected": dict(self._stats.rejected),
                    "reconnects": self._stats.reconnects}

    # --- outbound ----------------------------------------------------------------------------

    def publish_command(self, gh: str, command: Command) -> mqtt.MQTTMessageInfo:
        """Publish at QoS 1, never retained (a retained command would replay to a rebooted edge box).

        Tracked before it is sent: on a fast link the edge box's ack can arrive before ``publish``
        returns, and an ack for an untracked command would be dropped as late (then the command
        retried and an ack time-out raised for nothing)."""
        self.tracker.record(gh, command)
        return self.client.publish(command_topic(gh), encode(command), qos=QOS, retain=False)

    def retry(self, entry: PendingCommand) -> mqtt.MQTTMessageInfo | None:
        """Re-publish an overdue command with its original cmd_id; None once attempts are used up."""
        if not self.tracker.can_retry(entry):
            logger.error("command %s to %s unacked after %d attempts; giving up",
                         entry.cmd_id, entry.gh, entry.attempts)
            return None
        return self.publish_command(entry.gh, entry.command)

    # --- paho callbacks (network thread: must never raise) ------------------------------------

    def _on_connect(self, client: mqtt.Client, _userdata: Any, _flags: Any, reason_code: Any,
                    _properties: Any) -> None:
        if reason_code.is_failure:
            logger.error("MQTT connect to %s:%s refused: %s", self.target.host, self.target.port, reason_code)
            return
        with self._lock:
            self._connects += 1
            if self._connects > 1:
                self._stats.reconnects += 1
        logger.info("MQTT connected to %s:%s (connect #%d)", self.target.host, self.target.port, self._connects)
        result, mid = client.subscribe([(subscription(ch), QOS) for ch in ("telemetry", "ack", "estop")])
        if result != mqtt.MQTT_ERR_SUCCESS:
            logger.error("MQTT subscribe failed: %s", mqtt.error_string(result))
        self._sub_mid = mid
        client.publish(self.will_topic, ONLINE, qos=QOS, retain=True)

    def _on_subscribe(self, _client: mqtt.Client, _userdata: Any, mid: int, reason_codes: list[Any],
                      _properties: Any) -> None:
        if mid != self._sub_mid:
            return
        failed = [rc for rc in reason_codes if rc.is_failure]
        if failed:
            logger.error("broker refused subscriptions: %s", failed)
            return
        self._ready.set()

    def _on_disconnect(self, _client: mqtt.Client, _userdata: Any, _flags: Any, reason_code: Any,
                       _properties: Any) -> None:
        self._ready.clear()
        if self._started:
            logger.warning("MQTT connection lost (%s); reconnecting with back-off", reason_code)

    def _on_telemetry_msg(self, _client: mqtt.Client, _userdata: Any, msg: mqtt.MQTTMessage) -> None:
        try:
            gh = self._greenhouse(msg.topic)
            if gh is None:
                return
            try:
                tel = parse_telemetry(msg.payload, self._zones_for(gh))
            except PayloadError as exc:
                self._reject(gh, exc.reason_code, exc.detail)
                return
            with self._lock:
                last = self._last_seen.get(gh)
                if last is not None and last[0] == tel.boot_id and tel.seq <= last[1]:
                    reason = "duplicate" if tel.seq == last[1] else "out_of_order"
                    detail = f"seq {tel.seq} <= last {last[1]} (boot {tel.boot_id})"
                else:
                    age = self._wall_clock() - tel.ts.timestamp()
                    if age > self.max_age_s:
                        reason, detail = "stale", f"{age:.1f} s old > max_age_s {self.max_age_s:g}"
                    else:
                        reason, detail = "", ""
                        self._last_seen[gh] = (tel.boot_id, tel.seq)  # a new boot_id resets the window
            if reason:
                self._reject(gh, reason, detail)
                return
            self._deliver(self.on_telemetry, gh, tel)
        except Exception:  # noqa: BLE001 - a paho callback must never raise
            logger.exception("unexpected error handling telemetry on %s", msg.topic)

    def _on_ack_msg(self, _client: mqtt.Client, _userdata: Any, msg: mqtt.MQTTMessage) -> None:
        try:
            gh = self._greenhouse(msg.topic)
            if gh is None:
                return
            try:
                ack = parse_payload(msg.payload, Ack)
            except PayloadError as exc:
                self._reject(gh, exc.reason_code, exc.detail)
                return
            if self.tracker.resolve(ack.cmd_id) is None:
                logger.info("ack %s for %s matches no pending command (late or duplicate)", ack.cmd_id, gh)
            self._deliver(self.on_ack, gh, ack)
        except Exception:  # noqa: BLE001
            logger.exception("unexpected error handling ack on %s", msg.topic)

    def _on_estop_msg(self, _client: mqtt.Client, _userdata: Any, msg: mqtt.MQTTMessage) -> None:
        try:
            gh = self._greenhouse(msg.topic)
            if gh is None:
                return
            try:
                event = parse_payload(msg.payload, EstopEvent)
            except PayloadError as exc:
                self._reject(gh, exc.reason_code, exc.detail)
                return
            self._deliver(self.on_estop, gh, event)
        except Exception:  # noqa: BLE001
            logger.exception("unexpected error handling e-stop on %s", msg.topic)

    # --- helpers -----------------------------------------------------------------------------

    def _zones_for(self, gh: str) -> int:
        return self._zones(gh) if callable(self._zones) else self._zones

    def _greenhouse(self, name: str) -> str | None:
        """Greenhouse id of a topic, or None after counting the rejection."""
        try:
            gh, _channel = parse_topic(name)
        except ValueError as exc:
            self._reject(None, "bad_topic", str(exc))
            return None
        if self.known_greenhouses is not None and not self.known_greenhouses(gh):
            self._reject(gh, "unknown_greenhouse", f"{gh!r} is not registered")
            return None
        return gh

    def _reject(self, gh: str | None, reason: str, detail: str) -> None:
        with self._lock:
            self._stats.rejected[reason] = self._stats.rejected.get(reason, 0) + 1
        logger.warning("rejected message from %s: %s (%s)", gh or "?", reason, detail)
        if self.on_reject is not None:
            try:
                self.on_reject(gh, reason, detail)
            except Exception:  # noqa: BLE001
                logger.exception("on_reject hook failed")

    def _deliver(self, handler: Callable[[str, Any], Any] | None, gh: str, payload: BaseModel) -> None:
        """Count as accepted and hand over: to the asyncio loop if given, else call in place."""
        with self._lock:
            self._stats.accepted += 1
        if handler is None:
            return
        if self.loop is not None:
            try:
                self.loop.call_soon_threadsafe(handler, gh, payload)
            except RuntimeError:  # loop closed during shutdown
                logger.warning("event loop closed; dropped %s from %s", type(payload).__name__, gh)
            return
        try:
            handler(gh, payload)
        except Exception:  # noqa: BLE001 - a handler bug must not kill paho's thread
            logger.exception("%s handler failed for %s", type(payload).__name__, gh)
