"""`greentwin audit verify` on a trail someone changed: it names what failed and exits 1, it never crashes.

The rows are written and sealed by the writer's own round (:class:`~app.writer.store.DecisionStore`
with the real recorder and audit sink), then changed behind the service's back, on SQLite and on
PostgreSQL.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Connection, insert, select, text, update

from app.audit_sink import AuditSink
from app.cli import main
from app.core.db import make_engine, make_session_factory
from app.models import Decision
from app.recorder import DecisionRecorder
from app.writer import DecisionStore, Job
from audit import Keyring, SealedRecord, Signer, compute_record_hash
from audit.store import AuditStore
from audit.tables import AuditRecord
from tests.audit.test_store import _attacker
from tests.audit.test_store import db_url as database  # noqa: F401 (a fixture: a migrated database, empty)

T0 = datetime(2026, 6, 1, tzinfo=UTC)
TELEMETRY = {"air_temp_c": 21.5, "soil_vwc": [[0.25, 0.26]], "sum": 0.1 + 0.2, "tiny": 1e-7, "big": 1e16,
             "huge": 1e300, "neg_zero": -0.0, "note": "Düse ✓", "none": None, "flag": True}
"""Values a JSONB column gives back in another spelling (1e16 as an integer, -0.0 as 0): equal all the
same."""
_COLUMNS = (AuditRecord.greenhouse_id, AuditRecord.seq, AuditRecord.ts, AuditRecord.kind, AuditRecord.actor,
            AuditRecord.key_id, AuditRecord.nonce, AuditRecord.ciphertext, AuditRecord.prev_hash,
            AuditRecord.record_hash)


@pytest.fixture
def url(database: str, keys: tuple[Keyring, Signer]) -> str:  # noqa: F811
    """A migrated database with greenhouse ``ga``, registered as an operator does."""
    register(database, "ga")
    return database


def register(url: str, gh: str) -> None:
    """`greentwin greenhouse add` with the configured keys (the ``keys`` fixture): sealed in the access
    chain."""
    assert main(["greenhouse", "add", gh, "--zones", "2", "--url", url]) == 0


@pytest.fixture(autouse=True)
def _no_writer_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """No service writes here, so nothing is on its way to the trail: a second is lag enough."""
    monkeypatch.setattr("app.audit_coverage.SEAL_LAG_S", 1.0)


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Keyring, Signer]:
    """Audit keys, configured for `greentwin audit verify` as an operator would."""
    keyring, signer = Keyring.generate(), Signer.generate()
    pem = tmp_path / "signing.pem"
    pem.write_bytes(signer.to_pem())
    monkeypatch.setenv("GREENTWIN_AUDIT_KEYS", keyring.to_json())
    monkeypatch.setenv("GREENTWIN_AUDIT_SIGNING_KEY", str(pem))
    monkeypatch.setenv("GREENTWIN_STATE_DIR", str(tmp_path / "state"))
    return keyring, signer


def decision_job(seq: int) -> Job:
    """A decision as the control loop journals it."""
    row = {"greenhouse_id": "ga", "seq": seq, "ts": T0 + timedelta(minutes=seq, microseconds=seq),
           "actor": "policy:test", "mode": "auto", "telemetry": TELEMETRY,
           "estimate": {"theta": [0.25, 0.31]}, "member_actions": [[0.0, 1.0, 40.0, 0.0]],
           "voted": {"valves": [0, 1], "pump_pct": 40.0, "light_pct": 0.0},
           "clipped": {"valves": [0, 1], "pump_pct": 40.0, "light_pct": 0.0}, "rules_fired": [],
           "reward_terms": None, "confidence": 0.875, "explanation": {"alarms": [], "low_confidence": False},
           "cmd_id": str(uuid.UUID(int=seq)), "ack_status": "pending"}
    return Job("decision", row, "decision", "policy:test", row["ts"])


def write_as_the_service(url: str, keys: tuple[Keyring, Signer], jobs: list[Job], tmp_path: Path) -> None:
    """One writer round: rows stored, audit events sealed."""
    engine = make_engine(url)
    try:
        recorder = DecisionRecorder(make_session_factory(engine), tmp_path / "spool.jsonl")
        sink = AuditSink(AuditStore(engine, *keys))
        DecisionStore(recorder, lambda zones: None, audit=sink).store(jobs)
        assert sink.flush() == len(jobs)
    finally:
        engine.dispose()


def ack_job(seq: int, status: str) -> Job:
    """The edge box's answer to decision ``seq``'s command."""
    return Job.ack("ga", uuid.UUID(int=seq), status, None, T0 + timedelta(minutes=seq, seconds=2))


def mode_job(seq: int) -> Job:
    """An operator's e-stop, as the API journals it."""
    row = {"greenhouse_id": "ga", "seq": seq, "ts": T0 + timedelta(minutes=seq), "actor": "operator:olga",
           "from_mode": "auto", "to_mode": "estop", "reason": "leak in zone 2"}
    return Job("mode_change", row, "estop", "operator:olga", row["ts"])


