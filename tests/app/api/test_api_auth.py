"""The API's authentication and roles against the real app on SQLite: 401/403, actors, reports, throttling,
audit.

One app serves the whole module (starting one costs more than the tests); tests keep out of each
other's way with their own users and greenhouses. MQTT plays no part here: the bridge points at a
closed port and keeps retrying in the background.
"""

from __future__ import annotations

import csv
import io
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pypdf
import pytest
from fastapi.testclient import TestClient

from app.audit_sink import service_audit_keys
from app.auth.service import ACCESS_CHAIN, AuthConfigError
from app.auth.tokens import TokenSigner
from app.auth.users import create_user, disable_user
from app.cli import db as db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.main import create_app
from app.runtime import Runtime
from app.services.greenhouses import add_greenhouse
from app.services.report_signing import verify_command
from app.web.security import csrf_token
from audit import iter_verified
from audit.signing import load_certificate, verify_pdf
from audit.store import AuditStore

SECRET = "api-test-secret-" + "9f3c1a7e" * 4
METRICS_TOKEN = "api-test-metrics-" + "2e" * 16
SCRAPE = {"Authorization": f"Bearer {METRICS_TOKEN}"}
PW = "correct horse battery"
USERS = {  # name: roles
    "olga": ["operator"], "otto": ["operator"], "anna": ["agronomist"], "adam": ["admin"],
    "dora": ["operator"], "rita": ["operator"], "cora": ["operator"], "lola": ["operator"],
    "multi": ["operator", "agronomist"],
}
PERIOD = {"from": "2026-01-01T00:00:00Z", "to": "2027-01-01T00:00:00+00:00"}


@dataclass
class Api:
    client: TestClient
    settings: Settings
    state_dir: Path
    _tokens: dict[str, str] = field(default_factory=dict)

    def token(self, name: str, password: str = PW) -> str:
        """A fresh login (each costs an Argon2id check)."""
        r = self.client.post("/api/auth/login", json={"username": name, "password": password})
        assert r.status_code == 200, r.text
        self.client.cookies.clear()  # the tests choose per request how they authenticate
        return str(r.json()["access_token"])

    def auth(self, name: str) -> dict[str, str]:
        """Bearer header of one login per user and module (tests that revoke tokens use their own users)."""
        if name not in self._tokens:
            self._tokens[name] = self.token(name)
        return {"Authorization": f"Bearer {self._tokens[name]}"}

    def audit_store(self) -> AuditStore:
        keyring, signer = service_audit_keys(self.settings, self.state_dir)
        return AuditStore(make_engine(self.settings.database_url), keyring, signer)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: pytest.MonkeyPatch) -> Iterator[Api]:
    for name in ("GREENTWIN_REPORT_KEY", "GREENTWIN_REPORT_CERT", "GREENTWIN_ENVIRONMENT",
                 "GREENTWIN_STATE_DIR"):
        monkeypatch_module.delenv(name, raising=False)
    root = tmp_path_factory.mktemp("api")
    url = f"sqlite:///{root / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    for gh, name in (("gh1", "North house"), ("gh2", "South house"), ("gh3", "East house")):
        add_greenhouse(url, gh, zones=3, soil="loam", name=name)
    engine = make_engine(url)
    with make_session_factory(engine)() as session:
        for name, roles in USERS.items():
            create_user(session=session, username=name, password=PW, roles=roles)
    engine.dispose()
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", policy_dir=root / "no-policy",
                        environment="demo", secret_key=SECRET, metrics_token=METRICS_TOKEN)
    with TestClient(create_app(settings, state_dir=root / "state")) as client:
        yield Api(client, settings, root / "state")


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_without_a_token_only_health_answers(api: Api) -> None:
    c = api.client
    for method, path in (("GET", "/api/greenhouses"), ("GET", "/api/greenhouses/gh1/decisions"),
                         ("GET", "/api/greenhouses/gh1/mode-changes"), ("GET", "/api/auth/me"),
                         ("POST", "/api/greenhouses/gh1/estop"), ("POST", "/api/greenhouses/nope/estop"),
                         ("POST", "/api/greenhouses"), ("GET", "/api/greenhouses/gh1/report.pdf"),
                         ("GET", "/api/greenhouses/gh1/report.csv")):
        r = c.request(method, path, json={"reason": "no token"} if method == "POST" else None)
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["www-authenticate"] == "Bearer" and "POST /api/auth/login" in r.json()["detail"]
    r = c.get("/api/greenhouses", headers={"Authorization": "Bearer not-a-token"})
    assert r.status_code == 401 and r.json() == {"detail": "invalid token"}
    assert c.get("/healthz").status_code == 200
    assert c.get("/readyz").status_code == 503  # open, and honest: the broker is unreachable here
    r = c.get("/metrics")  # Prometheus's token, not a user's
    assert r.status_code == 401 and "GREENTWIN_METRICS_TOKEN" in r.json()["detail"]
    assert "greentwin_login_failures_total" in c.get("/metrics", headers=SCRAPE).text


