"""Who is notified, from the users' stored preferences and the site's settings.

A user's own webhook URL is accepted only on a host the site allows
(``GREENTWIN_NOTIFY_WEBHOOK_HOSTS``): otherwise any operator could have the service POST to any
address it can reach. Without one, the webhook channel goes to the site's webhook.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.alarm_models import NotificationPref
from app.alarms.notify import Notifier, Recipient
from app.alarms.senders import SmtpSender, WebhookSender
from app.core.notify_settings import NotifySettings
from app.metrics import Metrics
from app.models import User
from audit.wording import language


def allowed_hosts(settings: NotifySettings) -> frozenset[str]:
    return frozenset(h.strip().lower() for h in settings.notify_webhook_hosts.split(",") if h.strip())


def check_webhook_url(url: str, settings: NotifySettings) -> str:
    """``url`` if a user may choose it; ValueError saying why not."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("a webhook URL is http:// or https:// with a host")
    hosts = allowed_hosts(settings)
    if parts.hostname.lower() not in hosts:
        allowed = ", ".join(sorted(hosts)) or "none: only the site's webhook (leave the URL empty)"
        raise ValueError(f"webhook host {parts.hostname!r} is not allowed "
                         f"(GREENTWIN_NOTIFY_WEBHOOK_HOSTS: {allowed})")
    return url


def load_recipients(sessions: sessionmaker[Session], settings: NotifySettings) -> list[Recipient]:
    """Every enabled user with a channel switched on, their webhook resolved to where it will go, and the
    language they read (``users.language``) that their messages are written in."""
    hosts = allowed_hosts(settings)
    out = []
    with sessions() as s:
        rows = s.execute(select(NotificationPref, User.language)
                         .join(User, User.username == NotificationPref.username)
                         .where(User.disabled_at.is_(None)).order_by(NotificationPref.username))
        for p, lang in rows:
            hook = None
            if p.webhook_enabled:
                own = p.webhook_url if p.webhook_url and (urlsplit(p.webhook_url).hostname
                                                          or "").lower() in hosts \
                    else None  # an allowed host since removed from the list: back to the site's webhook
                hook = own or settings.notify_webhook_url or None
            out.append(Recipient(p.username, p.min_severity, p.email if p.email_enabled else None, hook,  # type: ignore[arg-type]
                                 language(lang)))
    return [r for r in out if r.email or r.webhook_url]


def notifier_from_settings(settings: NotifySettings, sessions: sessionmaker[Session],
                           metrics: Metrics | None) -> Notifier:
    """The service's notifier (not started): e-mail if an SMTP host is set, webhooks if a secret is."""
    common = {"timeout_s": settings.notify_timeout_s, "retries": settings.notify_retries}
    smtp = None
    if settings.notify_smtp_host:
        password = settings.notify_smtp_password
        smtp = SmtpSender(settings.notify_smtp_host, settings.notify_smtp_port, settings.notify_email_from,
                          starttls=settings.notify_smtp_starttls, username=settings.notify_smtp_username,
                          password=None if password is None else password.get_secret_value(), **common)  # type: ignore[arg-type]
    webhook = None
    if settings.notify_webhook_secret is not None and settings.notify_webhook_secret.get_secret_value():
        webhook = WebhookSender(settings.notify_webhook_secret.get_secret_value().encode(), **common)  # type: ignore[arg-type]
    return Notifier(lambda: load_recipients(sessions, settings), webhook=webhook, smtp=smtp, metrics=metrics,
                    repeat_s=settings.notify_repeat_min * 60.0, max_per_hour=settings.notify_max_per_hour)
