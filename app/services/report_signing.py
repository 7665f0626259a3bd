"""The identity that signs PDF reports, and the command line that checks one: the same for
``greentwin report`` and the API's download.

Signing identity, in order: the PEM files named by ``GREENTWIN_REPORT_KEY`` and
``GREENTWIN_REPORT_CERT``; else (dev/demo only) a P-256 key and self-signed certificate kept in
``<state dir>/report-signing/`` and generated on first use, with a note saying so. Verification
trusts the configured certificate, else that stored one.

pyHanko and cryptography load inside the functions, so ``greentwin --help`` stays fast.
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.config import Settings
    from audit.signing import SigningIdentity

KEY_ENV = "GREENTWIN_REPORT_KEY"
CERT_ENV = "GREENTWIN_REPORT_CERT"
SIGNING_SUBDIR = "report-signing"
# Two first reports (two API downloads at once) must not each generate a dev/demo key and overwrite
# the other's: the one written last would not match the certificate a verifier was told to trust.
_identity_lock = threading.Lock()


def dev_signing_paths(state_dir: Path) -> tuple[Path, Path]:
    """Where the dev/demo key and certificate are kept under ``state_dir``."""
    base = state_dir / SIGNING_SUBDIR
    return base / "report-key.pem", base / "report-cert.pem"


def signing_identity(settings: Settings, state_dir: Path,
                     note: Callable[[str], None] | None = None) -> SigningIdentity:
    """Configured key and certificate; in dev/demo, the stored (or a newly generated) self-signed pair.

    ``ValueError`` where none may be used (half configured, or none in prod); ``note`` hears of a
    newly generated pair, which verifiers must be told about."""
    from audit.signing import generate_identity, load_identity, save_identity

    key_path, cert_path = settings.report_key, settings.report_cert
    if key_path and cert_path:
        return load_identity(key_path, cert_path)
    if key_path or cert_path:
        raise ValueError(f"set both {KEY_ENV} and {CERT_ENV}, or neither")
    env = settings.environment
    if env == "prod":
        raise ValueError(f"report signing key not configured: set {KEY_ENV} and {CERT_ENV}")
    dev_key, dev_cert = dev_signing_paths(state_dir)
    with _identity_lock:
        if dev_key.is_file() and dev_cert.is_file():
            return load_identity(dev_key, dev_cert)
        identity = generate_identity()
        save_identity(identity, dev_key, dev_cert)
    if note is not None:
        note(f"no {KEY_ENV}/{CERT_ENV}; generated a self-signed report signing key in {dev_key.parent} "
             f"({env} only). Verifiers need {dev_cert}.")
    return identity


def trusted_certificate(settings: Settings, state_dir: Path) -> Path:
    """The certificate a report of this service is checked against: the configured one, else the
    dev/demo one."""
    return Path(settings.report_cert or dev_signing_paths(state_dir)[1])


def verify_command(report_cert: Path | None, state_dir: Path) -> str:
    """The ``greentwin report verify`` line that checks a report of the service configured so (the
    report and the dashboard show it): the configured certificate, else the state directory that keeps
    the dev/demo one. Without either the command looks in ``$GREENTWIN_STATE_DIR`` or ``./state``, which
    is not where a service started with ``--state-dir`` (``greentwin demo`` among them) keeps it."""
    source = (f"--cert {shlex.quote(str(report_cert))}" if report_cert
              else f"--state-dir {shlex.quote(str(state_dir))}")
    return f"greentwin report verify FILE.pdf {source}"
