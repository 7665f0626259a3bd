"""What a message from an edge box must pass before a handler sees it, on paho's network thread.

One thread carries every greenhouse's telemetry, acks and e-stops, so what one box sends must not
cost the others: a message is refused or shed by what is cheap to know first (its topic, retain
flag, size, the greenhouse's budget) before it is parsed; then the payload is validated
(:mod:`wire.topics`), admitted (:mod:`app.mqtt.admission`), and an ack matched to a command
this service sent (:mod:`app.mqtt.tracker`). Every refusal is counted by reason, and logged the
first time and every 100th after; nothing here raises into paho.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

import paho.mqtt.client as mqtt
from pydantic import BaseModel

from app.mqtt.admission import RateLimit, TelemetryAdmission
from app.mqtt.tracker import CommandTracker
from wire.topics import (
    MAX_PAYLOAD_BYTES,
    TOPIC_ROOT,
    Ack,
    EstopEvent,
    PayloadError,
    Telemetry,
    parse_payload,
    parse_telemetry,
    parse_topic,
)

logger = logging.getLogger("app.mqtt.bridge")  # one logger for the connection and what it carries

# Bridge-level reasons on top of topics.REASON_CODES (payload errors).
BridgeReason = Literal["bad_topic", "unknown_greenhouse", "duplicate", "out_of_order", "old_boot", "stale",
                       "future", "foreign_ack", "unknown_command", "retained"]
REJECT_LOG_EVERY: Final = 100
"""A rejection reason from one greenhouse is logged the first time and every 100th time after: a
flood of bad messages is counted in full but cannot flood the log."""
TELEMETRY_BYTES_PER_S: Final = 1024 * 1024
TELEMETRY_BYTES_BURST: Final = 4 * 1024 * 1024
"""The byte budget's defaults (the service's are its settings): a box's telemetry is a few KB, 20 a second."""
CHANNEL_MAX_BYTES: Final = {"telemetry": MAX_PAYLOAD_BYTES, "ack": 4096, "estop": 1024}
"""The largest payload worth parsing per channel: an ack or an e-stop event is a few hundred bytes, so
anything near the telemetry cap is refused before it costs a parse."""

TelemetryHandler = Callable[[str, Telemetry], Any]
AckHandler = Callable[[str, Ack], Any]
EstopHandler = Callable[[str, EstopEvent], Any]
RejectHandler = Callable[[str | None, str, str], Any]
ShedHandler = Callable[[str], Any]
Deliver = Callable[..., None]
"""Runs a handler with its arguments where the service wants it (its event loop)."""
E = TypeVar("E", Ack, EstopEvent)


@dataclass
class InboundStats:
    accepted: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    shed: int = 0


