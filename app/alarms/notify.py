"""Alarm notifications: who hears of an alarm, how often, sent from a worker thread.

The alarm book hands over a :class:`Notice` when an alarm is raised (and when a shelved one comes
back still active); :meth:`Notifier.submit` only queues it, so the control loop and the API never
wait on a mail server. The worker routes each notice to every user whose minimum severity it
meets, on the channels they chose, and limits each recipient (an address): one message per alarm
kind per greenhouse per ``repeat_s``, and at most ``max_per_hour`` messages an hour; what the cap
holds back goes out as one digest once the hour allows. A receiver that fails is retried by the
sender, then counted (``greentwin_notifications_total``) and logged once until it works again. While the
list of recipients cannot be read (the database away), the list read before is used; with none read yet,
notices wait (up to :data:`QUEUE_MAX`) and go out once it can be read: an outage delays a notice, it never
loses one.

Each recipient reads a message in their own language (``users.language``): the e-mail's subject and body
and the webhook's words (``title``, ``description``, ``action``, ``severity_text``, with ``language``
naming it) come from the catalogue (``alarm.*``, ``notify.*`` in :mod:`audit.wording`); the webhook's
machine fields (``kind``, ``severity``, ``greenhouse_id``, ``at``, ``event``, ``alarm_id``) never change.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

from app.alarms.catalogue import Severity, at_least, describe
from app.alarms.senders import DeliveryFailed, SmtpSender, WebhookSender
from app.deadletter import reason_of
from app.metrics import Metrics
from audit.wording import DEFAULT_LANGUAGE, language, severity_words, text

log = logging.getLogger(__name__)

HOUR_S = 3600.0
QUEUE_MAX = 1000


@dataclass(frozen=True)
class Notice:
    """One alarm, as a message says it: its words (``title``, ``description``, ``action``) in ``language``,
    the language it was raised in; other readers get the catalogue's words for its kind (:meth:`words`)."""

    alarm_id: str
    greenhouse_id: str
    kind: str
    severity: Severity
    title: str
    description: str
    action: str
    at: datetime
    event: Literal["raised", "unshelved"] = "raised"
    language: str = DEFAULT_LANGUAGE

    def words(self, lang: str = DEFAULT_LANGUAGE) -> tuple[str, str, str]:
        """(title, description, action) in ``lang``: the notice's own when it is in that language, else the
        catalogue's for its kind, so every recipient reads the alarm as the alarm list shows it to them."""
        lang = language(lang)
        if lang == language(self.language):
            return self.title, self.description, self.action
        worded = describe(self.kind, lang)
        return worded.title, worded.description, worded.action

    def severity_words(self, lang: str = DEFAULT_LANGUAGE) -> str:
        """The severity as the alarm list says it ('critical', '严重')."""
        return severity_words(self.severity, lang)

    def payload(self, lang: str = DEFAULT_LANGUAGE) -> dict[str, Any]:
        """The webhook's JSON: the machine fields as they are, the words in ``lang`` and ``language``
        naming it."""
        title, description, action = self.words(lang)
        return {**asdict(self), "at": self.at.isoformat(), "title": title, "description": description,
                "action": action, "language": language(lang), "severity_text": self.severity_words(lang)}

    def subject(self, lang: str = DEFAULT_LANGUAGE) -> str:
        return text("notify.subject", lang, severity=self.severity_words(lang).upper(), gh=self.greenhouse_id,
                    title=self.words(lang)[0])

    def text(self, lang: str = DEFAULT_LANGUAGE) -> str:
        title, description, action = self.words(lang)
        back = text("notify.unshelved", lang) if self.event == "unshelved" else ""
        return text("notify.body", lang, title=title, back=back, gh=self.greenhouse_id,
                    at=self.at.isoformat(timespec="seconds"), description=description, action=action,
                    kind=self.kind, id=self.alarm_id)


@dataclass(frozen=True)
class Recipient:
    """A user's choice: from which severity up, on which channels (None: not chosen), in which language."""

    username: str
    min_severity: Severity
    email: str | None = None
    webhook_url: str | None = None
    language: str = DEFAULT_LANGUAGE


