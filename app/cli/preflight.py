"""Checks ``greentwin serve`` runs before it starts: each failure is one line saying what to do.

Everything the service's start-up would otherwise trip over deep inside the ASGI lifespan (a
traceback in the log and uvicorn's exit code 3) is checked here first, in the order an operator
fixes them: settings, key files, database and schema, broker. The service keeps its own checks
(:func:`app.main.create_app` refuses the same things); this only turns them into instructions.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pydantic import ValidationError

from app.core.config import Settings, configured_secrets_dir, get_settings

INIT_HINT = "make it with `greentwin init --state-dir DIR` and load DIR/greentwin.env"


class StartBlocked(Exception):
    """The service cannot start; the message is the one line to print."""


def load_settings() -> Settings:
    """The settings, or :class:`StartBlocked` naming the first invalid one."""
    secrets_dir = configured_secrets_dir()
    if secrets_dir is not None and not os.access(secrets_dir, os.R_OK | os.X_OK):
        raise StartBlocked(f"GREENTWIN_SECRETS_DIR {str(secrets_dir)!r} is missing or unreadable by this "
                           f"user; {INIT_HINT}")
    try:
        return get_settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        where = ".".join(str(p) for p in first["loc"])
        if where and where.upper() not in message.upper():
            message = f"GREENTWIN_{where.upper()}: {message}"
        raise StartBlocked(f"{message}; {INIT_HINT}" if "KEY" in message else message) from None


def _readable(name: str, path: Path | None) -> None:
    if path is None:
        return
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise StartBlocked(f"{name} file {str(path)!r} cannot be read by this user ({exc.strerror}); "
                           "give the service's user read access (run `greentwin init` as that "
                           "user)") from None


def check_keys(settings: Settings) -> None:
    """Token secret, audit keys and report key: present (outside demo) and readable."""
    from app.audit_keys import load_keyring, load_signer
    from audit.errors import AuditError

    for name, path in (("GREENTWIN_AUDIT_SIGNING_KEY", settings.audit_signing_key),
                       ("GREENTWIN_REPORT_KEY", settings.report_key),
                       ("GREENTWIN_REPORT_CERT", settings.report_cert)):
        _readable(name, path)
    try:
        keyring, signer = load_keyring(settings), load_signer(settings)
    except (AuditError, ValueError) as exc:
        raise StartBlocked(f"audit keys unusable: {exc}") from None
    if settings.environment == "demo":
        return
    if settings.secret_key is None or not settings.secret_key.get_secret_value().strip():
        raise StartBlocked(f"GREENTWIN_SECRET_KEY is not set (the API token secret); {INIT_HINT}")
    if keyring is None:
        raise StartBlocked(f"no audit keyring (GREENTWIN_AUDIT_KEY or GREENTWIN_AUDIT_KEYS); {INIT_HINT}")
    if signer is None:
        raise StartBlocked(f"no audit signing key (GREENTWIN_AUDIT_SIGNING_KEY); {INIT_HINT}")


def check_database(settings: Settings) -> None:
    """Reachable, and at the migration head."""
    from sqlalchemy import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from app.core.db import SchemaOutOfDate, make_engine, require_current_schema

    try:
        where = make_url(settings.database_url).render_as_string(hide_password=True)
        engine = make_engine(settings.database_url)
    except (ArgumentError, ValueError, ImportError) as exc:
        raise StartBlocked(f"GREENTWIN_DATABASE_URL is not usable: {exc}") from None
    try:
        require_current_schema(engine)
    except SchemaOutOfDate as exc:
        raise StartBlocked(str(exc)) from None
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise StartBlocked(f"database {where} unreachable: {reason}; start it or fix "
                           "GREENTWIN_DATABASE_URL") from None
    finally:
        engine.dispose()


def check_broker(settings: Settings, timeout_s: float = 3.0) -> None:
    """Something accepts TCP connections at the broker's address (the MQTT session itself reconnects)."""
    from wire.connection import parse_mqtt_url

    try:
        target = parse_mqtt_url(settings.mqtt_url)
    except ValueError as exc:
        raise StartBlocked(f"GREENTWIN_MQTT_URL: {exc}") from None
    try:
        with socket.create_connection((target.host, target.port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise StartBlocked(f"MQTT broker unreachable at {target.host}:{target.port} ({exc.strerror or exc}); "
                           "start it or fix GREENTWIN_MQTT_URL") from None


def preflight() -> Settings:
    """All checks in order; the settings when the service can start."""
    settings = load_settings()
    check_keys(settings)
    check_database(settings)
    check_broker(settings)
    return settings
