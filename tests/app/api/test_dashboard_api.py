"""The dashboard's API and pages in-process: roles on every state-changing route, CSRF, headers, types,
history.

The role test is generated from the app's route table: a new state-changing route that is not in
``WRITE_POLICY`` fails it, so none can slip in without a decision on who may call it.
"""

from __future__ import annotations

import re
import shlex
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

try:
    from fastapi.routing import iter_route_contexts
except ImportError:  # FastAPI before 0.165: app.routes lists every route
    iter_route_contexts = None

from app.api import economics as econ
from app.api import history as hist
from app.auth.roles import ROLES
from app.auth.users import create_user
from app.cli import db as db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.main import create_app
from app.models import Decision
from app.services.greenhouses import add_greenhouse
from app.services.report_signing import verify_command
from app.web.security import CSP, csrf_token
from audit.labels import band_label, zone_label
from wire.topics import Telemetry

SECRET = "dashboard-api-secret-" + "5b1e7c2d" * 4
PW = "dashboard api password"
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
ANY_USER = frozenset(ROLES)
WRITE_POLICY: dict[tuple[str, str], frozenset[str] | None] = {
    ("POST", "/api/auth/login"): None,  # public: the password is the credential
    ("POST", "/api/auth/logout"): ANY_USER,
    ("POST", "/api/greenhouses"): frozenset({"admin"}),
    ("POST", "/api/greenhouses/{gh}/mode"): frozenset({"operator"}),
    ("POST", "/api/greenhouses/{gh}/estop"): frozenset({"operator"}),
    ("POST", "/api/greenhouses/{gh}/estop/reset"): frozenset({"operator"}),
    ("PATCH", "/api/greenhouses/{gh}/settings"): frozenset({"agronomist", "admin"}),
    ("POST", "/api/greenhouses/{gh}/forecast/what-if"): ANY_USER,  # advice: nothing is applied
    ("POST", "/api/alarms/{alarm_id}/ack"): frozenset({"operator"}),
    ("POST", "/api/alarms/{alarm_id}/shelve"): frozenset({"operator"}),
    ("POST", "/api/alarms/{alarm_id}/unshelve"): frozenset({"operator"}),
    ("PUT", "/api/alarms/thresholds/{gh}"): frozenset({"agronomist", "admin"}),
    ("PUT", "/api/me/notifications"): ANY_USER,
    ("PATCH", "/api/me"): ANY_USER,
    ("POST", "/api/users"): frozenset({"admin"}),
    ("POST", "/api/users/{username}/disable"): frozenset({"admin"}),
    ("POST", "/api/users/{username}/password"): frozenset({"admin"}),
    ("POST", "/api/users/{username}/roles"): frozenset({"admin"}),
    ("POST", "/api/users/{username}/unlock"): frozenset({"admin"}),
}
BODIES = {"/api/greenhouses": {"id": "ghnew", "zones": 2}, "/api/users": {"username": "x", "roles": ["x"]},
          "/api/greenhouses/{gh}/mode": {"mode": "auto", "reason": "test"},
          "/api/greenhouses/{gh}/estop": {"reason": "role test"},
          "/api/greenhouses/{gh}/estop/reset": {"reason": "test"},
          "/api/users/{username}/roles": {"roles": ["operator"]},
          "/api/greenhouses/{gh}/settings": {"reason": "role test"},
          "/api/greenhouses/{gh}/forecast/what-if": {"lamps": "rule"},
          "/api/alarms/{alarm_id}/shelve": {"reason": "role test", "minutes": 5},
          "/api/alarms/{alarm_id}/unshelve": {"reason": "role test"}, "/api/me": {"language": "en"}}
PARAMS = {"gh": "gh1", "alarm_id": "0" * 16, "username": "nobody"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("dash-api")
    url = f"sqlite:///{root / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=3, soil="loam", name="North house")
    engine = make_engine(url)
    with make_session_factory(engine)() as session:
        for role in ROLES:
            create_user(session=session, username=role, password=PW, roles=[role])
    engine.dispose()
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", policy_dir=root / "no-policy",
                        environment="demo", secret_key=SECRET, site_timezone="Europe/Amsterdam")
    with TestClient(create_app(settings, state_dir=root / "state")) as c:
        yield c


def _login(c: TestClient, user: str) -> str:
    r = c.post("/api/auth/login", json={"username": user, "password": PW})
    assert r.status_code == 200, r.text
    c.cookies.clear()
    return str(r.json()["access_token"])


def _write_routes(c: TestClient) -> list[tuple[str, str]]:
    """(method, path) of every state-changing route the app serves, hidden ones included."""
    routes = c.app.routes  # type: ignore[attr-defined]
    # FastAPI >= 0.165 keeps included routers as lazy entries; iter_route_contexts flattens them.
    flat = list(iter_route_contexts(routes)) if iter_route_contexts is not None else routes
    return sorted((m, r.path) for r in flat for m in set(getattr(r, "methods", None) or ()) & WRITE_METHODS)


def test_every_state_changing_route_has_a_role_policy(client: TestClient) -> None:
    assert set(_write_routes(client)) == set(WRITE_POLICY), "a write route without a decided role policy"


