"""AuditStore on SQLite and PostgreSQL: round trip, tampering names the first bad seq, triggers, purge,
resume."""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, select, text
from sqlalchemy.exc import DBAPIError

from app.cli import db as db_cli
from app.cli.audit import run_purge, run_verify
from app.core.db import make_engine
from audit import AuditChainMoved, AuditEvent, Keyring, Signer, compute_record_hash, iso_utc, parse_iso_utc
from audit.store import AuditStore
from audit.tables import AuditRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GHS = ("gh-a", "gh-b")
CHECKPOINT_EVERY = 40


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database: temp SQLite file, or a throw-away PostgreSQL database dropped afterwards."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'audit.sqlite3'}"
        db_cli.upgrade(url)
        yield url
        return
    with request.getfixturevalue("make_pg_database")("greentwin_audit") as url:
        db_cli.upgrade(url)
        yield url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = make_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture(scope="module")
def keys() -> tuple[Keyring, Signer]:
    return Keyring.generate(), Signer.generate()


@pytest.fixture
def store(engine: Engine, keys: tuple[Keyring, Signer]) -> AuditStore:
    return AuditStore(engine, *keys, checkpoint_every=CHECKPOINT_EVERY)


def _events(n: int, start: int = 0) -> list[AuditEvent]:
    return [
        AuditEvent(
            "decision", "loop", {"i": i, "pump_pct": i % 100, "note": "Düse ✓"}, T0 + timedelta(minutes=i)
        )
        for i in range(start, start + n)
    ]


def _fill(store: AuditStore) -> None:
    """200 records: 100 per greenhouse, in batches and one by one."""
    for gh in GHS:
        store.append_many(gh, _events(45))
        store.append_many(gh, _events(50, start=45))
        for ev in _events(5, start=95):
            store.append(gh, ev.kind, ev.actor, dict(ev.payload), ts=ev.ts)