Address = tuple[str, str]
"""(channel, address): what the limits count per."""


class RateLimiter:
    """Per recipient address: one message per (greenhouse, kind) per ``repeat_s``, ``max_per_hour`` in all."""

    def __init__(self, repeat_s: float, max_per_hour: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.repeat_s, self.max_per_hour, self.clock = repeat_s, max_per_hour, clock
        self._last: dict[tuple[Address, str, str], float] = {}
        self._sent: dict[Address, deque[float]] = {}

    def verdict(self, to: Address, gh: str, kind: str) -> Literal["send", "repeat", "held"]:
        now = self.clock()
        last = self._last.get((to, gh, kind))
        if last is not None and now - last < self.repeat_s:
            return "repeat"
        return "send" if self.room(to) else "held"

    def room(self, to: Address) -> bool:
        """Whether the hour allows another message to ``to``."""
        sent = self._sent.setdefault(to, deque())
        now = self.clock()
        while sent and now - sent[0] >= HOUR_S:
            sent.popleft()
        return len(sent) < self.max_per_hour

    def sent(self, to: Address, notices: list[Notice]) -> None:
        now = self.clock()
        self._sent.setdefault(to, deque()).append(now)
        for n in notices:
            self._last[(to, n.greenhouse_id, n.kind)] = now


class Notifier:
    """The worker: ``submit`` from anywhere, delivery on its own thread."""

    def __init__(self, recipients: Callable[[], list[Recipient]], *, webhook: WebhookSender | None,
                 smtp: SmtpSender | None, metrics: Metrics | None = None, repeat_s: float = 1800.0,
                 max_per_hour: int = 20, recipients_ttl_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._load_recipients = recipients
        self.webhook, self.smtp, self.metrics = webhook, smtp, metrics
        self.limits = RateLimiter(repeat_s, max_per_hour, clock)
        self.recipients_ttl_s, self.clock = recipients_ttl_s, clock
        self._recipients: tuple[float, list[Recipient]] | None = None
        self._queue: queue.Queue[Notice | None] = queue.Queue(QUEUE_MAX)
        self._held: dict[Address, list[Notice]] = {}
        self._held_language: dict[Address, str] = {}
        """The language of the recipient whose notices are held for an address: its digest is written in
        it."""
        self._failing: set[Address] = set()
        self._waiting: deque[Notice] = deque()
        """Notices that came while no list of recipients could be read yet, oldest first."""
        self._unreadable: str | None = None
        """Why the recipients could not be read, while they cannot (logged once per outage)."""
        self._thread: threading.Thread | None = None

    def submit(self, notice: Notice) -> bool:
        """Queue a notice (never blocks); False when the queue is full and it was dropped."""
        try:
            self._queue.put_nowait(notice)
            return True
        except queue.Full:
            self._count("any", "dropped")
            return False

    def invalidate(self) -> None:
        """A user changed their preferences: read them again before the next notice."""
        self._recipients = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="alarm-notify", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None
        if self.webhook is not None:
            self.webhook.close()

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Until every queued notice was handled (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._queue.unfinished_tasks

    def _run(self) -> None:
        while True:
            try:
                notice = self._queue.get(timeout=1.0)
            except queue.Empty:
                self._safely(self.deliver_waiting)
                self._safely(self.flush_digests)
                continue
            try:
                if notice is None:
                    return
                self._safely(self.deliver_waiting)
                self._safely(lambda n=notice: self.deliver(n))  # type: ignore[misc]
                self._safely(self.flush_digests)
            finally:
                self._queue.task_done()

    @staticmethod
    def _safely(work: Callable[[], None]) -> None:
        try:
            work()
        except Exception:  # noqa: BLE001 - the worker outlives any bug in one delivery
            log.exception("alarm notification failed")

    def recipients(self) -> list[Recipient] | None:
        """Who hears of alarms: read again every ``recipients_ttl_s``; while that fails, the list read
        before, or None when none was ever read."""
        cached = self._recipients
        if cached is None or self.clock() - cached[0] > self.recipients_ttl_s:
            try:
                cached = (self.clock(), self._load_recipients())
            except Exception as exc:  # noqa: BLE001 - the database away is an outage, not a bug
                if self._unreadable is None:
                    log.warning("alarm recipients could not be read (%s); %s", reason_of(exc),
                                "using the list read before" if cached else "notices wait until they can")
                self._unreadable = reason_of(exc)
                if cached is None:
                    return None
                cached = (self.clock(), cached[1])  # try again after another ttl, not on every notice
            else:
                if self._unreadable is not None:
                    log.warning("alarm recipients are read again")
                self._unreadable = None
            self._recipients = cached
        return cached[1]

    def deliver(self, notice: Notice) -> None:
        """Route one notice to every recipient it concerns (on this thread); keep it for later while
        nobody's preferences could be read yet."""
        recipients = self.recipients()
        if recipients is None:
            if len(self._waiting) >= QUEUE_MAX:
                self._waiting.popleft()
                self._count("any", "dropped")
            self._waiting.append(notice)
            return
        self._route(notice, recipients)

    def deliver_waiting(self) -> None:
        """Send the notices kept while the recipients could not be read, once they can."""
        if not self._waiting:
            return
        recipients = self.recipients()
        while recipients is not None and self._waiting:
            self._route(self._waiting.popleft(), recipients)

    def _route(self, notice: Notice, recipients: list[Recipient]) -> None:
        for r in recipients:
            if not at_least(notice.severity, r.min_severity):
                continue
            lang = language(r.language)
            for to in self._addresses(r):
                verdict = self.limits.verdict(to, notice.greenhouse_id, notice.kind)
                if verdict == "send":
                    self._send(to, [notice], lang)
                elif verdict == "held":
                    self._held.setdefault(to, []).append(notice)
                    self._held_language.setdefault(to, lang)
                    self._count(to[0], "held")
                else:
                    self._count(to[0], "repeat")

    def flush_digests(self) -> None:
        """Send what the hourly cap held back, one digest per recipient, once the hour allows."""
        for to in [t for t, held in self._held.items() if held and self.limits.room(t)]:
            self._send(to, self._held.pop(to), self._held_language.pop(to, DEFAULT_LANGUAGE))

    def _addresses(self, r: Recipient) -> list[Address]:
        out: list[Address] = []
        if r.email and self.smtp is not None:
            out.append(("email", r.email))
        if r.webhook_url and self.webhook is not None:
            out.append(("webhook", r.webhook_url))
        return out

    def _send(self, to: Address, notices: list[Notice], lang: str) -> None:
        """Deliver ``notices`` to one address in ``lang``, its recipient's language."""
        channel, address = to
        self.limits.sent(to, notices)  # a failed attempt counts too: a dead receiver is not hammered
        try:
            if channel == "email":
                assert self.smtp is not None
                subject, body_text = _mail(notices, lang)
                self.smtp.send(address, subject, body_text)
            else:
                assert self.webhook is not None
                body = notices[0].payload(lang) if len(notices) == 1 else \
                    {"digest": [n.payload(lang) for n in notices], "language": lang}
                self.webhook.post(address, body)
        except DeliveryFailed as exc:
            self._count(channel, "failed")
            if to not in self._failing:
                self._failing.add(to)
                log.error("alarm notification by %s to %s failed (%s); further failures are only counted",
                          channel, address, exc)
            return
        self._count(channel, "sent")
        if to in self._failing:
            self._failing.discard(to)
            log.warning("alarm notifications by %s to %s are delivered again", channel, address)

    def _count(self, channel: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.notifications.labels(channel, outcome).inc()


def _mail(notices: list[Notice], lang: str = DEFAULT_LANGUAGE) -> tuple[str, str]:
    """Subject and body of an e-mail in ``lang``: one alarm, or a digest of what the hourly cap held back."""
    if len(notices) == 1:
        return notices[0].subject(lang), notices[0].text(lang)
    worst = max(notices, key=lambda n: ("info", "warning", "critical").index(n.severity))
    subject = text("notify.digest_subject", lang, n=len(notices), severity=worst.severity_words(lang).upper())
    return subject, "\n---\n\n".join(n.text(lang) for n in notices)