@pytest.mark.parametrize("role", ROLES)
def test_each_role_against_every_state_changing_route(client: TestClient, role: str) -> None:
    for method, path in _write_routes(client):
        allowed = WRITE_POLICY[(method, path)]
        if allowed is None:
            continue
        url = path.format(**PARAMS)
        body = BODIES.get(path, {})
        assert client.request(method, url, json=body).status_code == 401, (method, path, "no token")
        r = client.request(method, url, json=body,
                           headers={"Authorization": f"Bearer {_login(client, role)}"})
        if role in allowed:
            assert r.status_code not in (401, 403), (role, method, path, r.text)
        else:
            assert r.status_code == 403 and "forbidden" in r.json()["detail"], (role, method, path, r.text)


def test_cookie_sessions_need_the_csrf_token_and_bearer_clients_do_not(client: TestClient) -> None:
    token, other = _login(client, "operator"), _login(client, "admin")
    url, body = "/api/greenhouses/gh1/mode", {"mode": "auto", "reason": "csrf test"}
    client.cookies.set("greentwin_session", token)
    try:
        r = client.post(url, json=body)
        assert r.status_code == 403 and "CSRF" in r.json()["detail"]
        assert client.post(url, json=body, headers={"X-CSRF-Token": "0" * 64}).status_code == 403
        assert client.post(url, json=body, headers={"X-CSRF-Token": csrf_token(other)}).status_code == 403, \
            "another session's token"
        good = {"X-CSRF-Token": csrf_token(token)}
        r = client.post(url, json=body, headers={**good, "Origin": "https://evil.example"})
        assert r.status_code == 403 and "Origin" in r.json()["detail"]
        assert client.post(url, json=body,
                           headers={"Authorization": "Basic b3BlcmF0b3I6eA=="}).status_code == 403, \
            "a non-bearer Authorization header does not make a cookie session exempt"
        client.cookies.clear()
        junk = {"Cookie": f'a="unterminated; b=\\x01; greentwin_session={token}'}
        r = client.post(url, json=body, headers=junk)
        assert r.status_code == 403 and "CSRF" in r.json()["detail"], \
            "a cookie found by the API is found by the check"
        client.cookies.set("greentwin_session", token)
        assert client.post(url, json=body, headers=good).status_code == 200
        assert client.post(url, json=body, headers={**good, "Origin": "http://testserver"}).status_code == 200
    finally:
        client.cookies.clear()
    assert client.post(url, json=body, headers={"Authorization": f"Bearer {token}"}).status_code == 200
    r = client.post("/api/auth/login", json={"username": "operator", "password": PW},
                    headers={"Origin": "https://evil.example"})
    assert r.status_code == 403, "a login posted from another site"


@pytest.mark.parametrize("authorization", ["Bearer  ", "Bearer \t", "bearer", "Bearer", "Token junk",
                                           "Bearer junk"])
def test_a_cookie_session_writes_only_with_its_csrf_token_whatever_authorization_header_comes_along(
        client: TestClient, authorization: str) -> None:
    """Either a real bearer token authenticates (no CSRF token needed) or the cookie does (needed), never the
    cookie without it: the check reads the header as the authentication does, which strips the credentials.
    (A 0xA0 byte, which a real server passes on, is tried in test_api_door.)"""
    token = _login(client, "operator")
    url, body = "/api/greenhouses/gh1/mode", {"mode": "auto", "reason": "csrf test"}
    client.cookies.set("greentwin_session", token)
    try:
        r = client.post(url, json=body, headers={"Authorization": authorization})
    finally:
        client.cookies.clear()
    assert r.status_code in (401, 403), (authorization, r.status_code, r.text)
    if r.status_code == 403:
        assert "CSRF" in r.json()["detail"], "read as a cookie session, and checked as one"
    else:
        assert r.json()["detail"] == "invalid token", "read as a bearer client, and its token refused"