def as_owner(url: str, sql: str) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()


def verify(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str]:
    code = main(["audit", "verify", "--url", url, *args])
    return code, capsys.readouterr().out


@contextlib.contextmanager
def past_the_triggers(url: str) -> Iterator[Connection]:
    """A connection that can rewrite audit records: what the database's owner or superuser can do."""
    engine = make_engine(url)
    try:
        with _attacker(engine) as conn:
            yield conn
    finally:
        engine.dispose()


def _flip_ciphertext(conn: Connection, seq: int, *, rehash: bool, chain: str = "ga") -> None:
    """Change one bit of record ``seq``'s ciphertext; with ``rehash`` also recompute the hashes from it on,
    so that links and hashes hold and only decryption can tell."""
    records = [SealedRecord(*row) for row in conn.execute(
        select(*_COLUMNS).where(AuditRecord.greenhouse_id == chain,
                                AuditRecord.seq >= seq).order_by(AuditRecord.seq))]
    ct = bytearray(records[0].ciphertext)
    ct[5] ^= 0x01
    prev = records[0].prev_hash
    for i, r in enumerate(records if rehash else records[:1]):
        r = replace(r, ciphertext=bytes(ct)) if i == 0 else replace(r, prev_hash=prev)
        new_hash = compute_record_hash(r) if rehash else r.record_hash
        conn.execute(update(AuditRecord).where(AuditRecord.greenhouse_id == chain, AuditRecord.seq == r.seq)
                     .values(ciphertext=r.ciphertext, prev_hash=r.prev_hash, record_hash=new_hash))
        prev = new_hash


@pytest.mark.parametrize(("rehash", "reason"), [(False, "record_hash does not match"),
                                                (True, "decryption failed")])
def test_tampered_ciphertext_is_named_with_exit_1_not_a_traceback(url, keys, tmp_path, capsys, rehash,
                                                                  reason) -> None:
    write_as_the_service(url, keys, [decision_job(q) for q in (1, 2, 3)], tmp_path)
    assert verify(capsys, url)[0] == 0
    with past_the_triggers(url) as conn:
        _flip_ciphertext(conn, 2, rehash=rehash)
    code, out = verify(capsys, url)  # before: AuditTamperError raised out of the coverage check
    assert code == 1, out
    assert f"FAIL ga: first bad record seq=2: {reason}" in out
    assert "ga: rows not compared with the trail past seq 1" in out


def _the_day(url, keys, tmp_path) -> None:
    write_as_the_service(url, keys, [decision_job(1), decision_job(2), ack_job(1, "applied"), mode_job(3),
                                     decision_job(4), ack_job(2, "applied"), ack_job(4, "timeout"),
                                     ack_job(4, "applied")], tmp_path)


def test_rows_as_sealed_verify(url, keys, tmp_path, capsys) -> None:
    _the_day(url, keys, tmp_path)
    code, out = verify(capsys, url)
    assert code == 0, out
    assert ("ok   ga: every record in the tables is in the trail, as sealed (3 decisions, 1 mode_changes, "
            "3 acks)") in out


