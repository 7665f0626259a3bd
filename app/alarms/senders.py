"""Delivering one notification: a signed JSON POST to a webhook, or an e-mail over SMTP.

Both retry a failure with doubling back-off and raise :class:`DeliveryFailed` once they give up;
they run in the notifier's worker thread (:mod:`app.alarms.notify`), never on the event loop. A
webhook is signed with HMAC-SHA256 over the exact bytes of the body, so a receiver holding the
shared secret can tell the service's messages from anyone else's; redirects are not followed (a
receiver cannot send the service's POST on to another host).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import smtplib
import ssl
import time
import uuid
from collections.abc import Callable
from email.message import EmailMessage
from typing import Any

import httpx

SIGNATURE_HEADER = "X-Greentwin-Signature"
DELIVERY_HEADER = "X-Greentwin-Delivery"


class DeliveryFailed(Exception):
    """A message that could not be delivered after every retry."""


def sign(secret: bytes, body: bytes) -> str:
    """The signature header's value: ``sha256=`` and the hex HMAC-SHA256 of ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(secret: bytes, body: bytes, header: str) -> bool:
    """What a receiver checks (constant time)."""
    return hmac.compare_digest(sign(secret, body), header)


def _retrying(attempt: Callable[[], None], retries: int, backoff_s: float,
              sleep: Callable[[float], None]) -> None:
    """``attempt()`` until it returns, at most ``retries`` more times after the first, waiting
    ``backoff_s``, then twice that, and so on; a :class:`_Permanent` failure is not retried."""
    delay = backoff_s
    for n in range(retries + 1):
        try:
            attempt()
            return
        except _Permanent as exc:
            raise DeliveryFailed(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - transport errors of every kind are retried alike
            if n == retries:
                raise DeliveryFailed(f"{exc.__class__.__name__}: {exc}") from None
        sleep(delay)
        delay *= 2


class _Permanent(Exception):
    """A refusal that retrying cannot change (a 4xx other than 408 and 429)."""


class WebhookSender:
    """JSON POSTs signed with the shared secret."""

    def __init__(self, secret: bytes, *, timeout_s: float = 5.0, retries: int = 3, backoff_s: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.secret = secret
        self.retries = retries
        self.backoff_s = backoff_s
        self.sleep = sleep
        self.client = httpx.Client(timeout=timeout_s, follow_redirects=False,
                                   headers={"User-Agent": "greentwin-alarms"})

    def post(self, url: str, payload: dict[str, Any]) -> None:
        """Deliver ``payload`` (one body and signature for every attempt; the delivery id repeats too,
        so a receiver can drop a retry of a message it already took)."""
        body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(self.secret, body),
                   DELIVERY_HEADER: uuid.uuid4().hex}

        def attempt() -> None:
            r = self.client.post(url, content=body, headers=headers)
            if r.status_code >= 500 or r.status_code in (408, 429):
                raise RuntimeError(f"HTTP {r.status_code}")
            if r.status_code >= 300:
                raise _Permanent(f"HTTP {r.status_code} from the webhook")

        _retrying(attempt, self.retries, self.backoff_s, self.sleep)

    def close(self) -> None:
        self.client.close()


class SmtpSender:
    """Plain-text e-mails through one SMTP server."""

    def __init__(self, host: str, port: int, sender: str, *, starttls: bool = False,
                 username: str | None = None, password: str | None = None, timeout_s: float = 5.0,
                 retries: int = 3, backoff_s: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.host, self.port, self.sender = host, port, sender
        self.starttls, self.username, self.password = starttls, username, password
        self.timeout_s, self.retries, self.backoff_s, self.sleep = timeout_s, retries, backoff_s, sleep

    def send(self, to: str, subject: str, text: str) -> None:
        msg = EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = self.sender, to, subject
        msg.set_content(text)

        def attempt() -> None:
            try:
                with smtplib.SMTP(self.host, self.port, timeout=self.timeout_s) as smtp:
                    if self.starttls:
                        smtp.starttls(context=ssl.create_default_context())
                    if self.username:
                        smtp.login(self.username, self.password or "")
                    refused = smtp.send_message(msg)
            except smtplib.SMTPRecipientsRefused as exc:
                raise _Permanent(f"recipient refused: {', '.join(exc.recipients)}") from None
            if refused:
                raise _Permanent(f"recipient refused: {', '.join(refused)}")

        _retrying(attempt, self.retries, self.backoff_s, self.sleep)