def test_security_headers_and_pages_without_inline_script(client: TestClient) -> None:
    r = client.get("/login")
    assert r.status_code == 200
    csp = r.headers["content-security-policy"]
    assert csp == CSP and "script-src 'self';" in csp and "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["x-frame-options"] == "DENY"
    token = _login(client, "agronomist")
    client.cookies.set("greentwin_session", token)
    try:
        for page in ("/", "/greenhouses/gh1", "/alarms"):
            html = client.get(page).text
            assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == [], f"inline script on {page}"
            assert re.search(r"\son[a-z]+=", html) is None, f"inline event handler on {page}"
            for src in re.findall(r'(?:src|href)="(/static/[^"]+)"', html):
                assert client.get(src).status_code == 200, src
            assert f'content="{csrf_token(token)}"' in html and 'content="Europe/Amsterdam"' in html
        assert 'id="controls"' not in client.get("/greenhouses/gh1").text, \
            "no controls without the operator role"
    finally:
        client.cookies.clear()
    r = client.get("/", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login?next=/"
    for target in ("//evil.example", "/\\evil.example", "https://evil.example"):
        assert client.get("/login", params={"next": target}).text.count('data-next="/"') == 1, target
    assert 'data-next="/alarms"' in client.get("/login?next=/alarms").text


def test_the_report_panel_names_the_state_directory_verify_needs(client: TestClient) -> None:
    """``greentwin report verify`` finds a dev/demo certificate only in the service's state directory,
    so the hint beside the download carries it, in a form a shell takes as one word."""
    state_dir = client.app.state.runtime.state_dir  # type: ignore[attr-defined]
    client.cookies.set("greentwin_session", _login(client, "agronomist"))
    try:
        html = client.get("/greenhouses/gh1").text
    finally:
        client.cookies.clear()
    [csv_link] = re.findall(r'<a class="btn" id="report-csv" href="([^"]*)"', html)
    assert csv_link == "/api/greenhouses/gh1/report.csv", "the CSV of the same summary, beside the PDF"
    [hint] = re.findall(r'<code id="report-verify-command">([^<]*)</code>', html)
    assert shlex.split(unescape(hint)) == ["greentwin", "report", "verify", "FILE.pdf", "--state-dir",
                                           str(state_dir)]
    spaced = verify_command(Path("/etc/green twin/report cert.pem"), state_dir)
    assert shlex.split(spaced)[-2:] == ["--cert", "/etc/green twin/report cert.pem"], \
        "a configured certificate wins"


def test_zone_tiles_and_trends_name_zones_and_bands_as_the_report_does(client: TestClient) -> None:
    headers = {"Authorization": f"Bearer {_login(client, 'agronomist')}"}
    zones = client.get("/api/greenhouses/gh1/live", headers=headers).json()["zones"]
    assert [z["label"] for z in zones] == ["Zone 1", "Zone 2", "Zone 3"]
    assert all(z["band_label"] == band_label(z["band_low_vwc"], z["band_high_vwc"]) == "19.5–27 %"
               for z in zones)
    history = client.get("/api/greenhouses/gh1/history", headers=headers).json()
    assert history["zone_labels"] == [zone_label(i) for i in range(3)]


def test_json_endpoints_are_typed_in_openapi(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    untyped = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            ok = op.get("responses", {}).get("200") or op.get("responses", {}).get("201") or {}
            content = ok.get("content", {}).get("application/json")
            if not path.startswith("/api/") or content is None:
                continue
            schema = content["schema"]
            schema = schema.get("items", schema)
            if "$ref" not in schema:
                untyped.append(f"{method.upper()} {path}: {schema}")
    assert untyped == []
    schemas = spec["components"]["schemas"]
    assert {"GreenhouseLive", "HistoryResponse", "EconomicsToday", "Outlook"} <= set(schemas)
    assert "outlook" in schemas["GreenhouseLive"]["properties"]
    assert "economics" in schemas["GreenhouseSummary"]["properties"]


def test_live_overview_and_alarms_answer_typed_json(client: TestClient) -> None:
    headers = {"Authorization": f"Bearer {_login(client, 'agronomist')}"}
    [row] = [r for r in client.get("/api/overview", headers=headers).json() if r["id"] == "gh1"]
    assert row["id"] == "gh1" and row["name"] == "North house" and row["edge"] == "unknown"
    assert row["telemetry_age_s"] is None and row["water_cap_l"] > 0
    live = client.get("/api/greenhouses/gh1/live", headers=headers).json()
    assert len(live["zones"]) == 3 and live["zones"][0]["band_low_vwc"] < live["zones"][0]["band_high_vwc"]
    # The crop twin's estimates beside the measured climate, and the outlook decisions are made on.
    assert live["crop"]["crop_day"] >= 60.0 and live["crop"]["yield_kg_m2"] == 0.0 \
        and live["crop"]["lai"] is None
    assert live["outlook"]["price_source"] == "tariff" and live["outlook"]["weather_source"] == "fallback"
    assert len(live["outlook"]["price_eur_mwh"]) == 24 and min(live["outlook"]["price_eur_mwh"]) > 0.0
    assert client.get("/api/greenhouses/nope/live", headers=headers).status_code == 404
    alarms = client.get("/api/alarms", headers=headers).json()
    assert {a["kind"] for a in alarms} <= {"estop_latched"}, alarms  # the role test latches an e-stop
    assert all(a["title"] and a["description"] and a["action"] for a in alarms)
    status = client.get("/api/greenhouses/gh1/audit-status", headers=headers).json()
    assert status["ok"] is True and status["greenhouse_id"] == "gh1"
    operator = {"Authorization": f"Bearer {_login(client, 'operator')}"}
    assert client.get("/api/greenhouses/gh1/audit-status", headers=operator).status_code == 403
    r = client.get("/api/greenhouses/gh1/history",
                   params={"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"},
                   headers=headers)
    assert r.status_code == 422
    r = client.get("/api/greenhouses/gh1/history", params={"from": "2026-01-01T00:00:00"}, headers=headers)
    assert r.status_code == 422 and "offset" in r.json()["detail"]


def test_economics_and_outlook_follow_the_first_telemetry(client: TestClient) -> None:
    """A telemetry message through the runtime as the bridge hands it over: the overview gains today's
    money (yield marked estimated) and the greenhouse page the decision's outlook, with the tariff's
    prices."""
    headers = {"Authorization": f"Bearer {_login(client, 'agronomist')}"}
    runtime = client.app.state.runtime  # type: ignore[attr-defined]
    now = datetime.now(UTC).replace(microsecond=0)
    tel = Telemetry(ts=now, boot_id="econ", seq=1, soil_vwc=[[0.24, 0.24]] * 3, air_temp_c=21.0,
                    air_rh_pct=70.0, par_umol_m2_s=200.0, co2_ppm=500.0, leaf_temp_c=21.0, flow_l_min=0.0,
                    pump_current_a=0.0, valve_open=[0, 0, 0], pump_pct=0.0, light_pct=0.0, estop=False)
    client.portal.call(runtime.on_telemetry, "gh1", tel)  # type: ignore[union-attr]
    deadline = time.monotonic() + 30
    while "gh1" not in runtime.dispatch.observations and time.monotonic() < deadline:
        time.sleep(0.05)
    live = client.get("/api/greenhouses/gh1/live", headers=headers).json()
    econ, outlook = live["economics"], live["decision_outlook"]
    assert econ is not None and econ["water_cost_eur"] == 0.0 and econ["lamp_price_eur_mwh"] > 0
    assert set(econ["estimated"]) == {"yield_kg", "revenue_eur", "profit_eur"}
    assert outlook is not None and len(outlook["hours"]) == len(outlook["price_eur_mwh"]) == 24
    # No price feed configured: the time-of-use tariff is the contract, every hour known.
    assert outlook["published"] == [True] * 24 and all(p > 0 for p in outlook["price_eur_mwh"])
    [row] = [r for r in client.get("/api/overview", headers=headers).json() if r["id"] == "gh1"]
    assert row["economics"]["day"] == econ["day"]
    h = client.get("/api/greenhouses/gh1/history", params={"hours": 24}, headers=headers).json()
    assert len(h["price_eur_mwh"]) == len(h["ts"])


def test_costs_and_the_price_trend_use_the_price_each_decision_recorded(tmp_path: Path) -> None:
    """Decisions that saw a day-ahead feed's 500 EUR/MWh in tariff peak hours: the API prices the lamps at
    500; an hour recorded without a price is filled from the tariff, and the API says which is which."""
    url = f"sqlite:///{tmp_path / 'price.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=3, soil="loam")
    engine = make_engine(url)
    with make_session_factory(engine)() as session:
        create_user(session=session, username="agronomist", password=PW, roles=["agronomist"])
        # 11:00-11:59 Amsterdam (a peak hour of the tariff) lamps on at 500 recorded; 12:00-12:59 lamps off,
        # no price kept.
        start = datetime(2026, 6, 3, 9, 0, tzinfo=UTC)
        session.execute(Decision.__table__.insert(), [
            {"greenhouse_id": "gh1", "seq": k + 1, "ts": start + timedelta(minutes=k), "actor": "policy:x",
             "mode": "auto", "telemetry": {"light_pct": 100.0 if k < 60 else 0.0},
             "estimate": {"theta": [0.24] * 3, **({"price_eur_mwh": 500.0} if k < 60 else {})},
             "member_actions": [], "voted": {}, "clipped": {}, "rules_fired": [], "confidence": 1.0}
            for k in range(120)])
        session.commit()
    engine.dispose()
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", policy_dir=tmp_path / "no-policy",
                        environment="demo", secret_key=SECRET, site_timezone="Europe/Amsterdam")
    with TestClient(create_app(settings, state_dir=tmp_path / "state")) as c:
        headers = {"Authorization": f"Bearer {_login(c, 'agronomist')}"}
        dash, runtime = c.app.state.dashboard, c.app.state.runtime  # type: ignore[attr-defined]
        assert dash.trends.catch_up(), "120 decisions: one round"
        ctl = runtime.controllers["gh1"]
        tariff_peak = float(econ.hourly_price(ctl, [start])[0])
        assert tariff_peak != 500.0
        # The controller's counters for that day as telemetry left them: an hour of lamps so far.
        ctl.state = replace(ctl.state, day="2026-06-03", last_ts=start + timedelta(minutes=59),
                            lights_hours_today=1.0)
        money = c.get("/api/greenhouses/gh1/live", headers=headers).json()["economics"]
        assert money["price_source"] == "recorded" and money["lamp_price_eur_mwh"] == 500.0
        assert money["lamp_kwh"] > 0 and money["energy_cost_eur"] == pytest.approx(money["lamp_kwh"] * 0.5)
        span = {"from": start.isoformat(), "to": (start + timedelta(hours=2)).isoformat()}
        for points in (24, 10):  # five-minute buckets from the cells; twelve-minute ones from the decisions
            h = c.get("/api/greenhouses/gh1/history", params={**span, "points": points},
                      headers=headers).json()
            half = len(h["ts"]) // 2
            assert h["price_source"] == "mixed" and len(h["ts"]) == points
            assert h["price_eur_mwh"][:half] == [500.0] * half
            assert h["price_eur_mwh"][half:] == [tariff_peak] * (points - half)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def history_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Both databases: the buckets are computed by each one's own SQL (julianday vs extract(epoch))."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'h.sqlite3'}"
        return
    with request.getfixturevalue("make_pg_database")("gt_dash_hist") as url:
        yield url


def test_history_averages_a_week_of_minutes_into_hourly_buckets(history_url: str) -> None:
    url = history_url
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=6, soil="loam")
    start = datetime(2026, 6, 1, tzinfo=UTC)
    minutes = 7 * 24 * 60
    rng = np.random.default_rng(0)
    theta = 0.2 + 0.05 * rng.random((minutes, 6))
    rows = [{"greenhouse_id": "gh1", "seq": k + 1, "ts": start + timedelta(minutes=k), "actor": "policy:x",
             "mode": "auto",
             "telemetry": {"flow_l_min": float(k % 60), "air_temp_c": None if k % 2 else 20.0},
             "estimate": {"theta": theta[k].tolist()}, "member_actions": [], "voted": {}, "clipped": {},
             "rules_fired": [], "confidence": 1.0} for k in range(minutes)]
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    with sessions() as s:
        s.execute(Decision.__table__.insert(), rows)
        s.commit()
        bands = [(0.2, 0.25)] * 6
        h = hist.history(s, "gh1", 6, bands, start, start + timedelta(days=7), 168)
        timings = []
        for _ in range(5):
            t0 = time.perf_counter()
            hist.history(s, "gh1", 6, bands, start, start + timedelta(days=7), 336)
            timings.append(time.perf_counter() - t0)
        in_band = hist.time_in_band_pct(s, "gh1", bands, start, start + timedelta(days=7))
    engine.dispose()
    assert h.samples == minutes and len(h.ts) == 168 and h.bucket_s == 3600.0
    assert h.flow_l_min == [29.5] * 168, "mean of 0..59 in every hour"
    assert h.air_temp_c == [20.0] * 168, "missing readings are left out of the mean, not counted as zero"
    expected = theta.reshape(168, 60, 6).mean(axis=1)
    assert np.allclose(np.array(h.moisture_vwc).T, expected, atol=1e-5)
    assert h.ts[0] == start + timedelta(minutes=30)
    assert in_band is not None and abs(in_band - 100 * (theta <= 0.25).mean()) < 1e-9
    print(f"history of 7 days x 1 min x 6 zones -> 336 points: best {min(timings) * 1e3:.0f} ms")


