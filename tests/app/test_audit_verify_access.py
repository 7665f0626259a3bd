"""`greentwin audit verify` holds who may do what to the ``_access`` chain: an account, a role or a
registration that reached the tables without its sealed record (someone with database access running
``UPDATE app_user_role ...``) exits 1 naming it, where the chain alone verifies as nothing wrong; and
`greentwin audit baseline-access` seals, once, what a site made before accounts were sealed.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from app.access_seal import AccessSealer
from app.audit_sink import ACCESS_CHAIN
from app.auth.users import create_user, disable_user
from app.cli import db as db_cli
from app.cli import main
from app.core.config import Settings
from app.core.db import make_engine
from app.main import create_app
from app.services.greenhouses import add_greenhouse
from audit import Keyring, Signer
from audit.store import AuditStore
from tests.app.test_audit_verify import (  # noqa: F401 (database, keys: fixtures)
    _flip_ciphertext,
    as_owner,
    database,
    keys,
    past_the_triggers,
    verify,
)

if TYPE_CHECKING:
    from app.access_coverage import AccessCheck

PW = "correct horse battery"
SECRET = "access-verify-secret-" + "5c2e90aa" * 4
NEVER_SEALED_HINT = "`greentwin audit baseline-access` seals every account and greenhouse as they stand, once"


@pytest.fixture
def pg_site(make_pg_database) -> Iterator[str]:  # type: ignore[no-untyped-def]
    with make_pg_database("gt_verify_access") as url:
        db_cli.upgrade(url)
        yield url


def _cli(*args: str) -> int:
    return main(list(args))


@pytest.fixture
def sealed_site(pg_site: str, keys: tuple[Keyring, Signer], tmp_path: Path,  # noqa: F811
                monkeypatch: pytest.MonkeyPatch) -> str:
    """A site set up as an operator does: the first admin by `greentwin user add`, then an operator account
    and a greenhouse by that admin through the service's API, every change sealed by whoever made it."""
    monkeypatch.setattr("sys.stdin", io.StringIO(PW + "\n"))
    assert _cli("user", "add", "adam", "--role", "admin", "--password-stdin", "--url", pg_site) == 0
    settings = Settings(database_url=pg_site, mqtt_url="mqtt://127.0.0.1:1",
                        policy_dir=tmp_path / "no-policy", environment="demo", secret_key=SECRET)
    with TestClient(create_app(settings, state_dir=tmp_path / "state"),
                    raise_server_exceptions=False) as client:
        r = client.post("/api/auth/login", json={"username": "adam", "password": PW})
        assert r.status_code == 200, r.text
        admin = {"Authorization": f"Bearer {r.json()['access_token']}"}
        client.cookies.clear()
        r = client.post("/api/users", json={"username": "olga", "roles": ["operator"]}, headers=admin)
        assert r.status_code == 201, r.text
        r = client.post("/api/greenhouses", json={"id": "ga", "zones": 2}, headers=admin)
        assert r.status_code == 201, r.text
    return pg_site


@pytest.mark.postgres
@pytest.mark.parametrize(("changes", "named"), [
    pytest.param(["UPDATE app_user_role SET role = 'admin' WHERE user_id = "
                  "(SELECT id FROM app_user WHERE username = 'olga')"],
                 "DIFFERS _access: roles other than sealed: olga: sealed ['operator'], stored ['admin']",
                 id="role-updated"),
    pytest.param(["INSERT INTO app_user_role (user_id, role) SELECT id, 'admin' FROM app_user "
                  "WHERE username = 'olga'"],
                 "DIFFERS _access: roles other than sealed: olga: sealed ['operator'], "
                 "stored ['admin', 'operator']",
                 id="role-inserted"),
    pytest.param(["INSERT INTO app_user (username, password_hash, token_epoch) SELECT 'eve', password_hash, "
                  "0 FROM app_user WHERE username = 'adam'",
                  "INSERT INTO app_user_role (user_id, role) SELECT id, 'admin' FROM app_user "
                  "WHERE username = 'eve'"],
                 "MISSING _access: 1 of 3 accounts never sealed: eve", id="account-inserted"),
])
def test_a_change_of_who_may_do_what_made_in_the_database_is_named(
        sealed_site, capsys, changes, named) -> None:
    code, out = verify(capsys, sealed_site)
    assert code == 0, out
    assert ("ok   _access: every account and registration is sealed as it stands (2 accounts, "
            "1 greenhouses)") in out
    for sql in changes:
        as_owner(sealed_site, sql)
    code, out = verify(capsys, sealed_site)  # before: exit 0, the chain verified and nothing else was asked
    assert code == 1, out
    assert "ok   _access: " in out and " records verified" in out  # the chain itself is genuine, only silent
    [line] = [ln for ln in out.splitlines() if ln.startswith(("MISSING _access", "DIFFERS _access"))]
    assert line.startswith(named), line
    assert "baseline-access" not in line  # a site sealed from the start has nothing made before sealing


