"""Service settings, read once from ``GREENTWIN_*`` environment variables (and optional secret files)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Self

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.mqtt.connection import MqttTarget, TlsFiles, parse_mqtt_url, with_credentials

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
        # A rejected value may be a secret (a URL with its password): errors name the field, not the value.
        hide_input_in_errors=True,
    )

    database_url: str = "sqlite:///./greentwin.sqlite3"
    mqtt_url: str = Field(default="mqtt://127.0.0.1:1883", repr=False)  # may carry a password
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

    # Edge input and broker access (issue 17). Edge timestamps further ahead than this are refused
    # (a box with a wrong clock must not pass as fresh); an accelerated simulation needs it raised.
    max_clock_skew_s: float = Field(default=30.0, gt=0)
    # Inbound telemetry per greenhouse: sustained rate and burst; beyond them it is shed and counted.
    telemetry_rate_per_s: float = Field(default=20.0, gt=0)
    telemetry_burst: int = Field(default=40, ge=1)
    # Telemetry waiting for a decision per greenhouse; beyond it the oldest is shed (newest matters).
    inbox_per_greenhouse: int = Field(default=64, ge=1)
    # Broker credentials and TLS (mqtts://): the site's CA, this client's certificate and key (PEM).
    # Username and password here take precedence over any in GREENTWIN_MQTT_URL.
    mqtt_username: str | None = None
    mqtt_password: SecretStr | None = None
    mqtt_ca_file: Path | None = None
    mqtt_cert_file: Path | None = None
    mqtt_key_file: Path | None = None
    # Largest API request body accepted (413 beyond).
    max_request_bytes: int = Field(default=256 * 1024, ge=1024)
    # Failed logins per account from all addresses together in login_window_s: caps a guess spread
    # over many addresses (each address alone is held to login_max_failures).
    login_max_failures_per_account: int = Field(default=20, ge=1)

    def mqtt_tls(self) -> TlsFiles | None:
        """The TLS files to connect with, or None when none is set."""
        if self.mqtt_ca_file is None and self.mqtt_cert_file is None and self.mqtt_key_file is None:
            return None
        return TlsFiles(self.mqtt_ca_file, self.mqtt_cert_file, self.mqtt_key_file)

    def mqtt_target(self) -> MqttTarget:
        """Where the broker is and who we are to it (URL, then settings' credentials)."""
        password = None if self.mqtt_password is None else self.mqtt_password.get_secret_value()
        return with_credentials(parse_mqtt_url(self.mqtt_url), self.mqtt_username, password)

    @model_validator(mode="after")
    def _usable_mqtt_settings(self) -> Self:
        """A bad broker URL or a missing TLS file fails at start, not at the first reconnect."""
        self.mqtt_target()
        self.mqtt_tls()
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
