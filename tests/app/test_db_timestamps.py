"""Timestamps keep their instant through the database, whatever offset they were written with.

SQLite has no time zone type: it stores the wall-clock digits it is given and hands back a naive
datetime. A reading stamped ``+02:00`` by an edge box must come back as the same instant in UTC,
not two hours late; PostgreSQL does this by itself, so the same test runs there when it is up.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import select, text

from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.models import Decision, ModeChange
from app.services.greenhouses import add_greenhouse
from wire.fields import check_db_timestamp

CEST = timezone(timedelta(hours=2))
LOCAL = datetime(2026, 6, 1, 14, 30, tzinfo=CEST)  # 12:30 UTC


def _decision(seq: int, ts: datetime) -> Decision:
    return Decision(greenhouse_id="gh1", seq=seq, ts=ts, actor="policy:test", mode="auto", telemetry={},
                    estimate=None, member_actions=[], voted={}, clipped={}, rules_fired=[], reward_terms=None,
                    confidence=1.0, explanation=None, cmd_id=None, ack_status=None)


@pytest.fixture(params=["sqlite", "postgresql"])
def sessions(request, tmp_path):
    """A migrated database with greenhouse ``gh1``: SQLite always, PostgreSQL when it is up."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
        db_cli.upgrade(url)
        add_greenhouse(url, "gh1", zones=6)
        yield make_session_factory(make_engine(url))
        return
    with request.getfixturevalue("make_pg_database")("gt_ts") as url:
        db_cli.upgrade(url)
        add_greenhouse(url, "gh1", zones=6)
        engine = make_engine(url)
        yield make_session_factory(engine)
        engine.dispose()


def test_an_aware_non_utc_timestamp_round_trips_as_the_same_instant(sessions):
    with sessions.begin() as s:
        s.add(_decision(1, LOCAL))
        s.add(ModeChange(greenhouse_id="gh1", seq=1, ts=LOCAL, actor="operator:ann", from_mode=None,
                         to_mode="auto", reason="start"))
    with sessions() as s:
        back = s.scalar(select(Decision.ts))
        mode_ts = s.scalar(select(ModeChange.ts))
        # Raw SQL (the trend rollups) reads what is stored: on SQLite the digits, which must be UTC's.
        raw = s.scalar(text("SELECT ts FROM decision"))
    assert back == LOCAL and back.utcoffset() == timedelta(0)
    assert mode_ts == LOCAL and mode_ts.tzinfo is not None
    if isinstance(raw, str):
        assert raw.startswith("2026-06-01 12:30:00")
    else:
        assert raw == LOCAL


def test_a_range_query_with_an_offset_finds_the_row_written_in_utc(sessions):
    with sessions.begin() as s:
        s.add(_decision(1, datetime(2026, 6, 1, 12, 30, tzinfo=UTC)))
    since = datetime(2026, 6, 1, 14, 0, tzinfo=CEST)  # 12:00 UTC: the row is after it
    with sessions() as s:
        found = s.scalars(select(Decision.seq).where(Decision.ts >= since)).all()
    assert found == [1]


def test_a_naive_timestamp_is_refused_rather_than_guessed():
    with pytest.raises(ValueError, match="time zone"):
        check_db_timestamp(datetime(2026, 6, 1, 12, 0))


def test_the_edge_check_keeps_the_offset_the_contract_echoes():
    assert check_db_timestamp(LOCAL).utcoffset() == timedelta(hours=2)