def _access_site(url: str, audit_keys: tuple[Keyring, Signer]) -> None:
    """An account and a greenhouse, sealed as the command line seals them."""
    engine = make_engine(url)
    try:
        sealer = AccessSealer(AuditStore(engine, *audit_keys), "cli:root")
        add_greenhouse(url, "ga", zones=2, seal=sealer.sealing("greenhouse_register"))
        with Session(engine) as s:
            create_user(session=s, username="adam", password=PW, roles=["admin"],
                        seal=sealer.sealing("user_added"))
    finally:
        engine.dispose()


@pytest.mark.parametrize(("rehash", "reason"), [(False, "record_hash does not match"),
                                                (True, "decryption failed")])
def test_a_tampered_access_record_is_the_chain_s_failure_not_a_traceback(
        database, keys, capsys, rehash, reason) -> None:  # noqa: F811
    _access_site(database, keys)
    assert verify(capsys, database)[0] == 0
    with past_the_triggers(database) as conn:
        _flip_ciphertext(conn, 2, rehash=rehash, chain=ACCESS_CHAIN)
    code, out = verify(capsys, database)
    assert code == 1, out
    [named] = [ln for ln in out.splitlines() if "seq=2" in ln]
    assert named.startswith(f"FAIL _access: first bad record seq=2: {reason}")
    # before: the accounts were not compared and nothing said so
    assert ("FAIL _access: accounts and registrations not compared with the trail past seq 1, "
            "where its chain fails") in out
    assert "MISSING _access" not in out and "DIFFERS _access" not in out  # nothing judged on a broken chain
    assert _cli("audit", "baseline-access", "--url", database) == 1  # nor sealed on one
    [refused] = capsys.readouterr().err.splitlines()
    assert refused.startswith(f"error: the _access chain fails at seq 2 ({reason}") \
        and "Traceback" not in refused


def _pre_sealing_site(url: str, audit_keys: tuple[Keyring, Signer]) -> None:
    """What a site made before accounts were sealed holds: accounts and a greenhouse without records, and
    an access chain of logins only."""
    add_greenhouse(url, "ga", zones=2)
    engine = make_engine(url)
    try:
        with Session(engine) as s:
            create_user(session=s, username="adam", password=PW, roles=["admin"])
            create_user(session=s, username="ivan", password=PW, roles=["agronomist", "operator"])
            disable_user(session=s, username="ivan")
        AuditStore(engine, *audit_keys).append(ACCESS_CHAIN, "login", "adam",
                                               {"username": "adam", "roles": ["admin"]})
    finally:
        engine.dispose()


