"""Alarm notifications against real receivers: an SMTP server (aiosmtpd) and an HTTP server on 127.0.0.1.

Signature, retries after a 500, severity routing, the per-recipient limits with their digest, and a
receiver that fails being counted and logged once while the worker goes on."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from email.header import decode_header, make_header
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from sqlalchemy import make_url, update

from app.alarm_models import NotificationPref
from app.alarms.catalogue import describe
from app.alarms.notify import Notice, Notifier, Recipient
from app.alarms.recipients import load_recipients
from app.alarms.senders import DELIVERY_HEADER, SIGNATURE_HEADER, SmtpSender, WebhookSender, verify
from app.auth.users import create_user
from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.core.notify_settings import NotifySettings
from app.metrics import Metrics
from app.models import User
from tests.app.alarms.alarm_receivers import Hook, Inbox, free_port
from tests.app.procs import CuttableProxy
from tests.conftest import temporary_pg_database

SECRET = b"webhook shared secret"
T0 = datetime(2026, 6, 1, 12, tzinfo=UTC)


@pytest.fixture(scope="module")
def smtp() -> Iterator[tuple[int, Inbox]]:
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield port, inbox
    controller.stop()


@pytest.fixture(scope="module")
def hook_server() -> Iterator[Hook]:
    hook = Hook()
    yield hook
    hook.close()


@pytest.fixture
def hook(hook_server: Hook) -> Hook:
    hook_server.requests.clear()
    hook_server.statuses.clear()
    return hook_server


def _notice(kind: str = "zone_dry:1", severity: str = "critical", gh: str = "gh1") -> Notice:
    return Notice("0123456789abcdef", gh, kind, severity, "Zone dry", "Zone 2 is dry.", "Check it.", T0)  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _notifier(recipients: list[Recipient], smtp_port: int | None = None, *, metrics: Metrics | None = None,
              clock: Clock | None = None, max_per_hour: int = 20, retries: int = 2) -> Notifier:
    smtp = None if smtp_port is None else SmtpSender("127.0.0.1", smtp_port, "greentwin@site.test", retries=0)
    return Notifier(lambda: recipients,
                    webhook=WebhookSender(SECRET, retries=retries, backoff_s=0.01, timeout_s=2),
                    smtp=smtp, metrics=metrics, repeat_s=1800.0, max_per_hour=max_per_hour,
                    clock=clock or Clock())


def test_webhooks_are_signed_and_retried_after_a_server_error(hook: Hook) -> None:
    metrics = Metrics()
    hook.statuses = [500, 500]
    _notifier([Recipient("olga", "warning", webhook_url=hook.url)], metrics=metrics).deliver(_notice())
    assert len(hook.requests) == 3, "two 500s, then delivered"
    bodies = {body for _, body in hook.requests}
    assert len(bodies) == 1 and len({h[DELIVERY_HEADER.lower()] for h, _ in hook.requests}) == 1, \
        "every retry is the same message"
    headers, body = hook.requests[-1]
    assert verify(SECRET, body, headers[SIGNATURE_HEADER.lower()])
    assert not verify(b"another secret", body, headers[SIGNATURE_HEADER.lower()])
    assert not verify(SECRET, body.replace(b"gh1", b"gh2"), headers[SIGNATURE_HEADER.lower()])
    payload = json.loads(body)
    assert (payload["greenhouse_id"], payload["kind"], payload["severity"]) == (
        "gh1", "zone_dry:1", "critical")
    assert metrics.notifications.labels("webhook", "sent")._value.get() == 1


def test_each_user_hears_from_their_minimum_severity_up_on_their_channels(smtp: tuple[int, Inbox],
                                                                          hook: Hook) -> None:
    port, inbox = smtp
    inbox.messages.clear()
    notifier = _notifier([Recipient("olga", "warning", email="olga@site.test"),
                          Recipient("adam", "critical", email="adam@site.test", webhook_url=hook.url),
                          Recipient("ines", "info", webhook_url=hook.url)], port)
    notifier.deliver(_notice("ack_timeout", "warning"))
    assert [to for to, _ in inbox.messages] == [["olga@site.test"]] and len(hook.requests) == 1
    notifier.deliver(_notice("estop_latched", "critical"))
    assert sorted(to[0] for to, _ in inbox.messages[1:]) == ["adam@site.test", "olga@site.test"]
    assert len(hook.requests) == 2, "adam and ines share the webhook: one message per address"
    _, mail = inbox.messages[-1]
    assert (mail["Subject"] == "[greentwin] CRITICAL gh1: Zone dry"
            and "What to do: Check it." in mail.get_payload())


def test_one_message_per_kind_and_greenhouse_per_window_and_a_digest_past_the_hourly_cap(hook: Hook) -> None:
    clock, metrics = Clock(), Metrics()
    notifier = _notifier([Recipient("olga", "info", webhook_url=hook.url)], metrics=metrics, clock=clock,
                         max_per_hour=2)
    notifier.deliver(_notice("zone_dry:1"))
    notifier.deliver(_notice("zone_dry:1"))
    assert len(hook.requests) == 1 and metrics.notifications.labels("webhook", "repeat")._value.get() == 1
    notifier.deliver(_notice("zone_dry:1", gh="gh2"))  # another greenhouse is another alarm
    notifier.deliver(_notice("zone_wet:0"))
    notifier.deliver(_notice("probe_fault:2"))
    assert len(hook.requests) == 2, "two an hour: the rest is held"
    notifier.flush_digests()
    assert len(hook.requests) == 2
    clock.t += 3601
    notifier.flush_digests()
    digest = json.loads(hook.requests[-1][1])["digest"]
    assert [d["kind"] for d in digest] == ["zone_wet:0", "probe_fault:2"]
    clock.t += 1801
    notifier.deliver(_notice("zone_dry:1"))
    assert json.loads(hook.requests[-1][1])["kind"] == "zone_dry:1", "past the repeat window it is sent again"


def test_a_failing_receiver_is_counted_logged_once_and_never_stops_the_worker(
        hook: Hook, caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    dead = f"http://127.0.0.1:{free_port()}/nobody"
    notifier = _notifier([Recipient("olga", "info", webhook_url=dead),
                          Recipient("adam", "info", webhook_url=hook.url)],
                         metrics=metrics, retries=1)
    notifier.start()
    try:
        with caplog.at_level(logging.ERROR, logger="app.alarms.notify"):
            for kind in ("zone_dry:0", "zone_dry:1", "zone_dry:2"):
                assert notifier.submit(_notice(kind))
            assert notifier.wait_idle()
    finally:
        notifier.stop()
    assert metrics.notifications.labels("webhook", "failed")._value.get() == 3
    assert metrics.notifications.labels("webhook", "sent")._value.get() == 3, \
        "the other receiver got all three"
    assert len([r for r in caplog.records if "failed" in r.getMessage()]) == 1, "logged once"


def _raised(kind: str = "zone_dry:1", severity: str = "critical") -> Notice:
    """A notice as the alarm book raises it: the catalogue's English words for its kind."""
    words = describe(kind)
    return Notice("0123456789abcdef", "gh1", kind, severity, words.title, words.description, words.action, T0)  # type: ignore[arg-type]