def test_alarm_groups_acknowledge_up_to_now_and_reopen_on_a_new_occurrence() -> None:
    from types import SimpleNamespace

    from app.api.alarm_book import AlarmBook, UnknownAlarm
    from app.runtime import Alarm

    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    runtime = SimpleNamespace(alarms=[Alarm("gh1", t0, "ack_timeout"), Alarm("gh1", t0 + timedelta(seconds=5),
                                                                             "ack_timeout"),
                                      Alarm("gh2", t0 + timedelta(seconds=1), "valve_failed:2")], audit=None)
    book = AlarmBook(runtime)  # type: ignore[arg-type]
    groups = {(a.greenhouse_id, a.kind): a for a in book.list()}
    timeout, failed = groups[("gh1", "ack_timeout")], groups[("gh2", "valve_failed:2")]
    assert (timeout.count, timeout.first_at, timeout.last_at, timeout.severity) == (
        2, t0, t0 + timedelta(seconds=5), "warning")
    assert failed.severity == "critical" and book.unacknowledged("gh1") == 1 \
        and book.unacknowledged("gh2") == 1
    ack = book.acknowledge(timeout.id, "operator:olga")
    assert ack.through == timeout.last_at and book.unacknowledged("gh1") == 0
    [acked] = book.list("gh1")
    assert acked.acknowledged and acked.acknowledged_by == "operator:olga"
    runtime.alarms.append(Alarm("gh1", t0 + timedelta(seconds=9), "ack_timeout"))
    [again] = book.list("gh1")
    assert not again.acknowledged and again.count == 3, \
        "a new occurrence after the acknowledgement reopens it"
    with pytest.raises(UnknownAlarm):
        book.acknowledge("f" * 16, "operator:olga")


