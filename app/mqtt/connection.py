"""How the service and the plant simulator connect to the broker: URL, client, will, back-off."""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

ONLINE: Final = b"online"
OFFLINE: Final = b"offline"
QOS: Final = 1
RECONNECT_MIN_S: Final = 1
RECONNECT_MAX_S: Final = 30


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
