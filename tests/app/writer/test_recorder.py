"""Decisions survive a dead database: spooled durably, written back once, never doubled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.models import Decision
from app.recorder import DecisionRecorder
from app.services.greenhouses import add_greenhouse

T0 = datetime(2026, 6, 1, tzinfo=UTC)


def _row(seq: int) -> dict:
    return {"greenhouse_id": "gh1", "seq": seq, "ts": T0 + timedelta(minutes=seq), "actor": "policy:test",
            "mode": "auto", "telemetry": {"seq": seq}, "estimate": None, "member_actions": [], "voted": {},
            "clipped": {"pump_pct": 0.0}, "rules_fired": [], "reward_terms": None, "confidence": 1.0,
            "explanation": None, "cmd_id": f"00000000-0000-0000-0000-{seq:012d}", "ack_status": "pending"}


def _count(factory) -> int:
    with factory() as s:
        return s.scalar(select(func.count()).select_from(Decision))


def test_spool_while_down_then_flush_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=6)
    live = make_session_factory(make_engine(url))
    dead = make_session_factory(make_engine(f"sqlite:///{tmp_path / 'missing' / 'nope.sqlite3'}"))
    rec = DecisionRecorder(live, tmp_path / "spool" / "decisions.jsonl")

    assert rec.record_decision(_row(1))
    rec.sessions = dead  # the database goes away
    assert not rec.record_decision(_row(2)) and not rec.record_decision(_row(3))
    assert rec.spooled == 2
    rec.sessions = live  # back, but older records wait: order is kept
    assert not rec.record_decision(_row(4))
    assert rec.spooled == 3 and _count(live) == 1

    # A crash half-way through an earlier flush left seq 2 already written.
    with live.begin() as s:
        s.add(Decision(**_row(2)))
    assert rec.flush_spool() == 2
    assert _count(live) == 4 and rec.spooled == 0
    with live() as s:
        assert sorted(s.scalars(select(Decision.seq))) == [1, 2, 3, 4]
    assert rec.flush_spool() == 0
    assert rec.record_decision(_row(5)) and _count(live) == 5


def test_flush_stops_at_a_dead_database_and_keeps_the_rest(tmp_path):
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=6)
    dead = make_session_factory(make_engine(f"sqlite:///{tmp_path / 'missing' / 'nope.sqlite3'}"))
    rec = DecisionRecorder(dead, tmp_path / "decisions.jsonl")
    for seq in (1, 2):
        rec.record_decision(_row(seq))
    assert rec.flush_spool() == 0 and rec.spooled == 2
    rec.sessions = make_session_factory(make_engine(url))
    assert rec.flush_spool() == 2 and rec.spooled == 0


def test_the_newest_commands_of_each_greenhouse_are_read_back_in_one_query(tmp_path):
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    for gh in ("gh1", "gh2"):
        add_greenhouse(url, gh, zones=6)
    rec = DecisionRecorder(make_session_factory(make_engine(url)), tmp_path / "spool.jsonl")
    for seq in range(1, 6):
        rec.record_decision(_row(seq))
        rec.record_decision({**_row(seq), "greenhouse_id": "gh2",
                             "cmd_id": f"00000000-0000-0000-0001-{seq:012d}"})
    got = rec.recent_commands(["gh1", "gh2"], limit=2)
    assert sorted(got) == [("gh1", _row(4)["cmd_id"], "pending"), ("gh1", _row(5)["cmd_id"], "pending"),
                           ("gh2", "00000000-0000-0000-0001-000000000004", "pending"),
                           ("gh2", "00000000-0000-0000-0001-000000000005", "pending")]
    assert rec.recent_commands(["gh3"]) == []