# ---- fuzz: every /api/ operation from the OpenAPI document, random parameters and bodies, no 5xx ----

FUZZ_SKIP = {"/api/stream",  # never ends by design
             "/api/auth/logout",  # would end the fuzzing session itself
             "/api/auth/login",  # Argon2 per call; its refusals are tested in test_api_auth
             "/api/greenhouses/{gh}/report.pdf"}  # builds and signs PDFs; its inputs are tested in
                                                  # test_api_auth
_json = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6)
                     | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(max_size=20), lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=8)
_param = st.one_of(st.text(max_size=30), st.integers(-10**9, 10**9).map(str), st.sampled_from(
    ["gh1", "nope", "0" * 16, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00", "-1", "1e309", "NaN", "%00",
     "../.."]))


_FUZZ_TOKENS: dict[str, str] = {}


def _operations(spec: dict[str, object]) -> list[tuple[str, str, dict[str, object]]]:
    ops = []
    for path, methods in spec["paths"].items():  # type: ignore[attr-defined]
        if path.startswith("/api/") and path not in FUZZ_SKIP:
            ops += [(method.upper(), path, op) for method, op in methods.items()]
    return sorted(ops, key=lambda o: (o[1], o[0]))


def _body_fields(spec: dict[str, object], op: dict[str, object]) -> list[str]:
    ref = (op.get("requestBody") or {}).get("content", {}).get("application/json", {}).get(  # type: ignore[attr-defined]
        "schema", {}).get("$ref")
    if not ref:
        return []
    return list(spec["components"]["schemas"][ref.rsplit("/", 1)[1]].get("properties", {}))  # type: ignore[index]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_api_requests_never_get_a_server_error(client: TestClient, data: st.DataObject) -> None:
    spec = client.get("/openapi.json").json()
    method, path, op = data.draw(st.sampled_from(_operations(spec)))
    params = op.get("parameters", [])
    url = path.format(**{p["name"]: quote(data.draw(_param), safe="") for p in params if p["in"] == "path"})
    query = {p["name"]: data.draw(_param) for p in params if p["in"] == "query" and data.draw(st.booleans())}
    fields = _body_fields(spec, op)
    body = data.draw(st.fixed_dictionaries({}, optional={f: _json for f in fields}) | _json) if fields \
        else None
    if "operator" not in _FUZZ_TOKENS:
        _FUZZ_TOKENS["operator"] = _login(client, "operator")
    r = client.request(method, url, params=query, json=body,
                       headers={"Authorization": f"Bearer {_FUZZ_TOKENS['operator']}"})
    assert r.status_code < 500, (method, url, query, body, r.text)


