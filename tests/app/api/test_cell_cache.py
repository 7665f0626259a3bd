"""The in-memory trend cells against the table, as rounds (this process's or another replica's) move on."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import delete

from app.api import trend_rollup as roll
from app.api.cell_cache import CellCache, Cells
from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.models import Decision, TrendCell, TrendProgress
from app.services.greenhouses import add_greenhouse
from tests.app.api.test_trend_rollup import START, _rows

WIDTH = roll.width(3)


def _catch_up(rollup: roll.TrendRollup, max_rows: int = roll.ROUND_ROWS) -> int:
    """Roll-up rounds until none is left behind; how many more rounds that took after the first."""
    rounds = 0
    while not rollup.catch_up(max_rows):
        rounds += 1
        assert rounds < 10_000, "the roll-up never caught up"
    return rounds


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'c.sqlite3'}"
        return
    with request.getfixturevalue("make_pg_database")("gt_cellcache") as pg:
        yield pg


def _equal(a: Cells | None, b: Cells) -> None:
    assert a is not None
    if not len(b[0]):  # the table's empty answer has no channel width
        assert not len(a[0])
        return
    assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
    assert np.array_equal(a[2], b[2]) and np.array_equal(a[3], b[3])


def test_the_cache_answers_as_the_table_does_as_rounds_move_on(url: str) -> None:
    db_cli.upgrade(url)
    for gh in ("gh1", "gh2"):
        add_greenhouse(url, gh, zones=3, soil="loam")
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    with sessions() as s:
        s.execute(Decision.__table__.insert(),
                  _rows("gh1", range(0, 1500), 1) + _rows("gh2", range(0, 300), 2))
        s.commit()
    here, other_replica = roll.TrendRollup(sessions), roll.TrendRollup(sessions)
    _catch_up(here)
    first = roll.cell_index(START)
    end = roll.cell_index(START + timedelta(days=2))
    cache = CellCache(days=2.0)
    with sessions() as s:
        for a, b in ((first, end), (first + 7, first + 100), (end - 3, end)):
            _equal(cache.read(s, "gh1", WIDTH, a, b), roll.read_cells(s, "gh1", a, b))
        assert cache.read(s, "gh1", WIDTH, first - 1, end) is None, "older than the window: the table answers"
        assert cache.read(s, "gh1", WIDTH + 1, first, end) is not None and cache.read(s, "gh1", WIDTH, first,
                                                                                      end)
        # New minutes, and a spool written back late (old times, new ids), rolled up by another replica.
        late = [{**r, "ts": START + timedelta(minutes=40 + i, seconds=3)}
                for i, r in enumerate(_rows("gh1", range(1500, 1510), 3))]
        s.execute(Decision.__table__.insert(), _rows("gh1", range(1510, 1600), 4) + late)
        s.commit()
    _catch_up(other_replica)
    with sessions() as s:
        for a, b in ((first, end), (first + 5, first + 20),
                     (roll.cell_index(START + timedelta(minutes=1500)), end)):
            _equal(cache.read(s, "gh1", WIDTH, a, b), roll.read_cells(s, "gh1", a, b))
        _equal(cache.read(s, "gh2", WIDTH, first, end), roll.read_cells(s, "gh2", first, end))
        # A new table (the progress went back): everything is read afresh.
        s.execute(delete(TrendCell))
        s.execute(delete(TrendProgress))
        s.commit()
        cache.read(s, "gh1", WIDTH, first, end)
        empty = cache.read(s, "gh1", WIDTH, first, end)
        assert empty is not None and len(empty[0]) == 0
    engine.dispose()


def test_the_window_moves_with_the_reads_and_keeps_a_bounded_size(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=3, soil="loam")
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    with sessions() as s:
        s.execute(Decision.__table__.insert(), _rows("gh1", range(0, 4 * 1440, 5), 1))
        s.commit()
    _catch_up(roll.TrendRollup(sessions))
    cache = CellCache(days=1.0)
    first = roll.cell_index(START)
    with sessions() as s:
        for day in range(1, 5):
            end = first + 288 * day
            _equal(cache.read(s, "gh1", WIDTH, end - 288, end), roll.read_cells(s, "gh1", end - 288, end))
    window = cache._windows["gh1"]
    assert window.first >= first + 288 * 3 - 288 and len(window.decisions) <= 4 * 288, "old days are let go"
    engine.dispose()


def test_a_reader_does_not_queue_behind_a_round_in_progress(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=3, soil="loam")
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    with sessions() as s:
        s.execute(Decision.__table__.insert(), _rows("gh1", range(0, 50), 1))
        s.commit()
    rollup = roll.TrendRollup(sessions)
    assert rollup.current_at is None and not rollup.current_within(60.0)
    assert rollup.catch_up(max_rows=20) is False and rollup.current_at is None, \
        "rows left behind: not current"
    assert _catch_up(rollup, max_rows=20) > 0, "more than one round of 20 rows"
    assert rollup.current_within(60.0) and not rollup.current_within(-1.0)
    with rollup._lock:  # a round under way elsewhere
        assert rollup.catch_up(wait=False) is None
    engine.dispose()