@contextmanager
def _attacker(engine: Engine) -> Iterator[Connection]:
    """A connection past the triggers: what someone with owner/superuser rights can do."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("ALTER TABLE audit_record DISABLE TRIGGER USER"))
            yield conn
            conn.execute(text("ALTER TABLE audit_record ENABLE TRIGGER USER"))
        else:
            conn.execute(text("DROP TRIGGER audit_record_no_update"))
            conn.execute(text("DROP TRIGGER audit_record_purge_only"))
            yield conn


def _bad(store: AuditStore, gh: str, seq: int, reason: str) -> None:
    [result] = store.verify(gh)
    assert not result.ok and result.greenhouse_id == gh
    assert result.first_bad_seq == seq, result
    assert result.reason is not None and reason in result.reason, result


def test_append_and_verify(store: AuditStore, keys: tuple[Keyring, Signer]) -> None:
    _fill(store)
    results = store.verify()
    assert [(r.greenhouse_id, r.ok, r.records_checked, r.head_seq) for r in results] == [
        ("gh-a", True, 100, 100),
        ("gh-b", True, 100, 100),
    ]
    records = list(store.iter_records("gh-a"))
    assert [r.seq for r in records] == list(range(1, 101))
    assert all(compute_record_hash(r) == r.record_hash for r in records)
    assert records[0].ts == iso_utc(T0) and isinstance(records[0].ciphertext, bytes)
    assert [r.seq for r in store.iter_records("gh-b", from_seq=95)] == [95, 96, 97, 98, 99, 100]
    assert [cp.seq for cp in store.checkpoints("gh-a")] == [40, 80]
    # A second store (another process) resumes the same chain from the database.
    other = AuditStore(store._engine, *keys)
    assert other.append("gh-a", "login", "op", {}).seq == 101
    assert store.verify("gh-a")[0].ok


def _flip_ciphertext(conn: Connection) -> None:
    ct = conn.execute(
        text("SELECT ciphertext FROM audit_record WHERE greenhouse_id='gh-a' AND seq=37")
    ).scalar_one()
    ct = bytearray(ct)
    ct[3] ^= 0x01
    conn.execute(
        text("UPDATE audit_record SET ciphertext=:ct WHERE greenhouse_id='gh-a' AND seq=37"),
        {"ct": bytes(ct)},
    )


def _delete_record(conn: Connection) -> None:
    conn.execute(text("DELETE FROM audit_record WHERE greenhouse_id='gh-a' AND seq=50"))


def _swap_seq(conn: Connection) -> None:
    sql = "UPDATE audit_record SET seq=:new WHERE greenhouse_id='gh-a' AND seq=:old"
    for old, new in ((60, 10**9), (61, 60), (10**9, 61)):
        conn.execute(text(sql), {"old": old, "new": new})


def _forge_record(conn: Connection) -> None:
    """A well-linked, correctly hashed record at the head, but not sealed with the keyring."""
    row = (
        conn.execute(text("SELECT * FROM audit_record WHERE greenhouse_id='gh-a' AND seq=100"))
        .mappings()
        .one()
    )
    forged: dict[str, Any] = dict(row)
    forged.update(seq=101, prev_hash=row["record_hash"], nonce=os.urandom(12), ciphertext=os.urandom(200))
    from audit import SealedRecord

    fields = {k: forged[k] for k in SealedRecord.__slots__ if k != "record_hash"}
    forged["record_hash"] = compute_record_hash(SealedRecord(**fields, record_hash=""))
    cols = ", ".join(forged)
    conn.execute(
        text(f"INSERT INTO audit_record ({cols}) VALUES ({', '.join(':' + c for c in forged)})"), forged
    )


@pytest.mark.parametrize(
    "tamper, seq, reason",
    [
        (_flip_ciphertext, 37, "record_hash does not match"),
        (_delete_record, 50, "record 50 missing"),
        (_swap_seq, 60, "prev_hash does not link"),
        (_forge_record, 101, "decryption failed"),
    ],
    ids=["ciphertext-byte", "deleted", "reordered", "forged"],
)
def test_tampering_names_first_bad_seq(
    store: AuditStore, engine: Engine, tamper: Any, seq: int, reason: str
) -> None:
    _fill(store)
    with _attacker(engine) as conn:
        tamper(conn)
    _bad(store, "gh-a", seq, reason)
    assert store.verify("gh-b")[0].ok


def test_wrong_key_and_rewritten_tail(
    store: AuditStore, engine: Engine, keys: tuple[Keyring, Signer]
) -> None:
    _fill(store)
    stranger = AuditStore(engine, Keyring.generate(), keys[1])
    _bad(stranger, "gh-a", 1, "unknown key id")
    # Someone holding the AES key but not the signing key rewrites history from seq 70 on:
    # the chain links up again, but the signed checkpoint at seq 80 does not agree.
    with _attacker(engine) as conn:
        conn.execute(text("DELETE FROM audit_record WHERE greenhouse_id='gh-a' AND seq >= 70"))
    thief = AuditStore(engine, keys[0], Signer.generate(), checkpoint_every=10_000)
    thief.append_many("gh-a", _events(31, start=500))
    _bad(store, "gh-a", 80, "signed checkpoint")


def test_cli_verify_reports_first_bad_record(
    store: AuditStore,
    engine: Engine,
    db_url: str,
    keys: tuple[Keyring, Signer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _fill(store)
    pem = tmp_path / "signing.pem"
    pem.write_bytes(keys[1].to_pem())
    monkeypatch.setenv("GREENTWIN_AUDIT_KEYS", keys[0].to_json())
    monkeypatch.setenv("GREENTWIN_AUDIT_SIGNING_KEY", str(pem))
    assert run_verify(argparse.Namespace(url=db_url, greenhouse=None)) == 0
    assert "ok   gh-a: 100 records" in capsys.readouterr().out
    with _attacker(engine) as conn:
        _flip_ciphertext(conn)
    assert run_verify(argparse.Namespace(url=db_url, greenhouse="gh-a")) == 1
    assert "FAIL gh-a: first bad record seq=37" in capsys.readouterr().out
    assert run_purge(argparse.Namespace(url=db_url, older_than_days=179)) == 2
    assert "refusing" in capsys.readouterr().err


def test_triggers_refuse_update_and_delete(store: AuditStore, engine: Engine) -> None:
    _fill(store)
    for sql in (
        "UPDATE audit_record SET kind='edited' WHERE greenhouse_id='gh-a' AND seq=5",
        "DELETE FROM audit_record WHERE greenhouse_id='gh-a' AND seq=5",
        "UPDATE audit_checkpoint SET ts=ts",
        "DELETE FROM audit_checkpoint",
    ):
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
            conn.execute(text(sql))
    if engine.dialect.name == "postgresql":
        # The licence alone is not enough: no anchor covers these rows.
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
            conn.execute(text("SET LOCAL greentwin.audit_purge = 'on'"))
            conn.execute(text("DELETE FROM audit_record WHERE greenhouse_id='gh-a' AND seq=5"))
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
            conn.execute(text("TRUNCATE audit_record"))
    else:
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
            conn.execute(text("INSERT INTO audit_purge_token (greenhouse_id) VALUES ('gh-a')"))
            conn.execute(text("DELETE FROM audit_record WHERE greenhouse_id='gh-a' AND seq=5"))
    assert all(r.ok and r.records_checked == 100 for r in store.verify())


def test_purge_refuses_short_retention(store: AuditStore) -> None:
    with pytest.raises(ValueError, match="retention"):
        store.purge(179)
    with pytest.raises(ValueError, match="retention_days"):
        store.purge(200, retention_days=179)


def test_purge_anchors_and_records_itself(store: AuditStore, engine: Engine) -> None:
    _fill(store)
    now = T0 + timedelta(days=180, minutes=30)  # records 1..30 (minutes 0..29) are older than 180 days
    [result] = [r for r in store.purge(180, now=now) if r.greenhouse_id == "gh-a"]
    assert (result.anchor.seq, result.records_deleted, result.record.seq) == (30, 30, 101)
    assert result.record.kind == "purge" and result.record.ts == iso_utc(now)
    verified = store.verify()
    assert all(r.ok for r in verified), verified
    assert [(r.records_checked, r.head_seq) for r in verified] == [(71, 101), (71, 101)]
    assert [r.seq for r in store.iter_records("gh-a")] == list(range(31, 102))
    assert store.latest_anchor("gh-a") == result.anchor
    # The chain goes on from the purge entry; the licence did not outlive the purge transaction.
    assert store.append("gh-a", "login", "op", {}).seq == 102
    with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
        conn.execute(text("DELETE FROM audit_record WHERE greenhouse_id='gh-a' AND seq=31"))
    assert store.purge(180, now=now) == []  # nothing left that is old enough
    # Purging everything still leaves a verifiable chain: anchor + purge entry.
    later = store.purge(365, now=T0 + timedelta(days=3650))
    assert [r.anchor.seq for r in later] == [102, 101]
    assert all(r.ok and r.records_checked == 1 for r in store.verify())
    _bad_after_purge = [r.seq for r in store.iter_records("gh-b")]
    assert _bad_after_purge == [102]


def test_purge_refuses_to_anchor_a_tampered_chain(store: AuditStore, engine: Engine) -> None:
    _fill(store)
    with _attacker(engine) as conn:
        _flip_ciphertext(conn)
    from audit import AuditTamperError

    with pytest.raises(AuditTamperError, match="seq=37"):
        store.purge(180, now=T0 + timedelta(days=400))
    assert store.latest_anchor("gh-a") is None
    assert len(list(store.iter_records("gh-a"))) == 100


@contextmanager
def _failing_insert(engine: Engine, seq: int) -> Iterator[None]:
    """A real database failure: inserting the record with ``seq`` raises 'disk full' (whatever the insert
    path)."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("CREATE FUNCTION audit_test_fail() RETURNS trigger LANGUAGE plpgsql AS "
                              "$$ BEGIN RAISE EXCEPTION 'disk full'; END $$"))
            conn.execute(text(f"CREATE TRIGGER audit_test_fail BEFORE INSERT ON audit_record FOR EACH ROW "
                              f"WHEN (NEW.seq = {int(seq)}) EXECUTE FUNCTION audit_test_fail()"))
        else:
            conn.execute(text(f"CREATE TRIGGER audit_test_fail BEFORE INSERT ON audit_record "
                              f"WHEN NEW.seq = {int(seq)} BEGIN SELECT RAISE(ABORT, 'disk full'); END"))
    try:
        yield
    finally:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("DROP TRIGGER audit_test_fail ON audit_record"))
                conn.execute(text("DROP FUNCTION audit_test_fail()"))
            else:
                conn.execute(text("DROP TRIGGER audit_test_fail"))