def test_admin_adds_disables_and_resets_accounts_and_each_change_is_sealed(client: TestClient) -> None:
    admin = {"Authorization": f"Bearer {_login(client, 'admin')}"}
    r = client.post("/api/users", json={"username": "nina", "roles": ["operator", "agronomist"]},
                    headers=admin)
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["roles"] == ["agronomist", "operator"] and len(created["password"]) >= 12
    assert client.post("/api/users", json={"username": "nina", "roles": ["operator"]},
                       headers=admin).status_code == 409
    login = client.post("/api/auth/login", json={"username": "nina", "password": created["password"]})
    assert login.status_code == 200
    client.cookies.clear()
    reset = client.post("/api/users/nina/password", headers=admin).json()
    assert reset["password"] != created["password"]
    assert client.get("/api/auth/me", headers={"Authorization": f"Bearer {login.json()['access_token']}"}) \
        .status_code == 401, "a reset revokes the old tokens"
    row = client.post("/api/users/nina/disable", headers=admin).json()
    assert row["disabled"] is True
    listed = {u["username"]: u for u in client.get("/api/users", headers=admin).json()}
    assert listed["nina"]["disabled"] and listed["operator"]["roles"] == ["operator"]
    assert client.post("/api/users/ghost/disable", headers=admin).status_code == 404
    runtime = client.app.state.runtime  # type: ignore[attr-defined]
    kinds = [(e.kind, e.actor) for e in runtime.audit.store.tail_entries("_access", 4)]
    assert kinds == [("user_add", "admin:admin"), ("login", "nina"), ("password_reset", "admin:admin"),
                     ("user_disable", "admin:admin")]


def test_role_changes_and_registrations_are_sealed_with_the_admin(client: TestClient) -> None:
    admin = {"Authorization": f"Bearer {_login(client, 'admin')}"}
    assert client.post("/api/users", json={"username": "rolf", "roles": ["operator"]},
                       headers=admin).status_code == 201
    r = client.post("/api/users/rolf/roles", json={"roles": ["agronomist", "admin"]}, headers=admin)
    assert r.status_code == 200 and r.json()["roles"] == ["admin", "agronomist"], r.text
    assert client.post("/api/users/ghost/roles", json={"roles": ["admin"]}, headers=admin).status_code == 404
    assert client.post("/api/users/rolf/roles", json={"roles": ["root"]}, headers=admin).status_code == 422
    r = client.post("/api/greenhouses", json={"id": "gh-sealed", "zones": 2, "soil": "clay"}, headers=admin)
    assert r.status_code == 201, r.text
    assert client.post("/api/greenhouses", json={"id": "gh-sealed", "zones": 2},
                       headers=admin).status_code == 409
    runtime = client.app.state.runtime  # type: ignore[attr-defined]
    entries = runtime.audit.store.tail_entries("_access", 3)
    assert [(e.kind, e.actor) for e in entries] == [("user_add", "admin:admin"),
                                                    ("user_roles", "admin:admin"),
                                                    ("greenhouse_register", "admin:admin")]
    assert entries[1].payload == {"username": "rolf", "from_roles": ["operator"],
                                  "to_roles": ["admin", "agronomist"]}
    assert entries[2].payload["greenhouse_id"] == "gh-sealed" and entries[2].payload["soil"] == "clay"
    assert all(r.ok for r in runtime.audit.store.verify("_access"))


