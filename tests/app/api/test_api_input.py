"""Control characters at the API's door, on PostgreSQL (which refuses NUL in text, unlike SQLite).

Every path and query parameter of every route, and every free string in a request body, gets a
NUL byte; every field of every JSON body gets a number JSON has no spelling for (Python's reader
takes NaN and Infinity, and 1e400 overflows to infinity): each answer is a 4xx naming the
problem, never a 500, and nothing is logged with a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from pydantic import BaseModel

from app.auth.roles import ROLES
from app.auth.users import create_user
from app.cli import db as db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.main import create_app
from app.services.greenhouses import add_greenhouse

try:
    from fastapi.routing import iter_route_contexts
except ImportError:  # FastAPI before 0.165: app.routes lists every route
    iter_route_contexts = None

PW = "correct horse battery"
NUL = "a\x00b"
VALID = {"gh": "gh1", "alarm_id": "0" * 16, "username": "root"}
BODY_STRINGS: list[tuple[str, str, dict[str, Any]]] = [  # (method, path, body with a NUL in one string)
    ("POST", "/api/auth/login", {"username": "ro\x00ot", "password": PW}),
    ("POST", "/api/users", {"username": "new\x00user", "roles": ["operator"]}),
    ("POST", "/api/greenhouses", {"id": "gh\x00x", "zones": 2}),
    ("POST", "/api/greenhouses", {"id": "ghx", "zones": 2, "name": "North\x00house"}),
    ("POST", "/api/greenhouses/gh1/mode", {"mode": "manual", "reason": "by \x00hand"}),
    ("POST", "/api/greenhouses/gh1/estop", {"reason": "leak\x00"}),
    ("POST", "/api/greenhouses/gh1/estop/reset", {"reason": "fixed\x00"}),
]
NON_FINITE = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity", "1e400": "Infinity"}
"""Spelled in a body: echoed in the 422 as."""
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[TestClient]:
    from tests.conftest import temporary_pg_database

    root = tmp_path_factory.mktemp("input")
    with temporary_pg_database(pg_url, "greentwin_input") as url:
        db_cli.upgrade(url)
        add_greenhouse(url, "gh1", zones=2, soil="loam")
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            create_user(session=session, username="root", password=PW, roles=list(ROLES))
        engine.dispose()
        settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", policy_dir=root / "no-policy",
                            environment="demo", secret_key="input-test-secret-" + "3c" * 16)
        with TestClient(create_app(settings, state_dir=root / "state"), raise_server_exceptions=False) as c:
            yield c


@pytest.fixture(scope="module")
def auth(client: TestClient) -> dict[str, str]:
    r = client.post("/api/auth/login", json={"username": "root", "password": PW})
    client.cookies.clear()
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


def _routes(client: TestClient) -> list[APIRoute]:
    routes = client.app.routes  # type: ignore[attr-defined]
    flat = [c.route for c in iter_route_contexts(routes)] if iter_route_contexts is not None else routes
    return [r for r in flat if isinstance(r, APIRoute) and "/stream" not in r.path]  # the stream never ends


def _params(dependant: Any, kind: str) -> list[str]:
    """Names (aliases) of a route's ``path_params`` or ``query_params``, its dependencies' included."""
    names = [p.alias for p in getattr(dependant, kind)]
    for sub in dependant.dependencies:
        names += [n for n in _params(sub, kind) if n not in names]
    return names


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]


def test_a_nul_in_any_path_parameter_is_refused_with_400(client: TestClient, auth: dict[str, str],
                                                         caplog: pytest.LogCaptureFixture) -> None:
    tried = 0
    for route in _routes(client):
        for name in _params(route.dependant, "path_params"):
            url = route.path_format.format(**{**VALID, name: NUL.replace("\x00", "%00")})
            for method in sorted(route.methods):
                r = client.request(method, url, headers=auth)
                assert r.status_code == 400, (method, route.path, name, r.status_code, r.text)
                assert "control character '\\x00'" in r.json()["detail"] and "path" in r.json()["detail"]
                tried += 1
    assert tried >= 15, "the routes with path parameters were found"
    _no_tracebacks(caplog)


def test_a_nul_in_any_query_parameter_is_refused_with_400(client: TestClient, auth: dict[str, str],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    tried = 0
    for route in _routes(client):
        url = route.path_format.format(**VALID)
        for name in _params(route.dependant, "query_params"):
            for method in sorted(route.methods):
                r = client.request(method, url, params={name: NUL}, headers=auth)
                assert r.status_code == 400, (method, route.path, name, r.status_code, r.text)
                assert f"query parameter {name!r}" in r.json()["detail"]
                tried += 1
    r = client.get("/api/stream", params={"gh": NUL}, headers=auth)  # the live stream's filter, too
    assert r.status_code == 400
    assert tried >= 5, "the routes with query parameters were found"
    _no_tracebacks(caplog)


@pytest.mark.parametrize("method, path, body", BODY_STRINGS)
def test_a_nul_in_a_body_string_is_refused_with_422(client: TestClient, auth: dict[str, str], method: str,
                                                    path: str, body: dict[str, Any],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    r = client.request(method, path, json=body, headers=auth)
    assert r.status_code == 422, (method, path, r.status_code, r.text)
    _no_tracebacks(caplog)


def _body_models(client: TestClient) -> list[tuple[str, str, type[BaseModel]]]:
    """(method, path with valid parameters, body model) of every route that reads a JSON body."""
    return [(method, route.path_format.format(**VALID), route.body_field.field_info.annotation)
            for route in _routes(client) if route.body_field is not None for method in sorted(route.methods)]


@pytest.mark.parametrize("spelled", sorted(NON_FINITE))
def test_a_non_finite_number_in_any_body_field_is_refused_with_422_naming_the_field(
        client: TestClient, auth: dict[str, str], spelled: str, caplog: pytest.LogCaptureFixture) -> None:
    tried = 0
    for method, url, model in _body_models(client):
        for field in model.model_fields:
            r = client.request(method, url, content=f'{{"{field}": {spelled}}}', headers={**auth, **JSON})
            assert r.status_code == 422, (method, url, field, r.status_code, r.text)
            [error] = [e for e in r.json()["detail"] if e["loc"] == ["body", field]]
            assert error["msg"] and error["input"] == NON_FINITE[spelled], (url, field, error)
            tried += 1
        r = client.request(method, url, content=spelled, headers={**auth, **JSON})
        assert r.status_code == 422 and r.json()["detail"][0]["input"] == NON_FINITE[spelled], (url, r.text)
    assert tried >= 15, "the routes with JSON bodies were found"
    r = client.post("/api/auth/login", content=f'{{"username": "root", "password": {spelled}}}', headers=JSON)
    assert r.status_code == 422, "no token needed to ask"
    r = client.post("/api/greenhouses/gh1/mode", headers={**auth, **JSON},
                    content=f'{{"mode": "manual", "reason": "by hand", '
                    f'"manual_action": [0, {spelled}, 0, 0]}}')
    assert r.status_code == 422
    assert [(e["loc"], e["msg"]) for e in r.json()["detail"]] == [
        (["body", "manual_action", 1], "Input should be a finite number")]
    _no_tracebacks(caplog)


@pytest.mark.parametrize("path, body", [
    ("/api/greenhouses/gh1/mode", {"mode": "auto", "reason": "   "}),
    ("/api/greenhouses/gh1/mode", {"mode": "auto", "reason": " \t\n ok \n"}),
    ("/api/greenhouses/gh1/estop", {"reason": "\u00a0\u00a0\u00a0"}),
    ("/api/greenhouses/gh1/estop/reset", {"reason": "    "}),
])
def test_a_reason_needs_three_characters_besides_blanks(client: TestClient, auth: dict[str, str], path: str,
                                                        body: dict[str, Any]) -> None:
    """The dashboard asks for as much (trimmed); the reason is what the audit trail keeps of the why."""
    r = client.post(path, json=body, headers=auth)
    assert r.status_code == 422, (path, body, r.text)
    [error] = r.json()["detail"]
    assert error["loc"] == ["body", "reason"] and "at least 3 characters besides blanks" in error["msg"]
    assert _greenhouse(client, auth) == ("auto", False), "nothing changed"


def test_a_manual_action_is_numbers_not_booleans_or_strings(client: TestClient, auth: dict[str, str]) -> None:
    manual = {"mode": "manual", "reason": "by hand"}
    for action, where in (([True, 0, 0, 0], ["body", "manual_action", 0]),
                          ([0, 0, "40", 0], ["body", "manual_action", 2]),
                          ([0, 0, 0, None], ["body", "manual_action", 3])):
        r = client.post("/api/greenhouses/gh1/mode", json={**manual, "manual_action": action}, headers=auth)
        assert r.status_code == 422 and [e["loc"] for e in r.json()["detail"]] == [where], (action, r.text)
    assert _greenhouse(client, auth) == ("auto", False), "nothing changed"


def test_a_manual_action_of_the_wrong_length_is_refused_with_422_naming_the_length(
        client: TestClient, auth: dict[str, str]) -> None:
    """One value per actuator: 2 valves, pump %, light % for the 2-zone gh1. The body is wrong, nothing
    conflicts."""
    manual = {"mode": "manual", "reason": "by hand"}
    for action in ([0, 0, 0], [0, 0, 0, 0, 0], [], None):
        r = client.post("/api/greenhouses/gh1/mode", json={**manual, "manual_action": action}, headers=auth)
        assert r.status_code == 422, (action, r.status_code, r.text)
        assert r.json()["detail"] == ("manual mode needs a manual_action of 4 values for gh1 (2 valves, "
                                      "pump %, light %), got "
                                      f"{0 if action is None else len(action)}")
    assert _greenhouse(client, auth) == ("auto", False), "nothing changed"
    r = client.post("/api/greenhouses/gh1/mode", json={**manual, "manual_action": [1, 0, 40, 0.0]},
                    headers=auth)
    assert r.status_code == 200, r.text
    r = client.post("/api/greenhouses/gh1/mode", json={"mode": "auto", "reason": "done by hand"},
                    headers=auth)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("body, field", [
    ({"id": "gh-cap1", "daily_water_cap_l": 1e308}, "daily_water_cap_l"),
    ({"id": "gh-cap2", "daily_water_cap_l": 100_000.5}, "daily_water_cap_l"),
    ({"id": "gh-cap3", "daily_water_cap_l": True}, "daily_water_cap_l"),
    ({"id": "gh-cap4", "zones": True}, "zones"),
])
def test_a_registration_refuses_a_water_cap_that_caps_nothing_and_booleans_for_numbers(
        client: TestClient, auth: dict[str, str], body: dict[str, Any], field: str) -> None:
    """The daily cap is a safety limit: at most 100,000 L a zone, and a number."""
    r = client.post("/api/greenhouses", json=body, headers=auth)
    assert r.status_code == 422 and [e["loc"] for e in r.json()["detail"]] == [["body", field]], r.text
    r = client.get("/api/greenhouses/{}/mode-changes".format(body["id"]), headers=auth)
    assert r.status_code == 404, "not registered"


def _greenhouse(client: TestClient, auth: dict[str, str]) -> tuple[str, bool]:
    [gh1] = [g for g in client.get("/api/greenhouses", headers=auth).json() if g["id"] == "gh1"]
    return gh1["mode"], gh1["estop_latched"]


def test_pages_and_static_files_refuse_a_nul_too(client: TestClient) -> None:
    for url in ("/greenhouses/gh%001", "/static/app%00.js", "/login?next=/%00"):
        r = client.get(url)
        assert r.status_code == 400, (url, r.status_code)
        assert r.headers["x-content-type-options"] == "nosniff", "the refusal carries the security headers"