def test_wrong_role_is_403_and_names_the_role_needed(api: Api) -> None:
    c = api.client
    agronomist, operator = api.auth("anna"), api.auth("olga")
    assert [g["id"] for g in c.get("/api/greenhouses", headers=agronomist).json()] == ["gh1", "gh2", "gh3"]
    r = c.post("/api/greenhouses/gh1/estop", json={"reason": "not mine to press"}, headers=agronomist)
    assert r.status_code == 403 and r.json()["detail"] == \
        "forbidden: needs role operator (user 'anna' has agronomist)"
    assert c.post("/api/greenhouses/gh1/mode", json={"mode": "manual", "reason": "try"},
                  headers=agronomist).status_code == 403
    for fmt in ("pdf", "csv"):
        r = c.get(f"/api/greenhouses/gh1/report.{fmt}", params=PERIOD, headers=operator)
        assert r.status_code == 403 and "agronomist or admin" in r.json()["detail"]
    new_gh = {"id": "gh9", "zones": 2, "soil": "clay"}
    for who in (operator, agronomist):
        assert c.post("/api/greenhouses", json=new_gh, headers=who).status_code == 403
    # The agronomist's and admin's access passes the role check (then the unknown greenhouse is 404).
    assert c.get("/api/greenhouses/nope/report.pdf", params=PERIOD,
                 headers=api.auth("adam")).status_code == 404
    assert c.get("/api/greenhouses/nope/report.csv", params=PERIOD,
                 headers=api.auth("adam")).status_code == 404


def test_admin_registers_greenhouses(api: Api) -> None:
    admin = api.auth("adam")
    r = api.client.post("/api/greenhouses", json={"id": "gh9", "zones": 2, "soil": "clay", "name": "Annex"},
                        headers=admin)
    assert r.status_code == 201 and r.json() == {"id": "gh9", "name": "Annex", "zones": 2, "soil": "clay",
                                                 "controlled": True}  # picked up at once: no restart
    assert api.client.post("/api/greenhouses", json={"id": "gh9"}, headers=admin).status_code == 409
    r = api.client.post("/api/greenhouses", json={"id": "Bad Id"}, headers=admin)
    assert r.status_code == 422 and "invalid greenhouse id" in r.json()["detail"]


def test_operator_actions_record_the_logged_in_user_not_the_body(api: Api) -> None:
    c, operator = api.client, api.auth("otto")
    r = c.post("/api/greenhouses/gh2/estop", json={"actor": "mallory", "reason": "leak at zone 3"},
               headers=operator)
    assert r.status_code == 200 and (r.json()["actor"], r.json()["to_mode"]) == ("operator:otto", "estop")
    assert c.post("/api/greenhouses/gh2/estop", json={"reason": ""}, headers=operator).status_code == 422
    r = c.post("/api/greenhouses/gh2/estop/reset", json={"reason": "leak fixed", "mode": "auto"},
               headers=operator)
    assert r.status_code == 200 and r.json()["actor"] == "operator:otto"
    r = c.post("/api/greenhouses/gh2/estop/reset", json={"reason": "again", "mode": "estop"},
               headers=operator)
    assert r.status_code == 422  # a reset leaves for manual or auto only
    multi = api.auth("multi")
    r = c.post("/api/greenhouses/gh2/mode", headers=multi,
               json={"mode": "manual", "reason": "irrigate by hand", "manual_action": [1, 0, 0, 40, 0]})
    assert r.status_code == 200 and r.json()["actor"] == "operator:multi"
    changes = c.get("/api/greenhouses/gh2/mode-changes", headers=api.auth("anna")).json()
    assert [(m["from_mode"], m["to_mode"], m["actor"]) for m in changes] == [
        ("auto", "estop", "operator:otto"), ("estop", "auto", "operator:otto"),
        ("auto", "manual", "operator:multi")]

    # The same actors are sealed into gh2's audit chain, which verifies.
    runtime = c.app.state.runtime  # type: ignore[attr-defined]
    runtime.audit.flush()
    store = api.audit_store()
    [result] = store.verify("gh2")
    assert result.ok, result.reason
    assert [(r.kind, r.actor) for r in store.iter_records("gh2")] == [
        ("estop", "operator:otto"), ("estop_reset", "operator:otto"), ("mode_change", "operator:multi")]