def test_the_last_enabled_admin_can_neither_step_down_nor_be_disabled(tmp_path: Path) -> None:
    """Without an enabled admin nobody can manage accounts through the API: 409 and nothing changed (nothing
    sealed either), until a second admin exists."""
    url = f"sqlite:///{tmp_path / 'admins.sqlite3'}"
    db_cli.upgrade(url)
    engine = make_engine(url)
    with make_session_factory(engine)() as session:
        create_user(session=session, username="adam", password=PW, roles=["admin"])
    engine.dispose()
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", policy_dir=tmp_path / "no-policy",
                        environment="demo", secret_key=SECRET)
    with TestClient(create_app(settings, state_dir=tmp_path / "state")) as c:
        adam = {"Authorization": f"Bearer {_login(c, 'adam')}"}
        store = c.app.state.runtime.audit.store  # type: ignore[attr-defined]
        sealed = len(store.tail_entries("_access", 100))
        for path, body in (("roles", {"roles": ["operator"]}), ("disable", None)):
            r = c.post(f"/api/users/adam/{path}", json=body, headers=adam)
            assert r.status_code == 409, (path, r.status_code, r.text)
            assert "'adam' is the last enabled admin" in r.json()["detail"]
        [row] = c.get("/api/users", headers=adam).json()
        assert (row["roles"], row["disabled"]) == (["admin"], False)
        assert len(store.tail_entries("_access", 100)) == sealed, "a refused change is not sealed"
        assert c.post("/api/users", json={"username": "ada", "roles": ["admin"]},
                      headers=adam).status_code == 201
        r = c.post("/api/users/adam/roles", json={"roles": ["operator"]}, headers=adam)
        assert r.status_code == 200 and r.json()["roles"] == ["operator"], \
            "with a second admin he may step down"


