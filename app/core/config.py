"""Service settings, read once from ``GREENTWIN_*`` environment variables (and optional secret files)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from app.api.client_address import IPNetwork, parse_networks
from app.core.notify_settings import NotifySettings
from wire.connection import MqttTarget, TlsFiles, parse_mqtt_url, with_credentials
from wire.topics import validate_topic_root

# ``policy/shipped`` sits next to the ``app`` package both in a checkout and in site-packages.
DEFAULT_POLICY_DIR = Path(__file__).resolve().parents[2] / "policy" / "shipped"

# Values that people paste from examples; a production audit trail must never be sealed with them.
PLACEHOLDER_KEYS = frozenset({"", "changeme", "change-me", "change_me", "changethis", "secret", "placeholder",
                              "xxx", "todo"})
MIN_PROD_KEY_LEN = 32

Environment = Literal["dev", "demo", "prod"]


class Settings(NotifySettings):
    """Everything the runtime service reads from its environment.

    Built directly in tests (``Settings(environment="prod", ...)``); in the service, from the environment.
    """

    model_config = SettingsConfigDict(
        env_prefix="GREENTWIN_",
        env_nested_delimiter="__",
        env_file=None,
        extra="ignore",
        validate_default=True,
        # The docstring under each field is its meaning in `greentwin settings --markdown`.
        use_attribute_docstrings=True,
        # A rejected value may be a secret (a URL with its password): errors name the field, not the value.
        hide_input_in_errors=True,
    )

    database_url: str = "sqlite:///./greentwin.sqlite3"
    """SQLAlchemy URL of the service's database (`postgresql://user:pw@host/db` in production)."""
    mqtt_url: str = Field(default="mqtt://127.0.0.1:1883", repr=False)  # may carry a password
    """MQTT broker the edge boxes speak to (`mqtt://` or `mqtts://`; credentials in the URL or below)."""
    mqtt_topic_root: str = "greentwin"
    """First level of every MQTT topic (`<root>/<greenhouse>/telemetry`, ...): services and edge boxes with
    different roots share a broker without hearing each other; the broker's ACL names it
    (deploy/mosquitto/acl). `greentwin demo` takes one of its own unless this is set."""
    policy_dir: Path = DEFAULT_POLICY_DIR
    """Directory of the served policy ensemble (the shipped one by default)."""
    environment: Environment = "dev"
    """`dev`, `demo` (generates and keeps its own keys) or `prod` (refuses to start without real ones)."""
    audit_key: SecretStr | None = None
    """Audit keyring: keyring JSON text or the path of a keyring JSON file (required in `prod`)."""

    max_age_s: float = Field(default=120.0, gt=0)
    """Telemetry older than this is stale: the loop holds actuators rather than act on it."""
    command_ttl_s: float = Field(default=30.0, gt=0)
    """A command not applied within its TTL must be dropped by the edge box."""
    ack_timeout_s: float = Field(default=10.0, gt=0)
    """Without an ack in this time the command counts as lost."""
    low_confidence_threshold: float = Field(default=0.6, ge=0.0, le=1.0)
    """Below this ensemble confidence the loop falls back to the expert controller."""

    metrics_token: SecretStr | None = None
    """Bearer token Prometheus sends to read `/metrics` (`greentwin init` writes one as the secret file
    `greentwin_metrics_token`); unset, `/metrics` answers 401, except in `demo` to requests from this
    machine's loopback address."""
    secret_key: SecretStr | None = None
    """Signs API tokens and session cookies; the service refuses to start without one outside `demo`."""
    access_token_ttl_s: float = Field(default=8 * 3600.0, gt=0, le=7 * 24 * 3600.0)
    """Lifetime of a login: one shift."""
    login_max_failures: int = Field(default=5, ge=1)
    """Failed logins allowed per username and client address within the sliding window."""
    login_window_s: float = Field(default=300.0, gt=0)
    """The sliding window of `login_max_failures`."""
    site_timezone: str = "UTC"
    """The site's IANA time zone: the dashboard shows times in it (ISO-8601 with offset on hover)."""
    # Deployment: key files and the state directory (`greentwin init` makes all of them).
    audit_keys: SecretStr | None = None
    """Audit keyring JSON text; takes precedence over `audit_key` (for platforms that inject secrets as
    variables)."""
    audit_signing_key: Path | None = None
    """Ed25519 PEM file that signs audit checkpoints and purge anchors (required in `prod`)."""
    report_key: Path | None = None
    """PEM private key that signs PDF reports (with `report_cert`; `dev`/`demo` make a self-signed one)."""
    report_cert: Path | None = None
    """PEM certificate of `report_key`; verifiers trust it."""
    state_dir: Path = Path("state")
    """Controller snapshots, the decision spool and the demo's generated keys."""

    @field_validator("audit_signing_key", "report_key", "report_cert", "audit_anchor_file", mode="before")
    @classmethod
    def _empty_path_is_unset(cls, value: object) -> object:
        """``GREENTWIN_REPORT_KEY=`` (an empty line in an env file) means unset, not the working directory."""
        return None if isinstance(value, str) and not value.strip() else value

    audit_seal_stuck_s: float = Field(default=300.0, gt=0)
    """Seconds an audit event may wait to be sealed before /readyz fails (sealing is stuck)."""
    writer_behind_s: float = Field(default=30.0, gt=0)
    """Seconds a journaled decision, mode change or ack may wait to be stored before /readyz fails (the writer
    falls behind)."""
    audit_anchor_every_min: float = Field(default=15.0, gt=0)
    """Minutes between exports of every audit chain's head, signed with the audit signing key, to
    `audit_anchor_file` (and `audit_anchor_url`); `greentwin audit verify` finds a chain cut or rewritten
    after its last export."""
    audit_anchor_file: Path | None = None
    """Append-only file of signed chain heads (archive it off the database host); default
    `audit-anchors.jsonl` in the state directory."""
    audit_anchor_url: str | None = Field(default=None, repr=False)
    """Also POST each export (JSON, the same signed lines) to this URL, e.g. a log service on another host; a
    failed POST is logged and the file still written."""

    # Edge input and broker access.
    max_clock_skew_s: float = Field(default=30.0, gt=0)
    """Edge timestamps further ahead than this are refused (a box with a wrong clock must not pass as fresh);
    an accelerated simulation needs it raised."""
    telemetry_rate_per_s: float = Field(default=20.0, gt=0)
    """Sustained inbound telemetry per greenhouse; beyond it and the burst, messages are shed and counted."""
    telemetry_burst: int = Field(default=40, ge=1)
    """Burst of inbound telemetry per greenhouse allowed above the sustained rate."""
    telemetry_bytes_per_s: float = Field(default=1024 * 1024, gt=0)
    """Telemetry bytes per second a greenhouse may send before they are parsed, valid or not; beyond it and
    the burst they are shed unparsed (counted), so one box's junk cannot hold up the others."""
    telemetry_bytes_burst: int = Field(default=4 * 1024 * 1024, ge=64 * 1024)
    """Burst of inbound telemetry bytes per greenhouse allowed above the sustained rate."""
    inbox_per_greenhouse: int = Field(default=64, ge=1)
    """Telemetry waiting for a decision per greenhouse; beyond it the oldest is shed (the newest matters)."""
    mqtt_username: str | None = None
    """Broker username; takes precedence over one in `mqtt_url`."""
    mqtt_password: SecretStr | None = None
    """Broker password; takes precedence over one in `mqtt_url`."""
    mqtt_ca_file: Path | None = None
    """PEM file of the site's private CA that signed the broker's certificate (TLS)."""
    mqtt_cert_file: Path | None = None
    """PEM client certificate of this service (TLS with client certificates)."""
    mqtt_key_file: Path | None = None
    """PEM private key of `mqtt_cert_file`."""
    max_request_bytes: int = Field(default=256 * 1024, ge=1024)
    """Largest API request body accepted (413 beyond)."""
    login_max_failures_per_account: int = Field(default=20, ge=1)
    """Failed logins per account from all addresses together within `login_window_s` that lock it for
    `login_lockout_s`: while locked, an address that failed on it is refused and any other gets one try, so
    its owner still logs in from a clean address; an admin lifts a lock on the Users page, `POST
    /api/users/{name}/unlock` or `greentwin user unlock NAME`."""
    login_max_failures_per_address: int = Field(default=20, ge=1)
    """Failed logins from one client address within `login_window_s`, over every account and unknown name
    together; beyond it the address is refused (429) until the window slides open."""
    login_lockout_s: float = Field(default=900.0, gt=0, le=86400.0)
    """How long an account stays locked after the last failed login at `login_max_failures_per_account`."""
    log_repeat_interval_s: float = Field(default=60.0, gt=0, le=3600.0)
    """The log's flood guard: of each kind of line (logger, level and message template; access lines by
    status, successful ones by route), at most `log_repeat_burst` per this many seconds; the rest are counted
    and one line then says how many were suppressed."""
    log_repeat_burst: int = Field(default=10, ge=1)
    """Lines of one kind let through per `log_repeat_interval_s` before the rest are only counted."""
    trusted_proxies: str = ""
    """Comma-separated addresses or networks (CIDR) of the reverse proxies in front of the API, e.g.
    `10.0.0.5,10.1.0.0/16`: from them alone `X-Forwarded-For` (the right-most address not in this list is the
    client, for login limits and the audit trail) and `X-Forwarded-Proto` are believed. Empty: none, the
    client is the connection's peer."""

    def trusted_proxy_networks(self) -> tuple[IPNetwork, ...]:
        """`trusted_proxies` parsed."""
        return parse_networks(self.trusted_proxies)

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_parse(cls, value: str) -> str:
        """A mistyped proxy address fails at start, not by trusting nobody (or the wrong host) silently."""
        parse_networks(value)
        return value

    def mqtt_tls(self) -> TlsFiles | None:
        """The TLS files to connect with, or None when none is set."""
        if self.mqtt_ca_file is None and self.mqtt_cert_file is None and self.mqtt_key_file is None:
            return None
        return TlsFiles(self.mqtt_ca_file, self.mqtt_cert_file, self.mqtt_key_file)

    def mqtt_target(self) -> MqttTarget:
        """Where the broker is and who we are to it (URL, then settings' credentials)."""
        password = None if self.mqtt_password is None else self.mqtt_password.get_secret_value()
        return with_credentials(parse_mqtt_url(self.mqtt_url), self.mqtt_username, password)

    @field_validator("mqtt_topic_root")
    @classmethod
    def _topic_root_is_one_level(cls, value: str) -> str:
        """A root with `/`, `+` or `#` would make the subscriptions match other sites' topics."""
        return validate_topic_root(value)

    @model_validator(mode="after")
    def _usable_mqtt_settings(self) -> Self:
        """A bad broker URL or a missing TLS file fails at start, not at the first reconnect."""
        self.mqtt_target()
        self.mqtt_tls()
        return self

    # Leases (several replicas): a replica commands a greenhouse only while it holds its lease.
    lease_ttl_s: float = Field(default=12.0, gt=0, le=3600.0)
    """How long a greenhouse's lease lasts unrenewed; a dead replica's greenhouses are taken over within
    `lease_ttl_s` + `lease_renew_s`."""
    lease_renew_s: float = Field(default=3.0, gt=0)
    """How often a replica renews its leases and takes over expired ones (at most half of `lease_ttl_s`)."""
    replica_id: str | None = Field(default=None, min_length=1, max_length=128)
    """Names this replica in the lease table; by default the host and the state directory, so a restarted
    replica takes its own leases back at once."""

    # The site's outlook: one weather and one price provider, shared by every greenhouse.
    weather_url: str = ""
    """Base URL of an Open-Meteo style hourly forecast API (`{url}/v1/forecast`); empty: no forecast is
    fetched and decisions see yesterday's observed weather, else a fixed climatology (recorded as `fallback`,
    no alarm)."""
    site_latitude: float = Field(default=52.0, ge=-90.0, le=90.0)
    """The site's latitude [deg] for the weather forecast."""
    site_longitude: float = Field(default=5.0, ge=-180.0, le=180.0)
    """The site's longitude [deg] for the weather forecast (and the climatology's solar time)."""
    price_url: str = ""
    """Base URL of the day-ahead price API (`GET {url}/v1/day-ahead`, JSON `{"unit": "EUR/MWh", "prices":
    [{"start": ISO, "eur_mwh": x}]}`); empty: the time-of-use tariff is the contract, every hour known."""
    price_adder_eur_mwh: float = Field(default=30.0, ge=-1000.0, le=6000.0)
    """Network, tax and supplier margin the grower pays on top of the spot or tariff price [EUR/MWh]."""
    outlook_timeout_s: float = Field(default=3.0, gt=0, le=60.0)
    """Time-out of one weather or price request (each of connect, send, read, and the whole body)."""
    outlook_retries: int = Field(default=2, ge=0, le=10)
    """Retries after a failed weather or price request (transport errors, 5xx, malformed data)."""
    outlook_cache_ttl_s: float = Field(default=900.0, ge=0)
    """How long a fetched forecast or price list is reused before the next refresh asks again."""
    outlook_refresh_s: float = Field(default=300.0, gt=0)
    """How often the outlook is refreshed, off the event loop; a decision never waits for it."""
    outlook_stale_s: float = Field(default=3 * 3600.0, gt=0)
    """A configured source whose data is older than this, or that fell back, raises an `outlook_*` alarm on
    every decision until it recovers."""
    forecast_every_s: float = Field(default=300.0, ge=0.0)
    """How often each greenhouse's twin runs the served policy 24 h forward under the outlook (the dashboard's
    forecast), in a worker process beside the control loop; 0: no forecasts."""
    # Policy registry and nightly retraining (app.registry, app.retraining).
    policy_poll_s: float = Field(default=30.0, gt=0, le=3600.0)
    """How often the service checks the policy registry for a newly promoted ensemble and swaps to it (no
    restart)."""
    settings_poll_s: float = Field(default=5.0, gt=0, le=3600.0)
    """How often each replica checks the greenhouse table for new registrations and settings changes and
    applies them (no restart); the replica that serves a change applies it at once."""
    retrain_dir: Path = Path("retrain")
    """Where `greentwin retrain` keeps its runs (one resumable folder each) and the candidate ensembles it
    registers."""
    retrain_launcher: str = ""
    """A command that `greentwin retrain` runs its fine-tuning under, e.g. `torchrun --standalone
    --nproc-per-node 4` (several GPUs; `--nnodes` for several machines); it is followed by `-m app.cli
    retrain-worker JOB`. Empty: in the retraining process."""
    retrain_every_s: float = Field(default=0.0, ge=0.0)
    """`greentwin demo` only: run the retraining job this often with a tiny budget (0: never; the demo sets
    its own). Production schedules `greentwin retrain` with the systemd timer or the compose service."""

    # The site's economics: what the policy's observation and the PDF report's money both price.
    fruit_price_eur_kg: float = Field(default=1.0, gt=0.0, le=10.0)
    """What the grower is paid per kg of fresh fruit [EUR/kg]: the observation's fruit price (its range ends
    at 10) and the report's revenue."""
    water_price_eur_m3: float = Field(default=0.75, ge=0.0, le=100.0)
    """What irrigation water costs [EUR/m3]: the report's water cost and the dashboard's water cost today (tap
    water ~1, rainwater ~0)."""

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
            raise ValueError(f"GREENTWIN_SITE_TIMEZONE {self.site_timezone!r} is not an IANA "
                             "time zone") from exc
        return self

    @model_validator(mode="after")
    def _prod_needs_real_audit_key(self) -> Self:
        """Refuse to start production with an audit trail nobody can trust (no key, or an example one)."""
        if self.environment != "prod":
            return self
        given = self.audit_keys or self.audit_key
        if given is None:
            raise ValueError("GREENTWIN_AUDIT_KEY is required when environment is 'prod'")
        key = given.get_secret_value().strip()
        if key.lower() in PLACEHOLDER_KEYS or len(set(key)) <= 1:
            raise ValueError("GREENTWIN_AUDIT_KEY is a placeholder; set a real key for 'prod'")
        if len(key) < MIN_PROD_KEY_LEN:
            raise ValueError(f"GREENTWIN_AUDIT_KEY must be at least {MIN_PROD_KEY_LEN} characters in 'prod'")
        return self

    @model_validator(mode="after")
    def _prod_refuses_weak_secret_key(self) -> Self:
        """A token signing secret from an example would let anyone mint an operator's token (and an
        example metrics token let anyone read the site's metrics)."""
        if self.environment != "prod":
            return self
        for name, secret in (("GREENTWIN_SECRET_KEY", self.secret_key),
                             ("GREENTWIN_METRICS_TOKEN", self.metrics_token)):
            if secret is None:
                continue
            key = secret.get_secret_value().strip()
            if not key and secret is self.metrics_token:
                continue  # set but empty: no metrics token, /metrics stays closed
            if key.lower() in PLACEHOLDER_KEYS or len(set(key)) <= 1:
                raise ValueError(f"{name} is a placeholder; set a real secret for 'prod'")
            if len(key) < MIN_PROD_KEY_LEN:
                raise ValueError(f"{name} must be at least {MIN_PROD_KEY_LEN} characters in 'prod'")
        return self


def configured_secrets_dir() -> Path | None:
    """``GREENTWIN_SECRETS_DIR``: read before the model, because it says where the model's files are."""
    return Path(d) if (d := os.environ.get("GREENTWIN_SECRETS_DIR")) else None


def get_settings(secrets_dir: Path | None = None) -> Settings:
    """Build settings, also reading Docker/Kubernetes-style secret files (one file per field).

    The directory is ``secrets_dir`` or ``GREENTWIN_SECRETS_DIR``; files are named like the
    variables (``greentwin_audit_key``), so a key never has to sit in the environment.
    """
    secrets_dir = secrets_dir or configured_secrets_dir()
    if secrets_dir is None:
        return Settings()
    return Settings(_secrets_dir=secrets_dir)  # type: ignore[call-arg]