def test_operator_actions_through_a_replica_not_holding_the_greenhouse_answer_409(api: Api) -> None:
    """deploy/README.md: a load balancer retries a 409, not a 500; the e-stop is the one that matters most."""
    c, operator = api.client, api.auth("olga")
    runtime = c.app.state.runtime  # type: ignore[attr-defined]
    held_before = runtime.dispatch.fence
    runtime.dispatch.fence = {"gh1": 1, "gh2": 1}.get  # another replica holds gh3
    try:
        for path, body in (("mode", {"mode": "manual", "reason": "by hand",
                                     "manual_action": [0, 0, 0, 0, 0]}),
                           ("estop", {"reason": "leak at zone 1"}),
                           ("estop/reset", {"reason": "leak fixed"})):
            r = c.post(f"/api/greenhouses/gh3/{path}", json=body, headers=operator)
            assert r.status_code == 409, (path, r.status_code, r.text)
            assert "controlled by another replica; retry" in r.json()["detail"], path
    finally:
        runtime.dispatch.fence = held_before
    ctl = runtime.controllers["gh3"]
    assert (ctl.mode, ctl.estop_latched) == ("auto", False), "nothing was latched by the replica that refused"


def test_privileged_logins_are_sealed_into_the_audit_chain(api: Api) -> None:
    store = api.audit_store()
    before = [r.seq for r in store.iter_records(ACCESS_CHAIN)]
    for name in ("olga", "adam", "anna", "multi"):
        api.token(name)
    added = [r for r in store.iter_records(ACCESS_CHAIN) if r.seq > max(before, default=0)]
    assert [(r.kind, r.actor) for r in added] == [("login", "olga"), ("login", "adam"), ("login", "multi")]
    [result] = store.verify(ACCESS_CHAIN)
    assert result.ok and result.records_checked >= 3, result.reason
    payloads = [e.payload for e in iter_verified(store.iter_records(ACCESS_CHAIN), store.keyring)]
    assert payloads[-1] == {"username": "multi", "roles": ["agronomist", "operator"], "client": "testclient"}


def test_agronomist_downloads_a_signed_report_naming_the_greenhouse(api: Api) -> None:
    c, agronomist = api.client, api.auth("anna")
    r = c.get("/api/greenhouses/gh1/report.pdf", params=PERIOD, headers=agronomist)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/pdf"
    assert r.headers["content-disposition"] == 'attachment; filename="gh1-20260101T0000Z-20270101T0000Z.pdf"'
    cert = load_certificate(api.state_dir / "report-signing" / "report-cert.pem")
    outcome = verify_pdf(r.content, cert)
    assert outcome.ok, outcome.reason
    text = "\n".join(p.extract_text() for p in pypdf.PdfReader(io.BytesIO(r.content)).pages)
    assert "North house (gh1)" in text and "anna via the greentwin API" in text
    assert not verify_pdf(r.content[:-200] + b"0" * 200, cert).ok
    # The first page names the line that checks it: the dashboard's, with the service's state directory.
    assert verify_command(None, api.state_dir) in " ".join(text.split())


def test_the_report_is_in_the_readers_language_unless_the_request_names_one(api: Api) -> None:
    """The PDF follows the caller's language (PATCH /api/me), ``language`` overrides it, and a Chinese report
    signs and verifies as an English one does; the CSV keeps its machine names and English words."""
    c, anna = api.client, api.auth("anna")

    def words(params: dict[str, str]) -> tuple[str, bytes]:
        r = c.get("/api/greenhouses/gh1/report.pdf", params={**PERIOD, **params}, headers=anna)
        assert r.status_code == 200, r.text
        pages = pypdf.PdfReader(io.BytesIO(r.content)).pages
        return "".join("".join(p.extract_text() for p in pages).split()), r.content

    assert "温室报告" not in words({})[0] and "Greenhousereport" in words({})[0]
    zh, pdf = words({"language": "zh-Hans"})
    assert "温室报告：Northhouse" in zh and "审计记录与签名" in zh and "Greenhousereport" not in zh
    assert verify_pdf(pdf, load_certificate(api.state_dir / "report-signing" / "report-cert.pem")).ok
    assert c.patch("/api/me", json={"language": "zh-Hans"}, headers=anna).status_code == 200
    try:
        assert "温室报告：Northhouse" in words({})[0]
        assert "Greenhousereport" in words({"language": "en"})[0]
        csv_text = c.get("/api/greenhouses/gh1/report.csv", params=PERIOD, headers=anna).text
        assert csv_text.startswith("section,item,zone,zone_name,start,value,unit") and "温室" not in csv_text
    finally:
        assert c.patch("/api/me", json={"language": "en"}, headers=anna).status_code == 200
    assert c.get("/api/greenhouses/gh1/report.pdf", params={**PERIOD, "language": "fr"},
                 headers=anna).status_code == 422