def test_acknowledging_an_acknowledged_alarm_answers_that_acknowledgement_and_seals_nothing(
        client: TestClient) -> None:
    """Only an acknowledgement that covers something new is sealed: a repeated click or a replayed request is
    no new record in the audit trail; a new occurrence is acknowledged (and sealed) anew."""
    operator = {"Authorization": f"Bearer {_login(client, 'operator')}"}
    runtime, dash = client.app.state.runtime, client.app.state.dashboard  # type: ignore[attr-defined]

    def acks_sealed() -> int:
        return sum(e.kind == "alarm_ack" for e in runtime.audit.store.tail_entries("_access", 1000))

    def group() -> dict[str, object]:
        return next(a for a in client.get("/api/alarms", params={"gh": "gh1"}, headers=operator).json()
                    if a["kind"] == "valve_failed:ack-test")

    runtime.dispatch.alarm("gh1", "valve_failed:ack-test")
    key, before = group()["id"], acks_sealed()
    first = client.post(f"/api/alarms/{key}/ack", headers=operator)
    assert first.status_code == 200, first.text
    for _ in range(3):
        again = client.post(f"/api/alarms/{key}/ack", headers=operator)
        assert again.status_code == 200 and again.json() == first.json()
    assert acks_sealed() == before + 1 and group()["acknowledged"]
    runtime.dispatch.alarm("gh1", "valve_failed:ack-test")
    assert not group()["acknowledged"], "a new occurrence reopens it"
    threads = [threading.Thread(target=dash.alarms.acknowledge, args=(key, "operator:operator"))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert acks_sealed() == before + 2, "four acknowledgements at once: one record"
    latest = client.post(f"/api/alarms/{key}/ack", headers=operator).json()
    assert latest["through"] > first.json()["through"] and group()["acknowledged"]


def test_alarms_and_their_acknowledgements_survive_a_restart(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from app.api.alarm_book import AlarmBook
    from app.runtime import Alarm

    url = f"sqlite:///{tmp_path / 'alarms.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=3, soil="loam")
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    before = SimpleNamespace(alarms=[Alarm("gh1", t0, "valve_failed:1"),
                                     Alarm("gh1", t0 + timedelta(seconds=1), "valve_failed:1"),
                                     Alarm("gh1", t0 + timedelta(seconds=2), "ack_timeout"),
                                     Alarm("ghost", t0, "ack_timeout")],
                             audit=None)  # refused by the database
    book = AlarmBook(before, sessions)  # type: ignore[arg-type]
    failed = next(a for a in book.list() if a.kind == "valve_failed:1")
    book.acknowledge(failed.id, "operator:olga")
    deadline = time.monotonic() + 10
    while book._dirty and time.monotonic() < deadline:  # the unacknowledged group is written behind
        time.sleep(0.05)
    after = SimpleNamespace(alarms=[], audit=None)  # a restarted service: no occurrences in memory
    restarted = AlarmBook(after, sessions)  # type: ignore[arg-type]
    groups = {a.kind: a for a in restarted.list("gh1")}
    assert groups["valve_failed:1"].acknowledged \
        and groups["valve_failed:1"].acknowledged_by == "operator:olga"
    assert groups["valve_failed:1"].count == 2 \
        and groups["valve_failed:1"].last_at == t0 + timedelta(seconds=1)
    assert not groups["ack_timeout"].acknowledged and restarted.unacknowledged("gh1") == 1
    assert restarted.list("ghost") == [], "the row the database refused did not hold up the others"
    after.alarms.append(Alarm("gh1", t0 + timedelta(minutes=5), "valve_failed:1"))
    again = next(a for a in restarted.list("gh1") if a.kind == "valve_failed:1")
    assert again.count == 3 and not again.acknowledged, "a new occurrence after the restart reopens it"
    restarted.flush()
    engine.dispose()


def test_policy_overview_for_admins_with_the_shipped_ensembles_metrics(client: TestClient) -> None:
    from app.api.routes.policy import read_ensemble

    admin = {"Authorization": f"Bearer {_login(client, 'admin')}"}
    r = client.get("/api/policy", headers=admin)
    assert r.status_code == 200, r.text
    body = r.json()
    # Greenhouses registered by earlier tests are controlled at once, on the same expert.
    controlled = sorted(client.app.state.runtime.controllers)  # type: ignore[attr-defined]
    assert "gh1" in controlled
    assert body["in_force"] == [{"policy_version": "expert", "greenhouses": controlled}], \
        "no ensemble: the expert"
    assert body["ensemble"] is None and "no readable ensemble" in body["problem"]
    operator = {"Authorization": f"Bearer {_login(client, 'operator')}"}
    assert client.get("/api/policy", headers=operator).status_code == 403
    shipped = Path(__file__).resolve().parents[3] / "policy" / "shipped"
    ensemble = read_ensemble(shipped)
    manifest = __import__("json").loads((shipped / "ensemble.json").read_text())
    assert ensemble.policy_version == manifest["policy_version"] \
        and len(ensemble.members) == len(manifest["members"])
    first = __import__("json").loads((shipped / "member_0" / "meta.json").read_text())
    assert ensemble.members[0].eval_mean_reward == first["metrics"]["eval"]["mean_reward"]
    assert ensemble.members[0].weights_sha256 == manifest["members"][0]["weights_sha256"]


def test_admin_pages_for_admins_only(client: TestClient) -> None:
    for role, status in (("admin", 200), ("operator", 403)):
        client.cookies.set("greentwin_session", _login(client, role))
        try:
            for page in ("/admin/greenhouses", "/admin/policy"):
                r = client.get(page)
                assert r.status_code == status, (role, page)
                if status == 200:
                    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", r.text) == [], page
                    for src in re.findall(r'src="(/static/[^"]+)"', r.text):
                        assert client.get(src).status_code == 200, src
        finally:
            client.cookies.clear()


def test_policy_overview_shows_the_registry_and_the_last_retraining_run(client: TestClient,
                                                                        tmp_path: Path) -> None:
    import shutil

    from app import registry
    from app.retraining.runs import record_run

    runtime = client.app.state.runtime  # type: ignore[attr-defined]
    shipped = Path(__file__).resolve().parents[3] / "policy" / "shipped"
    folder = tmp_path / "cand"
    shutil.copytree(shipped, folder)
    registry.add_candidate(runtime.sessions, "ppo-api-cand", folder, parent=None, status="refused",
                           metrics={"promote": False, "reason": "stress worse"}, note="gate: stress worse")
    record_run(runtime.sessions, "20261202T030000Z", status="refused",
               summary={"stages": {"gate": {"promote": False}}},
               candidate="ppo-api-cand", reason="stress worse", finished=True)
    admin = {"Authorization": f"Bearer {_login(client, 'admin')}"}
    body = client.get("/api/policy", headers=admin).json()
    [row] = [r for r in body["registry"] if r["version"] == "ppo-api-cand"]
    assert row["status"] == "refused" and row["metrics"]["reason"] == "stress worse"
    last = body["last_retrain"]
    assert (last["id"], last["status"], last["candidate"]) == ("20261202T030000Z", "refused", "ppo-api-cand")
    assert last["summary"]["stages"]["gate"] == {"promote": False}


def test_forecast_reads_and_what_ifs_refused_in_words(client: TestClient) -> None:
    """Before any telemetry the forecast waits; a what-if is checked as a settings change would be."""
    admin = {"Authorization": f"Bearer {_login(client, 'admin')}"}
    # A greenhouse of its own: gh1 has had telemetry from other tests of this module.
    assert client.post("/api/greenhouses", json={"id": "gh-quiet", "zones": 3},
                       headers=admin).status_code == 201
    auth = {"Authorization": f"Bearer {_login(client, 'operator')}"}
    r = client.get("/api/greenhouses/gh-quiet/forecast", headers=auth)
    assert r.status_code == 200 and r.json()["state"] == "waiting" and r.json()["forecast"] is None
    assert r.json()["tracking"]["samples"] == 0 \
        and client.get("/api/greenhouses/nope/forecast", headers=auth).status_code == 404
    url = "/api/greenhouses/gh-quiet/forecast/what-if"
    refused = {"nothing to try": {},
               "zones[7]": {"zones": [{"index": 7, "target_low_vwc": 0.2, "target_high_vwc": 0.3}]},
               "zones[0].target_low_vwc": {"zones": [{"index": 0, "target_low_vwc": 0.3,
                                                      "target_high_vwc": 0.2}]},
               "zones[1].target_high_vwc": {"zones": [{"index": 1, "target_low_vwc": 0.2,
                                                       "target_high_vwc": 0.9}]},
               "lamp_hours_per_day": {"lamp_hours_per_day": 30.0}}
    for words, body in refused.items():
        r = client.post(url, json=body, headers=auth)
        assert r.status_code == 422 and words in str(r.json()["detail"]), (body, r.text)
    assert client.post(url, json={"lamps": "sometimes"}, headers=auth).status_code == 422
    r = client.post(url, json={"lamps": "rule"}, headers=auth)
    assert r.status_code == 409 and "no telemetry" in r.json()["detail"]