def _stored(engine: Engine, gh: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM audit_record WHERE greenhouse_id = :gh"),
                            {"gh": gh}).scalar_one()


def _seal_workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("audit-seal-")]


def test_failed_insert_does_not_fork_the_chain(
    store: AuditStore, engine: Engine, keys: tuple[Keyring, Signer]
) -> None:
    store.append_many("gh-a", _events(5))
    with _failing_insert(engine, 6), pytest.raises(DBAPIError, match="disk full"):
        store.append_many("gh-a", _events(3, start=5))
    assert store.append("gh-a", "decision", "loop", {"after": "failure"}).seq == 6
    # A racing writer in another process takes seq 7: our stale chain hits the key and lands after it.
    AuditStore(engine, *keys).append("gh-a", "login", "op", {})
    assert store.append("gh-a", "decision", "loop", {}).seq == 8
    [result] = store.verify("gh-a")
    assert result.ok and result.records_checked == 8


def test_an_append_after_another_process_lands_after_its_record(engine: Engine,
                                                                 keys: tuple[Keyring, Signer]) -> None:
    """Two stores over one database stand for two processes (the service and `greentwin user add`): each
    caches the head of the chains it wrote; an append after the other's is retried against the stored head
    instead of failing on the seq the other took."""
    service, cli = AuditStore(engine, *keys), AuditStore(engine, *keys)
    service.append("_access", "login", "adam", {"roles": ["admin"]})
    cli.append("_access", "user_added", "cli:root", {"username": "olga"})
    assert service.append("_access", "login", "adam", {"roles": ["admin"]}).seq == 3
    cli.append_many("_access", [AuditEvent("user_roles", "cli:root", {"username": "olga"})])
    service.append_many("gh-a", _events(2))
    out = service.append_batches({"_access": [AuditEvent("alarm_ack", "operator:olga", {})],
                                  "gh-a": _events(1, 2)})
    assert out["_access"][0].seq == 5 and out["gh-a"][0].seq == 3
    # A caller whose record depends on what the chain held (a start-up record) appends only right after
    # the head it decided on, and reads again when another writer appended first: whether the other's
    # record was stored before this transaction read the head (fresh store) or this process had the
    # head cached from an earlier write of its own.
    decided_on = service.head_seq("_access")
    assert decided_on == 5
    cli.append("_access", "key_in_use", "system", {})
    with pytest.raises(AuditChainMoved) as moved:
        service.append("_access", "key_in_use", "system", {}, after_seq=decided_on)
    assert (moved.value.expected_seq, moved.value.stored_seq) == (5, 6)
    fresh = AuditStore(engine, *keys)
    with pytest.raises(AuditChainMoved):
        fresh.append("_access", "key_in_use", "system", {}, after_seq=decided_on)
    assert service.append("_access", "key_in_use", "system", {},
                          after_seq=service.head_seq("_access")).seq == 7
    assert [(r.ok, r.records_checked) for r in service.verify()] == [(True, 7), (True, 3)]


