"""The access chain as the tables' witness: a change of who may do what that is in the tables without its
sealed record (what a role change behind the old 500 left) is found, whatever verifying the chain says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.access_coverage import (
    AccessCoverage,
    AccessRows,
    SealedAccess,
    StoredAccount,
    check_access,
    compare_access,
)
from app.access_seal import AccessSealer
from app.audit_coverage import snapshot
from app.audit_sink import ACCESS_CHAIN
from app.auth.users import create_user, disable_user, set_roles
from app.cli import db as db_cli
from app.core.db import make_engine
from app.services.greenhouses import add_greenhouse
from audit import AuditEntry, Keyring, Signer, iso_utc
from audit.store import AuditStore

PW = "correct horse battery"


@pytest.fixture
def trail(tmp_path: Path) -> tuple[str, AuditStore]:
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    return url, AuditStore(make_engine(url), Keyring.generate(), Signer.generate())


def _checked(url: str, store: AuditStore) -> AccessCoverage:
    engine = make_engine(url)
    try:
        with snapshot(engine) as conn:
            return check_access(conn, store).coverage
    finally:
        engine.dispose()


def test_sealed_changes_account_for_the_tables_and_unsealed_ones_are_named(
        trail: tuple[str, AuditStore]) -> None:
    url, store = trail
    engine = make_engine(url)
    sealer = AccessSealer(store, "admin:adam")
    with Session(engine, expire_on_commit=False) as s:
        create_user(session=s, username="adam", password=PW, roles=["admin"], seal=sealer.sealing("user_add"))
        create_user(session=s, username="olga", password=PW, roles=["operator"],
                    seal=sealer.sealing("user_added"))
        create_user(session=s, username="ivan", password=PW, roles=["operator"],
                    seal=sealer.sealing("user_add"))
        set_roles(session=s, username="olga", roles=["agronomist", "operator"],
                  seal=sealer.sealing("user_roles"))
        disable_user(session=s, username="ivan", seal=sealer.sealing("user_disable"))
    add_greenhouse(url, "gh1", zones=2, seal=sealer.sealing("greenhouse_register"))
    store.append(ACCESS_CHAIN, "login", "adam", {"username": "adam", "roles": ["admin"]})
    found = _checked(url, store)
    assert found.ok, found.describe()
    assert found.describe() == "ok   _access: every account and registration is sealed as it stands " \
                               "(3 accounts, 1 greenhouses)"

    # Changes that reached the tables without their records: what the chain verifying cannot show.
    with Session(engine) as s:
        set_roles(session=s, username="olga", roles=["admin"])
        create_user(session=s, username="eve", password=PW, roles=["admin"])
    add_greenhouse(url, "gh-quiet", zones=1)
    with engine.begin() as conn:
        conn.execute(text("UPDATE app_user SET disabled_at = NULL WHERE username = 'ivan'"))
        conn.execute(text("DELETE FROM app_user WHERE username = 'adam'"))
    assert all(r.ok for r in store.verify(ACCESS_CHAIN))
    found = _checked(url, store)
    assert not found.ok
    assert found.unsealed_accounts == ["eve"] and found.unsealed_greenhouses == ["gh-quiet"]
    assert found.roles_differ == ["olga: sealed ['agronomist', 'operator'], stored ['admin']"]
    assert found.disabled_differ == ["ivan: sealed disabled, stored active"]
    assert found.vanished_accounts == ["adam"]
    missing, differs = found.describe().splitlines()
    # SQLite's created_at is in whole seconds: older than sealing, maybe
    assert missing.startswith("MISSING _access: 1 of 3 accounts never sealed: eve; 1 of 2 greenhouses "
                              "never sealed: gh-quiet")
    assert differs == ("DIFFERS _access: roles other than sealed: olga: sealed ['agronomist', 'operator'], "
                       "stored ['admin']; disabled state other than sealed: ivan: sealed disabled, "
                       "stored active; sealed accounts gone from the table: adam")
    engine.dispose()


def test_after_a_purge_only_rows_the_remaining_records_can_speak_for_are_asked() -> None:
    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    sealed = SealedAccess(anchor_ts=iso_utc(t0 - timedelta(days=1)))
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


def test_a_chain_purged_whole_asks_only_for_rows_newer_than_its_anchor() -> None:
    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    rows = AccessRows([StoredAccount("old", ["admin"], False, t0 - timedelta(days=300)),
                       StoredAccount("new", ["admin"], False, t0 + timedelta(days=1))], {})
    found = compare_access(rows, SealedAccess(anchor_ts=iso_utc(t0)))
    assert found.unsealed_accounts == ["new"]  # before: every row asked for, as if nothing had been purged


def test_a_baseline_is_the_state_from_its_record_on() -> None:
    """``access_baseline`` states every account and greenhouse: what came before it is replaced, and
    changes after it are replayed on it."""
    t0 = datetime(2026, 6, 1, tzinfo=UTC)

    def entry(seq: int, kind: str, payload: dict[str, object]) -> AuditEntry:
        return AuditEntry(ACCESS_CHAIN, seq, iso_utc(t0 + timedelta(minutes=seq)), kind, "cli:root", payload)

    sealed = SealedAccess()
    sealed.add(entry(1, "user_added", {"username": "gone", "roles": ["admin"]}))
    sealed.add(entry(2, "access_baseline", {
        "accounts": [{"username": "adam", "roles": ["admin"], "disabled": False},
                     {"username": "ivan", "roles": ["operator"], "disabled": True}, {"no": "name"}],
        "greenhouses": ["ga"]}))
    sealed.add(entry(3, "user_roles", {"username": "adam", "from_roles": ["admin"],
                                       "to_roles": ["operator"]}))
    assert sealed.baselined and sealed.greenhouses == {"ga"}
    assert {n: (a.created, a.roles, a.disabled) for n, a in sealed.accounts.items()} == {
        "adam": (True, ["operator"], False), "ivan": (True, ["operator"], True)}
    rows = AccessRows([StoredAccount("adam", ["operator"], False, t0),
                       StoredAccount("ivan", ["operator"], True, t0),
                       StoredAccount("eve", ["admin"], False, t0)], {"ga": t0})
    found = compare_access(rows, sealed)
    assert found.unsealed_accounts == ["eve"] and not found.vanished_accounts and not found.roles_differ
    assert "baseline-access" not in found.describe()  # a baseline was sealed: eve is not older than sealing
