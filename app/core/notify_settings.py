"""The ``GREENTWIN_NOTIFY_*`` settings: where alarm notifications go and how often.

A base of :class:`app.core.config.Settings`, kept apart so the alarm notifications' knobs read
together; every user chooses their own channels and minimum severity (``PUT /api/me/notifications``).
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class NotifySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GREENTWIN_", env_nested_delimiter="__", env_file=None,
                                      extra="ignore", validate_default=True, use_attribute_docstrings=True,
                                      hide_input_in_errors=True)

    notify_smtp_host: str = ""
    """SMTP server that alarm e-mails are sent through; empty: no e-mail is sent."""
    notify_smtp_port: int = Field(default=25, ge=1, le=65535)
    """Port of `notify_smtp_host` (587 with `notify_smtp_starttls`)."""
    notify_smtp_starttls: bool = False
    """Upgrade the SMTP connection with STARTTLS before logging in."""
    notify_smtp_username: str | None = None
    """SMTP login, if the server wants one."""
    notify_smtp_password: SecretStr | None = None
    """Password of `notify_smtp_username`."""
    notify_email_from: str = Field(default="greentwin@localhost", min_length=3, max_length=254)
    """Sender address of alarm e-mails."""
    notify_webhook_url: str = Field(default="", max_length=2000, repr=False)
    """The site's webhook (a chat or paging integration): users who choose the webhook channel without a URL
    of their own are notified here by a JSON POST."""
    notify_webhook_secret: SecretStr | None = None
    """Shared secret of the webhooks: each POST carries `X-Greentwin-Signature: sha256=<hex HMAC-SHA256 of the
    body>`; unset, no webhook is sent."""
    notify_webhook_hosts: str = ""
    """Comma-separated host names a user's own webhook URL may point at; empty: users can only choose the
    site's webhook (the service posts nowhere else)."""
    notify_retries: int = Field(default=3, ge=0, le=10)
    """Retries of a failed webhook POST or SMTP delivery, with doubling back-off from 1 s."""
    notify_timeout_s: float = Field(default=5.0, gt=0, le=60.0)
    """Time-out of one webhook POST or SMTP conversation."""
    notify_repeat_min: float = Field(default=30.0, ge=0.0, le=24 * 60.0)
    """A recipient hears of an alarm kind in a greenhouse at most once per this many minutes."""
    notify_max_per_hour: int = Field(default=20, ge=1, le=1000)
    """Messages per recipient per hour; alarms beyond it are held and sent as one digest when the hour
    allows."""