def test_agronomist_exports_the_reports_summary_as_csv(api: Api) -> None:
    """The same collected data as the PDF, one long table: the period, the money, each zone numbered
    from 1."""
    r = api.client.get("/api/greenhouses/gh1/report.csv", params=PERIOD, headers=api.auth("anna"))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert r.headers["content-disposition"] == 'attachment; filename="gh1-20260101T0000Z-20270101T0000Z.csv"'
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert list(rows[0]) == ["section", "item", "zone", "zone_name", "start", "value", "unit"]
    period = {row["item"]: row["value"] for row in rows if row["section"] == "period"}
    assert period["greenhouse"] == "gh1" and period["greenhouse_name"] == "North house"
    assert period["from"] == "2026-01-01T00:00:00+00:00" and period["to"] == "2027-01-01T00:00:00+00:00"
    assert {row["zone"] for row in rows if row["section"] == "zone"} == {"1", "2", "3"}
    bands = {float(row["value"]) for row in rows if row["section"] == "zone" and row["item"] == "band_low"}
    assert bands == {19.5} and {row["unit"] for row in rows if row["item"] == "band_low"} == {"% VWC"}
    assert {row["item"] for row in rows if row["section"] == "money"} >= {"yield", "revenue", "profit"}
    bad = api.client.get("/api/greenhouses/gh1/report.csv",
                         params={"from": "2026-01-01T00:00:00", "to": PERIOD["to"]},
                         headers=api.auth("anna"))
    assert bad.status_code == 422 and "needs a UTC offset" in bad.json()["detail"]


