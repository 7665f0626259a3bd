"""Where the service finds the audit trail's keys: the settings model.

Key material, in order: the keyring JSON in ``Settings.audit_keys`` (``GREENTWIN_AUDIT_KEYS``),
else ``Settings.audit_key`` (keyring JSON text, or the path of a keyring JSON file); the Ed25519
signing key from the PEM file ``Settings.audit_signing_key``, and the public keys it replaced from
the file beside it (``<signing key file>.retired``, written by ``greentwin audit keygen --rotate
... --signing-key``), so what was signed before a rotation still verifies. The loaders answer None when
nothing is configured, so each caller decides what a missing key means (the service refuses to
start outside demo mode, a command makes a throw-away key, a report says it did not verify).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from app.core.config import Settings, get_settings
from audit.crypto import DEFAULT_KEYS_ENV, Keyring, Signer, load_public_keys
from audit.errors import AuditKeyError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

SIGNING_KEY_ENV = "GREENTWIN_AUDIT_SIGNING_KEY"
__all__ = ["DEFAULT_KEYS_ENV", "SIGNING_KEY_ENV", "load_keyring", "load_retired_keys", "load_signer",
           "retired_keys_path"]


def load_keyring(settings: Settings) -> Keyring | None:
    """The configured keyring, or None when none is configured."""
    if settings.audit_keys is not None and (text := settings.audit_keys.get_secret_value().strip()):
        return Keyring.from_json(text)
    if settings.audit_key is None:
        return None
    value = settings.audit_key.get_secret_value().strip()
    if value.startswith("{"):
        return Keyring.from_json(value)
    if Path(value).is_file():
        return Keyring.from_file(value)
    raise AuditKeyError("GREENTWIN_AUDIT_KEY must be keyring JSON or the path of a keyring JSON file")


def load_signer(settings: Settings | None = None) -> Signer | None:
    """The signing key from the PEM file ``settings.audit_signing_key``, or None when unset."""
    path = (settings or get_settings()).audit_signing_key
    if path is None or not str(path):
        return None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AuditKeyError(f"cannot read {SIGNING_KEY_ENV} file {str(path)!r}: {exc.strerror}") from None
    return Signer.from_pem(data)


def retired_keys_path(signing_key: Path) -> Path:
    """The file of public keys the signing key at ``signing_key`` replaced (PEM blocks, oldest first)."""
    return signing_key.with_name(signing_key.name + ".retired")


def load_retired_keys(settings: Settings | None = None) -> list[Ed25519PublicKey]:
    """The retired signing keys' public keys; none when no signing key is configured or none was retired."""
    path = (settings or get_settings()).audit_signing_key
    if path is None or not str(path):
        return []
    retired = retired_keys_path(path)
    try:
        data = retired.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise AuditKeyError(f"cannot read retired signing keys {str(retired)!r}: {exc.strerror}") from None
    return load_public_keys(data)
