"""No audit event is lost silently: kept journaled until sealed, quarantined when it never can be."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from app.audit_sink import AuditSink
from app.cli import db as db_cli
from app.core.db import make_engine
from app.deadletter import DeadLetters
from app.journal import DecisionJournal, segments
from app.services.greenhouses import add_greenhouse
from app.writer import Job
from audit import Keyring, Signer
from audit.store import AuditStore
from tests.app.test_runtime_batch import _rows, _runtime

T0 = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "ga", zones=6, soil="loam")
    add_greenhouse(url, "gb", zones=6, soil="loam")
    return url


@pytest.fixture
def keys() -> tuple[Keyring, Signer]:
    return Keyring.generate(), Signer.generate()


def _sink(url: str, keys: tuple[Keyring, Signer], dead: DeadLetters | None = None) -> AuditSink:
    return AuditSink(AuditStore(make_engine(url), *keys), dead)


def test_an_event_that_cannot_be_sealed_is_dead_lettered_and_the_chain_goes_on(url, keys, tmp_path) -> None:
    alarms: list[tuple[str, str]] = []
    dead = DeadLetters(tmp_path / "dead-letter.jsonl",
                       on_add=lambda gh, kind, reason: alarms.append((gh, kind)))
    sink = _sink(url, keys, dead)
    sink.add("ga", "decision", "policy:x", {"seq": 1}, T0)
    sink.add("ga", "decision", "policy:x", {"seq": 2, "v": float("nan")}, T0)  # no canonical JSON for NaN
    sink.add("ga", "decision", "policy:x", {"seq": 3}, T0)
    sink.add("gb", "decision", "policy:x", {"seq": 1}, T0)
    assert sink.flush() == 3 and sink.pending == 0
    assert [e.payload["seq"] for e in sink.store.tail_entries("ga", 10)] == [1, 3]
    assert alarms == [("ga", "audit:decision")]
    letter = json.loads(dead.path.read_text())
    assert letter["record"]["payload"]["seq"] == 2 and "ValueError" in letter["reason"]


def test_a_refusal_that_persists_is_dead_lettered_after_the_retries(url, keys, tmp_path) -> None:
    dead = DeadLetters(tmp_path / "dead-letter.jsonl")
    sink = _sink(url, keys, dead)
    with sink.store._engine.begin() as conn:
        conn.execute(text("CREATE TRIGGER refuse BEFORE INSERT ON audit_record WHEN NEW.kind = 'poison' "
                          "BEGIN SELECT RAISE(ABORT, 'refused'); END"))
    sink.add("ga", "decision", "policy:x", {"seq": 1}, T0)
    sink.add("ga", "poison", "policy:x", {"seq": 2}, T0)
    sink.add("ga", "decision", "policy:x", {"seq": 3}, T0)
    for _ in range(sink.max_attempts - 1):  # may be passing: kept, in order
        sink.flush()
        assert sink.pending == 2 and dead.count == 0
    sink.flush()
    assert sink.pending == 0 and dead.count == 1
    assert [e.payload["seq"] for e in sink.store.tail_entries("ga", 10)] == [1, 3]
    [result] = sink.store.verify("ga")
    assert result.ok


def test_sealing_state_is_reported_for_metrics_and_readiness(url, keys) -> None:
    sink = _sink(url, keys)
    assert sink.waiting_since is None and sink.last_seal_at is None
    sink.add("ga", "decision", "policy:x", {"seq": 1}, T0)
    since = sink.waiting_since
    assert since is not None
    sink.flush()
    assert sink.waiting_since is None and sink.last_seal_at is not None and sink.last_seal_at >= since


def _journal_decisions(state: Path, seqs: range) -> None:
    journal = DecisionJournal(state / "journal")
    rows = [{"greenhouse_id": "ga", "seq": q, "ts": T0 + timedelta(minutes=q), "actor": "policy:test",
             "mode": "auto", "telemetry": {}, "estimate": None, "member_actions": [], "voted": {},
             "clipped": {}, "rules_fired": [], "reward_terms": None, "confidence": 1.0,
             "explanation": {"alarms": []}, "cmd_id": str(uuid.UUID(int=q)),
             "ack_status": "pending"} for q in seqs]
    journal.append(Job("decision", r, "decision", "policy:test", r["ts"]).entry() for r in rows)
    journal.close()


def test_the_journal_is_kept_at_start_until_its_events_are_sealed(url, keys, tmp_path) -> None:
    state = tmp_path / "state"
    _journal_decisions(state, range(1, 4))
    down = _sink(url, keys)

    def refuse(*args, **kwargs):
        raise OperationalError("INSERT", {}, Exception("database is locked"))

    down.store.append_batches = refuse  # type: ignore[method-assign]
    down.store.append_many = refuse  # type: ignore[method-assign]
    first = _runtime(url, state, audit=down)
    first.load_greenhouses()
    assert [d.seq for d in _rows(url)[0]] == [1, 2, 3]
    assert segments(state / "journal")  # before: discarded, the three events lost
    assert first.writer_resume  # the writer's first round seals what is missing, skipping what is stored
    assert down.pending == 0  # the journal holds them: nothing is sealed twice

    second = _runtime(url, state, audit=_sink(url, keys))
    second.load_greenhouses()
    assert [e.payload["seq"] for e in second.audit.store.tail_entries("ga", 10)] == [1, 2, 3]
    assert not segments(state / "journal") and not second.writer_resume
    assert [d.seq for d in _rows(url)[0]] == [1, 2, 3]


def test_stuck_sealing_fails_readiness_with_its_reason_and_shows_in_the_metrics(url, tmp_path) -> None:
    import time

    from fastapi import Response
    from prometheus_client import generate_latest

    from app.api.routes.health import readyz

    runtime = _runtime(url, tmp_path / "state")
    limit = runtime.settings.audit_seal_stuck_s
    runtime.writer.audit_pending, runtime.writer.audit_last_seal_at = 3, 1_700_000_000.0
    runtime.writer.audit_waiting_since = time.time() - limit / 2
    assert readyz(runtime, Response())["checks"]["audit_sealing"] == "ok"
    runtime.writer.audit_waiting_since = time.time() - limit - 60
    response = Response()
    body = readyz(runtime, response)
    assert response.status_code == 503 and body["ready"] is False
    assert body["checks"]["audit_sealing"].startswith("stuck: 3 events waiting")
    text_ = generate_latest(runtime.metrics.registry).decode()
    assert "greentwin_audit_unsealed_events 3.0" in text_
    assert "greentwin_audit_last_seal_timestamp_seconds 1.7e+09" in text_


def test_audit_verify_finds_a_chain_deleted_whole_and_records_never_sealed(url, keys, tmp_path, monkeypatch,
                                                                           capsys) -> None:
    import argparse

    from app.cli import main
    from app.cli.audit import run_verify
    from app.core.db import make_session_factory
    from app.models import Decision
    from tests.app.test_hostile_records import _row

    state = tmp_path / "state"
    _journal_decisions(state, range(1, 4))
    runtime = _runtime(url, state, audit=_sink(url, keys))
    runtime.load_greenhouses()  # ga: three decisions, stored and sealed; gb: nothing yet
    pem = tmp_path / "signing.pem"
    pem.write_bytes(keys[1].to_pem())
    monkeypatch.setenv("GREENTWIN_AUDIT_KEYS", keys[0].to_json())
    monkeypatch.setenv("GREENTWIN_AUDIT_SIGNING_KEY", str(pem))
    monkeypatch.setattr("app.audit_coverage.SEAL_LAG_S", 1.0)  # rows unsealed for longer are missing
    assert main(["audit", "baseline-access", "--url", url]) == 0  # the fixture's registrations, made unsealed
    args = argparse.Namespace(url=url, greenhouse=None)
    assert run_verify(args) == 0
    out = capsys.readouterr().out
    assert ("ok   ga: every record in the tables is in the trail, as sealed (3 decisions, 0 mode_changes, "
            "0 acks)") in out
    assert "ok   gb: no records and no chain yet" in out

    with make_session_factory(make_engine(url)).begin() as s:  # stored, never sealed (a lost event)
        s.add(Decision(**_row(4, ack_status="applied")))
    assert run_verify(args) == 1
    assert "MISSING ga: 1 of 4 decisions without an audit record: 4; 1 of 1 acks without an audit record" \
        in capsys.readouterr().out

    with runtime.audit.store._engine.begin() as conn:  # the whole chain deleted, past the triggers
        conn.execute(text("DROP TRIGGER audit_record_no_update"))
        conn.execute(text("DROP TRIGGER audit_record_purge_only"))
        conn.execute(text("DELETE FROM audit_record WHERE greenhouse_id = 'ga'"))
        conn.execute(text("DELETE FROM audit_checkpoint WHERE greenhouse_id = 'ga'"))
    assert run_verify(args) == 1  # before: "no audit records", exit 0
    assert "MISSING ga: no audit chain at all; 4 of 4 decisions without an audit record: 1, 2, 3, 4" \
        in capsys.readouterr().out


def test_a_downgrade_that_drops_the_audit_trail_needs_a_recorded_confirmation(
        url, keys, tmp_path, capsys) -> None:
    import stat

    from app.cli import main
    from app.cli.db_guard import AuditTrailDropRefused

    sink = _sink(url, keys)
    sink.add("ga", "decision", "policy:x", {"seq": 1}, T0)
    sink.flush()
    [head] = sink.store.tail_records("ga", 1)
    state = tmp_path / "state"
    with pytest.raises(AuditTrailDropRefused, match="--drop-audit-trail"):
        db_cli.downgrade(url, "base", state_dir=state)
    assert main(["db", "downgrade", "0001", "--url", url, "--state-dir", str(state)]) == 2
    assert "drops the audit trail" in capsys.readouterr().err
    db_cli.downgrade(url, "0003", state_dir=state)  # the revisions above the users' table: no confirmation
    assert main(["db", "downgrade", "-2", "--url", url,
                 "--state-dir", str(state)]) == 2  # relative, crossing 0002
    assert db_cli.current(url) == "0003" and not (state / "audit-trail-drops.jsonl").exists()

    db_cli.downgrade(url, "-1", state_dir=state)  # the users' table only: no confirmation needed
    assert db_cli.current(url) == "0002"
    assert main(["db", "downgrade", "--url", url, "--state-dir", str(state), "--drop-audit-trail",
                 "decommissioning the test site"]) == 0
    assert db_cli.current(url) == "0001"
    path = state / "audit-trail-drops.jsonl"
    [record] = [json.loads(line) for line in path.read_text().splitlines()]
    assert record["reason"] == "decommissioning the test site" and record["by"]
    assert record["chain_heads"] == [{"greenhouse_id": "ga", "seq": head.seq,
                                      "record_hash": head.record_hash}]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_state_directory_files_are_owner_only(url, tmp_path) -> None:
    import os
    import stat

    from app.audit_sink import service_audit_keys
    from app.core.config import Settings

    old = os.umask(0o022)  # a typical umask: files 0644 unless created owner-only
    try:
        state = tmp_path / "state"
        _journal_decisions(state, range(1, 3))
        runtime = _runtime(url, state)
        runtime.load_greenhouses()
        runtime.estop("ga", "operator:op1", "leak in zone 3")  # journal segment and snapshot
        runtime.journal.close()
        runtime.recorder._spool_many([("decision", {"greenhouse_id": "ga", "seq": 9})])
        runtime.recorder.dead_letters.add("ga", "decision", "test", {"seq": 9})
        service_audit_keys(Settings(environment="demo"), state)
    finally:
        os.umask(old)
    modes = {p.relative_to(state).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in state.rglob("*")}
    assert {"journal", "decision-spool.jsonl", "dead-letter.jsonl", "audit-keys/keyring.json"} <= set(modes)
    assert any(name.startswith("journal/journal-") for name in modes)
    assert len([n for n in modes if n.endswith(".json") and "/" not in n]) >= 1  # a controller snapshot
    wrong = {name: oct(mode) for name, mode in modes.items()
             if mode != (0o700 if (state / name).is_dir() else 0o600)}
    assert wrong == {}
    assert stat.S_IMODE(state.stat().st_mode) == 0o700


def test_an_operator_action_the_journal_cannot_take_is_refused_and_undone(url: str, tmp_path: Path) -> None:
    from app.journal import JournalUnwritable
    from tests.app.disk_full import disk_full_at

    runtime = _runtime(url, tmp_path / "state")
    runtime.load_greenhouses()
    ctl = runtime.controllers["ga"]
    seq = ctl.seq
    with disk_full_at(1), pytest.raises(JournalUnwritable, match="neither recorded nor applied"):
        runtime.estop("ga", "operator:op1", "leak in zone 3")
    assert not ctl.estop_latched and ctl.mode == "auto" and ctl.seq == seq, "not latched without a record"
    assert [a.kind for a in runtime.dispatch.alarms] == ["journal_unwritable"]
    assert runtime.metrics.estops.labels("ga", "api")._value.get() == 0.0, "a refused e-stop is not counted"
    event = runtime.estop("ga", "operator:op1", "leak in zone 3")  # room again
    assert ctl.estop_latched and event.seq == seq + 1
    runtime.journal.close()
