"""Words, not codes, through the API: each user's language (PATCH /api/me), decisions with their
explanation, command and clips as sentences in it (rows of any age), alarms and the page in it too."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, get_args

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.alarms.catalogue import KINDS, describe
from app.api.routes.me import Language
from app.auth.users import create_user
from app.cli import db as db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.main import create_app
from app.models import Decision
from app.services.greenhouses import add_greenhouse
from audit.wording import LANGUAGES, has

SECRET = "words-api-secret-" + "5e1a7c3b" * 4
PW = "words api password"
GH = "gh1"
T0 = datetime(2026, 6, 1, tzinfo=UTC)
CJK = re.compile(r"[\u4e00-\u9fff]")


def _row(seq: int, **fields: Any) -> dict[str, Any]:
    row = {"greenhouse_id": GH, "seq": seq, "ts": T0 + timedelta(minutes=seq), "actor": "policy:expert",
           "mode": "auto", "telemetry": {}, "estimate": None, "member_actions": [], "voted": {},
           "clipped": {"valves": [0, 0, 0], "pump_pct": 0.0, "light_pct": 0.0}, "rules_fired": [],
           "confidence": 1.0, "explanation": {"alarms": [], "low_confidence": False}, "cmd_id": None,
           "ack_status": None}
    return {**row, **fields}


ROWS = [
    _row(1, clipped={"valves": [0, 1, 0], "pump_pct": 40.0, "light_pct": 100.0},
         estimate={"price_eur_mwh": 42.0, "lamp_break_even_eur_mwh": 61.0},
         rules_fired=[{"rule": "zone.daily_water_cap", "actuator": "valve[0]", "before": 1.0, "after": 0.0,
                       "why": "251.9 L used today; cap 250.0 L"}]),
    # Older and odder rows: no clip reason, a legacy rule id, no explanation, NaN, odd shapes (as far as the
    # raw columns' own schema admits them; the renderers' unit tests take any JSON at all).
    _row(2, actor="expert:low_confidence", confidence=0.4, explanation=None,
         rules_fired=[{"rule": "lights_dark_period", "actuator": "lights", "before": 100.0, "after": 0.0}]),
    _row(3, clipped={"valves": [1, 1, 0], "pump_pct": math.nan, "light_pct": 0.0},
         explanation={"top": [{"feature": 3}, None, {"feature": "moisture[9]", "value": "x"}]},
         rules_fired=[{"rule": None}, {"actuator": "valve[7]", "before": "open"}],
         estimate={"price_eur_mwh": "x"}),
    _row(4, actor="watchdog", explanation={"error": "explanation failed: ValueError"},
         rules_fired=[{"rule": "pump.needs_open_valve", "actuator": "pump", "before": math.inf,
                       "after": 0.0}]),
    _row(5, explanation={"alarms": ["held:co2", "outlook_prices:stale", 7], "low_confidence": False}),
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """One greenhouse of three zones (zone 2 named 'north bed') with the rows above, and a logged-in
    operator."""
    root: Path = tmp_path_factory.mktemp("words")
    url = f"sqlite:///{root / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, GH, zones=3, soil="loam")
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    with sessions() as session:
        create_user(session=session, username="olga", password=PW, roles=["operator"])
    with sessions.begin() as session:
        session.execute(text("UPDATE zone SET name = 'north bed' WHERE zone_index = 1"))
        session.execute(Decision.__table__.insert(), ROWS)
    engine.dispose()
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", policy_dir=root / "no-policy",
                        environment="demo", secret_key=SECRET)
    with TestClient(create_app(settings, state_dir=root / "state")) as c:
        r = c.post("/api/auth/login", json={"username": "olga", "password": PW})
        assert r.status_code == 200, r.text
        yield c


@pytest.fixture
def lang(client: TestClient) -> Iterator[Any]:
    """``lang(code)`` sets the caller's language; English again afterwards."""
    csrf = {"X-CSRF-Token": _csrf(client)}

    def set_to(code: str) -> None:
        r = client.patch("/api/me", json={"language": code}, headers=csrf)
        assert r.status_code == 200, r.text
        assert r.json()["language"] == code

    yield set_to
    set_to("en")


def _csrf(client: TestClient) -> str:
    page = client.get(f"/greenhouses/{GH}")
    match = re.search(r'name="csrf-token" content="([^"]+)"', page.text)
    assert match, page.text[:500]
    return match.group(1)


def test_the_language_is_one_of_the_catalogues(client: TestClient, lang: Any) -> None:
    assert get_args(Language) == LANGUAGES
    assert client.get("/api/me").json()["language"] == "en"
    csrf = {"X-CSRF-Token": _csrf(client)}
    for body in ({"language": "fr"}, {"language": "zh"}, {"language": None}, {},
                 {"language": "en", "roles": ["admin"]}):
        assert client.patch("/api/me", json=body, headers=csrf).status_code == 422, body
    lang("zh-Hans")
    assert client.get("/api/me").json() == {"username": "olga", "roles": ["operator"], "language": "zh-Hans"}


