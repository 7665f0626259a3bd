"""Schema-valid but hostile input never jams recording: refused at the edge, or quarantined once.

PostgreSQL refuses what SQLite stores without a word (a NUL in JSONB, an actor longer than its
column), so each recording test runs on both.
"""

from __future__ import annotations

import json
import stat
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import String, func, select

from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.deadletter import DeadLetters
from app.journal import DecisionJournal
from app.models import Decision, ModeChange
from app.recorder import DecisionRecorder
from app.services.greenhouses import add_greenhouse
from app.writer import Job
from tests.app.test_runtime_batch import _runtime
from wire.fields import ACTOR_MAX_LEN, ESTOP_SOURCE_MAX_LEN, REASON_MAX_LEN
from wire.topics import Ack, EstopEvent, PayloadError, Telemetry, parse_payload

T0 = datetime(2026, 6, 1, tzinfo=UTC)
TS = "2026-06-01T00:00:00+00:00"
TELEMETRY = {"ts": TS, "boot_id": "b1", "seq": 1, "soil_vwc": [[0.2]], "air_temp_c": 20.0, "air_rh_pct": 50.0,
             "par_umol_m2_s": 0.0, "co2_ppm": 400.0, "leaf_temp_c": 20.0, "flow_l_min": 0.0,
             "pump_current_a": 0.0, "valve_open": [0], "pump_pct": 0.0, "light_pct": 0.0, "estop": False}


@pytest.mark.parametrize(("model", "payload", "field"), [
    (Telemetry, {**TELEMETRY, "boot_id": "b\u00001"}, "boot_id"),
    (Telemetry, {**TELEMETRY, "boot_id": "b\n1"}, "boot_id"),
    (Telemetry, {**TELEMETRY, "ts": "0001-01-01T00:00:00+05:00"}, "ts"),
    (Telemetry, {**TELEMETRY, "ts": "9999-12-31T23:59:59-05:00"}, "ts"),
    (Telemetry, {**TELEMETRY, "ts": "1970-01-01T00:00:00+00:00"}, "ts"),
    (EstopEvent, {"ts": TS, "pressed": True, "source": "p" * (ESTOP_SOURCE_MAX_LEN + 1)}, "source"),
    (EstopEvent, {"ts": TS, "pressed": True, "source": "panel\u0000"}, "source"),
    (Ack, {"cmd_id": str(uuid.UUID(int=1)), "ts": TS, "status": "rejected", "reason": "bad\u0000"}, "reason"),
])
def test_hostile_but_schema_shaped_payloads_are_refused_at_the_edge(model, payload, field) -> None:
    with pytest.raises(PayloadError) as err:
        parse_payload(json.dumps(payload).encode(), model)
    assert err.value.reason_code == "schema" and err.value.detail.startswith(f"{field}:")


def test_edge_limits_and_table_columns_share_one_definition() -> None:
    assert parse_payload(json.dumps({"ts": TS, "pressed": True,
                                     "source": "p" * ESTOP_SOURCE_MAX_LEN}).encode(),
                         EstopEvent).source
    for model in (Decision, ModeChange):
        assert isinstance(model.__table__.c.actor.type, String)
        assert model.__table__.c.actor.type.length == ACTOR_MAX_LEN
    assert ModeChange.__table__.c.reason.type.length == REASON_MAX_LEN
    assert len("edge:") + ESTOP_SOURCE_MAX_LEN == ACTOR_MAX_LEN


def _row(seq: int, **kw) -> dict:
    return {"greenhouse_id": "ga", "seq": seq, "ts": T0 + timedelta(minutes=seq), "actor": "policy:test",
            "mode": "auto", "telemetry": {"seq": seq}, "estimate": None, "member_actions": [], "voted": {},
            "clipped": {"pump_pct": 0.0}, "rules_fired": [], "reward_terms": None, "confidence": 1.0,
            "explanation": {"alarms": []}, "cmd_id": str(uuid.UUID(int=seq)), "ack_status": "pending", **kw}


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
        db_cli.upgrade(url)
        add_greenhouse(url, "ga", zones=6, soil="loam")
        yield url
        return
    with request.getfixturevalue("make_pg_database")("gt_hostile") as url:
        db_cli.upgrade(url)
        add_greenhouse(url, "ga", zones=6, soil="loam")
        yield url


def _hostile(url: str, seq: int) -> dict:
    """A row the database refuses: a CHECK on both; on PostgreSQL also a NUL in JSONB."""
    if url.startswith("postgresql"):
        return _row(seq, telemetry={"boot_id": "b\u00001"})
    return _row(seq, mode="bogus")


def _seqs(url: str) -> list[int]:
    with make_session_factory(make_engine(url))() as s:
        return sorted(s.scalars(select(Decision.seq)))