def test_chunked_batch_is_one_transaction(engine: Engine, keys: tuple[Keyring, Signer]) -> None:
    """With seal_ahead (a worker on PostgreSQL) a batch is written in chunks: still all or nothing, in
    order."""
    store = AuditStore(engine, *keys, checkpoint_every=CHECKPOINT_EVERY, seal_ahead=16)
    records = store.append_many("gh-a", _events(100))
    assert [r.seq for r in records] == list(range(1, 101))
    assert [r.seq for r in store.iter_records("gh-a")] == list(range(1, 101))
    assert [cp.seq for cp in store.checkpoints("gh-a")] == [40, 80]
    # The database refuses a record in the fifth chunk: nothing of the batch stays, the chain goes on.
    with _failing_insert(engine, 100 + 70), pytest.raises(DBAPIError, match="disk full"):
        store.append_many("gh-a", _events(100, start=100))
    assert _stored(engine, "gh-a") == 100 and not _seal_workers()
    # A bad event in a later chunk fails in the sealing worker and is raised here, before anything commits.
    bad = _events(60, start=100)
    bad[50] = AuditEvent("decision", "loop", {"i": 150}, datetime(2026, 1, 1))  # naive timestamp
    with pytest.raises(ValueError, match="naive"):
        store.append_many("gh-a", bad)
    assert _stored(engine, "gh-a") == 100 and not _seal_workers()
    assert store.append_many("gh-a", _events(40, start=100))[0].seq == 101
    [result] = store.verify("gh-a")
    assert result.ok and result.records_checked == 140 and result.head_seq == 140