def test_the_baseline_seals_a_pre_sealing_site_once_and_later_direct_changes_are_caught(
        database, keys, capsys) -> None:  # noqa: F811
    _pre_sealing_site(database, keys)
    code, out = verify(capsys, database)  # before: exit 0, nothing compared the accounts with the chain
    assert code == 1, out
    [missing] = [ln for ln in out.splitlines() if ln.startswith("MISSING _access")]
    assert missing.startswith("MISSING _access: 2 of 2 accounts never sealed: adam, ivan; "
                              "1 of 1 greenhouses never sealed: ga") and NEVER_SEALED_HINT in missing

    assert _cli("audit", "baseline-access", "--url", database) == 0
    [said] = capsys.readouterr().out.splitlines()
    assert said.startswith("sealed access_baseline at _access seq 2 by cli:") and said.endswith(
        ": 2 accounts and 1 greenhouses as they stand, accepting 2 of 2 accounts never sealed: adam, ivan; "
        "1 of 1 greenhouses never sealed: ga")
    engine = make_engine(database)
    try:
        [record] = AuditStore(engine, *keys).tail_entries(ACCESS_CHAIN, 1)
    finally:
        engine.dispose()
    assert record.kind == "access_baseline" and record.actor.startswith("cli:")
    assert record.payload["accounts"] == [{"username": "adam", "roles": ["admin"], "disabled": False},
                                          {"username": "ivan", "roles": ["agronomist", "operator"],
                                           "disabled": True}]
    assert record.payload["greenhouses"] == ["ga"]
    assert record.payload["accepted"]["never_sealed_accounts"] == ["adam", "ivan"]
    code, out = verify(capsys, database)
    assert code == 0, out
    assert ("ok   _access: every account and registration is sealed as it stands (2 accounts, "
            "1 greenhouses)") in out

    assert _cli("audit", "baseline-access", "--url", database) == 1  # once: nothing to baseline now
    assert capsys.readouterr().err == ("error: nothing to baseline: every account and registration is "
                                       "sealed as it stands (2 accounts, 1 greenhouses)\n")

    as_owner(database, "UPDATE app_user SET disabled_at = NULL WHERE username = 'ivan'")
    as_owner(database, "INSERT INTO app_user_role (user_id, role) SELECT id, 'admin' FROM app_user "
                       "WHERE username = 'ivan'")
    as_owner(database, "INSERT INTO greenhouse (id, name, zones) VALUES ('gb', 'gb', 1)")
    code, out = verify(capsys, database)
    assert code == 1, out
    assert "MISSING _access: 1 of 2 greenhouses never sealed: gb\n" in out  # no hint: the baseline was sealed
    assert "DIFFERS _access: roles other than sealed: ivan: sealed ['agronomist', 'operator'], stored " \
           "['admin', 'agronomist', 'operator']; disabled state other than sealed: ivan: sealed disabled, " \
           "stored active\n" in out


@pytest.mark.postgres
def test_an_account_made_while_the_baseline_reads_is_not_left_out(
        pg_site, keys, capsys, monkeypatch) -> None:  # noqa: F811
    """An account added (and sealed) after the baseline read the tables but before it sealed takes the next
    seq first; the baseline is read again, so it does not seal a state without that account after its
    record."""
    from app import access_baseline

    _pre_sealing_site(pg_site, keys)
    engine = make_engine(pg_site)
    real_check = access_baseline.check_access
    reads: list[int] = []

    def check_then_someone_adds_an_account(conn: Connection, store: AuditStore) -> AccessCheck:
        found = real_check(conn, store)
        reads.append(len(found.rows.accounts))
        if len(reads) == 1:
            with Session(engine) as s:
                create_user(session=s, username="nina", password=PW, roles=["operator"],
                            seal=AccessSealer(AuditStore(engine, *keys), "admin:adam").sealing("user_add"))
        return found

    monkeypatch.setattr(access_baseline, "check_access", check_then_someone_adds_an_account)
    try:
        assert _cli("audit", "baseline-access", "--url", pg_site) == 0
        kinds = [(e.seq, e.kind) for e in AuditStore(engine, *keys).tail_entries(ACCESS_CHAIN, 3)]
    finally:
        engine.dispose()
    assert reads == [2, 3]
    assert kinds == [(1, "login"), (2, "user_add"), (3, "access_baseline")]
    # without the second read: nina never sealed, as the baseline replaced her
    code, out = verify(capsys, pg_site)
    assert code == 0, out
    assert ("ok   _access: every account and registration is sealed as it stands (3 accounts, "
            "1 greenhouses)") in out