@pytest.mark.parametrize(("changes", "named"), [
    pytest.param(["UPDATE decision SET clipped = '{\"valves\": [1, 1], \"pump_pct\": 100.0, "
                  "\"light_pct\": 0.0}', actor = 'operator:op1', ack_status = 'rejected' WHERE seq = 2"],
                 "1 row differs from its sealed record: decision seq 2 actor: stored 'operator:op1', "
                 "sealed 'policy:test' (also clipped, ack_status)", id="decision"),
    # The one column written after insert must be what the last sealed command_ack says.
    pytest.param(["UPDATE decision SET ack_status = 'rejected' WHERE seq = 4",
                  "UPDATE decision SET ack_status = 'pending' WHERE seq = 1"],
                 "2 rows differ from their sealed records: decision seq 1 ack_status: stored 'pending', "
                 "sealed 'applied' (command_ack, chain seq 3); then decision seq 4", id="ack-status"),
    pytest.param(["UPDATE mode_change SET reason = 'routine test', actor = 'operator:bob' WHERE seq = 3"],
                 "1 row differs from its sealed record: mode_change seq 3 actor: stored 'operator:bob', "
                 "sealed 'operator:olga' (also reason)", id="mode-change"),
])
def test_a_row_changed_after_sealing_is_named_by_table_greenhouse_seq_and_column(url, keys, tmp_path, capsys,
                                                                                changes, named) -> None:
    _the_day(url, keys, tmp_path)
    for sql in changes:
        as_owner(url, sql)
    code, out = verify(capsys, url)  # before: exit 0, and the API and the reports showed the rewritten rows
    assert code == 1, out
    assert f"DIFFERS ga: {named}" in out


def test_a_decision_stored_before_a_crash_is_sealed_as_stored(
        url, keys, tmp_path, capsys, monkeypatch) -> None:
    """The writer replays what a crash left unsealed: a row it had stored keeps the explanation it was stored
    with, and that is what is sealed, however the ensemble would explain it now (swapped meanwhile, or
    another batch's rounding)."""
    from types import SimpleNamespace

    import app.writer.store as writer_store

    version = {"v": "before the crash"}
    monkeypatch.setattr(writer_store, "explain_decisions",
                        lambda proposer, requests: [{"top_factors": [version["v"]]} for _ in requests])
    ensemble = SimpleNamespace(ensemble="members")  # explained (the explanation is faked above)

    def jobs() -> list[Job]:
        out = [decision_job(1), decision_job(2)]
        for j in out:
            j.request = object()  # type: ignore[assignment]  # an ensemble decision, explained by the writer
        return out

    engine = make_engine(url)
    try:
        recorder = DecisionRecorder(make_session_factory(engine), tmp_path / "spool.jsonl")
        # stored; the writer dies before sealing
        DecisionStore(recorder, lambda zones: ensemble).store(jobs())
        version["v"] = "after the restart"
        sink = AuditSink(AuditStore(engine, *keys))
        DecisionStore(recorder, lambda zones: ensemble, audit=sink).store(jobs(), skip_stored=True)
        assert sink.flush() == 2
    finally:
        engine.dispose()
    # before: the replay sealed a fresh explanation, other than the stored one
    code, out = verify(capsys, url)
    assert code == 0, out


def test_after_a_purge_a_row_that_only_claims_to_be_older_than_the_trail_is_still_asked_for(
        url, keys, tmp_path, capsys) -> None:
    """Rows whose records were purged on purpose are not asked for; which ones those are is told by their
    seq, below every remaining record's, not only by the ``ts`` a row gives itself."""
    old = [decision_job(q) for q in (1, 2)]
    for j in old:
        j.row["ts"] = j.ts = j.ts - timedelta(days=200)
    write_as_the_service(url, keys, [*old, decision_job(3), decision_job(4)], tmp_path)
    engine = make_engine(url)
    try:
        [purged] = AuditStore(engine, *keys).purge(180, now=T0 + timedelta(days=1))
        assert purged.records_deleted == 2
        code, out = verify(capsys, url)
        assert code == 0, out
        assert "(4 decisions" not in out and "(2 decisions, 0 mode_changes, 0 acks)" in out
        forged = {**decision_job(10).row, "ts": T0 - timedelta(days=300), "actor": "operator:op1"}
        with engine.begin() as conn:
            conn.execute(insert(Decision), [forged])
    finally:
        engine.dispose()
    code, out = verify(capsys, url)  # before: exit 0, the forged row passed for one older than the purge
    assert code == 1, out
    assert "MISSING ga: 1 of 3 decisions without an audit record: 10" in out
