"""MQTT bridge between the edge boxes and the control service.

Runs paho's network thread and validates every inbound payload at the edge (a bad one is logged,
counted by reason and dropped, never reaching a handler or raising out of a paho callback); what
is admitted (order, age, skew, rate) is :mod:`app.mqtt.admission`'s call, pending acks are
:mod:`app.mqtt.tracker`'s. Handlers run on the asyncio loop when one is given.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

import paho.mqtt.client as mqtt
from pydantic import BaseModel

from app.mqtt.admission import DEFAULT_MAX_FUTURE_S, RateLimit, TelemetryAdmission
from app.mqtt.connection import OFFLINE, ONLINE, QOS, MqttTarget, TlsFiles, make_client, parse_mqtt_url
from app.mqtt.topics import (
    MAX_PAYLOAD_BYTES,
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
from app.mqtt.tracker import CommandTracker, PendingCommand
from twin.config import DEFAULT_ZONES

logger = logging.getLogger(__name__)

SERVICE_STATUS_TOPIC: Final = "greentwin/service/status"

# Bridge-level reasons on top of topics.REASON_CODES (payload errors).
BridgeReason = Literal["bad_topic", "unknown_greenhouse", "duplicate", "out_of_order", "old_boot", "stale",
                       "future", "foreign_ack", "unknown_command", "retained"]
CHANNEL_MAX_BYTES: Final = {"telemetry": MAX_PAYLOAD_BYTES, "ack": 4096, "estop": 1024}
"""The largest payload worth parsing per channel: an ack or an e-stop event is a few hundred bytes, so
anything near the telemetry cap is refused before it costs a parse."""
TELEMETRY_BYTES_PER_S: Final = 1024 * 1024
TELEMETRY_BYTES_BURST: Final = 4 * 1024 * 1024
"""Telemetry bytes a greenhouse may send before parsing (its messages are a few KB, 20 a second): the
parse of payloads a box sends beyond this is never spent, whatever they hold."""
REJECT_LOG_EVERY: Final = 100
"""A rejection reason from one greenhouse is logged the first time and every 100th time after: a
flood of bad messages is counted in full but cannot flood the log."""

TelemetryHandler = Callable[[str, Telemetry], Any]
AckHandler = Callable[[str, Ack], Any]
EstopHandler = Callable[[str, EstopEvent], Any]
RejectHandler = Callable[[str | None, str, str], Any]
ShedHandler = Callable[[str], Any]
ConnectHandler = Callable[[int], Any]
"""Called with the connection's number (1 for the first, more after each reconnect)."""
E = TypeVar("E", Ack, EstopEvent)


# --- the bridge ---------------------------------------------------------------------------------


@dataclass
class _Stats:
    accepted: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    reconnects: int = 0
    shed: int = 0