@pytest.mark.parametrize("params, detail", [
    ({"from": "2026-02-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "'to' must be after 'from'"),
    ({"from": "2025-01-01T00:00:00Z", "to": "2026-03-01T00:00:00Z"}, "longer than 400 days"),
    ({"from": "2026-01-01T00:00:00", "to": "2026-02-01T00:00:00Z"}, "needs a UTC offset"),
    ({"from": "2026-01-01T00:00:00 02:00", "to": "2026-02-01T00:00:00Z"}, "write it as %2B"),
    ({"from": "last tuesday", "to": "2026-02-01T00:00:00Z"}, "is not ISO-8601"),
])
def test_report_period_is_validated(api: Api, params: dict[str, str], detail: str) -> None:
    r = api.client.get("/api/greenhouses/gh1/report.pdf", params=params, headers=api.auth("anna"))
    assert r.status_code == 422 and detail in r.json()["detail"]


def test_failed_logins_are_throttled_per_username_and_address(api: Api) -> None:
    c = api.client
    metric = 'greentwin_login_failures_total{reason="%s"}'

    def count(reason: str) -> float:
        line = next((x for x in c.get("/metrics", headers=SCRAPE).text.splitlines()
                     if x.startswith(metric % reason)), None)
        return float(line.split()[-1]) if line else 0.0

    bad0, limited0 = count("bad_credentials"), count("rate_limited")
    limit = api.settings.login_max_failures
    for _ in range(limit):
        r = c.post("/api/auth/login", json={"username": "rita", "password": "wrong password!"})
        assert r.status_code == 401 and r.json()["detail"] == "invalid username or password"
    r = c.post("/api/auth/login", json={"username": "RITA", "password": PW})  # even the right password
    assert r.status_code == 429 and "too many failed logins" in r.json()["detail"]
    assert 0 < int(r.headers["retry-after"]) <= api.settings.login_window_s + 1
    assert (count("bad_credentials") - bad0, count("rate_limited") - limited0) == (limit, 1)
    # Another address, or another user from this one, is not held back.
    other = TestClient(c.app, client=("10.1.2.3", 40000))
    assert other.post("/api/auth/login", json={"username": "rita", "password": PW}).status_code == 200
    assert c.post("/api/auth/login", json={"username": "cora", "password": PW}).status_code == 200
    c.cookies.clear()


def test_disabled_users_cannot_log_in_and_their_tokens_stop_working(api: Api) -> None:
    c = api.client
    headers = {"Authorization": f"Bearer {api.token('dora')}"}
    assert c.get("/api/auth/me", headers=headers).json()["username"] == "dora"
    engine = make_engine(api.settings.database_url)
    with make_session_factory(engine)() as session:
        disable_user(session=session, username="dora")
    engine.dispose()
    r = c.get("/api/auth/me", headers=headers)
    assert r.status_code == 401 and r.json()["detail"] == "account disabled"
    r = c.post("/api/auth/login", json={"username": "dora", "password": PW})
    assert r.status_code == 403 and r.json()["detail"] == "account disabled" and "set-cookie" not in r.headers


def test_expired_and_foreign_tokens_are_refused(api: Api) -> None:
    c = api.client
    ttl = api.settings.access_token_ttl_s
    user_id = c.app.state.auth.authenticate(api.auth("olga")["Authorization"][7:]).user_id  # type: ignore[attr-defined]
    old, _ = TokenSigner(SECRET, ttl, clock=lambda: time.time() - 2 * ttl).issue(
        user_id=user_id, username="olga", epoch=0)
    r = c.get("/api/auth/me", headers={"Authorization": f"Bearer {old}"})
    assert r.status_code == 401 and r.json()["detail"] == "token expired: log in again"
    forged, _ = TokenSigner("some other secret " * 3, ttl).issue(user_id=user_id, username="olga", epoch=0)
    r = c.get("/api/auth/me", headers={"Authorization": f"Bearer {forged}"})
    assert r.status_code == 401 and r.json()["detail"] == "invalid token"


def test_browser_session_cookie_and_logout(api: Api) -> None:
    c = api.client
    r = c.post("/api/auth/login", json={"username": "lola", "password": PW})
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("greentwin_session=" + r.json()["access_token"])
    assert all(flag in cookie for flag in ("HttpOnly", "SameSite=strict", "Path=/", "Max-Age=28800"))
    token = r.json()["access_token"]
    me = c.get("/api/auth/me")  # the cookie alone authenticates
    assert me.status_code == 200 and me.json()["roles"] == ["operator"]
    r = c.post("/api/auth/logout")  # a cookie session's write needs the page's CSRF token
    assert r.status_code == 403 and "CSRF" in r.json()["detail"]
    r = c.post("/api/auth/logout", headers={"X-CSRF-Token": csrf_token(token)})
    assert r.status_code == 204 and 'greentwin_session=""' in r.headers["set-cookie"]
    assert c.get("/api/auth/me").status_code == 401
    r = c.get("/api/auth/me", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 401 and r.json()["detail"] == "session ended: log in again"


def test_no_password_reaches_the_logs(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    secret_typed = "hunter2-but-longer"
    with caplog.at_level(logging.DEBUG):
        api.client.post("/api/auth/login", json={"username": "cora", "password": secret_typed})
        api.client.post("/api/auth/login", json={"username": secret_typed, "password": secret_typed})
        api.token("cora")
    assert caplog.records and not any(secret_typed in r.getMessage() or PW in r.getMessage()
                                      for r in caplog.records)


def test_unknown_greenhouse_is_404_after_auth(api: Api) -> None:
    operator = api.auth("olga")
    assert api.client.post("/api/greenhouses/nope/estop", json={"reason": "abc"},
                           headers=operator).status_code == 404
    r = api.client.get("/api/greenhouses/nope/report.pdf", params=PERIOD, headers=api.auth("anna"))
    assert r.status_code == 404 and r.json()["detail"] == "unknown greenhouse 'nope'"



def test_service_refuses_to_start_without_a_secret_outside_demo(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", environment="dev", secret_key=None)
    engine = make_engine(url)
    runtime = Runtime(settings, make_session_factory(engine), state_dir=tmp_path / "state")
    with pytest.raises(AuthConfigError, match="GREENTWIN_SECRET_KEY"), \
            TestClient(create_app(settings, runtime=runtime)):
        pytest.fail("the service started without a token secret")
    engine.dispose()