def test_text_fields_survive_the_bulk_insert(store: AuditStore) -> None:
    """Tabs, newlines, backslashes and non-ASCII in every free-text column are stored as written."""
    gh, kind, actor = "gh\\t\t1", "note\nkind\r", "operator:Zoë \\N\t\\x00"
    written = store.append_many(gh, [AuditEvent(kind, actor, {"text": "a\tb\\c"}, T0 + timedelta(minutes=i))
                                     for i in range(3)])
    stored = list(store.iter_records(gh))
    assert stored == written and {(r.greenhouse_id, r.kind, r.actor) for r in stored} == {(gh, kind, actor)}
    [result] = store.verify(gh)
    assert result.ok and result.records_checked == 3
    # ts_at (what purges and reports select on) is the instant the sealed ts names, as insert() would
    # store it.
    with store._engine.connect() as conn:
        stored_at = conn.execute(select(AuditRecord.ts_at).where(AuditRecord.greenhouse_id == gh)
                                 .order_by(AuditRecord.seq)).scalars().all()
    assert [t if t.tzinfo else t.replace(tzinfo=UTC) for t in stored_at] == \
        [parse_iso_utc(r.ts) for r in written]


@pytest.mark.postgres
def test_copy_follows_the_client_encoding(make_pg_database: Any, keys: tuple[Keyring, Signer]) -> None:
    """Binary COPY on a UTF-8 connection and on any other: psycopg encodes text in the client encoding."""
    with make_pg_database("greentwin_audit_enc") as url:
        db_cli.upgrade(url)
        for encoding in ("UTF8", "LATIN1"):
            engine = make_engine(url, connect_args={"options": f"-c client_encoding={encoding}"})
            try:
                with engine.connect() as conn:
                    assert conn.exec_driver_sql("SHOW client_encoding").scalar() == encoding
                store = AuditStore(engine, *keys)
                gh = f"gh-{encoding}"
                written = store.append_many(gh, [AuditEvent("note\t", "operator:Zoë \\", {"i": i},
                                                            T0 + timedelta(minutes=i)) for i in range(3)])
                assert list(store.iter_records(gh)) == written
                # NUL cannot be stored in a PostgreSQL text column: refused before the database, chain intact.
                with pytest.raises(ValueError, match="NUL"):
                    store.append(gh, "note", "operator:\x00", {})
                assert store.append(gh, "note", "operator:x", {}).seq == 4
                [result] = store.verify(gh)
                assert result.ok and result.records_checked == 4
            finally:
                engine.dispose()


def test_batches_of_many_greenhouses_are_one_transaction(store: AuditStore, engine: Engine) -> None:
    """The service's flush: every greenhouse's events in one commit; a failure stores none of them."""
    store.append_many("gh-b", _events(3))
    out = store.append_batches({"gh-a": _events(50), "gh-b": _events(2, start=3), "gh-c": []})
    assert {gh: [r.seq for r in recs] for gh, recs in out.items()} == {
        "gh-a": list(range(1, 51)), "gh-b": [4, 5]}
    assert [cp.seq for cp in store.checkpoints("gh-a")] == [40]
    # The database refuses gh-b's 6th record: gh-a's records of the same flush are not stored either.
    with _failing_insert(engine, 6), pytest.raises(DBAPIError, match="disk full"):
        store.append_batches({"gh-a": _events(5, start=50), "gh-b": _events(1, start=5)})
    assert _stored(engine, "gh-a") == 50 and _stored(engine, "gh-b") == 5
    out = store.append_batches({"gh-b": _events(1, start=5), "gh-a": _events(5, start=50)})
    assert out["gh-a"][0].seq == 51 and out["gh-b"][0].seq == 6
    assert all(r.ok for r in store.verify())
    tail = store.tail_entries("gh-a", 3)
    assert [(e.seq, e.payload["i"]) for e in tail] == [(53, 52), (54, 53), (55, 54)]
    assert store.tail_entries("gh-z", 3) == [] and store.tail_entries("gh-a", 0) == []


def _register(conn: Connection, gh: str) -> None:
    """A row change of the service's own (a greenhouse registration) in the caller's transaction."""
    conn.execute(text("INSERT INTO greenhouse (id, name, zones) VALUES (:gh, :gh, 1)"), {"gh": gh})


