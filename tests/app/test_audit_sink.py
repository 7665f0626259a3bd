"""The service's side of the audit trail: batched flushes across greenhouses and key changes on record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from app.audit_sink import ACCESS_CHAIN, AuditSink, record_key_in_use, record_policy_in_force
from app.cli import db as db_cli
from app.core.db import make_engine
from audit import Keyring, Signer
from audit.store import AuditStore

T0 = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> AuditStore:
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    return AuditStore(make_engine(url), Keyring.generate(), Signer.generate())


def test_a_rotated_key_is_recorded_once_and_old_records_still_verify(store: AuditStore) -> None:
    assert record_key_in_use(store, T0) == "key_in_use"
    assert record_key_in_use(store, T0) is None
    old = store.keyring.current_key_id
    store.append(ACCESS_CHAIN, "login", "olga", {"username": "olga"}, T0 + timedelta(seconds=1))
    store.keyring = store.keyring.rotate()
    assert record_key_in_use(store, T0 + timedelta(seconds=2)) == "key_rotation"
    assert record_key_in_use(store, T0 + timedelta(seconds=3)) is None
    entries = store.tail_entries(ACCESS_CHAIN, 10)
    assert [e.kind for e in entries] == ["key_in_use", "login", "key_rotation"]
    assert entries[-1].payload["from_key_id"] == old
    assert entries[-1].payload["to_key_id"] == store.keyring.current_key_id != old
    [result] = store.verify(ACCESS_CHAIN)
    assert result.ok and result.records_checked == 3


def test_flush_seals_all_greenhouses_at_once_and_a_bad_chain_holds_up_no_other(store: AuditStore) -> None:
    sink = AuditSink(store)
    for i in range(3):
        for gh in ("ga", "gb"):
            sink.add(gh, "decision", "policy:x", {"seq": i + 1}, T0 + timedelta(seconds=i))
    assert sink.flush() == 6 and sink.pending == 0
    # gb's next record cannot be stored (a database-side refusal): ga's still are, gb's wait in order.
    with store._engine.begin() as conn:
        conn.execute(text("CREATE TRIGGER refuse_gb BEFORE INSERT ON audit_record "
                          "WHEN NEW.greenhouse_id = 'gb' BEGIN SELECT RAISE(ABORT, 'disk full'); END"))
    sink.add("ga", "decision", "policy:x", {"seq": 4}, T0 + timedelta(seconds=4))
    sink.add("gb", "decision", "policy:x", {"seq": 4}, T0 + timedelta(seconds=4))
    sink.add("gb", "decision", "policy:x", {"seq": 5}, T0 + timedelta(seconds=5))
    assert sink.flush() == 1 and sink.pending == 2
    with store._engine.begin() as conn:
        conn.execute(text("DROP TRIGGER refuse_gb"))
    assert sink.flush() == 2 and sink.pending == 0
    assert [e.payload["seq"] for e in store.tail_entries("gb", 10)] == [1, 2, 3, 4, 5]
    assert [e.payload["seq"] for e in store.tail_entries("ga", 10)] == [1, 2, 3, 4]
    assert all(r.ok for r in store.verify())


def test_the_policy_in_force_is_recorded_when_it_changes(store: AuditStore) -> None:
    assert record_policy_in_force(store, ["ppo-a", "ppo-a"], T0) == "policy_in_use"
    assert record_policy_in_force(store, ["ppo-a"], T0) is None
    store.append(ACCESS_CHAIN, "login", "olga", {"username": "olga"}, T0 + timedelta(seconds=1))
    assert record_policy_in_force(store, ["ppo-b"], T0 + timedelta(seconds=2)) == "policy_change"
    assert record_policy_in_force(store, ["ppo-a"], T0 + timedelta(seconds=3)) == "policy_change"  # rollback
    entries = store.tail_entries(ACCESS_CHAIN, 10)
    assert [(e.kind, e.payload["from_versions"], e.payload["to_versions"]) for e in entries
            if e.kind != "login"] == [
        ("policy_in_use", None, ["ppo-a"]), ("policy_change", ["ppo-a"], ["ppo-b"]),
        ("policy_change", ["ppo-b"], ["ppo-a"])]
