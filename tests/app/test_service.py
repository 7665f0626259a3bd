"""The whole service against the real broker: plant-sim -> bridge -> controller -> command -> ack -> DB."""

from __future__ import annotations

import time
import uuid

import pytest
from fastapi.testclient import TestClient

from app.audit_sink import ACCESS_CHAIN, service_audit_keys
from app.auth.users import create_user
from app.cli import db as db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.main import create_app
from app.services.greenhouses import add_greenhouse
from audit.errors import AuditKeyError
from audit.store import AuditStore
from plantsim.sim import PlantSim

OPERATOR_PW = "leak-patrol-2026"
METRICS_TOKEN = "service-test-metrics-" + "8c" * 16


def _login(client: TestClient, username: str = "op1") -> None:
    """Authenticate every later request of ``client`` as ``username``."""
    r = client.post("/api/auth/login", json={"username": username, "password": OPERATOR_PW})
    assert r.status_code == 200, r.text
    client.headers["Authorization"] = f"Bearer {r.json()['access_token']}"


def _wait(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def service_env(tmp_path, mqtt_available):
    gh = "t" + uuid.uuid4().hex[:10]
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, gh, zones=6, soil="loam")
    engine = make_engine(url)
    with make_session_factory(engine)() as session:
        create_user(session=session, username="op1", password=OPERATOR_PW, roles=["operator"])
    engine.dispose()
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1883", policy_dir=tmp_path / "no-policy",
                        max_age_s=3600.0, max_clock_skew_s=3600.0, environment="demo",
                        metrics_token=METRICS_TOKEN)
    return gh, settings, tmp_path / "state"


def test_decisions_flow_end_to_end_and_estop_survives_restart(service_env):
    gh, settings, state_dir = service_env
    sim = PlantSim(settings.mqtt_url, [gh], dt_s=60.0, seed=0)
    try:
        with TestClient(create_app(settings, state_dir=state_dir)) as client:
            runtime = client.app.state.runtime
            _login(client)
            assert runtime.bridge.wait_ready(10)
            assert sim.start()
            for k in range(1, 6):
                sim.step_once()
                assert _wait(lambda k=k: runtime.last_decision.get(gh, {}).get("seq") == k), f"decision {k}"
            assert _wait(lambda: len(runtime.bridge.tracker) == 0), "every command acknowledged"
            listed = {g["id"]: g for g in client.get("/api/greenhouses").json()}
            assert listed[gh]["mode"] == "auto" and listed[gh]["last_decision"]["seq"] == 5
            rows = client.get(f"/api/greenhouses/{gh}/decisions").json()
            assert [r["seq"] for r in rows] == [5, 4, 3, 2, 1]
            # The edge box's acks reach the decisions' rows (the writer stores them in journal order).
            assert _wait(lambda: [r["ack_status"]
                                  for r in client.get(f"/api/greenhouses/{gh}/decisions").json()]
                         == ["applied"] * 5), "acks recorded"

            assert client.post(f"/api/greenhouses/{gh}/estop",
                               json={"actor": "op1", "reason": ""}).status_code == 422
            assert client.post(f"/api/greenhouses/{gh}/estop",
                               json={"actor": "op1", "reason": "leak at zone 3",
                                     "extra": 1}).status_code == 422
            r = client.post(f"/api/greenhouses/{gh}/estop", json={"actor": "op1", "reason": "leak at zone 3"})
            assert r.status_code == 200 and r.json()["to_mode"] == "estop"
            sim.step_once()
            assert _wait(lambda: runtime.last_decision[gh]["mode"] == "estop")
            assert runtime.last_decision[gh]["clipped"]["pump_pct"] == 0.0
            assert client.post("/api/greenhouses/nope/estop",
                               json={"actor": "a", "reason": "abc"}).status_code == 404
            metrics = client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text
            assert f'greentwin_decisions_total{{actor="policy",greenhouse="{gh}"}} 5.0' in metrics
            assert f'greentwin_estops_total{{greenhouse="{gh}",source="api"}} 1.0' in metrics
            assert client.get("/readyz").json()["ready"] is True

        # A restart (new app, same state directory) keeps the e-stop latched.
        with TestClient(create_app(settings, state_dir=state_dir)) as client:
            _login(client)
            listed = {g["id"]: g for g in client.get("/api/greenhouses").json()}
            assert listed[gh]["estop_latched"] is True and listed[gh]["mode"] == "estop"
            r = client.post(f"/api/greenhouses/{gh}/estop/reset",
                            json={"actor": "op1", "reason": "leak fixed"})
            assert r.status_code == 200 and r.json()["to_mode"] == "manual"  # a safe hold, not the policy
            changes = client.get(f"/api/greenhouses/{gh}/mode-changes").json()
            # The logged-in operator is the actor, whatever the body's "actor" says.
            assert [(c["from_mode"], c["to_mode"], c["actor"]) for c in changes] == [
                ("auto", "estop", "operator:op1"), ("estop", "manual", "operator:op1")]
    finally:
        sim.close()

    # Every decision and mode change is in the sealed audit trail, and the chain verifies.
    keyring, signer = service_audit_keys(settings, state_dir)
    store = AuditStore(make_engine(settings.database_url), keyring, signer)
    [result] = store.verify(gh)
    assert result.ok, result.reason
    kinds = [r.kind for r in store.iter_records(gh)]
    assert kinds.count("decision") == 6 and kinds.count("estop") == 1 and kinds.count("estop_reset") == 1
    acks = [e.payload for e in store.tail_entries(gh, 100) if e.kind == "command_ack"]
    assert len(acks) >= 5 and {a["status"] for a in acks} == {"applied"}
    # The key in use was recorded once (two starts on the same key), before the logins it sealed.
    access = [r.kind for r in store.iter_records(ACCESS_CHAIN)]
    assert access[0] == "key_in_use" and access.count("key_in_use") == 1 and "key_rotation" not in access
    assert access.count("policy_in_use") == 1 and "policy_change" not in access


def test_service_refuses_to_start_without_audit_keys_outside_demo(service_env, monkeypatch):
    gh, settings, state_dir = service_env
    monkeypatch.delenv("GREENTWIN_AUDIT_KEYS", raising=False)
    monkeypatch.delenv("GREENTWIN_AUDIT_SIGNING_KEY", raising=False)
    with pytest.raises(AuditKeyError, match="outside demo"), \
            TestClient(create_app(settings.model_copy(update={"environment": "dev"}), state_dir=state_dir)):
        pytest.fail("the service started without audit keys")


def test_service_refuses_a_schema_that_is_behind(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.sqlite3'}"
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1883")
    from app.core.db import SchemaOutOfDate

    with pytest.raises(SchemaOutOfDate, match="greentwin db upgrade"), TestClient(create_app(settings)):
        pytest.fail("the service started on a schema that is behind")
