"""The service under a restricted PostgreSQL role: it writes what it must, the trail stays out of reach.

Migrations run as the owner; ``greentwin db grant --role`` gives the service's role its rights;
then, connected as that role, the service's own code records a decision and its ack, manages an
account and seals audit records, while every way of rewriting or cutting the trail (UPDATE,
DELETE under the purge licence, TRUNCATE, DDL) is refused by PostgreSQL's permissions.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import ProgrammingError

from app import registry
from app.auth.users import create_user, disable_user
from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.services.greenhouses import add_greenhouse
from audit import Keyring, Signer
from audit.store import AuditStore
from tests.app.pg_roles import RoleDatabase, owner_and_app_roles
from tests.app.test_audit_verify import (  # noqa: F401
    ack_job,
    decision_job,
    keys,
    verify,
    write_as_the_service,
)

pytestmark = [pytest.mark.postgres]


@pytest.fixture(scope="module")
def roles(pg_url: str) -> Iterator[RoleDatabase]:
    with owner_and_app_roles(pg_url, "gt_roles") as rdb:
        db_cli.upgrade(rdb.owner_url)
        out = subprocess.run([sys.executable, "-m", "app.cli", "db", "grant", "--role", rdb.app, "--url",
                              rdb.owner_url], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert f"{rdb.app}: SELECT, INSERT on audit_record" in out.stdout.splitlines()
        assert f"{rdb.app}: SELECT, INSERT, UPDATE (ack_status) on decision" in out.stdout.splitlines()
        assert f"{rdb.app}: SELECT, INSERT on mode_change" in out.stdout.splitlines()
        add_greenhouse(rdb.owner_url, "gh1", zones=2)
        yield rdb


def test_the_service_role_records_decisions_accounts_and_audit_records(roles: RoleDatabase) -> None:
    engine = make_engine(roles.app_url)
    try:
        cmd_id = str(uuid.uuid4())
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO decision (greenhouse_id, seq, ts, actor, mode, telemetry, member_actions, "
                "voted, clipped, rules_fired, confidence, cmd_id) VALUES ('gh1', 1, now(), 'policy', 'auto', "
                "'{}', '[]', '{}', '{}', '[]', 1.0, :c)"), {"c": cmd_id})
            conn.execute(text("UPDATE decision SET ack_status = 'applied' WHERE cmd_id = :c"), {"c": cmd_id})
        with make_session_factory(engine)() as session:
            create_user(session=session, username="olga", password="a-long-enough-password-1",
                        roles=["operator"])
            assert disable_user(session=session, username="olga").disabled_at is not None
        store = AuditStore(engine, Keyring.generate(), Signer.generate(), checkpoint_every=2)
        for i in range(3):
            store.append("gh1", "decision", "policy", {"i": i}, datetime.now(UTC))
        [result] = store.verify("gh1")
        assert result.ok and result.head_seq == 3
    finally:
        engine.dispose()


def test_the_service_role_promotes_and_rolls_back_policies(roles: RoleDatabase, tmp_path: Path) -> None:
    """The retraining job and `greentwin policy` run as the service's role: the registry's rows change."""
    shipped = Path(__file__).resolve().parents[2] / "policy" / "shipped"
    candidate = tmp_path / "candidate"
    shutil.copytree(shipped, candidate)
    engine = make_engine(roles.app_url)
    try:
        sessions = make_session_factory(engine)
        first = registry.ensure_seeded(sessions, shipped)
        assert first is not None and first.status == "promoted"
        registry.add_candidate(sessions, "candidate-1", candidate, parent=first.version)
        assert registry.promote(sessions, "candidate-1", "test").status == "promoted"
        taken_back, again = registry.rollback(sessions, "test")
        assert (taken_back.version, taken_back.status) == ("candidate-1", "rolled_back")
        assert again.version == first.version and registry.promoted(sessions).version == first.version
    finally:
        engine.dispose()


@pytest.mark.parametrize("sql", [
    "UPDATE audit_record SET actor = 'someone else'",
    "DELETE FROM audit_record",
    "SELECT set_config('greentwin.audit_purge', 'on', true); DELETE FROM audit_record",
    "TRUNCATE audit_record",
    "DELETE FROM audit_checkpoint",
    "UPDATE audit_checkpoint SET head_hash = head_hash",
    "INSERT INTO audit_purge_token (greenhouse_id) VALUES ('gh1')",
    "DELETE FROM decision",
    "UPDATE decision SET actor = 'operator:op1'",
    "UPDATE decision SET clipped = '{}', ack_status = 'rejected'",
    "UPDATE mode_change SET reason = 'routine'",
    "DELETE FROM mode_change",
    "DROP TABLE audit_record",
    "ALTER TABLE audit_record DISABLE TRIGGER ALL",
    "CREATE TABLE intruder (i int)",
])
def test_the_service_role_cannot_touch_the_trail_or_the_schema(roles: RoleDatabase, sql: str) -> None:
    engine = create_engine(roles.app_url)
    try:
        with pytest.raises(ProgrammingError, match="permission denied|must be owner"), engine.begin() as conn:
            for statement in sql.split("; "):
                conn.execute(text(statement))
    finally:
        engine.dispose()


def test_grant_refuses_an_unknown_role_and_sqlite(roles: RoleDatabase, tmp_path: object) -> None:
    from app.cli.db_grant import grant

    with pytest.raises(ValueError, match="does not exist"):
        grant(roles.owner_url, "gt_no_such_role_here")
    with pytest.raises(ValueError, match="PostgreSQL"):
        grant(f"sqlite:///{tmp_path}/x.sqlite3", "anyone")


def test_what_the_service_role_may_still_change_is_caught_by_verify(
        roles, keys, tmp_path, capsys, monkeypatch) -> None:  # noqa: F811
    """The ack status is the service's to write, so its role may set it to anything: verify compares it with
    the sealed command_ack and names the row, run as that same role (as the scheduled verify runs)."""
    add_greenhouse(roles.owner_url, "ga", zones=2)
    write_as_the_service(roles.app_url, keys, [decision_job(7), ack_job(7, "applied")], tmp_path)
    assert verify(capsys, roles.app_url, "--greenhouse", "ga")[0] == 0
    engine = create_engine(roles.app_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE decision SET ack_status = 'rejected' WHERE seq = 7"))
    finally:
        engine.dispose()
    monkeypatch.setattr("app.audit_coverage.SEAL_LAG_S", 1.0)
    code, out = verify(capsys, roles.app_url, "--greenhouse", "ga")
    assert code == 1, out
    assert "decision seq 7 ack_status: stored 'rejected', sealed 'applied' (command_ack, chain seq 2)" in out