def test_a_row_the_database_refuses_is_dead_lettered_once_and_the_rest_recorded(
        db_url: str, tmp_path: Path) -> None:
    alarms: list[tuple[str, str]] = []
    dead = DeadLetters(tmp_path / "state" / "dead-letter.jsonl",
                       on_add=lambda gh, kind, reason: alarms.append((gh, kind)))
    rec = DecisionRecorder(make_session_factory(make_engine(db_url)), tmp_path / "state" / "spool.jsonl",
                           dead_letters=dead)
    assert rec.record_many([("decision", _row(1)), ("decision", _hostile(db_url, 2)), ("decision", _row(3))])
    assert _seqs(db_url) == [1, 3]
    assert dead.count == 1 and alarms == [("ga", "decision")]
    [line] = dead.path.read_text().splitlines()
    letter = json.loads(line)
    assert letter["kind"] == "decision" and letter["greenhouse_id"] == "ga" and letter["record"]["seq"] == 2
    assert letter["reason"]
    assert stat.S_IMODE(dead.path.stat().st_mode) == 0o600
    # The next batch goes on; the quarantined row is not retried.
    assert rec.record_many([("decision", _row(4))])
    assert _seqs(db_url) == [1, 3, 4] and dead.count == 1


def test_a_spooled_row_the_database_refuses_is_dead_lettered_and_the_spool_drains(
        db_url: str, tmp_path: Path) -> None:
    dead = DeadLetters(tmp_path / "dead-letter.jsonl")
    rec = DecisionRecorder(make_session_factory(make_engine(db_url)), tmp_path / "spool.jsonl",
                           dead_letters=dead)
    rec._spool_many([("decision", _row(1)), ("decision", _hostile(db_url, 2)), ("decision", _row(3))])
    rec.flush_spool()
    assert rec.spooled == 0 and _seqs(db_url) == [1, 3] and dead.count == 1


def test_a_restart_with_a_refused_row_in_the_journal_starts(db_url: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    journal = DecisionJournal(state / "journal")
    journal.append(Job("decision", r, "decision", "policy:test", r["ts"]).entry()
                   for r in (_row(1), _hostile(db_url, 2), _row(3)))
    journal.close()

    runtime = _runtime(db_url, state)
    runtime.load_greenhouses()  # before: the refused row raised here, at every start
    assert _seqs(db_url) == [1, 3]
    assert [a.kind for a in runtime.alarms] == ["dead_letter:decision"]
    assert runtime.controllers["ga"].seq == 3
    assert len((state / "dead-letter.jsonl").read_text().splitlines()) == 1
    with make_session_factory(make_engine(db_url))() as s:
        assert s.scalar(select(func.count()).select_from(ModeChange)) == 0


def test_the_writer_process_dead_letters_a_refused_row_and_raises_its_alarm(
        db_url: str, tmp_path: Path) -> None:
    from app.writer import WriterConfig, WriterProcess
    from audit import Keyring, Signer
    from tests.app.writer.test_writer_process import _wait

    alarms: list[tuple[str, str]] = []
    writer = WriterProcess(on_dead_letter=lambda gh, kind, reason: alarms.append((gh, kind)))
    journal = DecisionJournal(tmp_path / "journal")
    keyring, signer = Keyring.generate(), Signer.generate()
    writer.start(WriterConfig(database_url=db_url, spool_path=tmp_path / "spool.jsonl",
                              journal=journal.folder, policy_dir=tmp_path / "no-policy",
                              audit_keys=(keyring.to_json(), signer.to_pem()), gather_s=0.01))
    try:
        assert writer.wait_ready(60)
        rows = [_row(1), _hostile(db_url, 2), _row(3)]
        writer.appended(journal.append(Job("decision", r, "decision", "policy:test", r["ts"]).entry()
                                       for r in rows))
        assert _wait(lambda: writer.backlog == 0 and alarms, 60)
        row = _row(4)
        writer.appended(journal.append([Job("decision", row, "decision", "policy:test", row["ts"]).entry()]))
        assert _wait(lambda: writer.backlog == 0, 60)  # the writer goes on: no retry of the refused row
    finally:
        journal.close()
        writer.stop()
    assert _seqs(db_url) == [1, 3, 4] and alarms == [("ga", "decision")]
    assert DeadLetters(tmp_path / "dead-letter.jsonl").count == 1


def test_an_operator_reason_is_held_to_the_same_limits() -> None:
    from pydantic import ValidationError

    from app.api.routes.greenhouses import EstopRequest, GreenhouseCreate

    assert EstopRequest(reason="leak in\nzone 3").reason  # line breaks are free text
    for bad in ("leak\u0000", "x" * (REASON_MAX_LEN + 1), "le\x1bak"):
        with pytest.raises(ValidationError):
            EstopRequest(reason=bad)
    with pytest.raises(ValidationError):
        GreenhouseCreate(id="ga", name="North\u0000house")
