"""Service settings, read once from ``GREENTWIN_*`` environment variables (and optional secret files)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Self

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# ``policy/shipped`` sits next to the ``app`` package both in a checkout and in site-packages.
DEFAULT_POLICY_DIR = Path(__file__).resolve().parents[2] / "policy" / "shipped"

# Values that people paste from examples; a production audit trail must never be sealed with them.
PLACEHOLDER_KEYS = frozenset({"", "changeme", "change-me", "change_me", "changethis", "secret", "placeholder", "xxx", "todo"})
MIN_PROD_KEY_LEN = 32

Environment = Literal["dev", "demo", "prod"]


class Settings(BaseSettings):
    """Everything the runtime service reads from its environment.

    Built directly in tests (``Settings(environment="prod", ...)``); in the service, from the environment.
    """

    model_config = SettingsConfigDict(
        env_prefix="GREENTWIN_",
        env_nested_delimiter="__",
        env_file=None,
        extra="ignore",
        validate_default=True,
    )

    database_url: str = "sqlite:///./greentwin.sqlite3"
    mqtt_url: str = "mqtt://127.0.0.1:1883"
    policy_dir: Path = DEFAULT_POLICY_DIR
    environment: Environment = "dev"
    audit_key: SecretStr | None = None

    # Telemetry older than this is stale: the loop holds actuators rather than act on it.
    max_age_s: float = Field(default=120.0, gt=0)
    # A command not applied within its TTL must be dropped by the edge box.
    command_ttl_s: float = Field(default=30.0, gt=0)
    # Without an ack in this time the command counts as lost.
    ack_timeout_s: float = Field(default=10.0, gt=0)
    # Below this ensemble confidence the loop falls back to the expert controller.
    low_confidence_threshold: float = Field(default=0.6, ge=0.0, le=1.0)

    # Signs API tokens and session cookies. Only the API needs it, so other commands run without;
    # the service refuses to start without one outside demo mode (the demo generates and keeps one).
    secret_key: SecretStr | None = None
    # Lifetime of a login: one shift.
    access_token_ttl_s: float = Field(default=8 * 3600.0, gt=0, le=7 * 24 * 3600.0)
    # Failed logins allowed per username and client address within the sliding window.
    login_max_failures: int = Field(default=5, ge=1)
    login_window_s: float = Field(default=300.0, gt=0)
    # The site's IANA time zone: the dashboard shows times in it (ISO-8601 with offset on hover).
    site_timezone: str = "UTC"

    # Leases (several replicas): a replica commands a greenhouse only while it holds its lease. A dead
    # replica's greenhouses are taken over within lease_ttl_s + lease_renew_s (15 s by default).
    lease_ttl_s: float = Field(default=12.0, gt=0, le=3600.0)
    lease_renew_s: float = Field(default=3.0, gt=0)
    # Names this replica in the lease table; by default the host and the state directory, so a
    # restarted replica takes its own leases back at once.
    replica_id: str | None = Field(default=None, min_length=1, max_length=128)

    @model_validator(mode="after")
    def _renew_well_within_ttl(self) -> Self:
        """Renewing less often than twice per lease would let a healthy replica lose it to one slow round."""
        if self.lease_renew_s * 2 > self.lease_ttl_s:
            raise ValueError(f"GREENTWIN_LEASE_RENEW_S ({self.lease_renew_s:g}) must be at most half of "
                             f"GREENTWIN_LEASE_TTL_S ({self.lease_ttl_s:g})")
        return self

    @model_validator(mode="after")
    def _known_time_zone(self) -> Self:
        from zoneinfo import ZoneInfo

        try:
            ZoneInfo(self.site_timezone)
        except (ValueError, KeyError) as exc:
            raise ValueError(f"GREENTWIN_SITE_TIMEZONE {self.site_timezone!r} is not an IANA time zone") from exc
        return self

    @model_validator(mode="after")
    def _prod_needs_real_audit_key(self) -> Self:
        """Refuse to start production with an audit trail nobody can trust (no key, or an example one)."""
        if self.environment != "prod":
            return self
        if self.audit_key is None:
            raise ValueError("GREENTWIN_AUDIT_KEY is required when environment is 'prod'")
        key = self.audit_key.get_secret_value().strip()
        if key.lower() in PLACEHOLDER_KEYS or len(set(key)) <= 1:
            raise ValueError("GREENTWIN_AUDIT_KEY is a placeholder; set a real key for 'prod'")
        if len(key) < MIN_PROD_KEY_LEN:
            raise ValueError(f"GREENTWIN_AUDIT_KEY must be at least {MIN_PROD_KEY_LEN} characters in 'prod'")
        return self

    @model_validator(mode="after")
    def _prod_refuses_weak_secret_key(self) -> Self:
        """A token signing secret from an example would let anyone mint an operator's token."""
        if self.environment != "prod" or self.secret_key is None:
            return self
        key = self.secret_key.get_secret_value().strip()
        if key.lower() in PLACEHOLDER_KEYS or len(set(key)) <= 1:
            raise ValueError("GREENTWIN_SECRET_KEY is a placeholder; set a real secret for 'prod'")
        if len(key) < MIN_PROD_KEY_LEN:
            raise ValueError(f"GREENTWIN_SECRET_KEY must be at least {MIN_PROD_KEY_LEN} characters in 'prod'")
        return self


def get_settings(secrets_dir: Path | None = None) -> Settings:
    """Build settings, also reading Docker/Kubernetes-style secret files (one file per field).

    The directory is ``secrets_dir`` or ``GREENTWIN_SECRETS_DIR``; files are named like the
    variables (``greentwin_audit_key``), so a key never has to sit in the environment.
    """
    secrets_dir = secrets_dir or (Path(d) if (d := os.environ.get("GREENTWIN_SECRETS_DIR")) else None)
    if secrets_dir is None:
        return Settings()
    return Settings(_secrets_dir=secrets_dir)  # type: ignore[call-arg]
