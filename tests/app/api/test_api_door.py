"""The API's door as a site runs it: one real ``greentwin serve`` (uvicorn, its logging, PostgreSQL,
a private Mosquitto), spoken to over HTTP from 127.0.0.1 the way a client on the host would.

What only the real server shows lives here: which forwarded headers the server believes, what
hostile input does to the service's own log, who may read ``/metrics``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.audit_sink import ACCESS_CHAIN
from app.auth.users import create_user
from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.services.greenhouses import add_greenhouse
from app.web.security import csrf_token
from audit.store import AuditStore
from tests.app.procs import MOSQUITTO, AuditKeys, Mosquitto, Service, running, service_env

pytestmark = [pytest.mark.mqtt, pytest.mark.slow]

PW = "correct horse battery"
USERS = {"adam": ["admin"], "olga": ["operator"], "nora": ["operator"]}
REPEAT_INTERVAL_S, REPEAT_BURST = 3.0, 5
SUPPRESSED = re.compile(r"uvicorn\.access (\d+) similar lines suppressed in \d+ s, like: (.*)$")


@dataclass
class Door:
    service: Service
    database_url: str
    keys: AuditKeys

    @property
    def http(self) -> httpx.Client:
        return self.service.http

    def login(self, name: str, password: str = PW, **headers: str) -> httpx.Response:
        return self.http.post("/api/auth/login", json={"username": name, "password": password},
                              headers=headers)

    def log_from(self, offset: int) -> str:
        """What the service logged from byte ``offset`` of its log on."""
        with self.service.log.open("rb") as fh:
            fh.seek(offset)
            return fh.read().decode("utf-8", errors="replace")

    def log_size(self) -> int:
        return self.service.log.stat().st_size

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
    with temporary_pg_database(pg_url, "greentwin_door") as url, \
            running(Mosquitto(root / "broker")) as broker:
        db_cli.upgrade(url)
        add_greenhouse(url, "gh1", zones=2, soil="loam")
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            for name, roles in USERS.items():
                create_user(session=session, username=name, password=PW, roles=roles)
        engine.dispose()
        env = service_env(database_url=url, mqtt_url=broker.url, keys=keys, policy_dir=root / "no-policy",
                          extra={"GREENTWIN_LOG_REPEAT_INTERVAL_S": str(REPEAT_INTERVAL_S),
                                 "GREENTWIN_LOG_REPEAT_BURST": str(REPEAT_BURST)})
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


def test_a_nul_byte_is_a_4xx_and_one_short_log_line(door: Door) -> None:
    """In a login name, a user path, a report's greenhouse id: refused at the door, and the log gets
    the access line of each refusal, no traceback."""
    admin = {"Authorization": f"Bearer {door.login('adam').json()['access_token']}"}
    start = door.log_size()
    assert door.http.post("/api/auth/login",
                          json={"username": "ad\u0000am", "password": PW}).status_code == 422
    assert door.http.post("/api/users/ad%00am/disable", headers=admin).status_code == 400
    r = door.http.get("/api/greenhouses/gh%001/report.pdf", headers=admin,
                      params={"from": "2026-01-01T00:00:00Z", "to": "2026-02-01T00:00:00Z"})
    assert r.status_code == 400 and "control character" in r.json()["detail"]
    time.sleep(0.5)  # the access lines are written after the answers
    logged = door.log_from(start)
    assert "Traceback" not in logged and " ERROR " not in logged, logged[-3000:]
    assert len(logged) < 1500, f"{len(logged)} bytes logged for three bad requests"


def test_a_flood_of_bad_requests_is_collapsed_in_the_log(door: Door) -> None:
    """A not-JSON flood: of its lines only a few per interval reach the log, the rest are counted
    in "suppressed" lines, and every request is accounted for by one or the other."""
    start, sent, began = door.log_size(), 1000, time.monotonic()
    for _ in range(sent):
        r = door.http.post("/api/auth/login", content=b"not json",
                           headers={"content-type": "application/json"})
        assert r.status_code == 422
    took = time.monotonic() - began
    time.sleep(REPEAT_INTERVAL_S + 0.5)
    assert door.http.get("/healthz").status_code == 200  # a line after the interval reports the last one
    time.sleep(0.5)
    lines = door.log_from(start).splitlines()
    passed = [ln for ln in lines if '"POST /api/auth/login HTTP/1.1" 422' in ln and "suppressed" not in ln]
    suppressed = [int(m.group(1)) for ln in lines if (m := SUPPRESSED.search(ln)) and " 422" in m.group(2)]
    assert len(passed) + sum(suppressed) == sent, (len(passed), suppressed)
    windows = int(took / REPEAT_INTERVAL_S) + 2
    assert len(passed) <= REPEAT_BURST * windows and len(suppressed) <= windows, \
        (len(passed), suppressed, took)
    assert sum(len(ln) + 1 for ln in lines) < 200 * (REPEAT_BURST + 1) * windows + 2000


def test_metrics_need_the_metrics_token(door: Door) -> None:
    """``/metrics`` names greenhouses, alarm kinds and login failures: not for anyone who asks."""
    for headers in ({}, {"Authorization": "Bearer wrong-token"},
                    {"Authorization": f"Basic {door.keys.metrics_token}"},
                    {"Authorization": f"Bearer {door.login('adam').json()['access_token']}"}):
        r = door.http.get("/metrics", headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (headers, r.text[:200])
        assert "GREENTWIN_METRICS_TOKEN" in r.json()["detail"] and "greentwin_" not in r.text
    assert door.service.metric("greentwin_login_failures_total", reason="bad_credentials") >= 5
    assert door.http.get("/healthz").status_code == 200, "liveness stays open"


def test_a_cookie_session_with_a_blank_bearer_header_still_needs_its_csrf_token(door: Door) -> None:
    """uvicorn trims ASCII spaces off a header's end but passes a 0xA0 byte on, which the authentication
    strips as whitespace: no bearer token then, so the cookie authenticates and the CSRF check applies."""
    token = door.login("nora").json()["access_token"]
    door.http.cookies.clear()
    url, body = "/api/greenhouses/gh1/mode", {"mode": "auto", "reason": "csrf at the door"}
    cookie = {"Cookie": f"greentwin_session={token}"}
    r = door.http.post(url, json=body, headers={**cookie, "Authorization": b"Bearer \xa0"})  # type: ignore[dict-item]
    assert r.status_code == 403 and "CSRF" in r.json()["detail"], r.text
    r = door.http.post(url, json=body, headers={**cookie, "X-CSRF-Token": csrf_token(token)})
    assert r.status_code == 200, r.text
