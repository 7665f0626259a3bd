"""Settings: defaults, environment overrides, and the production audit-key guard."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.core.config import DEFAULT_POLICY_DIR, Settings, get_settings

GOOD_KEY = "k3y-" + "0123456789abcdef" * 3


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own GREENTWIN_* variables must not leak into these tests."""
    import os

    for name in list(os.environ):
        if name.upper().startswith("GREENTWIN_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    s = Settings()
    assert s.database_url == "sqlite:///./greentwin.sqlite3"
    assert s.mqtt_url == "mqtt://127.0.0.1:1883"
    assert s.policy_dir == DEFAULT_POLICY_DIR
    assert s.policy_dir.parts[-2:] == ("policy", "shipped")
    assert s.environment == "dev"
    assert s.audit_key is None
    assert s.low_confidence_threshold == 0.6
    assert s.max_age_s > 0 and s.command_ttl_s > 0 and s.ack_timeout_s > 0


def test_env_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GREENTWIN_DATABASE_URL", "postgresql+psycopg://u@db/gt")
    monkeypatch.setenv("GREENTWIN_POLICY_DIR", str(tmp_path))
    monkeypatch.setenv("GREENTWIN_ENVIRONMENT", "demo")
    monkeypatch.setenv("GREENTWIN_MAX_AGE_S", "45")
    monkeypatch.setenv("greentwin_low_confidence_threshold", "0.75")
    s = Settings()
    assert s.database_url == "postgresql+psycopg://u@db/gt"
    assert s.policy_dir == tmp_path
    assert s.environment == "demo"
    assert s.max_age_s == 45.0
    assert s.low_confidence_threshold == 0.75


def test_constructor_beats_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GREENTWIN_MQTT_URL", "mqtt://env:1883")
    assert Settings(mqtt_url="mqtt://arg:1883").mqtt_url == "mqtt://arg:1883"


@pytest.mark.parametrize(
    "field, value",
    [("environment", "staging"), ("max_age_s", 0), ("ack_timeout_s", -1), ("low_confidence_threshold", 1.5)],
)
def test_invalid_values_rejected(field: str, value: object) -> None:
    with pytest.raises(ValidationError):
        Settings(**{field: value})


def test_prod_refuses_missing_key() -> None:
    with pytest.raises(ValidationError, match="AUDIT_KEY is required"):
        Settings(environment="prod")


@pytest.mark.parametrize("key", ["", "changeme", "CHANGEME", "change-me", "  secret  ", "x" * 40,
                                 "short-but-real"])
def test_prod_refuses_placeholder_or_weak_key(key: str) -> None:
    with pytest.raises(ValidationError, match="AUDIT_KEY"):
        Settings(environment="prod", audit_key=key)


def test_prod_refuses_placeholder_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GREENTWIN_ENVIRONMENT", "prod")
    monkeypatch.setenv("GREENTWIN_AUDIT_KEY", "changethis")
    with pytest.raises(ValidationError, match="placeholder"):
        Settings()


def test_prod_accepts_real_key_and_hides_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GREENTWIN_ENVIRONMENT", "prod")
    monkeypatch.setenv("GREENTWIN_AUDIT_KEY", GOOD_KEY)
    s = Settings()
    assert s.audit_key is not None and s.audit_key.get_secret_value() == GOOD_KEY
    assert GOOD_KEY not in repr(s) and GOOD_KEY not in s.model_dump_json()


def test_dev_tolerates_placeholder_key() -> None:
    assert Settings(environment="dev", audit_key="changeme").audit_key is not None


def test_secrets_dir(tmp_path: Path) -> None:
    (tmp_path / "greentwin_audit_key").write_text(GOOD_KEY)
    (tmp_path / "greentwin_environment").write_text("prod")
    s = get_settings(secrets_dir=tmp_path)
    assert s.environment == "prod"
    assert s.audit_key is not None and s.audit_key.get_secret_value() == GOOD_KEY


def test_secrets_dir_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "greentwin_database_url").write_text("sqlite:///from-secret.sqlite3")
    monkeypatch.setenv("GREENTWIN_SECRETS_DIR", str(tmp_path))
    assert get_settings().database_url == "sqlite:///from-secret.sqlite3"


@pytest.mark.parametrize("secret", ["changeme", "  secret ", "y" * 40, "too-short-for-prod"])
def test_prod_refuses_placeholder_or_weak_secret_key(secret: str) -> None:
    with pytest.raises(ValidationError, match="SECRET_KEY"):
        Settings(environment="prod", audit_key=GOOD_KEY, secret_key=secret)


def test_prod_accepts_real_secret_key_and_hides_it(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "s3cr3t-" + "fedcba9876543210" * 3
    monkeypatch.setenv("GREENTWIN_ENVIRONMENT", "prod")
    monkeypatch.setenv("GREENTWIN_AUDIT_KEY", GOOD_KEY)
    monkeypatch.setenv("GREENTWIN_SECRET_KEY", secret)
    s = Settings()
    assert s.secret_key is not None and s.secret_key.get_secret_value() == secret
    assert secret not in repr(s) and secret not in s.model_dump_json()
    # Commands other than the API (migrations, audit, reports) run in prod without one.
    monkeypatch.delenv("GREENTWIN_SECRET_KEY")
    assert Settings(environment="prod", audit_key=GOOD_KEY).secret_key is None
