"""Alarm notifications against real receivers: an SMTP server (aiosmtpd) and an HTTP server on 127.0.0.1.

Signature, retries after a 500, severity routing, the per-recipient limits with their digest, and a
receiver that fails being counted and logged once while the worker goes on."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from aiosmtpd.controller import Controller

from app.alarms.notify import Notice, Notifier, Recipient
from app.alarms.senders import DELIVERY_HEADER, SIGNATURE_HEADER, SmtpSender, WebhookSender, verify
from app.metrics import Metrics
from tests.app.alarm_receivers import Hook, Inbox, free_port

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
    return Notifier(lambda: recipients, webhook=WebhookSender(SECRET, retries=retries, backoff_s=0.01, timeout_s=2),
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
    assert (payload["greenhouse_id"], payload["kind"], payload["severity"]) == ("gh1", "zone_dry:1", "critical")
    assert metrics.notifications.labels("webhook", "sent")._value.get() == 1


def test_each_user_hears_from_their_minimum_severity_up_on_their_channels(smtp: tuple[int, Inbox], hook: Hook) -> None:
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
    assert mail["Subject"] == "[greentwin] CRITICAL gh1: Zone dry" and "What to do: Check it." in mail.get_payload()


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
    notifier = _notifier([Recipient("olga", "info", webhook_url=dead), Recipient("adam", "info", webhook_url=hook.url)],
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
    assert metrics.notifications.labels("webhook", "sent")._value.get() == 3, "the other receiver got all three"
    assert len([r for r in caplog.records if "failed" in r.getMessage()]) == 1, "logged once"
