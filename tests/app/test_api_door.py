"""The API's door as a site runs it: one real ``greentwin serve`` (uvicorn, its logging, PostgreSQL,
a private Mosquitto), spoken to over HTTP from 127.0.0.1 the way a client on the host would.

What only the real server shows lives here: which forwarded headers the server believes, what
hostile input does to the service's own log, who may read ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.audit_sink import ACCESS_CHAIN
from app.auth.users import create_user
from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from audit.store import AuditStore
from tests.app.procs import MOSQUITTO, AuditKeys, Mosquitto, Service, running, service_env

pytestmark = [pytest.mark.mqtt, pytest.mark.slow]

PW = "correct horse battery"
USERS = {"adam": ["admin"], "olga": ["operator"]}


@dataclass
class Door:
    service: Service
    database_url: str
    keys: AuditKeys

    @property
    def http(self) -> httpx.Client:
        return self.service.http

    def login(self, name: str, password: str = PW, **headers: str) -> httpx.Response:
        return self.http.post("/api/auth/login", json={"username": name, "password": password}, headers=headers)

    def access_entries(self, n: int = 20) -> list[object]:
        engine = make_engine(self.database_url)
        try:
            return list(AuditStore(engine, *self.keys.open()).tail_entries(ACCESS_CHAIN, n))
        finally:
            engine.dispose()


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[Door]:
    from tests.conftest import _unavailable, temporary_pg_database

    if not Path(MOSQUITTO).exists():
        _unavailable(f"mosquitto not installed at {MOSQUITTO}")
    root = tmp_path_factory.mktemp("door")
    keys = AuditKeys.generate(root / "keys")
    with temporary_pg_database(pg_url, "greentwin_door") as url, running(Mosquitto(root / "broker")) as broker:
        db_cli.upgrade(url)
        db_cli.add_greenhouse(url, "gh1", zones=2, soil="loam")
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            for name, roles in USERS.items():
                create_user(session=session, username=name, password=PW, roles=roles)
        engine.dispose()
        env = service_env(database_url=url, mqtt_url=broker.url, keys=keys, policy_dir=root / "no-policy")
        with running(Service(root, env)) as service:
            yield Door(service, url, keys)


def test_a_forwarded_for_header_from_a_direct_client_is_not_believed(door: Door) -> None:
    """No proxy is configured: ``X-Forwarded-For`` from a client on 127.0.0.1 neither names the
    client of a sealed login nor moves the failed-login limit to another address."""
    assert door.login("adam", **{"X-Forwarded-For": "192.0.2.66"}).status_code == 200
    login = next(e for e in reversed(door.access_entries()) if e.kind == "login")  # type: ignore[attr-defined]
    assert login.payload["client"] == "127.0.0.1"  # type: ignore[attr-defined]
    for i in range(5):  # the per-(account, address) limit, each from a "new" forwarded address
        r = door.login("olga", "wrong password!", **{"X-Forwarded-For": f"198.51.100.{i + 1}"})
        assert r.status_code == 401, r.text
    assert door.login("olga", **{"X-Forwarded-For": "198.51.100.99"}).status_code == 429
