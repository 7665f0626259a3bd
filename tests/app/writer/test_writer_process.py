"""The writer process: stores what the journal holds, once, even when it is killed and restarted."""

from __future__ import annotations

import os
import signal
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.journal import DecisionJournal
from app.models import Decision
from app.services.greenhouses import add_greenhouse
from app.writer import Job, WriterConfig, WriterProcess
from audit import Keyring, Signer
from audit.store import AuditStore

T0 = datetime(2026, 6, 1, tzinfo=UTC)


def _job(seq: int) -> Job:
    row = {"greenhouse_id": "ga", "seq": seq, "ts": T0 + timedelta(minutes=seq), "actor": "expert:test",
           "mode": "auto", "telemetry": {}, "estimate": None, "member_actions": [], "voted": {},
           "clipped": {}, "rules_fired": [], "reward_terms": None, "confidence": 1.0,
           "explanation": {"alarms": [], "low_confidence": False}, "cmd_id": str(uuid.UUID(int=seq)),
           "ack_status": "pending"}
    return Job("decision", row, "decision", "expert:test", row["ts"])


def _wait(predicate, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def _start(tmp_path: Path, writer: WriterProcess, rotate_every: int, **cfg: float
           ) -> tuple[str, Keyring, Signer, DecisionJournal]:
    """A migrated database with greenhouse ``ga``, audit keys, a journal and ``writer`` tailing it."""
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "ga", zones=6)
    keyring, signer = Keyring.generate(), Signer.generate()
    journal = DecisionJournal(tmp_path / "journal", rotate_every=rotate_every)
    writer.start(WriterConfig(database_url=url, spool_path=tmp_path / "spool.jsonl", journal=journal.folder,
                              policy_dir=tmp_path / "no-policy",
                              audit_keys=(keyring.to_json(), signer.to_pem()), gather_s=0.01, **cfg))
    return url, keyring, signer, journal


def test_a_killed_writer_is_restarted_and_stores_every_record_once(tmp_path: Path) -> None:
    seen: list[int] = []
    writer = WriterProcess(on_stored=lambda stored: seen.extend(s["seq"] for _, s in stored))
    url, keyring, signer, journal = _start(tmp_path, writer, rotate_every=4)
    try:
        assert writer.wait_ready(60)
        for seq in range(1, 7):
            writer.appended(journal.append([_job(seq).entry()]))
        assert _wait(lambda: writer.backlog == 0)
        os.kill(writer._proc.pid, signal.SIGKILL)  # the process dies; what it stored stays stored
        writer._proc.join(10)
        for seq in range(7, 11):  # the loop goes on journaling meanwhile
            writer.appended(journal.append([_job(seq).entry()]))
        assert writer.restart_if_dead() and writer.wait_ready(60)
        assert _wait(lambda: writer.backlog == 0 and 10 in seen)
    finally:
        journal.close()
        writer.stop()
    with make_session_factory(make_engine(url))() as s:
        assert list(s.scalars(select(Decision.seq).order_by(Decision.seq))) == list(range(1, 11))
    store = AuditStore(make_engine(url), keyring, signer)
    [result] = store.verify("ga")
    assert result.ok, result.reason
    # Audit events wait in the writer's memory until sealed (every few seconds), but the journal keeps
    # them until they are: the restarted writer seals those the killed one had not, and no other.
    entries = store.tail_entries("ga", 100)
    assert [(e.kind, e.payload["seq"]) for e in entries] == [("decision", seq) for seq in range(1, 11)]


def test_a_restarted_writer_does_not_seal_twice_what_was_sealed(tmp_path: Path) -> None:
    writer = WriterProcess()
    url, keyring, signer, journal = _start(tmp_path, writer, rotate_every=100, audit_flush_s=0.05)
    store = AuditStore(make_engine(url), keyring, signer)
    try:
        assert writer.wait_ready(60)
        for seq in range(1, 5):
            writer.appended(journal.append([_job(seq).entry()]))
        # Sealed, and the segment kept (it is the active one): a restart replays all four.
        assert _wait(lambda: len(store.tail_entries("ga", 10)) == 4)
        os.kill(writer._proc.pid, signal.SIGKILL)
        writer._proc.join(10)
        writer.appended(journal.append([_job(5).entry()]))
        assert writer.restart_if_dead() and writer.wait_ready(60)
        assert _wait(lambda: writer.backlog == 0 and len(store.tail_entries("ga", 10)) >= 5)
        time.sleep(0.3)  # a second round would have sealed duplicates by now
    finally:
        journal.close()
        writer.stop()
    assert [e.payload["seq"] for e in store.tail_entries("ga", 100)] == [1, 2, 3, 4, 5]
    [result] = store.verify("ga")
    assert result.ok, result.reason


def test_ctrl_c_leaves_the_writer_to_the_service(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches every process of the group: the writer waits for the service's
    "stop", which comes after the control loop has journaled its last batch."""
    writer = WriterProcess()
    url, keyring, signer, journal = _start(tmp_path, writer, rotate_every=100)
    try:
        assert writer.wait_ready(60)
        os.kill(writer._proc.pid, signal.SIGINT)
        time.sleep(0.5)
        assert writer.alive
        writer.appended(journal.append([_job(1).entry()]))
    finally:
        journal.close()
        writer.stop()
    assert [e.payload["seq"]
            for e in AuditStore(make_engine(url), keyring, signer).tail_entries("ga", 10)] == [1]


def test_a_stalled_writer_shows_how_far_behind_it_is_and_catches_up(tmp_path: Path) -> None:
    """/readyz reads ``behind_s``: a writer that stops storing (here: stopped by a signal) is behind by
    the age of the oldest record it has not stored, and back to 0 once it has caught up."""
    writer = WriterProcess()
    _url, _keyring, _signer, journal = _start(tmp_path, writer, rotate_every=100)
    try:
        assert writer.wait_ready(60)
        writer.appended(journal.append([_job(1).entry()]))
        assert _wait(lambda: writer.backlog == 0) and writer.behind_s() == 0.0
        os.kill(writer._proc.pid, signal.SIGSTOP)
        try:
            writer.appended(journal.append([_job(2).entry()]))
            time.sleep(1.2)
            writer.appended(journal.append([_job(3).entry()]))
            assert writer.backlog == 2 and writer.behind_s() >= 1.2  # the oldest waiting record's age
        finally:
            os.kill(writer._proc.pid, signal.SIGCONT)
        assert _wait(lambda: writer.backlog == 0) and writer.behind_s() == 0.0
    finally:
        journal.close()
        writer.stop()
