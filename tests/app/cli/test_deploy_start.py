"""A production start: ``greentwin init`` makes what it needs; a start that cannot proceed says why in one
line."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.cli import db as db_cli
from app.cli.init import (
    ENV_FILE,
    KEYRING_FILE,
    METRICS_TOKEN_FILE,
    REPORT_CERT_FILE,
    SIGNING_FILE,
    TOKEN_FILE,
    init_state_dir,
)
from app.cli.preflight import StartBlocked, preflight
from app.core.config import Settings, get_settings
from tests.app.procs import free_port
from tests.conftest import MQTT_HOST, MQTT_PORT

ROOT = Path(__file__).resolve().parents[3]


def _env_lines(state: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (state / ENV_FILE).read_text().splitlines())


def _prod_env(state: Path, url: str, mqtt_port: int = MQTT_PORT) -> dict[str, str]:
    """A child's environment: what ``greentwin init`` wrote, plus the database and broker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENTWIN_")}
    env.update(_env_lines(state))
    env.update({"GREENTWIN_ENVIRONMENT": "prod", "GREENTWIN_DATABASE_URL": url,
                "GREENTWIN_MQTT_URL": f"mqtt://{MQTT_HOST}:{mqtt_port}"})
    return env


def _serve(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", "serve", "--port", str(free_port())], cwd=cwd,
                          env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)


def _one_line_refusal(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


def test_init_makes_owner_only_files_once(tmp_path: Path) -> None:
    state = tmp_path / "state"
    written = init_state_dir(state)
    assert len(written) == 7
    for path in (state, state / "secrets"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    for path in written:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    secrets = state / "secrets"
    before = {p.name: p.read_bytes() for p in secrets.iterdir()}
    assert init_state_dir(state) == []  # idempotent: nothing changes
    assert {p.name: p.read_bytes() for p in secrets.iterdir()} == before
    (secrets / SIGNING_FILE).unlink()
    with pytest.raises(FileExistsError, match=KEYRING_FILE):  # a half-made directory is not guessed at
        init_state_dir(state)
    assert not (secrets / SIGNING_FILE).exists()
    init_state_dir(state, force=True)
    assert (secrets / KEYRING_FILE).read_bytes() != before[KEYRING_FILE]
    assert (secrets / REPORT_CERT_FILE).read_bytes() != before[REPORT_CERT_FILE]


def test_init_adds_the_metrics_token_to_a_directory_made_before_it(tmp_path: Path) -> None:
    """A site initialised by an older version reruns init: it gets the metrics token, and no key changes."""
    state = tmp_path / "state"
    init_state_dir(state)
    secrets = state / "secrets"
    (secrets / METRICS_TOKEN_FILE).unlink()
    before = {p.name: p.read_bytes() for p in secrets.iterdir()}
    assert init_state_dir(state) == [secrets / METRICS_TOKEN_FILE]
    assert {p.name: p.read_bytes() for p in secrets.iterdir() if p.name != METRICS_TOKEN_FILE} == before
    token = (secrets / METRICS_TOKEN_FILE).read_text().strip()
    assert len(token) >= 32 and stat.S_IMODE((secrets / METRICS_TOKEN_FILE).stat().st_mode) == 0o600
    settings = get_settings(secrets)
    assert settings.metrics_token is not None and settings.metrics_token.get_secret_value().strip() == token


def test_initialised_state_passes_every_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              mqtt_available: tuple[str, int]) -> None:
    from app.cli.report import load_signing_identity

    state, url = tmp_path / "state", f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    init_state_dir(state)
    db_cli.upgrade(url)
    for name, value in _prod_env(state, url, mqtt_available[1]).items():
        if name.startswith("GREENTWIN_"):
            monkeypatch.setenv(name, value)
    settings = preflight()
    assert settings.environment == "prod" and settings.state_dir == state.resolve()
    assert settings.secret_key is not None
    assert settings.secret_key.get_secret_value() == (state / "secrets" / TOKEN_FILE).read_text().strip()
    identity = load_signing_identity(type("Args", (), {"state_dir": None})())
    assert identity.cert.subject.rfc4514_string()


@pytest.fixture
def initialised(tmp_path: Path) -> tuple[Path, str]:
    state, url = tmp_path / "state", f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    init_state_dir(state)
    db_cli.upgrade(url)
    return state, url


def test_missing_token_secret_is_one_line(initialised: tuple[Path, str], tmp_path: Path) -> None:
    state, url = initialised
    (state / "secrets" / TOKEN_FILE).unlink()
    _one_line_refusal(_serve(_prod_env(state, url), tmp_path), "GREENTWIN_SECRET_KEY", "greentwin init")


def test_missing_audit_keyring_is_one_line(initialised: tuple[Path, str], tmp_path: Path) -> None:
    state, url = initialised
    (state / "secrets" / KEYRING_FILE).unlink()
    _one_line_refusal(_serve(_prod_env(state, url), tmp_path), "GREENTWIN_AUDIT_KEY", "greentwin init")


def test_unreadable_key_file_is_one_line(initialised: tuple[Path, str], tmp_path: Path) -> None:
    state, url = initialised
    env = _prod_env(state, url)
    env["GREENTWIN_AUDIT_SIGNING_KEY"] = str(state)  # a directory: unreadable as a file, even for root
    _one_line_refusal(_serve(env, tmp_path), "GREENTWIN_AUDIT_SIGNING_KEY", "cannot be read")
    if os.geteuid() != 0:  # root reads a mode-000 file anyway
        key = state / "secrets" / SIGNING_FILE
        key.chmod(0)
        _one_line_refusal(_serve(_prod_env(state, url), tmp_path), "GREENTWIN_AUDIT_SIGNING_KEY",
                          "cannot be read")


def test_schema_behind_is_one_line(initialised: tuple[Path, str], tmp_path: Path) -> None:
    state, _ = initialised
    fresh = f"sqlite:///{tmp_path / 'never-migrated.sqlite3'}"
    _one_line_refusal(_serve(_prod_env(state, fresh), tmp_path), "greentwin db upgrade")


def test_unreachable_broker_is_one_line(initialised: tuple[Path, str], tmp_path: Path) -> None:
    state, url = initialised
    port = free_port()  # nothing listens there
    _one_line_refusal(_serve(_prod_env(state, url, port), tmp_path), "MQTT broker unreachable", str(port))
    # A URL that is no broker URL is refused when the settings are read, with the password masked.
    with pytest.raises(ValidationError, match="mqtt:// or mqtts://") as refused:
        Settings(mqtt_url="http://user:hunter2@example.invalid")
    assert "hunter2" not in str(refused.value)


def test_settings_in_prod_without_keys_is_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENTWIN_")}
    env["GREENTWIN_ENVIRONMENT"] = "prod"
    _one_line_refusal(_serve(env, tmp_path), "GREENTWIN_AUDIT_KEY", "greentwin init")


def test_settings_read_the_key_paths(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Key files and the state directory come through the settings model; an empty value means unset."""
    monkeypatch.setenv("GREENTWIN_REPORT_KEY", "")
    monkeypatch.setenv("GREENTWIN_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("GREENTWIN_AUDIT_SIGNING_KEY", str(tmp_path / "k.pem"))
    s = get_settings()
    assert s.report_key is None and s.state_dir == tmp_path and s.audit_signing_key == tmp_path / "k.pem"


def test_missing_secrets_dir_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from app.cli.preflight import load_settings

    monkeypatch.setenv("GREENTWIN_SECRETS_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(StartBlocked, match="GREENTWIN_SECRETS_DIR .*nowhere.*greentwin init"):
        load_settings()
