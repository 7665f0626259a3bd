"""How the service and the plant simulator connect to the broker: URL, client, will, back-off."""

from __future__ import annotations

import contextlib
import socket
import ssl
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

ONLINE: Final = b"online"
OFFLINE: Final = b"offline"
QOS: Final = 1
RECONNECT_MIN_S: Final = 1
RECONNECT_MAX_S: Final = 4
"""The reconnect back-off's cap (1, 2, 4, 4 ... s), well under the command TTL (30 s): a broker back
after an outage is reached within seconds, before an edge box that kept its link falls back."""


@dataclass(frozen=True)
class MqttTarget:
    """Where and how to connect, parsed from ``mqtt[s]://[user[:pass]@]host[:port]``."""

    host: str
    port: int
    tls: bool
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # never in a log line that prints the target


@dataclass(frozen=True)
class TlsFiles:
    """The site's private CA (to verify the broker) and this client's certificate and key (PEM)."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("a client certificate needs its key and a key its certificate")
        for path in (self.ca_file, self.cert_file, self.key_file):
            if path is not None and not Path(path).is_file():
                raise ValueError(f"TLS file {path} does not exist")


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***``: for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return parts._replace(netloc=f"{parts.username}:***@{netloc}").geturl()


def with_credentials(target: MqttTarget, username: str | None, password: str | None) -> MqttTarget:
    """Credentials from settings take precedence over the URL's (the URL need not carry a secret)."""
    return replace(target, username=username if username is not None else target.username,
                   password=password if password is not None else target.password)


def parse_mqtt_url(url: str) -> MqttTarget:
    """Parse a broker URL; ValueError for schemes we cannot honour (rather than silently going plain-text)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("mqtt", "tcp"):
        tls, default_port = False, 1883
    elif scheme in ("mqtts", "ssl"):
        tls, default_port = True, 8883
    else:
        raise ValueError(f"unsupported MQTT URL scheme {parts.scheme!r} in {redact_url(url)!r}: "
                         "use mqtt:// or mqtts://")
    if not parts.hostname:
        raise ValueError(f"MQTT URL {redact_url(url)!r} has no host")
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


def make_client(target: MqttTarget, client_id: str, will_topic: str,
                tls: TlsFiles | None = None) -> mqtt.Client:
    """A VERSION2 client with a retained ``offline`` will, capped exponential reconnect back-off and
    no Nagle delay; over TLS (``mqtts://``) it verifies the broker against ``tls.ca_file`` (the system's
    CAs without one) and presents its client certificate when given."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311,
                         clean_session=True)
    client.on_socket_open = no_delay
    if target.username is not None:
        client.username_pw_set(target.username, target.password)
    apply_tls(client, target, tls)
    client.will_set(will_topic, OFFLINE, qos=QOS, retain=True)
    client.reconnect_delay_set(min_delay=RECONNECT_MIN_S, max_delay=RECONNECT_MAX_S)
    return client


def apply_tls(client: mqtt.Client, target: MqttTarget, tls: TlsFiles | None) -> None:
    """TLS for ``mqtts://`` (broker verified against ``tls.ca_file``, else the system's CAs; the client
    certificate presented when given). TLS files with a plain URL are refused, not ignored."""
    if target.tls:
        tls = tls or TlsFiles()
        client.tls_set(ca_certs=_str(tls.ca_file), certfile=_str(tls.cert_file), keyfile=_str(tls.key_file),
                       cert_reqs=ssl.CERT_REQUIRED, tls_version=ssl.PROTOCOL_TLS_CLIENT)
    elif tls is not None and (tls.ca_file or tls.cert_file):
        raise ValueError("TLS files are set but the MQTT URL is not mqtts://: refusing to send in the clear")


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)
