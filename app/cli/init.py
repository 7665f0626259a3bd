"""``greentwin init --state-dir DIR``: everything a production start needs, made once.

Run it as the user the service runs as (in the container: ``docker compose run --rm init``), so
every file belongs to that user and is readable by nobody else (files 0600, folders 0700):

* ``DIR/secrets/greentwin_secret_key``: the API token secret (``GREENTWIN_SECRET_KEY`` read
  through ``GREENTWIN_SECRETS_DIR``);
* ``DIR/secrets/greentwin_audit_key``: the audit keyring (``GREENTWIN_AUDIT_KEY``, same way);
* ``DIR/secrets/greentwin_metrics_token``: the bearer token Prometheus reads ``/metrics`` with
  (``GREENTWIN_METRICS_TOKEN``, same way; give Prometheus a copy);
* ``DIR/secrets/audit_signing_key``: the Ed25519 key that signs audit checkpoints;
* ``DIR/secrets/report_key.pem`` and ``report_cert.pem``: the report signing key and its
  self-signed certificate (replace both with a CA-issued pair if verifiers need one);
* ``DIR/greentwin.env``: the ``GREENTWIN_*`` lines that point the service at all of the above.

A second run changes nothing but add what a newer version makes and this directory lacks (the
metrics token). Existing key material is never replaced without ``--force``, because a new
keyring makes every sealed record unreadable.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path

EXIT_OK, EXIT_USAGE = 0, 2
SECRETS_SUBDIR = "secrets"
ENV_FILE = "greentwin.env"
TOKEN_FILE, KEYRING_FILE, SIGNING_FILE = "greentwin_secret_key", "greentwin_audit_key", "audit_signing_key"
METRICS_TOKEN_FILE = "greentwin_metrics_token"
ADDED_LATER = (f"{SECRETS_SUBDIR}/{METRICS_TOKEN_FILE}",)
"""Files a directory initialised by an older version may lack: a rerun adds them, nothing else."""
REPORT_KEY_FILE, REPORT_CERT_FILE = "report_key.pem", "report_cert.pem"


def add_init_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``greentwin init`` (argparse only)."""
    parser.add_argument("--state-dir", required=True, metavar="DIR",
                        help="state directory of the service; secrets go to DIR/secrets")
    parser.add_argument("--force", action="store_true",
                        help="replace existing keys (sealed audit records become unreadable)")


def _write_private(path: Path, data: bytes, *, replace: bool) -> None:
    """Owner-only file, written whole: a temporary file renamed over the target (never half a key)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    if replace:
        os.replace(tmp, path)
    else:
        os.link(tmp, path)  # fails with FileExistsError instead of overwriting a key made meanwhile
        tmp.unlink()


def _materials(state: Path) -> dict[str, Callable[[], bytes]]:
    """File name -> maker of its content; the report key and certificate are made as one pair."""
    from audit.crypto import Keyring, Signer
    from audit.signing import generate_identity, identity_pem

    pair: list[tuple[bytes, bytes]] = []

    def report(index: int) -> Callable[[], bytes]:
        def make() -> bytes:
            if not pair:
                pair.append(identity_pem(generate_identity()))
            return pair[0][index]
        return make

    secrets_dir = state / SECRETS_SUBDIR
    env = "".join(f"{k}={v}\n" for k, v in (
        ("GREENTWIN_STATE_DIR", state),
        ("GREENTWIN_SECRETS_DIR", secrets_dir),
        ("GREENTWIN_AUDIT_SIGNING_KEY", secrets_dir / SIGNING_FILE),
        ("GREENTWIN_REPORT_KEY", secrets_dir / REPORT_KEY_FILE),
        ("GREENTWIN_REPORT_CERT", secrets_dir / REPORT_CERT_FILE),
    ))
    return {
        f"{SECRETS_SUBDIR}/{TOKEN_FILE}": lambda: (secrets.token_urlsafe(48) + "\n").encode(),
        f"{SECRETS_SUBDIR}/{KEYRING_FILE}": lambda: Keyring.generate().to_json().encode(),
        f"{SECRETS_SUBDIR}/{METRICS_TOKEN_FILE}": lambda: (secrets.token_urlsafe(32) + "\n").encode(),
        f"{SECRETS_SUBDIR}/{SIGNING_FILE}": lambda: Signer.generate().to_pem(),
        f"{SECRETS_SUBDIR}/{REPORT_KEY_FILE}": report(0),
        f"{SECRETS_SUBDIR}/{REPORT_CERT_FILE}": report(1),
        ENV_FILE: lambda: env.encode(),
    }


def init_state_dir(state: Path, *, force: bool = False) -> list[Path]:
    """Make every file a production start needs under ``state``; the paths written.

    Raises FileExistsError naming the files already there when some (not all) exist and
    ``force`` is false; when all exist, writes only those of :data:`ADDED_LATER` it lacks.
    """
    state = state.resolve()
    files = _materials(state)
    existing = [name for name in files if name not in ADDED_LATER and (state / name).exists()]
    if existing and not force and len(existing) < len(files) - len(ADDED_LATER):
        raise FileExistsError(f"{state} already holds {', '.join(existing)}; nothing written "
                                  "(--force replaces every key: sealed audit records become unreadable)")
    if not force:  # what is there stays: all of it, or (checked above) only files added later
        files = {name: make for name, make in files.items() if not (state / name).exists()}
        if not files:
            return []
    for folder in (state, state / SECRETS_SUBDIR):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.chmod(0o700)
    written = []
    for name, make in files.items():
        _write_private(state / name, make(), replace=force)
        written.append(state / name)
    return written


def run_init(args: argparse.Namespace) -> int:
    """``greentwin init --state-dir DIR [--force]``: 0 made (or already there), 2 refused."""
    state = Path(args.state_dir)
    try:
        written = init_state_dir(state, force=args.force)
    except FileExistsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"error: cannot write {exc.filename or state}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    env_file = state.resolve() / ENV_FILE
    if not written:
        print(f"{state} is already initialised; nothing changed (settings in {env_file})")
        return EXIT_OK
    print(f"wrote {len(written)} files under {state.resolve()} (owner-only); "
          f"load the settings from {env_file} (systemd EnvironmentFile=, or `set -a; . {env_file}`)")
    return EXIT_OK


def run_settings(args: argparse.Namespace) -> int:
    """``greentwin settings``: the settings table of deploy/README.md, from the settings themselves."""
    from app.core.settings_doc import settings_markdown

    print(settings_markdown(), end="")
    return 0
