"""Alarm operations: episodes that open and clear, acknowledging with a comment, shelving with a reason and an
expiry, the filtered history, thresholds and notification preferences, through the book and the REST API.

The book is driven by a clock of its own where time matters; the API tests run one service in-process with a
real webhook receiver, and an e-stop through the API raises the watched ``estop_latched`` alarm, notifies and
clears it again."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from app.alarms.conditions import ConditionTracker, Evaluation, Reading
from app.alarms.notify import Notifier, Recipient
from app.alarms.senders import SIGNATURE_HEADER, WebhookSender, verify
from app.api.alarm_book import AlarmBook, NotShelved
from app.auth.roles import ROLES
from app.auth.users import create_user
from app.cli import db as db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.main import create_app
from app.runtime import Alarm
from app.services.greenhouses import add_greenhouse
from tests.app.alarms.alarm_receivers import Hook
from tests.app.procs import wait_until

SECRET = "alarm-ops-secret-" + "4c2e9a1b" * 4
HOOK_SECRET = "hook shared secret"
PW = "alarm operations password"
T0 = datetime(2026, 6, 1, 12, tzinfo=UTC)


@pytest.fixture(scope="module")
def hook() -> Iterator[Hook]:
    h = Hook()
    yield h
    h.close()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def book_setup(tmp_path: Path, hook: Hook) -> Iterator[tuple[AlarmBook, SimpleNamespace, Clock]]:
    url = f"sqlite:///{tmp_path / 'book.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=3, soil="loam")
    engine = make_engine(url)
    tracker = ConditionTracker()
    runtime = SimpleNamespace(alarms=[], audit=None,
                              housekeeping=SimpleNamespace(process_alarms=SimpleNamespace(tracker=tracker)))
    notifier = Notifier(lambda: [Recipient("olga", "info", webhook_url=hook.url)],
                        webhook=WebhookSender(HOOK_SECRET.encode(), retries=0), smtp=None, repeat_s=0.0)
    notifier.start()
    clock = Clock()
    hook.requests.clear()
    yield AlarmBook(runtime, make_session_factory(engine), notifier, clock=clock), runtime, clock  # type: ignore[arg-type]
    notifier.stop()
    engine.dispose()


def _sent(hook: Hook, notifier: Notifier) -> list[dict[str, object]]:
    assert notifier.wait_idle()
    return [json.loads(body) for _, body in hook.requests]


def test_event_alarms_open_an_episode_and_clear_after_they_go_quiet(book_setup, hook: Hook) -> None:
    book, runtime, clock = book_setup
    runtime.alarms.append(Alarm("gh1", T0, "ack_timeout"))
    [a] = book.list()
    assert a.active and a.title == "Command not acknowledged" and a.action.startswith("Check the box")
    runtime.alarms.append(Alarm("gh1", T0 + timedelta(minutes=1), "ack_timeout"))
    book.list()
    assert [n["kind"] for n in _sent(hook, book.notifier)] == ["ack_timeout"], "one notice per episode"
    clock.now = T0 + timedelta(minutes=12)
    book.sweep()
    assert not book.list()[0].active
    runtime.alarms.append(Alarm("gh1", clock.now, "ack_timeout"))
    book.sweep()
    [second, first] = book.history(gh="gh1")
    assert first.cleared_at == T0 + timedelta(minutes=11) and first.count == 2
    assert second.cleared_at is None and second.count == 1
    assert [e.raised_at for e in book.history(state="cleared")] == [T0]
    assert len(_sent(hook, book.notifier)) == 2, "a new episode notifies again"


def test_watched_alarms_are_active_while_their_condition_holds(book_setup) -> None:
    book, runtime, clock = book_setup
    tracker = runtime.housekeeping.process_alarms.tracker
    zone = frozenset({"zone_dry"})
    assert tracker.apply("gh1", Evaluation([Reading("zone_dry:1", T0)], zone), T0) == (["zone_dry:1"], [])
    runtime.alarms.append(Alarm("gh1", T0, "zone_dry:1"))  # the watch raises through the dispatcher
    clock.now = T0 + timedelta(hours=2)
    book.sweep()
    [a] = book.list(active=True)
    assert a.kind == "zone_dry:1" and a.description.startswith("The moisture estimate of zone 2")
    tracker.apply("gh1", Evaluation([], zone), T0 + timedelta(hours=1, minutes=59))
    book.sweep()
    assert book.list(active=True) == []
    [ep] = book.history(kind="zone_dry")
    assert ep.cleared_at == T0 + timedelta(hours=1, minutes=59) and ep.severity == "critical"
    assert book.history(kind="zone_dry:2") == [] and book.history(kind="zone") == [], "a code, not a prefix"


def test_a_shelved_alarm_is_hidden_and_silent_until_its_expiry(book_setup, hook: Hook) -> None:
    book, runtime, clock = book_setup
    runtime.alarms.append(Alarm("gh1", T0, "valve_failed:0"))
    key = book.list()[0].id
    _sent(hook, book.notifier)
    hook.requests.clear()
    shelved = book.shelve(key, "operator:olga", "valve replaced tomorrow", 60)
    assert shelved.shelved and shelved.shelved_until == T0 + timedelta(hours=1)
    assert book.list() == [] and [a.id for a in book.list(shelved=True)] == [key]
    assert book.unacknowledged("gh1") == 0
    clock.now = T0 + timedelta(minutes=50)
    runtime.alarms.append(Alarm("gh1", clock.now, "valve_failed:0"))
    book.sweep()
    assert book.list() == [] and _sent(hook, book.notifier) == [], "no notice while shelved"
    clock.now = T0 + timedelta(minutes=61)
    runtime.alarms.append(Alarm("gh1", clock.now, "valve_failed:0"))
    book.sweep()
    [back] = book.list()
    assert not back.shelved and back.active and book.unacknowledged("gh1") == 1
    assert [(n["kind"], n["event"]) for n in _sent(hook, book.notifier)] == [("valve_failed:0", "unshelved")]
    with pytest.raises(NotShelved):
        book.unshelve(key, "operator:olga", "not shelved")
    actions = book.actions(key)
    assert [(x.action, x.actor, x.comment) for x in actions] == [
        ("shelve", "operator:olga", "valve replaced tomorrow")]


def test_an_acknowledgement_with_a_comment_covers_every_episode_so_far(book_setup) -> None:
    book, runtime, clock = book_setup
    runtime.alarms.append(Alarm("gh1", T0, "ack_timeout"))
    clock.now = T0 + timedelta(minutes=20)
    book.sweep()
    runtime.alarms.append(Alarm("gh1", clock.now, "ack_timeout"))
    key = book.list()[0].id
    ack = book.acknowledge(key, "operator:olga", "broker restarted")
    assert ack.comment == "broker restarted" and book.list()[0].ack_comment == "broker restarted"
    assert [(e.acknowledged_by, e.ack_comment) for e in book.history()] == [
        ("operator:olga", "broker restarted")] * 2
    assert book.history(state="unacknowledged") == []
    assert book.acknowledge(key, "operator:adam", "again") == ack, "standing acknowledgement, nothing new"
    assert [x.action for x in book.actions(key)] == ["ack"]


# ---- the REST API on a running service -------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, hook: Hook) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("alarm-ops")
    url = f"sqlite:///{root / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=3, soil="loam")
    engine = make_engine(url)
    with make_session_factory(engine)() as session:
        for role in ROLES:
            create_user(session=session, username=role, password=PW, roles=[role])
    engine.dispose()
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", policy_dir=root / "no-policy",
                        environment="demo", secret_key=SECRET, notify_webhook_url=hook.url,
                        notify_webhook_secret=HOOK_SECRET, notify_retries=0)
    with TestClient(create_app(settings, state_dir=root / "state")) as c:
        c.app.state.runtime.housekeeping.process_alarms.every_s = 0.0  # type: ignore[attr-defined]
        yield c


def _auth(c: TestClient, user: str) -> dict[str, str]:
    r = c.post("/api/auth/login", json={"username": user, "password": PW})
    assert r.status_code == 200, r.text
    c.cookies.clear()
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


def _sealed(c: TestClient, kind: str) -> list[object]:
    store = c.app.state.runtime.audit.store  # type: ignore[attr-defined]
    return [e for e in store.tail_entries("_access", 1000) if e.kind == kind]


def test_acknowledge_shelve_and_unshelve_through_the_api_are_sealed_with_who_and_why(
        client: TestClient) -> None:
    op = _auth(client, "operator")
    client.app.state.runtime.dispatch.alarm("gh1", "command_rejected")  # type: ignore[attr-defined]
    [a] = [x for x in client.get("/api/alarms", headers=op).json() if x["kind"] == "command_rejected"]
    assert (a["severity"], a["title"], a["active"]) == ("critical", "Command rejected", True)
    key = a["id"]
    r = client.post(f"/api/alarms/{key}/ack", json={"comment": "box reconfigured"}, headers=op)
    assert r.status_code == 200 and r.json()["comment"] == "box reconfigured", r.text
    [seal] = _sealed(client, "alarm_ack")[-1:]
    assert seal.actor == "operator:operator" and seal.payload["comment"] == "box reconfigured"  # type: ignore[attr-defined]
    for body, why in (({"reason": "x", "minutes": 5}, "reason"),
                      ({"reason": "good reason", "minutes": 0}, "minutes"),
                      ({"reason": "good reason", "minutes": 20000}, "minutes"), ({"minutes": 5}, "reason"),
                      ({"reason": "good\x00reason", "minutes": 5}, "reason")):
        bad = client.post(f"/api/alarms/{key}/shelve", json=body, headers=op)
        assert bad.status_code == 422 and why in bad.text, (body, bad.text)
    assert client.post(f"/api/alarms/{'f' * 16}/shelve", json={"reason": "no such", "minutes": 5},
                       headers=op).status_code == 404
    assert client.post(f"/api/alarms/{key}/unshelve", json={"reason": "not shelved"},
                       headers=op).status_code == 409
    r = client.post(f"/api/alarms/{key}/shelve", json={"reason": "vendor visit", "minutes": 90}, headers=op)
    assert r.status_code == 200 and r.json()["shelved"] and r.json()["shelve_reason"] == "vendor visit", \
        r.text
    assert key not in {x["id"] for x in client.get("/api/alarms", headers=op).json()}
    assert key in {x["id"] for x in client.get("/api/alarms", params={"shelved": True}, headers=op).json()}
    assert client.post(f"/api/alarms/{key}/unshelve", json={"reason": "vendor came early"},
                       headers=op).status_code == 200
    assert key in {x["id"] for x in client.get("/api/alarms", headers=op).json()}
    shelve, unshelve = _sealed(client, "alarm_shelve")[-1], _sealed(client, "alarm_unshelve")[-1]
    assert shelve.payload["reason"] == "vendor visit" and unshelve.payload["reason"] == "vendor came early"  # type: ignore[attr-defined]
    actions = client.get(f"/api/alarms/{key}/actions", headers=op).json()
    assert [(x["action"], x["comment"]) for x in actions] == [("unshelve", "vendor came early"),
                                                             ("shelve", "vendor visit"),
                                                             ("ack", "box reconfigured")]
    viewer = _auth(client, "agronomist")
    assert client.post(f"/api/alarms/{key}/shelve", json={"reason": "not mine", "minutes": 5},
                       headers=viewer).status_code == 403


def test_history_filters_and_refuses_bad_ones(client: TestClient) -> None:
    op = _auth(client, "operator")
    client.app.state.runtime.dispatch.alarm("gh1", "telemetry_shed:rate_limit")  # type: ignore[attr-defined]
    client.get("/api/alarms", headers=op)

    def kinds(**params: object) -> set[str]:
        r = client.get("/api/alarms/history", params=params, headers=op)
        assert r.status_code == 200, r.text
        return {e["kind"] for e in r.json()}

    assert "telemetry_shed:rate_limit" in kinds(gh="gh1", kind="telemetry_shed", severity="warning",
                                                state="active")
    assert "telemetry_shed:rate_limit" not in kinds(severity="critical")
    assert kinds(gh="nope") == set() and kinds(until="2000-01-01T00:00:00Z") == set()
    assert "telemetry_shed:rate_limit" in kinds(since="2000-01-01T00:00:00Z")
    for params in ({"severity": "loud"}, {"state": "sleepy"}, {"since": "yesterday"},
                   {"since": "2026-01-01T00:00:00"},
                   {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, {"limit": 0}):
        r = client.get("/api/alarms/history", params=params, headers=op)
        assert r.status_code == 422 and r.json()["detail"], (params, r.text)
    assert {k["code"] for k in client.get("/api/alarms/kinds", headers=op).json()} >= {"zone_dry",
                                                                                       "edge_offline"}


def test_an_estop_raises_a_watched_alarm_that_notifies_signed_and_clears_on_reset(client: TestClient,
                                                                                  hook: Hook) -> None:
    op = _auth(client, "operator")
    r = client.put("/api/me/notifications", json={"min_severity": "critical", "webhook_enabled": True},
                   headers=op)
    assert r.status_code == 200, r.text
    assert client.get("/api/me/notifications", headers=op).json()["webhook_enabled"] is True
    hook.requests.clear()
    assert client.post("/api/greenhouses/gh1/estop", json={"reason": "alarm test"},
                       headers=op).status_code == 200

    def estop_alarm(active: bool) -> dict[str, object] | None:
        rows = client.get("/api/alarms", params={"gh": "gh1"}, headers=op).json()
        return next((a for a in rows if a["kind"] == "estop_latched" and a["active"] == active), None)

    raised = wait_until(lambda: estop_alarm(True), 15, "the estop_latched alarm")
    assert raised["severity"] == "critical" and "reset it with a reason" in raised["action"]
    wait_until(lambda: any(json.loads(b)["kind"] == "estop_latched" for _, b in hook.requests), 10,
               "its webhook")
    headers, body = next((h, b) for h, b in hook.requests if json.loads(b)["kind"] == "estop_latched")
    assert verify(HOOK_SECRET.encode(), body, headers[SIGNATURE_HEADER.lower()])
    r = client.post("/api/greenhouses/gh1/estop/reset", json={"reason": "checked the line"}, headers=op)
    assert r.status_code == 200, r.text
    wait_until(lambda: estop_alarm(False), 15, "the estop_latched alarm to clear")
    wait_until(lambda: client.get("/api/alarms/history", params={"kind": "estop_latched", "state": "cleared"},
                                  headers=op).json(), 10, "its cleared episode")


def test_thresholds_per_greenhouse_and_notification_preferences_refuse_bad_input(client: TestClient) -> None:
    agro, op = _auth(client, "agronomist"), _auth(client, "operator")
    assert client.get("/api/alarms/thresholds/gh1", headers=op).json()["zone_band_minutes"] == 30
    r = client.put("/api/alarms/thresholds/gh1", json={"zone_band_minutes": 45, "edge_offline_minutes": 2},
                   headers=agro)
    assert r.status_code == 200, r.text
    got = client.get("/api/alarms/thresholds/gh1", headers=op).json()
    assert (got["zone_band_minutes"], got["edge_offline_minutes"], got["water_cap_pct"]) == (45, 2, 100)
    assert _sealed(client, "alarm_thresholds")[-1].actor == "agronomist:agronomist"  # type: ignore[attr-defined]
    for body in ('{"zone_band_minutes": 0}', '{"zone_band_minutes": "soon"}', '{"typo": 1}',
                 '{"water_cap_pct": 1e400}',
                 '{"edge_offline_minutes": NaN}'):
        r = client.put("/api/alarms/thresholds/gh1", content=body,
                       headers={**agro, "Content-Type": "application/json"})
        assert r.status_code == 422 and r.json()["detail"], (body, r.text)
    assert client.put("/api/alarms/thresholds/gh1", json={}, headers=op).status_code == 403
    assert client.get("/api/alarms/thresholds/nope", headers=op).status_code == 404
    for body in ({"email_enabled": True}, {"email": "not-an-address", "email_enabled": True},
                 {"webhook_url": "http://elsewhere.example/x", "webhook_enabled": True},
                 {"min_severity": "loud"}):
        r = client.put("/api/me/notifications", json=body, headers=op)
        assert r.status_code == 422 and r.json()["detail"], (body, r.text)


def test_the_alarms_page_offers_history_filters_and_shelving_to_operators_only(client: TestClient) -> None:
    for role, operator in (("operator", "yes"), ("agronomist", "no")):
        client.cookies.set("greentwin_session", _auth(client, role)["Authorization"].split()[1])
        try:
            page = client.get("/alarms")
        finally:
            client.cookies.clear()
        assert page.status_code == 200
        assert f'data-operator="{operator}"' in page.text
        assert 'id="history-filters"' in page.text and 'id="shelved"' in page.text
        assert '<script src="/static/alarms.js" defer></script>' in page.text and "<script>" not in page.text
