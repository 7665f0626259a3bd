"""The decisions API an integrator pages through: cursor pages, time filters, refusals, and timestamps
that always name their offset, on SQLite (which hands times back without one) and PostgreSQL."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select

from app.api.routes.greenhouses import DECISIONS_MAX_LIMIT, decision_cursor
from app.auth.users import create_user
from app.cli import db as db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.main import create_app
from app.models import Decision, ModeChange
from app.services.greenhouses import add_greenhouse
from app.writer.jobs import Job
from tests.conftest import temporary_pg_database

SECRET = "decisions-api-secret-" + "9c4d2e1f" * 4
PW = "decisions api password"
GH = "gh1"
T0 = datetime(2026, 6, 1, tzinfo=UTC)
N = 523  # more than one page at every limit tried, and not a multiple of any
OFFSET = re.compile(r"(Z|[+-]\d\d:\d\d)$")
IST = timezone(timedelta(hours=5, minutes=30))


def _ts(k: int) -> datetime:
    """Decision k's time: two decisions share each minute, so the pages must break ties by seq."""
    return T0 + timedelta(minutes=k // 2)


def _row(seq: int, ts: datetime) -> dict[str, Any]:
    return {"greenhouse_id": GH, "seq": seq, "ts": ts, "actor": "policy:x", "mode": "auto",
            "telemetry": {}, "estimate": None, "member_actions": [], "voted": {},
            "clipped": {"valves": [0, 0], "pump_pct": 0.0, "light_pct": 0.0}, "rules_fired": [],
            "confidence": 1.0, "explanation": {"alarms": [], "low_confidence": False}, "cmd_id": None,
            "ack_status": None}


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('decisions') / 'gt.sqlite3'}"
        return
    with temporary_pg_database(request.getfixturevalue("pg_url"), "gt_api_decisions") as url:
        yield url


