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
from sqlalchemy import Connection, select, update

from app.audit_sink import AuditSink
from app.cli import db as db_cli
from app.cli import main
from app.core.db import make_engine, make_session_factory
from app.recorder import DecisionRecorder
from app.writer import DecisionStore, Job
from audit import Keyring, SealedRecord, Signer, compute_record_hash
from audit.store import AuditStore
from audit.tables import AuditRecord
from tests.audit.test_store import _attacker

T0 = datetime(2026, 6, 1, tzinfo=UTC)
_COLUMNS = (AuditRecord.greenhouse_id, AuditRecord.seq, AuditRecord.ts, AuditRecord.kind, AuditRecord.actor,
            AuditRecord.key_id, AuditRecord.nonce, AuditRecord.ciphertext, AuditRecord.prev_hash,
            AuditRecord.record_hash)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
        db_cli.upgrade(url)
        db_cli.add_greenhouse(url, "ga", zones=2)
        yield url
        return
    with request.getfixturevalue("make_pg_database")("gt_verify") as url:
        db_cli.upgrade(url)
        db_cli.add_greenhouse(url, "ga", zones=2)
        yield url


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
    row = {"greenhouse_id": "ga", "seq": seq, "ts": T0 + timedelta(minutes=seq), "actor": "policy:test",
           "mode": "auto", "telemetry": {"air_temp_c": 21.5, "soil_vwc": [[0.25, 0.26]]},
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


def verify(capsys: pytest.CaptureFixture[str], url: str) -> tuple[int, str]:
    code = main(["audit", "verify", "--url", url])
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


def _flip_ciphertext(conn: Connection, seq: int, *, rehash: bool) -> None:
    """Change one bit of record ``seq``'s ciphertext; with ``rehash`` also recompute the hashes from it on,
    so that links and hashes hold and only decryption can tell."""
    records = [SealedRecord(*row) for row in conn.execute(
        select(*_COLUMNS).where(AuditRecord.greenhouse_id == "ga", AuditRecord.seq >= seq).order_by(AuditRecord.seq))]
    ct = bytearray(records[0].ciphertext)
    ct[5] ^= 0x01
    prev = records[0].prev_hash
    for i, r in enumerate(records if rehash else records[:1]):
        r = replace(r, ciphertext=bytes(ct)) if i == 0 else replace(r, prev_hash=prev)
        new_hash = compute_record_hash(r) if rehash else r.record_hash
        conn.execute(update(AuditRecord).where(AuditRecord.greenhouse_id == "ga", AuditRecord.seq == r.seq)
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
