"""Edge boxes online/offline, from their retained ``<root>/<gh>/status`` messages.

Each edge box publishes a retained ``online`` when it connects and leaves a retained ``offline``
as its last will, so a subscriber learns every box's state at once on (re)connect. The control
bridge does not need it; the dashboard does, so this is its own small read-only client.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from app.mqtt.admission import RateLimit
from wire.connection import (
    RECONNECT_MAX_S,
    RECONNECT_MIN_S,
    MqttTarget,
    TlsFiles,
    apply_tls,
    parse_mqtt_url,
)
from wire.topics import TOPIC_ROOT, parse_topic, subscription, validate_topic_root

log = logging.getLogger(__name__)

EdgeState = Literal["online", "offline", "unknown"]
STATUS_RATE_PER_S = 2.0
STATUS_BURST = 10
"""A box says online or offline when its link changes: a few a second is already a flood, shed here."""
MAX_KNOWN = 10_000
"""Boxes remembered at most: status topics of ids nobody registered must not grow memory without end."""


@dataclass(frozen=True)
class EdgeStatus:
    state: EdgeState
    since: datetime | None
    """When this service saw the state arrive (the retained message carries no time)."""


class EdgeStatusWatcher:
    """Subscribes to every greenhouse's status topic and keeps the last state of each."""

    def __init__(self, mqtt_url: str | MqttTarget, tls: TlsFiles | None = None,
                 topic_root: str = TOPIC_ROOT) -> None:
        self.target = mqtt_url if isinstance(mqtt_url, MqttTarget) else parse_mqtt_url(mqtt_url)
        self.tls = tls
        self.topic_root = validate_topic_root(topic_root)
        self._lock = threading.Lock()
        self._states: dict[str, EdgeStatus] = {}
        self._client: mqtt.Client | None = None
        self._limit = RateLimit(STATUS_RATE_PER_S, STATUS_BURST)
        self.shed = 0
        """Status messages dropped over a box's rate."""

    def start(self) -> None:
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"greentwin-dash-{uuid.uuid4().hex[:8]}")
        if self.target.username is not None:
            client.username_pw_set(self.target.username, self.target.password)
        apply_tls(client, self.target, self.tls)
        client.on_connect = self._on_connect
        client.on_message = self._on_message
        client.reconnect_delay_set(RECONNECT_MIN_S, RECONNECT_MAX_S)
        client.connect_async(self.target.host, self.target.port, keepalive=30)
        client.loop_start()
        self._client = client

    def stop(self) -> None:
        if self._client is not None:
            self._client.disconnect()
            self._client.loop_stop()
            self._client = None

    def get(self, gh: str) -> EdgeStatus:
        with self._lock:
            return self._states.get(gh, EdgeStatus("unknown", None))

    def _on_connect(self, client: mqtt.Client, _u: Any, _f: Any, reason_code: Any, _p: Any) -> None:
        if not reason_code.is_failure:
            client.subscribe(subscription("status", self.topic_root), qos=1)

    def _on_message(self, _c: mqtt.Client, _u: Any, msg: mqtt.MQTTMessage) -> None:
        try:
            gh, _channel = parse_topic(msg.topic, self.topic_root)
        except ValueError:
            return
        if not self._limit.allow(gh, time.monotonic()):
            self.shed += 1
            return
        text = bytes(msg.payload[:16]).decode("utf-8", errors="replace").strip().lower()
        state: EdgeState = "online" if text == "online" else "offline" if text == "offline" else "unknown"
        with self._lock:
            if gh not in self._states and len(self._states) >= MAX_KNOWN:
                return
            if self._states.get(gh, EdgeStatus("unknown", None)).state != state:
                self._states[gh] = EdgeStatus(state, datetime.now(UTC))