def _registered(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT id FROM greenhouse ORDER BY id")).scalars())


def test_append_in_commits_with_the_callers_change_or_not_at_all(engine: Engine,
                                                                 keys: tuple[Keyring, Signer]) -> None:
    store, other = AuditStore(engine, *keys), AuditStore(engine, *keys)
    store.append("_access", "login", "adam", {})
    other.append("_access", "user_added", "cli:root", {})  # this store's cached head is stale now
    with engine.begin() as conn:
        _register(conn, "gh-x")
        [record] = store.append_in(conn, "_access",
                                   [AuditEvent("greenhouse_register", "admin:adam", {"id": "gh-x"})])
    assert record.seq == 3
    # The caller rolls back: its record goes with its change.
    with pytest.raises(RuntimeError, match="caller"), engine.begin() as conn:
        _register(conn, "gh-y")
        store.append_in(conn, "_access", [AuditEvent("greenhouse_register", "admin:adam", {"id": "gh-y"})])
        raise RuntimeError("the caller changes its mind")
    # The audit table refuses the record (no race: nothing newer is stored): the error is raised, not retried,
    # and the caller's change is rolled back with it.
    with _failing_insert(engine, 4), pytest.raises(DBAPIError, match="disk full"), engine.begin() as conn:
        _register(conn, "gh-z")
        store.append_in(conn, "_access", [AuditEvent("greenhouse_register", "admin:adam", {"id": "gh-z"})])
    assert _registered(engine) == ["gh-x"] and _stored(engine, "_access") == 3
    assert store.append("_access", "login", "adam", {}).seq == 4 \
        and other.append("_access", "login", "x", {}).seq == 5
    [result] = store.verify("_access")
    assert result.ok and result.records_checked == 5


@pytest.mark.postgres
def test_append_in_lands_after_a_record_that_commits_while_it_waits(
        make_pg_database: Any, keys: tuple[Keyring, Signer], caplog: pytest.LogCaptureFixture) -> None:
    """The other process's record is not committed yet when this one reads the head: its insert waits on
    that seq, fails when the other commits, and is sealed again after it, the caller's change kept."""
    with make_pg_database("greentwin_audit_race") as url:
        db_cli.upgrade(url)
        engine = make_engine(url)
        try:
            service, cli = AuditStore(engine, *keys), AuditStore(engine, *keys)
            service.append("_access", "login", "adam", {})
            with engine.connect() as cli_conn:
                cli_tx = cli_conn.begin()
                cli.append_in(cli_conn, "_access",
                              [AuditEvent("user_added", "cli:root", {"username": "olga"})])
                commit_later = threading.Timer(0.5, cli_tx.commit)
                commit_later.start()
                with caplog.at_level("INFO", logger="audit.store"), engine.begin() as conn:
                    _register(conn, "gh-x")
                    [record] = service.append_in(conn, "_access",
                                                 [AuditEvent("greenhouse_register", "admin:adam",
                                                             {"id": "gh-x"})])
                commit_later.join()
            assert "another writer took seq 2 of _access" in caplog.text
            assert record.seq == 3 and _registered(engine) == ["gh-x"]
            assert [e.kind for e in service.tail_entries("_access", 5)] == ["login", "user_added",
                                                                            "greenhouse_register"]
            [result] = service.verify("_access")
            assert result.ok and result.records_checked == 3
        finally:
            engine.dispose()


def test_a_conditional_append_that_waits_on_another_writers_seq_reports_the_chain_moved(
        make_pg_database: Any, keys: tuple[Keyring, Signer]) -> None:
    """The other writer's record is not committed when this one reads the head: the conditional insert
    waits on that seq and, when the other commits, reports the moved chain instead of sealing after it."""
    with make_pg_database("greentwin_audit_cond") as url:
        db_cli.upgrade(url)
        engine = make_engine(url)
        try:
            service, cli = AuditStore(engine, *keys), AuditStore(engine, *keys)
            service.append("_access", "login", "adam", {})
            decided_on = service.head_seq("_access")
            with engine.connect() as cli_conn:
                cli_tx = cli_conn.begin()
                cli.append_in(cli_conn, "_access",
                              [AuditEvent("policy_in_use", "system", {"to_versions": ["x"]})])
                commit_later = threading.Timer(0.5, cli_tx.commit)
                commit_later.start()
                with pytest.raises(AuditChainMoved) as moved:
                    service.append("_access", "policy_in_use", "system", {"to_versions": ["x"]},
                                   after_seq=decided_on)
                commit_later.join()
            assert (moved.value.expected_seq, moved.value.stored_seq) == (1, 2)
            assert [e.kind for e in service.tail_entries("_access", 5)] == ["login", "policy_in_use"]
            [result] = service.verify("_access")
            assert result.ok and result.records_checked == 2
        finally:
            engine.dispose()