def test_decisions_carry_their_sentences_in_the_callers_language(client: TestClient, lang: Any) -> None:
    rows = {d["seq"]: d for d in client.get(f"/api/greenhouses/{GH}/decisions").json()}
    first = rows[1]
    assert first["command_text"] == "Zone 2 (north bed) open, others closed; pump 40 %; lamps on"
    assert first["clips_text"] == ["Zone 1 valve closed instead of open: the zone has had its daily water "
                                   "cap (251.9 L used today; cap 250.0 L)"]
    assert first["explanation_text"] == [
        "Decided by the threshold expert rule (no trained policy is served)",
        "Lamps on: all-in price 42 EUR/MWh is below this crop's break-even of 61 EUR/MWh"]
    assert first["rules_fired"][0]["rule"] == "zone.daily_water_cap"  # the raw record stays beside the words
    assert rows[2]["clips_text"] == ["Lamps off instead of 100 %: it is the crop's daily dark period"]
    assert rows[2]["explanation_text"][0].startswith("The ensemble's members disagreed (confidence 40 %)")
    assert rows[4]["explanation_text"] == ["Telemetry stale: every actuator to its safe state",
                                           "No explanation: it could not be computed"]
    lang("zh-Hans")
    rows = {d["seq"]: d for d in client.get(f"/api/greenhouses/{GH}/decisions").json()}
    assert rows[1]["command_text"] == "2号区（north bed）开启，其余关闭；水泵 40%；补光灯开启"
    assert rows[1]["clips_text"] == ["1号区阀门关闭（原为开启）：该区已达到每日灌溉用水上限"]
    assert rows[1]["explanation_text"][-1] == ("补光灯开启：综合电价 42 欧元/兆瓦时，"
                                               "低于该作物的盈亏平衡电价 61 欧元/兆瓦时")
    for d in rows.values():
        assert all(CJK.search(s) for s in d["explanation_text"]), d


def test_recent_decisions_put_each_clip_beside_its_actuator(client: TestClient, lang: Any) -> None:
    lang("zh-Hans")
    recent = {d["seq"]: d for d in client.get(f"/api/greenhouses/{GH}/recent-decisions").json()}
    assert set(recent) == {1, 2, 3, 4, 5}  # odd rows are shown, not a 500
    clip = recent[1]["clips"][0]
    assert clip["actuator"] == "valve[0]" and clip["text"] == recent[1]["clips_text"][0]
    assert recent[4]["clips"][0]["text"].startswith("水泵关闭")
    assert recent[1]["command_text"].startswith("2号区（north bed）开启")


def test_what_a_decision_was_made_without_reads_as_words(client: TestClient, lang: Any) -> None:
    """A held reading and a stale outlook, recorded as codes, read as the alarm list and the report say them;
    the codes stay beside the words, and an odd entry is shown as it is rather than failing the list."""
    row = {d["seq"]: d for d in client.get(f"/api/greenhouses/{GH}/recent-decisions").json()}[5]
    assert row["alarms"] == ["held:co2", "outlook_prices:stale", "7"]
    assert row["alarms_text"] == ["CO₂ held at its last reading (the sensor gave none)",
                                  describe("outlook_prices:stale").title, "7"]
    assert {d["seq"]: d for d in client.get(f"/api/greenhouses/{GH}/recent-decisions").json()}[1][
        "alarms_text"] == []
    lang("zh-Hans")
    row = {d["seq"]: d for d in client.get(f"/api/greenhouses/{GH}/decisions").json()}[5]
    assert all(CJK.search(s) for s in row["alarms_text"][:2]) and "held" not in "".join(row["alarms_text"])


def test_alarm_kinds_and_the_page_follow_the_language(client: TestClient, lang: Any) -> None:
    kinds = {k["code"]: k for k in client.get("/api/alarms/kinds").json()}
    assert kinds["zone_dry"]["title"] == "Zone dry" and kinds["zone_dry"]["action"].startswith(
        "Check the zone's")
    page = client.get(f"/greenhouses/{GH}").text
    assert '<html lang="en">' in page and "Last decisions" in page and 'id="language"' in page
    lang("zh-Hans")
    kinds = {k["code"]: k for k in client.get("/api/alarms/kinds").json()}
    assert kinds["zone_dry"]["title"] == "分区偏干" and CJK.search(kinds["water_cap"]["description"])
    page = client.get(f"/greenhouses/{GH}").text
    assert '<html lang="zh-Hans">' in page and "最近决策" in page and "Last decisions" not in page
    assert '<option value="zh-Hans" selected>' in page
    alarms_page = client.get("/alarms").text
    assert "未处理报警" in alarms_page


def test_every_alarm_kind_has_its_words_in_both_languages() -> None:
    for code in KINDS:
        for part in ("title", "description", "action"):
            assert has(f"alarm.{code}.{part}"), (code, part)
        for detail in ("", "1", "0,2", "stale"):
            zh = describe(f"{code}:{detail}" if detail else code, "zh-Hans")
            assert CJK.search(zh.title) and CJK.search(zh.description) and CJK.search(zh.action), code
            assert "{" not in zh.description + zh.title, code
    assert describe("water_cap:0,2", "zh-Hans").description.startswith("1、3号区今日用水已达每日上限")
    assert describe("outlook_prices:stale", "zh-Hans").title == "电价展望已过期"
