"""MQTT bridge between the edge boxes and the control service.

Runs paho's network thread: the connection, its subscriptions and status, and commands out (tracked
until acked, :mod:`app.mqtt.tracker`). What an inbound message must pass before its handler sees it
is :mod:`app.mqtt.inbound`'s; handlers run on the asyncio loop when one is given.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Final

import paho.mqtt.client as mqtt

from app.mqtt.admission import DEFAULT_MAX_FUTURE_S, RateLimit, TelemetryAdmission
from app.mqtt.inbound import (
    TELEMETRY_BYTES_BURST,
    TELEMETRY_BYTES_PER_S,
    AckHandler,
    EstopHandler,
    Inbound,
    RejectHandler,
    ShedHandler,
    TelemetryHandler,
    call_hook,
)
from app.mqtt.tracker import CommandTracker, PendingCommand
from twin.config import DEFAULT_ZONES
from wire.connection import OFFLINE, ONLINE, QOS, MqttTarget, TlsFiles, make_client, parse_mqtt_url
from wire.topics import (
    TOPIC_ROOT,
    Command,
    command_topic,
    encode,
    service_status_topic,
    subscription,
)

logger = logging.getLogger(__name__)

SERVICE_STATUS_TOPIC: Final = service_status_topic()
"""The service's status topic under the default root."""

ConnectHandler = Callable[[int], Any]
"""Called with the connection's number (1 for the first, more after each reconnect)."""


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
        will_topic: str | None = None,
        topic_root: str = TOPIC_ROOT,
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
        byte_budget: RateLimit | None = None,
        on_shed: ShedHandler | None = None,
        tls: TlsFiles | None = None,
        on_connected: ConnectHandler | None = None,
    ) -> None:
        self.target = url if isinstance(url, MqttTarget) else parse_mqtt_url(url)
        self.client_id = client_id or f"greentwin-service-{uuid.uuid4().hex[:8]}"
        self.topic_root = topic_root
        """First level of every topic it subscribes and publishes to (:data:`wire.topics.TOPIC_ROOT`)."""
        self.will_topic = will_topic or service_status_topic(topic_root)
        self.loop = loop
        self.on_connected = on_connected
        self.tracker = CommandTracker(ack_timeout_s=ack_timeout_s, max_attempts=max_attempts)
        self.inbound = Inbound(
            admission=TelemetryAdmission(max_age_s=max_age_s, max_future_s=max_future_s,
                                         wall_clock=wall_clock),
            tracker=self.tracker, deliver=self._deliver_call, zones=zones,
            known_greenhouses=known_greenhouses, topic_root=topic_root,
            on_telemetry=on_telemetry, on_ack=on_ack, on_estop=on_estop, on_reject=on_reject, on_shed=on_shed,
            rate_limit=rate_limit or RateLimit(), event_rate_limit=event_rate_limit or RateLimit(),
            byte_budget=byte_budget or RateLimit(TELEMETRY_BYTES_PER_S, TELEMETRY_BYTES_BURST))
        """What a message must pass before a handler sees it (:mod:`app.mqtt.inbound`)."""
        self.keepalive = keepalive
        self._lock = threading.Lock()
        self._reconnects = 0
        self._connects = 0
        self._sub_mid: int | None = None
        self._ready = threading.Event()
        self._started = False

        self.client = make_client(self.target, self.client_id, self.will_topic, tls)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_subscribe = self._on_subscribe
        self.client.message_callback_add(subscription("telemetry", topic_root), self.inbound.on_telemetry_msg)
        self.client.message_callback_add(subscription("ack", topic_root), self.inbound.on_ack_msg)
        self.client.message_callback_add(subscription("estop", topic_root), self.inbound.on_estop_msg)

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
            reconnects = self._reconnects
        return {**self.inbound.snapshot(), "reconnects": reconnects}

    @property
    def reconnects(self) -> int:
        """Connections made after the first (the service counts them as a metric)."""
        with self._lock:
            return self._reconnects

    # --- outbound ----------------------------------------------------------------------------

    def publish_command(self, gh: str, command: Command) -> mqtt.MQTTMessageInfo:
        """Publish at QoS 1, never retained (a retained command would replay to a rebooted edge box).

        Tracked before it is sent: on a fast link the edge box's ack can arrive before ``publish``
        returns, and an ack for an untracked command would be dropped as late (then the command
        retried and an ack time-out raised for nothing)."""
        self.tracker.record(gh, command)
        return self.client.publish(command_topic(gh, self.topic_root), encode(command), qos=QOS, retain=False)

    def overdue_commands(self) -> list[PendingCommand]:
        """Commands whose ack is overdue, each handed out once per publication (see
        :class:`CommandTracker`)."""
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
                self._reconnects += 1
        logger.info("MQTT connected to %s:%s (connect #%d)", self.target.host, self.target.port,
                    self._connects)
        result, mid = client.subscribe([(subscription(ch, self.topic_root), QOS)
                                        for ch in ("telemetry", "ack", "estop")])
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

    def _deliver_call(self, handler: Callable[..., Any], *args: Any) -> None:
        """Run ``handler(*args)`` on the asyncio loop if given, else in place (never raising into paho)."""
        if self.loop is not None:
            try:
                self.loop.call_soon_threadsafe(handler, *args)
            except RuntimeError:  # loop closed during shutdown
                logger.warning("event loop closed; dropped a call of %r", handler)
            return
        call_hook(handler, *args)  # a handler bug must not kill paho's thread