def _header(value: str) -> str:
    """A mail header as a reader sees it (an encoded-word subject decoded)."""
    return str(make_header(decode_header(value)))


def test_each_recipient_reads_the_mail_in_their_language(smtp: tuple[int, Inbox]) -> None:
    port, inbox = smtp
    inbox.messages.clear()
    notifier = _notifier([Recipient("wei", "info", email="wei@site.test", language="zh-Hans"),
                          Recipient("olga", "info", email="olga@site.test")], port)
    notifier.deliver(_raised())
    mails = {to[0]: mail for to, mail in inbox.messages}
    zh, en = describe("zone_dry:1", "zh-Hans"), describe("zone_dry:1")
    chinese = mails["wei@site.test"]
    assert (_header(chinese["Subject"]) == f"[greentwin] 严重 gh1：{zh.title}"
            == "[greentwin] 严重 gh1：分区偏干")
    body = chinese.get_payload(decode=True).decode(chinese.get_content_charset())
    assert zh.description in body and f"处理建议：{zh.action}" in body and "2号区" in body
    assert en.description not in body and "What to do" not in body
    english = mails["olga@site.test"]
    assert english["Subject"] == f"[greentwin] CRITICAL gh1: {en.title}"
    assert f"What to do: {en.action}" in english.get_payload(decode=True).decode()


