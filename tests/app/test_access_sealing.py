"""Every change of who may do what is sealed in the ``_access`` chain exactly once, whichever process makes
it, or it does not happen: the service (the real app on PostgreSQL) and ``greentwin user|greenhouse`` as real
processes on the same database, and an audit table that refuses the record.

Each process caches the chain heads it wrote, so the service's next append after a CLI command used to hit
the seq the CLI took: the role change committed unsealed behind a 500, the next privileged login got 503.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from app.audit_sink import ACCESS_CHAIN, service_audit_keys
from app.auth.users import create_user
from app.cli import db as db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.main import create_app
from app.models import Greenhouse, User
from audit.store import AuditStore

pytestmark = pytest.mark.postgres

SECRET = "access-seal-secret-" + "4be1c07d" * 4
PW = "correct horse battery"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Plant:
    """The running service (in this process) and what a CLI process needs to reach the same database and
    keys."""

    client: TestClient
    url: str
    state_dir: Path
    engine: Engine

    def store(self) -> AuditStore:
        return AuditStore(self.engine, *service_audit_keys(Settings(environment="demo"), self.state_dir))

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``greentwin ARGS`` as its own process (its own audit store) against the service's database."""
        return subprocess.run(self._command(args), cwd=REPO, env=self._env(), capture_output=True, text=True,
                              timeout=120, check=False)

    def start_cli(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self._command(args), cwd=REPO, env=self._env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def _command(self, args: tuple[str, ...]) -> list[str]:
        return [sys.executable, "-m", "app.cli", *args, "--url", self.url, "--state-dir", str(self.state_dir)]

    def _env(self) -> dict[str, str]:
        return {**os.environ, "GREENTWIN_ENVIRONMENT": "demo", "GREENTWIN_DATABASE_URL": self.url}

    def login(self, name: str) -> dict[str, str]:
        r = self.client.post("/api/auth/login", json={"username": name, "password": PW})
        assert r.status_code == 200, r.text
        self.client.cookies.clear()
        return {"Authorization": f"Bearer {r.json()['access_token']}"}

    def roles(self, name: str) -> list[str]:
        with Session(self.engine) as s:
            user = s.scalars(select(User).where(User.username == name)).one()
            return sorted(user.roles)


@pytest.fixture(scope="module")
def plant(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[Plant]:
    from tests.conftest import temporary_pg_database

    root = tmp_path_factory.mktemp("access-seal")
    with temporary_pg_database(pg_url, "greentwin_access") as url:
        db_cli.upgrade(url)
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            for name, roles in {"adam": ["admin"], "olga": ["operator"], "otto": ["operator"],
                                "rita": ["operator"], "ivan": ["operator"], "pia": ["agronomist"]}.items():
                create_user(session=session, username=name, password=PW, roles=roles)
        settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", policy_dir=root / "no-policy",
                            environment="demo", secret_key=SECRET)
        try:
            with TestClient(create_app(settings, state_dir=root / "state"),
                            raise_server_exceptions=False) as client:
                yield Plant(client, url, root / "state", engine)
        finally:
            engine.dispose()


def _kinds(store: AuditStore, count: int) -> list[tuple[str, str]]:
    return [(e.kind, e.actor) for e in store.tail_entries(ACCESS_CHAIN, count)]


def test_a_role_change_after_a_cli_user_add_is_sealed_once(plant: Plant) -> None:
    admin = plant.login("adam")  # the service has appended to the access chain: it holds its head
    done = plant.cli("user", "add", "nina", "--role", "operator")
    assert done.returncode == 0, done.stderr
    r = plant.client.post("/api/users/olga/roles", json={"roles": ["agronomist", "operator"]}, headers=admin)
    assert r.status_code == 200, r.text
    assert plant.roles("olga") == ["agronomist", "operator"]
    store = plant.store()
    entries = store.tail_entries(ACCESS_CHAIN, 3)
    assert [(e.kind, e.actor.split(":")[0]) for e in entries] == [("login", "adam"), ("user_added", "cli"),
                                                                  ("user_roles", "admin")]
    assert entries[2].payload == {"username": "olga", "from_roles": ["operator"],
                                  "to_roles": ["agronomist", "operator"]}
    assert all(r.ok for r in store.verify(ACCESS_CHAIN))


def test_the_first_privileged_login_after_a_cli_command_is_let_in(plant: Plant) -> None:
    plant.login("adam")
    assert plant.cli("greenhouse", "add", "gh-cli", "--zones", "2").returncode == 0
    plant.login("otto")  # was 503: the login's record hit the seq the CLI had taken
    assert plant.cli("user", "disable", "ivan").returncode == 0
    admin = plant.login("adam")
    assert plant.client.post("/api/users/pia/password", headers=admin).status_code == 200
    store = plant.store()
    assert [(k, a.split(":")[0]) for k, a in _kinds(store, 6)] == [
        ("login", "adam"), ("greenhouse_register", "cli"), ("login", "otto"), ("user_disabled", "cli"),
        ("login", "adam"), ("password_reset", "admin")]
    assert all(r.ok for r in store.verify(ACCESS_CHAIN))


def test_cli_changes_while_the_service_keeps_appending_are_each_sealed_once(
        plant: Plant, caplog: pytest.LogCaptureFixture) -> None:
    """Three `greentwin user add` processes at once while the service seals into the same chain all along."""
    service_store: AuditStore = plant.client.app.state.runtime.audit.store  # type: ignore[attr-defined]
    stop, sealed = threading.Event(), []

    def keep_sealing() -> None:
        while not stop.is_set():
            sealed.append(service_store.append(ACCESS_CHAIN, "alarm_ack", "operator:olga",
                                               {"n": len(sealed)}).seq)
            time.sleep(0.005)

    sealer = threading.Thread(target=keep_sealing)
    with caplog.at_level("INFO", logger="audit.store"):
        sealer.start()
        try:
            procs = [plant.start_cli("user", "add", f"crowd{i}", "--role", "operator") for i in range(3)]
            outcomes = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
        finally:
            stop.set()
            sealer.join()
    assert all(rc == 0 for rc, _ in outcomes), outcomes
    assert "another writer appended to _access meanwhile" in caplog.text  # the service did lose races
    assert sealed == sorted(sealed)
    store = plant.store()
    entries = [e for e in store.tail_entries(ACCESS_CHAIN, len(sealed) + 10)
               if e.kind in ("alarm_ack", "user_added")]
    assert sorted(e.payload["username"] for e in entries
                  if e.kind == "user_added") == ["crowd0", "crowd1", "crowd2"]
    assert [e.payload["n"] for e in entries if e.kind == "alarm_ack"] == list(range(len(sealed)))
    for i in range(3):
        assert plant.roles(f"crowd{i}") == ["operator"]
    assert all(r.ok for r in store.verify(ACCESS_CHAIN))


@contextmanager
def _audit_table_refuses(engine: Engine) -> Iterator[None]:
    """The database refuses every new audit record (as a full disk or a revoked grant would)."""
    with engine.begin() as conn:
        conn.execute(text("CREATE FUNCTION audit_test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
                          "$$ BEGIN RAISE EXCEPTION 'audit disk full'; END $$"))
        conn.execute(text("CREATE TRIGGER audit_test_refuse BEFORE INSERT ON audit_record FOR EACH ROW "
                          "EXECUTE FUNCTION audit_test_refuse()"))
    try:
        yield
    finally:
        with engine.begin() as conn:
            conn.execute(text("DROP TRIGGER audit_test_refuse ON audit_record"))
            conn.execute(text("DROP FUNCTION audit_test_refuse()"))


def test_a_change_the_trail_refuses_is_not_made(plant: Plant) -> None:
    admin = plant.login("adam")
    store = plant.store()
    [head_before] = [h for h in store.heads() if h[0] == ACCESS_CHAIN]
    with _audit_table_refuses(plant.engine):
        r = plant.client.post("/api/users/rita/roles", json={"roles": ["admin"]}, headers=admin)
        assert r.status_code == 503, r.text
        assert "audit trail" in r.json()["detail"] and "nothing was changed" in r.json()["detail"]
        assert plant.client.post("/api/users", json={"username": "eve", "roles": ["admin"]},
                                 headers=admin).status_code == 503
        assert plant.client.post("/api/users/rita/disable", headers=admin).status_code == 503
        assert plant.client.post("/api/users/rita/password", headers=admin).status_code == 503
        assert plant.client.post("/api/greenhouses", json={"id": "gh-unsealed", "zones": 2},
                                 headers=admin).status_code == 503
        cli = plant.cli("user", "roles", "rita", "--role", "admin")
        assert cli.returncode == 1 and "audit trail" in cli.stderr and "Traceback" not in cli.stderr, \
            cli.stderr
        cli = plant.cli("greenhouse", "add", "gh-unsealed-cli")
        assert cli.returncode == 1 and "audit trail" in cli.stderr and "Traceback" not in cli.stderr, \
            cli.stderr
    assert [h for h in store.heads() if h[0] == ACCESS_CHAIN] == [head_before]
    assert plant.roles("rita") == ["operator"]
    with Session(plant.engine) as s:
        assert s.scalars(select(User).where(User.username == "eve")).one_or_none() is None
        assert s.get(Greenhouse, "gh-unsealed") is None and s.get(Greenhouse, "gh-unsealed-cli") is None
    plant.login("rita")  # neither disabled nor given a new password
