"""The trend cells against the decisions they roll up, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select

from app.api import history as hist
from app.api import trend_rollup as roll
from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.models import Decision, TrendCell
from app.services.greenhouses import add_greenhouse

START = datetime(2026, 6, 1, tzinfo=UTC)
BANDS = [(0.2, 0.25)] * 3


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'r.sqlite3'}"
        return
    with request.getfixturevalue("make_pg_database")("gt_rollup") as pg:
        yield pg


def _estimate(theta: list[float], k: int) -> dict[str, object]:
    """Every fifth decision recorded no price (a record from before prices were kept)."""
    return {"theta": theta} if k % 5 == 0 else {"theta": theta, "price_eur_mwh": 40.0 + (k // 60) % 24 * 2.5}


def _rows(gh: str, minutes: range, seed: int) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    return [{"greenhouse_id": gh, "seq": k + 1, "ts": START + timedelta(minutes=k, seconds=17),
             "actor": "watchdog" if k % 97 == 0 else "policy:x", "mode": "auto",
             "telemetry": {"flow_l_min": float(rng.random()), "air_temp_c": None if k % 3 else 20.0 + k % 7},
             "estimate": _estimate((0.2 + 0.05 * rng.random(3)).tolist(), k), "member_actions": [],
             "voted": {}, "clipped": {}, "rules_fired": [], "confidence": 1.0} for k in minutes]


def _same(a: hist.HistoryResponse, b: hist.HistoryResponse) -> None:
    assert a.samples == b.samples and a.ts == b.ts
    for name in ("moisture_vwc", *hist.SCALARS, "price_eur_mwh"):
        x, y = getattr(a, name), getattr(b, name)
        assert np.allclose(np.array(x, dtype=float), np.array(y, dtype=float), atol=2e-5, equal_nan=True), \
            name


def test_cells_answer_as_the_decisions_do_and_take_in_late_rows(url: str) -> None:
    db_cli.upgrade(url)
    for gh in ("gh1", "gh2"):
        add_greenhouse(url, gh, zones=3, soil="loam")
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    with sessions() as s:
        s.execute(Decision.__table__.insert(),
                  _rows("gh1", range(0, 2000), 1) + _rows("gh2", range(0, 300), 2))
        s.commit()
    rollup = roll.TrendRollup(sessions)
    rounds = 1
    while not rollup.catch_up(max_rows=700):
        rounds += 1
    assert rounds == 4, "2,300 rows in rounds of 700"
    end = START + timedelta(days=2)
    with sessions() as s:
        for frm, points in ((START, 96), (START + timedelta(hours=6), 288),
                            (START + timedelta(minutes=5), 7)):
            from_cells = hist.history(s, "gh1", 3, BANDS, frm, end, points, cells=True)
            _same(from_cells, hist.history(s, "gh1", 3, BANDS, frm, end, points))
        half_hours = hist.history(s, "gh1", 3, BANDS, START, end, 96, cells=True).price_eur_mwh
        assert half_hours[:3] == [40.0, 40.0, 42.5], \
            "the mean of the prices recorded, records without one left out"
        assert not hist.on_cell_grid(START + timedelta(minutes=1), 300.0) \
            and not hist.on_cell_grid(START, 450.0)
        # a spool written back late: old timestamps, new ids
        late_rows = _rows("gh1", range(2000, 2010), 3)
        s.execute(Decision.__table__.insert(), [{**r, "ts": START + timedelta(minutes=30 + i, seconds=5)}
                                                for i, r in enumerate(late_rows)])
        s.commit()
    assert rollup.catch_up()
    with sessions() as s:
        late = hist.history(s, "gh1", 3, BANDS, START, end, 96, cells=True)
        assert late.samples == 2000 - 21 + 10, "watchdog holds left out, the late rows counted"
        _same(late, hist.history(s, "gh1", 3, BANDS, START, end, 96))
        cells = s.scalar(select(func.count()).select_from(TrendCell))
    assert rollup.catch_up(), "nothing new: a round changes nothing"
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(TrendCell)) == cells
    engine.dispose()