@dataclass
class Inbound:
    """The three inbound channels' paho callbacks and the checks before their handlers."""

    admission: TelemetryAdmission
    tracker: CommandTracker
    deliver: Deliver
    zones: int | Callable[[str], int]
    known_greenhouses: Callable[[str], bool] | None = None
    on_telemetry: TelemetryHandler | None = None
    on_ack: AckHandler | None = None
    on_estop: EstopHandler | None = None
    on_reject: RejectHandler | None = None
    on_shed: ShedHandler | None = None
    rate_limit: RateLimit = field(default_factory=RateLimit)
    """Valid telemetry per greenhouse: beyond it, shed before the intake."""
    event_rate_limit: RateLimit = field(default_factory=RateLimit)
    """Acks and e-stop releases per greenhouse (one bucket per channel); a press is never shed."""
    byte_budget: RateLimit = field(
        default_factory=lambda: RateLimit(TELEMETRY_BYTES_PER_S, TELEMETRY_BYTES_BURST))
    """Telemetry bytes per greenhouse before parsing: the parse of what a box sends beyond it is never
    spent, whatever it holds."""
    topic_root: str = TOPIC_ROOT
    """First level of the topics it accepts; any other is a ``bad_topic``."""
    stats: InboundStats = field(default_factory=InboundStats)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _rejects_logged: dict[tuple[str | None, str], int] = field(default_factory=dict)

    def snapshot(self) -> dict[str, Any]:
        """``accepted``, ``rejected`` {reason: count}, ``shed``."""
        with self._lock:
            return {"accepted": self.stats.accepted, "rejected": dict(self.stats.rejected),
                    "shed": self.stats.shed}

    def on_telemetry_msg(self, _client: mqtt.Client, _userdata: Any, msg: mqtt.MQTTMessage) -> None:
        try:
            if (gh := self._admit(msg, "telemetry")) is None:
                return
            try:
                tel = parse_telemetry(msg.payload, self.zones(gh) if callable(self.zones) else self.zones)
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

    def on_ack_msg(self, _client: mqtt.Client, _userdata: Any, msg: mqtt.MQTTMessage) -> None:
        try:
            if (gh := self._admit(msg, "ack")) is None:
                return
            if (ack := self._timed_event(gh, msg, Ack)) is None:
                return
            match = self.tracker.match(gh, ack.cmd_id, ack.status)
            if match == "foreign":
                self._reject(gh, "foreign_ack",
                             f"ack for command {ack.cmd_id} sent to {self.tracker.owner(ack.cmd_id)}")
                return
            if match == "unknown":  # nothing of ours to answer: not worth a sealed record
                self._reject(gh, "unknown_command",
                             f"ack for command {ack.cmd_id}, which this service did not send")
                return
            self.tracker.resolve(gh, ack.cmd_id)
            if match == "repeat":  # a redelivered or re-acked answer: heard (and recorded) once already
                self._reject(gh, "duplicate", f"ack {ack.status} for {ack.cmd_id} again")
                return
            self._deliver(self.on_ack, gh, ack)
        except Exception:  # noqa: BLE001
            logger.exception("unexpected error handling ack on %s", msg.topic)

    def on_estop_msg(self, _client: mqtt.Client, _userdata: Any, msg: mqtt.MQTTMessage) -> None:
        try:
            if ((gh := self._admit(msg, "estop")) is None
                    or (event := self._timed_event(gh, msg, EstopEvent)) is None):
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

    def _greenhouse(self, name: str) -> str | None:
        """Greenhouse id of a topic, or None after counting the rejection."""
        try:
            gh, _channel = parse_topic(name, self.topic_root)
        except ValueError as exc:
            self._reject(None, "bad_topic", str(exc))
            return None
        if self.known_greenhouses is not None and not self.known_greenhouses(gh):
            self._reject(gh, "unknown_greenhouse", f"{gh!r} is not registered")
            return None
        return gh

    def _reject(self, gh: str | None, reason: str, detail: str) -> None:
        with self._lock:
            self.stats.rejected[reason] = self.stats.rejected.get(reason, 0) + 1
            nth = self._rejects_logged[gh, reason] = self._rejects_logged.get((gh, reason), 0) + 1
            if len(self._rejects_logged) > 4096:  # unknown greenhouse ids are many: forget, never grow
                self._rejects_logged.clear()
        if nth % REJECT_LOG_EVERY == 1:
            more = f"; {nth} so far from it" if nth > 1 else ""
            logger.warning("rejected message from %s: %s (%s%s)", gh or "?", reason, detail[:300], more)
        call_hook(self.on_reject, gh, reason, detail)

    def _shed(self, gh: str) -> None:
        """Over the greenhouse's rate (telemetry, acks or e-stop releases): dropped, counted, logged
        every 100th time."""
        with self._lock:
            self.stats.shed += 1
            nth = self.stats.shed
        if nth % 100 == 1:
            logger.warning("messages from %s over the rate limit: shed (%d so far)", gh, nth)
        call_hook(self.on_shed, gh)

    def _deliver(self, handler: Callable[[str, Any], Any] | None, gh: str, payload: BaseModel) -> None:
        """Count as accepted and hand over."""
        with self._lock:
            self.stats.accepted += 1
        if handler is not None:
            self.deliver(handler, gh, payload)


def call_hook(fn: Callable[..., Any] | None, *args: Any) -> None:
    """Call a service hook from paho's thread, which must never raise."""
    if fn is not None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001
            logger.exception("bridge hook %r failed", fn)
