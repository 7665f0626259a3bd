"""The client's address: the TCP peer, unless the peer is a configured reverse proxy.

``X-Forwarded-For`` is whatever the sender wrote, so it names the client only when a proxy we
run wrote it: each proxy appends the address it received the request from. The service walks
the chain from the right past the proxies it trusts (``GREENTWIN_TRUSTED_PROXIES``, none by
default) and takes the first address it does not trust; what lies left of that was written by
the client and is ignored. The address found is the one login throttling counts and the audit
trail seals. The server's own proxy-header handling (uvicorn trusts 127.0.0.1 by default) is
switched off where the service is served (:mod:`app.serving`), so this is the only place that
reads these headers.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_networks(text: str) -> tuple[IPNetwork, ...]:
    """Comma-separated addresses or CIDR networks; ``ValueError`` naming the first bad entry."""
    networks = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"{entry!r} is not an IP address or network (CIDR)") from None
    return tuple(networks)


def _address(entry: str) -> IPAddress | None:
    """An address from one ``X-Forwarded-For`` entry (``1.2.3.4``, ``1.2.3.4:5``, ``[::1]:5``, ``::1``)."""
    entry = entry.strip()
    if entry.startswith("["):
        entry = entry[1:].partition("]")[0]
    elif entry.count(":") == 1:
        entry = entry.partition(":")[0]
    try:
        return ipaddress.ip_address(entry)
    except ValueError:
        return None


def _trusted(address: IPAddress, trusted: Sequence[IPNetwork]) -> bool:
    return any(address.version == net.version and address in net for net in trusted)


def forwarded_client(peer: str, forwarded_for: Iterable[str], trusted: Sequence[IPNetwork]) -> str:
    """The client's address given the TCP ``peer`` and the ``X-Forwarded-For`` header values in order."""
    peer_address = _address(peer)
    if peer_address is None or not _trusted(peer_address, trusted):
        return peer
    hops = [hop for value in forwarded_for for hop in value.split(",") if hop.strip()]
    client = peer_address
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:  # not written by a proxy of ours: the last hop we could trust stands
            break
        client = address
        if not _trusted(address, trusted):
            break
    return str(client)


class ForwardedClientMiddleware:
    """Pure ASGI middleware: sets ``scope["client"]`` (and ``scheme`` from ``X-Forwarded-Proto``) when
    the request came through a trusted proxy; passes every other request unchanged."""

    def __init__(self, app: ASGIApp, trusted: Sequence[IPNetwork]) -> None:
        self.app = app
        self.trusted = tuple(trusted)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        if self.trusted and scope["type"] in ("http", "websocket") and client:
            peer = _address(str(client[0]))
            if peer is not None and _trusted(peer, self.trusted):
                headers = scope.get("headers") or []
                chain = [v.decode("latin-1") for k, v in headers if k == b"x-forwarded-for"]
                proto = [v.decode("latin-1") for k, v in headers if k == b"x-forwarded-proto"]
                scope = dict(scope, client=(forwarded_client(str(client[0]), chain, self.trusted), 0))
                nearest = proto[-1].split(",")[-1].strip().lower() if proto else ""
                if nearest in ("http", "https") and scope["type"] == "http":
                    scope["scheme"] = nearest
        await self.app(scope, receive, send)