@pytest.fixture(scope="module")
def client(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("decisions-app")
    db_cli.upgrade(database)
    add_greenhouse(database, GH, zones=2, soil="loam")
    engine = make_engine(database)
    with make_session_factory(engine)() as session:
        create_user(session=session, username="viewer", password=PW, roles=["agronomist"])
    engine.dispose()
    settings = Settings(database_url=database, mqtt_url="mqtt://127.0.0.1:1", policy_dir=root / "no-policy",
                        environment="demo", secret_key=SECRET)
    with TestClient(create_app(settings, state_dir=root / "state")) as c:
        r = c.post("/api/auth/login", json={"username": "viewer", "password": PW})
        assert r.status_code == 200, r.text
        c.cookies.clear()
        c.headers["Authorization"] = f"Bearer {r.json()['access_token']}"
        yield c


@pytest.fixture
def seeded(client: TestClient, database: str) -> Iterator[Any]:
    """``N`` decisions of ``GH`` (seq 1..N); ``add(rows)`` stores more, as the writer would meanwhile."""
    engine = make_engine(database)
    sessions = make_session_factory(engine)

    def add(rows: list[dict[str, Any]]) -> None:
        with sessions.begin() as s:
            s.execute(Decision.__table__.insert(), rows)

    add([_row(k + 1, _ts(k)) for k in range(N)])
    try:
        yield add
    finally:
        with sessions.begin() as s:
            s.execute(delete(Decision).where(Decision.greenhouse_id == GH))
        engine.dispose()


def _walk(client: TestClient, params: dict[str, Any],
          between: Any = None) -> tuple[list[dict[str, Any]], int]:
    """Every row of every page, following ``Link: rel="next"``; (rows, pages). ``between(page)`` runs
    after each page but the last."""
    rows: list[dict[str, Any]] = []
    r = client.get(f"/api/greenhouses/{GH}/decisions", params=params)
    pages = 0
    while True:
        assert r.status_code == 200, r.text
        pages += 1
        rows += r.json()
        nxt = r.links.get("next")
        if nxt is None:
            return rows, pages
        assert nxt["url"].startswith(f"/api/greenhouses/{GH}/decisions?"), "relative, on the same endpoint"
        if between is not None:
            between(pages)
        r = client.get(nxt["url"])


def _forged(text: str) -> str:
    """A cursor spelled like the real ones around a position no page ends at."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _key(row: dict[str, Any]) -> tuple[datetime, int]:
    return datetime.fromisoformat(row["ts"]), row["seq"]


@pytest.mark.parametrize("limit", [1, 50, DECISIONS_MAX_LIMIT])
def test_pages_return_every_decision_once_newest_first(client: TestClient, seeded: Any, limit: int) -> None:
    rows, pages = _walk(client, {"limit": limit} if limit > 1
                        else {"limit": 1, "from": _ts(N - 7).isoformat()})
    expected = [(_ts(k), k + 1) for k in reversed(range(N))]
    if limit == 1:  # one per page would take N requests: the last few minutes show the same walk
        expected = [(ts, seq) for ts, seq in expected if ts >= _ts(N - 7)]
    assert [_key(r) for r in rows] == expected
    assert pages == -(-len(expected) // limit), "every page full but the last"


def test_decisions_stored_meanwhile_neither_repeat_nor_shift_a_page(client: TestClient, seeded: Any) -> None:
    later = N + 1000

    def insert_meanwhile(page: int) -> None:
        # Newer than anything read so far, and one sharing the newest decision's minute: neither may
        # appear on a later page nor push an unread one onto a page already read.
        seeded([_row(later + 2 * page, _ts(N) + timedelta(minutes=page)),
                _row(later + 2 * page + 1, _ts(N - 1))])

    rows, pages = _walk(client, {"limit": 60}, between=insert_meanwhile)
    seqs = [r["seq"] for r in rows]
    assert len(seqs) == len(set(seqs)), "a decision came twice"
    assert [_key(r) for r in rows] == [(_ts(k), k + 1) for k in reversed(range(N))]
    assert pages == -(-N // 60)


def test_time_filter_is_from_inclusive_to_exclusive_in_any_offset(client: TestClient, seeded: Any) -> None:
    frm, to = _ts(100), _ts(300)  # the first of minute 50 and the first of minute 150
    # Offsets other than UTC: the bounds are instants, whatever zone they are written in.
    rows, _ = _walk(client, {"from": frm.astimezone(IST).isoformat(), "to": to.astimezone(IST).isoformat(),
                             "limit": 64})
    assert [r["seq"] for r in rows] == [k + 1 for k in reversed(range(100, 300))]
    assert min(_key(r)[0] for r in rows) == frm and max(_key(r)[0] for r in rows) < to
    # From the minute of decision N-3 (seq N-2, sharing it with seq N-1): the last three.
    only_from, _ = _walk(client, {"from": _ts(N - 3).isoformat().replace("+00:00", "Z"), "limit": 500})
    assert [r["seq"] for r in only_from] == [N, N - 1, N - 2]
    only_to, _ = _walk(client, {"to": _ts(4).isoformat(), "limit": 500})
    assert [r["seq"] for r in only_to] == [4, 3, 2, 1]
    assert client.get(f"/api/greenhouses/{GH}/decisions",
                      params={"from": (_ts(N) + timedelta(days=1)).isoformat()}).json() == []


@pytest.mark.parametrize(("params", "says"), [
    ({"from": "2026-06-01T00:00:00"}, "'from' '2026-06-01T00:00:00' needs a UTC offset"),
    ({"to": "2026-06-01"}, "'to' '2026-06-01' needs a UTC offset"),
    ({"from": "yesterday"}, "'from' 'yesterday' is not ISO-8601"),
    ({"from": "2026-06-01T00:00:00 02:00"}, "write it as %2B"),  # a '+' sent unescaped
    ({"from": "0001-01-01T00:00:00+01:00"}, "out of range"),
    ({"from": "2026-06-02T00:00:00Z", "to": "2026-06-01T00:00:00Z"}, "'to' must be after 'from'"),
    ({"from": "2026-06-01T00:00:00Z", "to": "2026-06-01T00:00:00Z"}, "'to' must be after 'from'"),
    ({"cursor": "not-a-cursor"}, "'cursor' is not one this endpoint issued"),
    ({"cursor": decision_cursor(T0, 5)[:-3]}, "'cursor' is not one this endpoint issued"),
    ({"cursor": _forged("2026-06-01T00:00:00+00:00|-1")}, "'cursor' is not one this endpoint issued"),
    ({"cursor": _forged(f"2026-06-01T00:00:00+00:00|{2**63}")}, "'cursor' is not one this endpoint issued"),
    ({"cursor": _forged("2026-06-01T00:00:00|5")}, "'cursor' is not one this endpoint issued"),
    ({"cursor": _forged("0001-01-01T00:00:00+01:00|5")}, "'cursor' is not one this endpoint issued"),
])
def test_bad_paging_input_is_a_422_that_says_why(client: TestClient, params: dict[str, str],
                                                 says: str) -> None:
    r = client.get(f"/api/greenhouses/{GH}/decisions", params=params)
    assert r.status_code == 422 and says in r.json()["detail"], r.text


@pytest.mark.parametrize("limit", [0, DECISIONS_MAX_LIMIT + 1])
def test_the_limit_cap_stays(client: TestClient, limit: int) -> None:
    r = client.get(f"/api/greenhouses/{GH}/decisions", params={"limit": limit})
    assert r.status_code == 422
    [error] = r.json()["detail"]
    assert error["loc"] == ["query", "limit"]


def test_every_decision_timestamp_names_its_offset(client: TestClient, seeded: Any, database: str) -> None:
    engine = make_engine(database)
    with make_session_factory(engine).begin() as s:
        seq = (s.scalar(select(func.max(ModeChange.seq)).where(ModeChange.greenhouse_id == GH)) or 0) + 1
        s.add(ModeChange(greenhouse_id=GH, seq=seq, ts=_ts(3), actor="operator:olga", from_mode="auto",
                         to_mode="manual", reason="by hand"))
    engine.dispose()
    # The greenhouse list shows what the writer reports of the last stored decision; one decided on
    # telemetry stamped in India must still come back as the same instant, with an offset.
    last = _row(N, _ts(N - 1).astimezone(IST))
    client.app.state.runtime.last_decision[GH] = Job("decision", last, "decision", last["actor"],  # type: ignore[attr-defined]
                                                     last["ts"]).summary()
    stamps: list[tuple[str, str, datetime]] = []
    [status] = [g for g in client.get("/api/greenhouses").json() if g["id"] == GH]
    stamps.append(("greenhouses", status["last_decision"]["ts"], _ts(N - 1)))
    for row in client.get(f"/api/greenhouses/{GH}/decisions", params={"limit": 20}).json():
        stamps.append(("decisions", row["ts"], _ts(row["seq"] - 1)))
    for row in client.get(f"/api/greenhouses/{GH}/recent-decisions", params={"limit": 20}).json():
        stamps.append(("recent-decisions", row["ts"], _ts(row["seq"] - 1)))
    [change] = [m for m in client.get(f"/api/greenhouses/{GH}/mode-changes").json() if m["seq"] == seq]
    stamps.append(("mode-changes", change["ts"], _ts(3)))
    assert len(stamps) == 42
    for where, text, instant in stamps:
        assert OFFSET.search(text), f"{where}: {text!r} has no UTC offset"
        assert datetime.fromisoformat(text) == instant, where


def test_paging_is_described_in_the_openapi_document(client: TestClient) -> None:
    op = client.get("/openapi.json").json()["paths"]["/api/greenhouses/{gh}/decisions"]["get"]
    params = {p["name"]: p for p in op["parameters"]}
    assert {"from", "to", "cursor", "limit"} <= set(params)
    assert params["limit"]["schema"]["maximum"] == DECISIONS_MAX_LIMIT
    assert "offset" in params["from"]["description"] and "exclusive" in params["to"]["description"]
    assert "Link" in op["responses"]["200"]["headers"] and 'rel="next"' in op["description"]
    row = client.get("/openapi.json").json()["components"]["schemas"]["DecisionRow"]
    assert row["properties"]["ts"]["format"] == "date-time"


def test_cursor_round_trips_the_position() -> None:
    """Independent of any database: the cursor names the last decision's (instant, seq) exactly."""
    from app.api.routes.greenhouses import read_decision_cursor

    ts = datetime(2026, 6, 1, 12, 30, 15, 123456, tzinfo=IST)
    assert read_decision_cursor(decision_cursor(ts, 42)) == (ts.astimezone(UTC), 42)
    naive_as_sqlite_returns_it = ts.astimezone(UTC).replace(tzinfo=None)
    assert read_decision_cursor(decision_cursor(naive_as_sqlite_returns_it, 42)) == (ts.astimezone(UTC), 42)
