"""Where the service finds the audit trail's keys: the environment and its settings.

Key material, in order: the keyring JSON in ``GREENTWIN_AUDIT_KEYS``, else
``Settings().audit_key`` (keyring JSON text, or the path of a keyring JSON file); the Ed25519
signing key from the PEM file named by ``GREENTWIN_AUDIT_SIGNING_KEY``. Both loaders answer None
when nothing is configured, so each caller decides what a missing key means (the service refuses
to start outside demo mode, a command makes a throw-away key, a report says it did not verify).
"""

from __future__ import annotations

import os
from pathlib import Path

from app.core.config import Settings
from audit.crypto import DEFAULT_KEYS_ENV, Keyring, Signer
from audit.errors import AuditKeyError

SIGNING_KEY_ENV = "GREENTWIN_AUDIT_SIGNING_KEY"


def load_keyring(settings: Settings) -> Keyring | None:
    """The configured keyring, or None when none is configured."""
    if os.environ.get(DEFAULT_KEYS_ENV):
        return Keyring.from_env()
    if settings.audit_key is None:
        return None
    value = settings.audit_key.get_secret_value().strip()
    if value.startswith("{"):
        return Keyring.from_json(value)
    if Path(value).is_file():
        return Keyring.from_file(value)
    raise AuditKeyError("GREENTWIN_AUDIT_KEY must be keyring JSON or the path of a keyring JSON file")


def load_signer() -> Signer | None:
    """The signing key from the PEM file in ``GREENTWIN_AUDIT_SIGNING_KEY``, or None when unset."""
    path = os.environ.get(SIGNING_KEY_ENV)
    if not path:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise AuditKeyError(f"cannot read {SIGNING_KEY_ENV} file {path!r}: {exc.strerror}") from None
    return Signer.from_pem(data)
