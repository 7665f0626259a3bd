"""The access chain as the tables' witness: a change of who may do what that is in the tables without its
sealed record (what a role change behind the old 500 left) is found, whatever verifying the chain says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.access_coverage import AccessRows, SealedAccess, StoredAccount, check_access, compare_access
from app.access_seal import AccessSealer
from app.audit_sink import ACCESS_CHAIN
from app.auth.users import create_user, disable_user, set_roles
from app.cli import db as db_cli
from app.core.db import make_engine
from audit import AuditEntry, Keyring, Signer, iso_utc
from audit.store import AuditStore

PW = "correct horse battery"


@pytest.fixture
def trail(tmp_path: Path) -> tuple[str, AuditStore]:
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    return url, AuditStore(make_engine(url), Keyring.generate(), Signer.generate())


def test_sealed_changes_account_for_the_tables_and_unsealed_ones_are_named(trail: tuple[str, AuditStore]) -> None:
    url, store = trail
    engine = make_engine(url)
    sealer = AccessSealer(store, "admin:adam")
    with Session(engine, expire_on_commit=False) as s:
        create_user(session=s, username="adam", password=PW, roles=["admin"], seal=sealer.sealing("user_add"))
        create_user(session=s, username="olga", password=PW, roles=["operator"], seal=sealer.sealing("user_added"))
        create_user(session=s, username="ivan", password=PW, roles=["operator"], seal=sealer.sealing("user_add"))
        set_roles(session=s, username="olga", roles=["agronomist", "operator"], seal=sealer.sealing("user_roles"))
        disable_user(session=s, username="ivan", seal=sealer.sealing("user_disable"))
    db_cli.add_greenhouse(url, "gh1", zones=2, seal=sealer.sealing("greenhouse_register"))
    store.append(ACCESS_CHAIN, "login", "adam", {"username": "adam", "roles": ["admin"]})
    found = check_access(engine, store)
    assert found.ok, found.describe()
    assert found.describe() == "ok   _access: every account and registration is sealed as it stands " \
                               "(3 accounts, 1 greenhouses)"

    # Changes that reached the tables without their records: what the chain verifying cannot show.
    with Session(engine) as s:
        set_roles(session=s, username="olga", roles=["admin"])
        create_user(session=s, username="eve", password=PW, roles=["admin"])
    db_cli.add_greenhouse(url, "gh-quiet", zones=1)
    with engine.begin() as conn:
        conn.execute(text("UPDATE app_user SET disabled_at = NULL WHERE username = 'ivan'"))
        conn.execute(text("DELETE FROM app_user WHERE username = 'adam'"))
    assert all(r.ok for r in store.verify(ACCESS_CHAIN))
    found = check_access(engine, store)
    assert not found.ok
    assert found.unsealed_accounts == ["eve"] and found.unsealed_greenhouses == ["gh-quiet"]
    assert found.roles_differ == ["olga: sealed ['agronomist', 'operator'], stored ['admin']"]
    assert found.disabled_differ == ["ivan: sealed disabled, stored active"]
    assert found.vanished_accounts == ["adam"]
    assert found.describe().startswith("MISSING _access (3 accounts, 2 greenhouses): accounts never sealed: eve; ")
    engine.dispose()


def test_after_a_purge_only_rows_the_remaining_records_can_speak_for_are_asked() -> None:
    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    sealed = SealedAccess(purged=True)
    sealed.add(AuditEntry(ACCESS_CHAIN, 40, iso_utc(t0), "user_roles", "cli:root",
                          {"username": "old", "from_roles": ["operator"], "to_roles": ["admin"]}))
    rows = AccessRows([StoredAccount("old", ["admin"], False, t0 - timedelta(days=300)),
                       StoredAccount("older", ["operator"], False, t0 - timedelta(days=400)),
                       StoredAccount("new", ["admin"], False, t0 + timedelta(days=1))],
                      {"gh-old": t0 - timedelta(days=300), "gh-new": t0 + timedelta(days=1)})
    found = compare_access(rows, sealed)
    assert found.unsealed_accounts == ["new"] and found.unsealed_greenhouses == ["gh-new"]
    assert found.roles_differ == [] and found.vanished_accounts == []
    rows.accounts[0] = StoredAccount("old", ["operator"], False, t0 - timedelta(days=300))
    assert compare_access(rows, sealed).roles_differ == ["old: sealed ['admin'], stored ['operator']"]
