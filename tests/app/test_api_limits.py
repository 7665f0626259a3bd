"""Limits at the API's door: request body size, and failed logins per account across addresses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from fastapi.testclient import TestClient

from app.auth.users import create_user
from app.cli import db as db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.main import create_app

PW = "correct horse battery"
MAX_BYTES = 4096


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("limits")
    url = f"sqlite:///{root / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    db_cli.add_greenhouse(url, "gh1", zones=3, soil="loam")
    engine = make_engine(url)
    with make_session_factory(engine)() as session:
        for name in ("maya", "nina"):
            create_user(session=session, username=name, password=PW, roles=["operator"])
    engine.dispose()
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", policy_dir=root / "no-policy",
                        environment="demo", secret_key="limits-test-secret-" + "5e" * 16,
                        login_max_failures=3, login_max_failures_per_account=6, max_request_bytes=MAX_BYTES)
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


def test_failed_logins_are_capped_per_account_across_addresses(client: TestClient) -> None:
    """Two failures from each of three addresses stay under the per-address cap (3) but reach the
    account's (6): the right password from a fourth address is refused too, another account is not."""
    for i in range(3):
        guesser = TestClient(client.app, client=(f"10.9.0.{i + 1}", 40000))
        for _ in range(2):
            assert guesser.post("/api/auth/login", json={"username": "maya", "password": "guess!"}).status_code == 401
    fresh = TestClient(client.app, client=("10.9.1.1", 40000))
    r = fresh.post("/api/auth/login", json={"username": "maya", "password": PW})
    assert r.status_code == 429 and "too many failed logins" in r.json()["detail"]
    assert fresh.post("/api/auth/login", json={"username": "nina", "password": PW}).status_code == 200


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

    from app.mqtt.topics import Telemetry, encode, telemetry_topic
    from tests.app.procs import wait_until

    runtime = client.app.state.runtime
    bridge = runtime.bridge
    for seq in range(bridge.rate_limit.burst + 20):
        tel = Telemetry(ts=datetime.now(UTC), boot_id="flood", seq=seq, soil_vwc=[[0.2, 0.2]] * 3, air_temp_c=20.0,
                        air_rh_pct=50.0, par_umol_m2_s=0.0, co2_ppm=400.0, leaf_temp_c=19.5, flow_l_min=0.0,
                        pump_current_a=0.0, valve_open=[0, 0, 0], pump_pct=0.0, light_pct=0.0, estop=False)
        msg = mqtt.MQTTMessage(topic=telemetry_topic("gh1").encode())
        msg.payload = encode(tel)
        bridge._on_telemetry_msg(bridge.client, None, msg)  # as paho's thread delivers it

    def shed() -> float:
        line = next((x for x in client.get("/metrics").text.splitlines()
                     if x.startswith('greentwin_telemetry_shed_total{greenhouse="gh1",reason="rate_limit"}')), None)
        return float(line.split()[-1]) if line else 0.0

    wait_until(lambda: shed() >= 10, 10, "shed telemetry in /metrics")
    assert bridge.stats["shed"] == shed()
    assert any(a.kind == "telemetry_shed:rate_limit" and a.greenhouse_id == "gh1" for a in runtime.alarms)