def test_a_webhook_keeps_its_codes_and_carries_the_recipients_words(hook: Hook) -> None:
    clock = Clock()
    notifier = _notifier([Recipient("wei", "info", webhook_url=hook.url, language="zh-Hans")], clock=clock,
                         max_per_hour=1)
    notifier.deliver(_raised())
    headers, body = hook.requests[-1]
    assert verify(SECRET, body, headers[SIGNATURE_HEADER.lower()])
    payload = json.loads(body)
    zh = describe("zone_dry:1", "zh-Hans")
    assert (payload["kind"], payload["severity"], payload["greenhouse_id"], payload["event"]) == \
        ("zone_dry:1", "critical", "gh1", "raised")
    assert payload["language"] == "zh-Hans" and payload["severity_text"] == "严重"
    assert (payload["title"], payload["description"], payload["action"]) == (
        zh.title, zh.description, zh.action)
    notifier.deliver(_raised("probe_fault:2", "warning"))  # past the hourly cap: held for the digest
    notifier.deliver(_raised("zone_wet:0", "warning"))
    clock.t += 3601
    notifier.flush_digests()
    digest = json.loads(hook.requests[-1][1])
    assert digest["language"] == "zh-Hans"
    assert [(d["kind"], d["title"]) for d in digest["digest"]] == [("probe_fault:2", "探头故障"),
                                                                   ("zone_wet:0", "分区偏湿")]


def test_recipients_carry_the_language_their_user_chose(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    with sessions() as s:
        for name, lang in (("wei", "zh-Hans"), ("olga", "en")):
            create_user(session=s, username=name, password="a long enough password", roles=["operator"])
            s.execute(update(User).where(User.username == name).values(language=lang))
            s.add(NotificationPref(username=name, email=f"{name}@site.test", email_enabled=True,
                                   min_severity="warning", updated_at=T0))
        s.commit()
    try:
        found = {r.username: r.language for r in load_recipients(sessions, NotifySettings())}
    finally:
        engine.dispose()
    assert found == {"wei": "zh-Hans", "olga": "en"}


@pytest.mark.postgres
def test_a_database_outage_delays_notices_and_loses_none(
        hook: Hook, pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """With the database away before any list was read, notices wait and go out when it is back; away
    later, the list read before is used. One warning each way, no traceback."""
    with temporary_pg_database(pg_url, "gt_notify") as url:
        db_cli.upgrade(url)
        owner = make_engine(url)
        with make_session_factory(owner)() as s:
            create_user(session=s, username="olga", password="a long enough password", roles=["operator"])
            s.add(NotificationPref(username="olga", webhook_enabled=True, min_severity="info", updated_at=T0))
            s.commit()
        owner.dispose()
        target = make_url(url)
        proxy = CuttableProxy((target.host or "127.0.0.1", target.port or 5432))
        engine = make_engine(target.set(host="127.0.0.1", port=proxy.port)
                             .render_as_string(hide_password=False))
        settings = NotifySettings(notify_webhook_url=hook.url)
        clock = Clock()
        notifier = Notifier(lambda: load_recipients(make_session_factory(engine), settings),
                            webhook=WebhookSender(SECRET, retries=0, timeout_s=2), smtp=None,
                            recipients_ttl_s=30.0, clock=clock)
        hook.requests.clear()
        try:
            with caplog.at_level(logging.WARNING, logger="app.alarms.notify"):
                proxy.cut()
                notifier.deliver(_notice("zone_dry:0"))
                notifier.deliver(_notice("zone_dry:1"))
                assert hook.requests == [], "nobody known yet: the notices wait"
                notifier.deliver_waiting()
                assert hook.requests == [], "still away: they keep waiting"
                proxy.restore()
                clock.t += 31.0
                notifier.deliver_waiting()
                assert [json.loads(b)["kind"] for _, b in hook.requests] == ["zone_dry:0", "zone_dry:1"]
                proxy.cut()
                clock.t += 31.0
                notifier.deliver(_notice("zone_wet:2"))
                assert json.loads(hook.requests[-1][1])["kind"] == "zone_wet:2", \
                    "the list read before is used"
        finally:
            proxy.close()
            engine.dispose()
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "could not be read" in m]) == 2, said
    assert any("read again" in m for m in said)
    assert not [r for r in caplog.records if r.exc_info], "an outage is a line, not a traceback"
    assert all("\n" not in m for m in said)