class MqttBridge:
    """The service's MQTT connection: validated telemetry/acks/e-stops in, commands out.

    Subscriptions are (re)made in ``on_connect`` because the session is clean: after a reconnect
    the broker has forgotten them. The service's own status topic holds a retained ``online``
    while connected and the broker's retained ``offline`` will after an unclean loss.
    """

    def __init__(
        self,
        url: str | MqttTarget,
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
        max_future_s: float = DEFAULT_MAX_FUTURE_S,
        rate_limit: RateLimit | None = None,
        event_rate_limit: RateLimit | None = None,
        on_shed: ShedHandler | None = None,
        tls: TlsFiles | None = None,
        on_connected: ConnectHandler | None = None,
    ) -> None:
        self.target = url if isinstance(url, MqttTarget) else parse_mqtt_url(url)
        self.client_id = client_id or f"greentwin-service-{uuid.uuid4().hex[:8]}"
        self.will_topic = will_topic
        self.on_telemetry = on_telemetry
        self.on_ack = on_ack
        self.on_estop = on_estop
        self.on_reject = on_reject
        self.loop = loop
        self.admission = TelemetryAdmission(max_age_s=max_age_s, max_future_s=max_future_s, wall_clock=wall_clock)
        self.rate_limit = rate_limit or RateLimit()
        self.event_rate_limit = event_rate_limit or RateLimit()
        self.byte_budget = RateLimit(TELEMETRY_BYTES_PER_S, TELEMETRY_BYTES_BURST)
        """Acks and e-stop events per greenhouse (one bucket per channel): beyond it they are shed, so one
        box's flood cannot stall the loop or the recording of everyone else's (a press is never shed)."""
        self.on_shed = on_shed
        self.on_connected = on_connected
        self.known_greenhouses = known_greenhouses
        self.tracker = CommandTracker(ack_timeout_s=ack_timeout_s, max_attempts=max_attempts)
        self.keepalive = keepalive
        self._zones = zones
        self._lock = threading.Lock()
        self._stats = _Stats()
        self._rejects_logged: dict[tuple[str | None, str], int] = {}
        self._connects = 0
        self._sub_mid: int | None = None
        self._ready = threading.Event()
        self._started = False

        self.client = make_client(self.target, self.client_id, will_topic, tls)
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
        """Snapshot: ``accepted``, ``rejected`` {reason: count}, ``reconnects``, ``shed`` (over the rate)."""
        with self._lock:
            return {"accepted": self._stats.accepted, "rejected": dict(self._stats.rejected),
                    "reconnects": self._stats.reconnects, "shed": self._stats.shed}

    @property
    def reconnects(self) -> int:
        """Connections made after the first (the service counts them as a metric)."""
        with self._lock:
            return self._stats.reconnects

    # --- outbound ----------------------------------------------------------------------------

    def publish_command(self, gh: str, command: Command) -> mqtt.MQTTMessageInfo:
        """Publish at QoS 1, never retained (a retained command would replay to a rebooted edge box).

        Tracked before it is sent: on a fast link the edge box's ack can arrive before ``publish``
        returns, and an ack for an untracked command would be dropped as late (then the command
        retried and an ack time-out raised for nothing)."""
        self.tracker.record(gh, command)
        return self.client.publish(command_topic(gh), encode(command), qos=QOS, retain=False)

    def overdue_commands(self) -> list[PendingCommand]:
        """Commands whose ack is overdue, each handed out once per publication (see :class:`CommandTracker`)."""
        return self.tracker.expired()

    def can_retry(self, entry: PendingCommand) -> bool:
        """Whether ``entry`` may be published again (:meth:`retry`) or is given up."""
        return self.tracker.can_retry(entry)

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
        if self.on_connected is not None:
            self._deliver_call(self.on_connected, self._connects)

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
            if (gh := self._admit(msg, "telemetry")) is None:
                return
            try:
                tel = parse_telemetry(msg.payload, self._zones(gh) if callable(self._zones) else self._zones)
            except PayloadError as exc:
                self._reject(gh, exc.reason_code, exc.detail)
                return
            if (verdict := self.admission.check(gh, tel)) is not None:
                self._reject(gh, *verdict)
                return
            if not self.rate_limit.allow(gh, time.monotonic()):
                self._shed(gh)
                return
            self._deliver(self.on_telemetry, gh, tel)
        except Exception:  # noqa: BLE001 - a paho callback must never raise
            logger.exception("unexpected error handling telemetry on %s", msg.topic)

    def _on_ack_msg(self, _client: mqtt.Client, _userdata: Any, msg: mqtt.MQTTMessage) -> None:
        try:
            if (gh := self._admit(msg, "ack")) is None:
                return
            if (ack := self._timed_event(gh, msg, Ack)) is None:
                return
            match = self.tracker.match(gh, ack.cmd_id, ack.status)
            if match == "foreign":
                self._reject(gh, "foreign_ack", f"ack for command {ack.cmd_id} sent to {self.tracker.owner(ack.cmd_id)}")
                return
            if match == "unknown":  # nothing of ours to answer: not worth a sealed record
                self._reject(gh, "unknown_command", f"ack for command {ack.cmd_id}, which this service did not send")
                return
            self.tracker.resolve(gh, ack.cmd_id)
            if match == "repeat":  # a redelivered or re-acked answer: heard (and recorded) once already
                self._reject(gh, "duplicate", f"ack {ack.status} for {ack.cmd_id} again")
                return
            self._deliver(self.on_ack, gh, ack)
        except Exception:  # noqa: BLE001
            logger.exception("unexpected error handling ack on %s", msg.topic)

    def _on_estop_msg(self, _client: mqtt.Client, _userdata: Any, msg: mqtt.MQTTMessage) -> None:
        try:
            if (gh := self._admit(msg, "estop")) is None or (event := self._timed_event(gh, msg, EstopEvent)) is None:
                return
            if not event.pressed and self._over_rate(gh, "estop"):
                return  # a release changes nothing in the service; a press always gets through
            self._deliver(self.on_estop, gh, event)
        except Exception:  # noqa: BLE001
            logger.exception("unexpected error handling e-stop on %s", msg.topic)

    def _admit(self, msg: mqtt.MQTTMessage, channel: str) -> str | None:
        """The greenhouse of a message worth parsing, or None after counting why not: not ours, retained
        (the broker replays a retained message at every subscription: an e-stop pressed an hour ago
        would latch again at each reconnect), larger than its channel takes, or past the greenhouse's
        budget (telemetry bytes, ack messages; an e-stop press is never held back: its size is)."""
        if (gh := self._greenhouse(msg.topic)) is None:
            return None
        if msg.retain:
            self._reject(gh, "retained", f"a retained {channel} message is an old one replayed")
            return None
        size = len(msg.payload)
        if size > CHANNEL_MAX_BYTES[channel]:
            self._reject(gh, "too_large", f"{size} bytes > {CHANNEL_MAX_BYTES[channel]} on {channel}")
            return None
        if channel == "telemetry" and not self.byte_budget.allow(gh, time.monotonic(), size):
            self._shed(gh)
            return None
        if channel == "ack" and self._over_rate(gh, "ack"):
            return None
        return gh

    def _over_rate(self, gh: str, channel: str) -> bool:
        """True (shed and counted) when ``gh``'s ``channel`` is past its rate."""
        if self.event_rate_limit.allow(f"{channel}/{gh}", time.monotonic()):
            return False
        self._shed(gh)
        return True

    def _timed_event(self, gh: str, msg: mqtt.MQTTMessage, model: type[E]) -> E | None:
        """The payload of an ack or e-stop from known greenhouse ``gh``, not from the future."""
        try:
            event = parse_payload(msg.payload, model)
        except PayloadError as exc:
            self._reject(gh, exc.reason_code, exc.detail)
            return None
        if (verdict := self.admission.check_time(event.ts)) is not None:
            self._reject(gh, *verdict)
            return None
        return event

    # --- helpers -----------------------------------------------------------------------------

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
            nth = self._rejects_logged[gh, reason] = self._rejects_logged.get((gh, reason), 0) + 1
            if len(self._rejects_logged) > 4096:  # unknown greenhouse ids are many: forget, never grow
                self._rejects_logged.clear()
        if nth % REJECT_LOG_EVERY == 1:
            more = f"; {nth} so far from it" if nth > 1 else ""
            logger.warning("rejected message from %s: %s (%s%s)", gh or "?", reason, detail[:300], more)
        _hook(self.on_reject, gh, reason, detail)

    def _shed(self, gh: str) -> None:
        """Over the greenhouse's rate (telemetry, acks or e-stop releases): dropped, counted, logged
        every 100th time."""
        with self._lock:
            self._stats.shed += 1
            nth = self._stats.shed
        if nth % 100 == 1:
            logger.warning("messages from %s over the rate limit: shed (%d so far)", gh, nth)
        _hook(self.on_shed, gh)

    def _deliver(self, handler: Callable[[str, Any], Any] | None, gh: str, payload: BaseModel) -> None:
        """Count as accepted and hand over: to the asyncio loop if given, else call in place."""
        with self._lock:
            self._stats.accepted += 1
        if handler is not None:
            self._deliver_call(handler, gh, payload)

    def _deliver_call(self, handler: Callable[..., Any], *args: Any) -> None:
        """Run ``handler(*args)`` on the asyncio loop if given, else in place (never raising into paho)."""
        if self.loop is not None:
            try:
                self.loop.call_soon_threadsafe(handler, *args)
            except RuntimeError:  # loop closed during shutdown
                logger.warning("event loop closed; dropped a call of %r", handler)
            return
        _hook(handler, *args)  # a handler bug must not kill paho's thread


def _hook(fn: Callable[..., Any] | None, *args: Any) -> None:
    """Call a service hook from paho's thread, which must never raise."""
    if fn is not None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001
            logger.exception("bridge hook %r failed", fn)
