"""Limits at the API's door: request body size, failed logins per address and per account, account locks."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import paho.mqtt.client as mqtt
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.audit_sink import ACCESS_CHAIN
from app.auth.users import create_user
from app.cli import db as db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.main import create_app
from app.services.greenhouses import add_greenhouse

PW = "correct horse battery"
MAX_BYTES = 4096
METRICS_TOKEN = "limits-metrics-token-" + "6b" * 16
SCRAPE = {"Authorization": f"Bearer {METRICS_TOKEN}"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("limits")
    url = f"sqlite:///{root / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=3, soil="loam")
    engine = make_engine(url)
    with make_session_factory(engine)() as session:
        for name in ("maya", "nina", "lena", "ivan"):
            create_user(session=session, username=name, password=PW, roles=["operator"])
        create_user(session=session, username="adam", password=PW, roles=["admin"])
    engine.dispose()
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", policy_dir=root / "no-policy",
                        environment="demo", secret_key="limits-test-secret-" + "5e" * 16,
                        login_max_failures=3, login_max_failures_per_account=6,
                        login_max_failures_per_address=8, max_request_bytes=MAX_BYTES,
                        metrics_token=METRICS_TOKEN)
    with TestClient(create_app(settings, state_dir=root / "state")) as c:
        yield c


def test_a_body_over_the_limit_is_refused_with_413(client: TestClient) -> None:
    huge = {"username": "maya", "password": "x" * (MAX_BYTES * 4)}
    r = client.post("/api/auth/login", json=huge)
    assert r.status_code == 413 and f"{MAX_BYTES} bytes" in r.json()["detail"]


def test_a_chunked_body_without_length_is_cut_off_at_the_limit(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"username": "maya", "password": "'
        for _ in range(8):
            yield b"y" * 1024
        yield b'"}'

    r = client.post("/api/auth/login", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_a_body_within_the_limit_is_served(client: TestClient) -> None:
    r = client.post("/api/auth/login", json={"username": "nina", "password": PW})
    assert r.status_code == 200 and r.json()["access_token"]


def _login(client: TestClient, address: str, name: str, password: str) -> httpx.Response:
    return TestClient(client.app, client=(address, 40000)).post("/api/auth/login",
                                                                json={"username": name, "password": password})


def test_failures_from_many_addresses_lock_the_account_but_not_its_owner(client: TestClient) -> None:
    """Two failures from each of three addresses stay under the per-address cap (3) but reach the
    account's (6): the account is locked. Its owner, from an address with no failures, still logs in;
    an address that failed is refused even with the right password; a fresh one gets one guess."""
    for i in range(3):
        for _ in range(2):
            assert _login(client, f"10.9.0.{i + 1}", "maya", "guess!").status_code == 401
    assert _login(client, "10.9.1.1", "maya", PW).status_code == 200
    r = _login(client, "10.9.0.1", "maya", PW)
    assert r.status_code == 429 and "ask an admin to lift the lock" in r.json()["detail"]
    assert _login(client, "10.9.2.1", "maya", "one more guess").status_code == 401
    assert _login(client, "10.9.2.1", "maya", PW).status_code == 429, "one try per address while locked"
    assert _login(client, "10.9.0.1", "nina", PW).status_code == 200, "another account is not locked"


def test_one_address_is_limited_across_accounts(client: TestClient) -> None:
    """Spraying one guess at many names (known or not) from one address stops at the per-address cap
    (8), whatever the account; other addresses are not held back."""
    for i in range(8):
        assert _login(client, "10.9.3.1", f"name{i}", "guess!").status_code == 401
    r = _login(client, "10.9.3.1", "nina", PW)
    assert r.status_code == 429 and "too many failed logins" in r.json()["detail"]
    assert _login(client, "10.9.3.2", "nina", PW).status_code == 200


def test_an_admin_sees_a_lock_and_lifts_it_sealed(client: TestClient,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="app.auth.service"):
        for i in range(6):
            assert _login(client, f"10.9.4.{i + 1}", "lena", "guess!").status_code == 401
    assert any("login lock on lena until" in r.getMessage()
               and "6 failed logins from 6 addresses" in r.getMessage()
               for r in caplog.records)
    admin = {"Authorization": f"Bearer {_login(client, '10.9.5.1', 'adam', PW).json()['access_token']}"}
    operator = {"Authorization": f"Bearer {_login(client, '10.9.5.1', 'nina', PW).json()['access_token']}"}
    listed = {row["username"]: row["locked_until"]
              for row in client.get("/api/lockouts", headers=admin).json()}
    assert "lena" in listed and listed["lena"] > datetime.now(UTC).isoformat()
    assert client.get("/api/lockouts", headers=operator).status_code == 403
    assert client.post("/api/users/lena/unlock", headers=operator).status_code == 403
    assert _login(client, "10.9.4.1", "lena", PW).status_code == 429
    with caplog.at_level(logging.WARNING, logger="app.auth.service"):
        r = client.post("/api/users/lena/unlock", headers=admin)
    assert r.status_code == 200 and r.json()["username"] == "lena"
    assert any(rec.getMessage() == "login lock on lena lifted by admin:adam" for rec in caplog.records)
    assert client.post("/api/users/lena/unlock", headers=admin).status_code == 409
    assert client.post("/api/users/ghost/unlock", headers=admin).status_code == 404
    assert "lena" not in {row["username"] for row in client.get("/api/lockouts", headers=admin).json()}
    assert _login(client, "10.9.4.1", "lena", PW).status_code == 200, \
        "the lift clears the address's failures too"
    metrics = client.get("/metrics", headers=SCRAPE).text
    assert 'greentwin_login_lock_changes_total{change="lifted"} 1.0' in metrics
    # The lift is sealed in the access chain by the admin, and the chain verifies.
    store = client.app.state.runtime.audit.store
    [entry] = [e for e in store.tail_entries(ACCESS_CHAIN, 50) if e.kind == "user_unlock"]
    assert entry.actor == "admin:adam" and entry.payload["username"] == "lena" \
        and entry.payload["locked_until"]
    assert all(result.ok for result in store.verify(ACCESS_CHAIN))


def test_a_lift_the_trail_refuses_leaves_the_lock(client: TestClient) -> None:
    for i in range(6):
        assert _login(client, f"10.9.6.{i + 1}", "ivan", "guess!").status_code == 401
    admin = {"Authorization": f"Bearer {_login(client, '10.9.5.2', 'adam', PW).json()['access_token']}"}
    engine = make_engine(client.app.state.runtime.settings.database_url)
    with engine.begin() as conn:  # the database refuses every new audit record (a full disk, a revoked grant)
        conn.execute(text("CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_record "
                          "BEGIN SELECT RAISE(ABORT, 'audit disk full'); END"))
    try:
        r = client.post("/api/users/ivan/unlock", headers=admin)
        assert r.status_code == 503 and "nothing was changed" in r.json()["detail"]
    finally:
        with engine.begin() as conn:
            conn.execute(text("DROP TRIGGER refuse_audit"))
        engine.dispose()
    assert "ivan" in {row["username"] for row in client.get("/api/lockouts", headers=admin).json()}
    assert _login(client, "10.9.6.1", "ivan", PW).status_code == 429, "still locked"


def test_settings_never_echo_the_brokers_password(tmp_path: Path) -> None:
    secret = "hunter2-not-for-logs"
    with pytest.raises(ValueError) as bad_scheme:
        Settings(mqtt_url=f"ftp://svc:{secret}@broker:1883")
    with pytest.raises(ValueError) as bad_number:
        Settings(mqtt_url=f"mqtt://svc:{secret}@broker:1883", max_age_s="soon")
    good = Settings(mqtt_url=f"mqtt://svc:{secret}@broker:1883", mqtt_password="also-" + secret)
    texts = [str(bad_scheme.value), str(bad_number.value), repr(good), str(good), repr(good.mqtt_target())]
    assert all(secret not in t for t in texts), texts
    assert good.mqtt_target().password == "also-" + secret  # the setting wins over the URL's


def test_a_telemetry_flood_is_shed_visibly_by_the_running_service(client: TestClient) -> None:
    """Through the service's own bridge: over the burst, telemetry is counted as shed and alarmed."""
    from datetime import UTC, datetime

    from tests.app.procs import wait_until
    from wire.topics import Telemetry, encode, telemetry_topic

    runtime = client.app.state.runtime
    bridge = runtime.bridge
    for seq in range(bridge.inbound.rate_limit.burst + 20):
        tel = Telemetry(ts=datetime.now(UTC), boot_id="flood", seq=seq, soil_vwc=[[0.2, 0.2]] * 3,
                        air_temp_c=20.0, air_rh_pct=50.0, par_umol_m2_s=0.0, co2_ppm=400.0, leaf_temp_c=19.5,
                        flow_l_min=0.0, pump_current_a=0.0, valve_open=[0, 0, 0], pump_pct=0.0, light_pct=0.0,
                        estop=False)
        msg = mqtt.MQTTMessage(topic=telemetry_topic("gh1").encode())
        msg.payload = encode(tel)
        bridge.inbound.on_telemetry_msg(bridge.client, None, msg)  # as paho's thread delivers it

    def shed() -> float:
        line = next((x for x in client.get("/metrics", headers=SCRAPE).text.splitlines()
                     if x.startswith('greentwin_telemetry_shed_total{greenhouse="gh1",'
                                     'reason="rate_limit"}')), None)
        return float(line.split()[-1]) if line else 0.0

    wait_until(lambda: shed() >= 10, 10, "shed telemetry in /metrics")
    assert bridge.stats["shed"] == shed()
    assert any(a.kind == "telemetry_shed:rate_limit" and a.greenhouse_id == "gh1" for a in runtime.alarms)
