"""Which address is the client's: the peer, or what trusted proxies wrote in ``X-Forwarded-For``."""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import ip_network

import pytest
from fastapi.testclient import TestClient

from app.api.client_address import forwarded_client, parse_networks
from app.audit_sink import ACCESS_CHAIN
from app.auth.users import create_user
from app.cli import db as db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.main import create_app

PW = "correct horse battery"
PROXIES = parse_networks("10.0.0.0/24, 2001:db8::1")


@pytest.mark.parametrize("peer, chain, client", [
    ("203.0.113.5", ["192.0.2.66"], "203.0.113.5"),  # not a proxy of ours: the header is the sender's word
    ("10.0.0.2", [], "10.0.0.2"),
    ("10.0.0.2", ["203.0.113.9"], "203.0.113.9"),
    ("10.0.0.2", ["192.0.2.66, 203.0.113.9"], "203.0.113.9"),  # the client wrote the left part
    ("10.0.0.2", ["192.0.2.66", "203.0.113.9, 10.0.0.7"], "203.0.113.9"),  # two headers, two proxies
    ("10.0.0.2", ["10.0.0.8, 10.0.0.7"], "10.0.0.8"),  # all ours: the farthest
    ("10.0.0.2", ["203.0.113.9, not-an-address"], "10.0.0.2"),  # garbage where our proxy writes
    ("10.0.0.2", ["[2001:db8::7]:443"], "2001:db8::7"),
    ("2001:db8::1", ["203.0.113.9:5555"], "203.0.113.9"),
    ("testclient", ["203.0.113.9"], "testclient"),
])
def test_the_right_most_address_no_trusted_proxy_wrote_is_the_client(
        peer: str, chain: list[str], client: str) -> None:
    assert forwarded_client(peer, chain, PROXIES) == client


def test_proxy_settings_parse_and_refuse_typos() -> None:
    assert Settings(trusted_proxies="10.0.0.5, 10.1.0.0/16").trusted_proxy_networks() == (
        ip_network("10.0.0.5/32"), ip_network("10.1.0.0/16"))
    assert Settings().trusted_proxy_networks() == ()
    with pytest.raises(ValueError, match="'10.0.0.x' is not an IP address"):
        Settings(trusted_proxies="10.0.0.5,10.0.0.x")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("proxied")
    url = f"sqlite:///{root / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    engine = make_engine(url)
    with make_session_factory(engine)() as session:
        for name in ("adam", "olga"):
            create_user(session=session, username=name, password=PW, roles=["admin"])
    engine.dispose()
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", policy_dir=root / "no-policy",
                        environment="demo", secret_key="proxied-test-secret-" + "7a" * 16,
                        trusted_proxies="10.0.0.0/24", login_max_failures=2)
    with TestClient(create_app(settings, state_dir=root / "state")) as client:
        yield client


def _via(app: TestClient, peer: str, name: str, password: str, forwarded_for: str) -> int:
    client = TestClient(app.app, client=(peer, 40000))
    r = client.post("/api/auth/login", json={"username": name, "password": password},
                    headers={"X-Forwarded-For": forwarded_for, "X-Forwarded-Proto": "https"})
    if r.status_code == 200:
        assert "Secure" in r.headers["set-cookie"], "TLS ended at the proxy: the cookie is Secure"
    return r.status_code


def test_behind_a_trusted_proxy_the_forwarded_client_is_sealed_and_limited(app: TestClient) -> None:
    assert _via(app, "10.0.0.2", "adam", PW, "192.0.2.66, 203.0.113.9") == 200
    store = app.app.state.runtime.audit.store  # type: ignore[attr-defined]
    [login] = [e for e in store.tail_entries(ACCESS_CHAIN, 5) if e.kind == "login"]
    assert login.payload["client"] == "203.0.113.9"
    # Two failures from the forwarded client hold it back, whatever it writes at the left.
    for spoof in ("192.0.2.1", "192.0.2.2"):
        assert _via(app, "10.0.0.2", "olga", "wrong!", f"{spoof}, 203.0.113.7") == 401
    assert _via(app, "10.0.0.3", "olga", PW, "192.0.2.3, 203.0.113.7") == 429
    assert _via(app, "10.0.0.3", "olga", PW, "203.0.113.8") == 200, "another client behind the proxy is not"
    # A client that is no proxy of ours is itself the client, whatever header it sends.
    assert _via(app, "198.51.100.4", "olga", "wrong!", "203.0.113.8") == 401
    assert _via(app, "198.51.100.4", "olga", "wrong!", "203.0.113.8") == 401
    assert _via(app, "10.0.0.2", "olga", PW, "203.0.113.8") == 200, "the failures counted against the peer"
