"""Handlers behind ``greentwin audit verify``, ``audit baseline-access``, ``audit purge`` and
``audit keygen``.

Keys come from :mod:`app.audit_keys`. In ``dev``/``demo`` a missing key is generated for this
run with a warning (such keys open nothing stored earlier); in ``prod`` it is an error, because
a made-up key would make every record look tampered.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app.audit_keys import SIGNING_KEY_ENV, load_keyring, load_retired_keys, load_signer, retired_keys_path
from app.core.config import Settings, get_settings
from audit.crypto import DEFAULT_KEYS_ENV, Keyring, Signer
from audit.errors import AuditError, AuditKeyError

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from audit.store import AuditStore

EXIT_OK, EXIT_TAMPER, EXIT_USAGE = 0, 1, 2


def load_keys(settings: Settings) -> tuple[Keyring, Signer]:
    """Configured keys; in dev/demo, generated stand-ins with a warning on stderr."""
    keyring, signer = load_keyring(settings), load_signer(settings)
    missing = [name for name, v in ((DEFAULT_KEYS_ENV, keyring), (SIGNING_KEY_ENV, signer)) if v is None]
    if missing and settings.environment == "prod":
        raise AuditKeyError(f"audit keys not configured: {', '.join(missing)}")
    if keyring is None:
        print(
            f"warning: no audit keyring ({DEFAULT_KEYS_ENV} / GREENTWIN_AUDIT_KEY); "
            f"generated a throw-away one ({settings.environment} only)",
            file=sys.stderr,
        )
        keyring = Keyring.generate()
    if signer is None:
        print(
            f"warning: no signing key ({SIGNING_KEY_ENV}); generated a throw-away one "
            f"({settings.environment} only)",
            file=sys.stderr,
        )
        signer = Signer.generate()
    return keyring, signer


def _open_store(args: argparse.Namespace) -> tuple[AuditStore, Engine]:
    """Store over the migrated database; imports lazily so ``greentwin --help`` stays fast."""
    from app.core.db import make_engine, require_current_schema
    from audit.store import AuditStore

    settings = get_settings()
    keyring, signer = load_keys(settings)
    engine = make_engine(getattr(args, "url", None) or settings.database_url)
    try:
        require_current_schema(engine)
    except Exception:
        engine.dispose()
        raise
    return AuditStore(engine, keyring, signer, retired_keys=load_retired_keys(settings)), engine


def run_verify(args: argparse.Namespace) -> int:
    """``greentwin audit verify [--greenhouse GH] [--url URL] [--anchors FILE]``: 0 when every chain
    verifies, holds every stored decision, mode change and answered command, accounts for every account
    and registration as it stands, and still holds the head last exported to the anchor file; 1 naming
    the first bad record or what is missing or other than sealed."""
    from app.core.db import SchemaOutOfDate

    try:
        store, engine = _open_store(args)
    except (AuditError, SchemaOutOfDate) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from app.audit_coverage import check_trail

    gh = getattr(args, "greenhouse", None)
    try:
        trail = check_trail(engine, store, gh)
        anchor_lines, anchors_ok = _check_anchors(store, args, gh)
    finally:
        engine.dispose()
    results, coverage = trail.chains, trail.coverage
    access = [] if trail.access is None or trail.access.empty else [trail.access]
    if not results and not coverage and not access and not anchor_lines:
        print("no audit records")
        return EXIT_OK
    status = EXIT_OK if anchors_ok else EXIT_TAMPER
    for r in results:
        if r.ok:
            print(f"ok   {r.greenhouse_id}: {r.records_checked} records verified (head seq {r.head_seq})")
        else:
            print(f"FAIL {r.greenhouse_id}: first bad record seq={r.first_bad_seq}: {r.reason}")
            status = EXIT_TAMPER
    # A chain that verifies may still lack records: the tables say what must be in it.
    for c in [*coverage, *access]:
        print(c.describe())
        if not c.ok:
            status = EXIT_TAMPER
    for line in anchor_lines:
        print(line)
    return status


def run_baseline_access(args: argparse.Namespace) -> int:
    """``greentwin audit baseline-access [--url URL] [--state-dir DIR]``: once, after upgrading a site whose
    accounts were made before they were sealed, seal every account and greenhouse as they stand
    (:mod:`app.access_baseline`) with the service's keys, the operating system user as the actor; 1 when
    there is nothing to baseline or the access chain fails, 2 for missing keys or an old schema."""
    from app.access_baseline import BaselineRefused, seal_baseline
    from app.access_seal import ChangeNotSealed
    from app.audit_sink import ACCESS_CHAIN
    from app.cli.user import AccessTrail
    from app.core.db import SchemaOutOfDate, require_current_schema

    trail = None
    try:
        trail = AccessTrail(getattr(args, "url", None), getattr(args, "state_dir", None))
        require_current_schema(trail.engine)
        done = seal_baseline(trail.engine, trail.sealer)
    except (BaselineRefused, ChangeNotSealed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_TAMPER
    except (AuditError, SchemaOutOfDate) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if trail is not None:
            trail.close()
    accepted = done.accepted
    print(f"sealed {done.record.kind} at {ACCESS_CHAIN} seq {done.record.seq} by {done.record.actor}: "
          f"{accepted.accounts} accounts and {accepted.greenhouses} greenhouses as they stand, accepting "
          + "; ".join([*accepted.missing(), *accepted.differs()]))
    return EXIT_OK


def _check_anchors(store: AuditStore, args: argparse.Namespace, gh: str | None) -> tuple[list[str], bool]:
    """Lines about each chain against the newest external anchor of its head, and whether all hold.

    A chain cut or rewritten after its head was exported fails even when what is left verifies."""
    from app.anchoring import anchor_path
    from audit.anchors import check_anchors, read_anchors

    arg = getattr(args, "anchors", None)
    path = Path(arg) if arg else anchor_path(get_settings(), get_settings().state_dir)
    if not path.exists():
        if arg:
            return [f"FAIL anchors: {path} does not exist"], False
        return [f"note: no anchor file at {path}; chain heads not checked against exported anchors "
                "(--anchors FILE)"], True
    anchors, problems = read_anchors(path, list(store.verify_keys))
    if gh is not None:
        anchors = {g: cp for g, cp in anchors.items() if g == gh}
    lines = [f"FAIL anchors: {p}" for p in problems]
    checks = check_anchors(store, anchors)
    lines += [c.describe().replace(": ", ": anchor: ", 1) for c in checks]
    return lines, not problems and all(c.ok for c in checks)


def run_purge(args: argparse.Namespace) -> int:
    """``greentwin audit purge [--older-than-days N] [--url URL]``: refuses N below the 180-day retention."""
    from app.core.db import SchemaOutOfDate
    from audit.store import MIN_RETENTION_DAYS

    days = getattr(args, "older_than_days", None)
    days = MIN_RETENTION_DAYS if days is None else days
    if days < MIN_RETENTION_DAYS:
        print(
            f"error: refusing to purge records younger than {MIN_RETENTION_DAYS} days (got {days})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        store, engine = _open_store(args)
    except (AuditError, SchemaOutOfDate) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        results = store.purge(days)
    except AuditError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_TAMPER
    finally:
        engine.dispose()
    if not results:
        print(f"nothing older than {days} days")
    for r in results:
        print(
            f"purged {r.greenhouse_id}: {r.records_deleted} records through seq {r.anchor.seq} "
            f"(anchor signed; purge entry seq {r.record.seq})"
        )
    return EXIT_OK


KEYRING_FILE, SIGNING_KEY_FILE = "greentwin_audit_key", "audit_signing_key"
"""File names ``audit keygen --out`` writes: the keyring is named like its setting, so the folder
can serve as ``GREENTWIN_SECRETS_DIR``."""


def _write_secret(path: Path, data: bytes) -> None:
    """Create ``path`` readable by its owner only; never overwrite an existing key."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _replace_secret(path: Path, data: bytes) -> None:
    """Rewrite an owner-only key file atomically (a crash leaves the old file or the new, never half)."""
    tmp = path.with_name(path.name + ".new")
    tmp.unlink(missing_ok=True)
    _write_secret(tmp, data)
    os.replace(tmp, path)


def _rotate_signing_key(pem: Path, old: Signer) -> None:
    """A fresh signing key in ``pem``; the old public key appended to the retired file first, so no
    moment exists where a statement's key is neither current nor retired."""
    new = Signer.generate()
    retired = retired_keys_path(pem)
    fd = os.open(retired, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, old.public_key_pem())
        os.fsync(fd)
    finally:
        os.close(fd)
    _replace_secret(pem, new.to_pem())
    print(f"rotated {pem}: signing key {new.key_id} (was {old.key_id}); the old public key kept in {retired} "
          "so what it signed still verifies")


def run_keygen(args: argparse.Namespace) -> int:
    """``greentwin audit keygen --out DIR`` or ``--rotate FILE [--signing-key PEM]``; prints key ids,
    never key material.

    Rotation rewrites the keyring atomically with a new current key in front; old keys stay so
    old records still decrypt. Each record names its key id, so the switch is visible in every
    chain from the first record sealed after the service restarts with the new keyring. With
    ``--signing-key`` the Ed25519 signing key is replaced too, and its public key appended to
    ``PEM.retired``: checkpoints and exported anchors signed before still verify (each anchor line
    names its key id).
    """
    try:
        if args.rotate:
            path = Path(args.rotate)
            old = Keyring.from_file(path)
            pem = Path(args.signing_key) if getattr(args, "signing_key", None) else None
            old_signer = None if pem is None else Signer.from_pem(pem.read_bytes())
            new = old.rotate()
            _replace_secret(path, new.to_json().encode())
            print(f"rotated {path}: current key {new.current_key_id} (was {old.current_key_id}); "
                  f"{len(new)} keys kept for decryption")
            if pem is not None and old_signer is not None:
                _rotate_signing_key(pem, old_signer)
            return EXIT_OK
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        keyring, signer = Keyring.generate(), Signer.generate()
        _write_secret(folder / KEYRING_FILE, keyring.to_json().encode())
        _write_secret(folder / SIGNING_KEY_FILE, signer.to_pem())
    except FileExistsError as exc:
        print(f"error: {exc.filename} exists; refusing to overwrite a key", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, AuditError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"wrote {folder / KEYRING_FILE} (key {keyring.current_key_id}) and {folder / SIGNING_KEY_FILE}; "
          f"set GREENTWIN_AUDIT_KEY={folder / KEYRING_FILE} and "
          f"GREENTWIN_AUDIT_SIGNING_KEY={folder / SIGNING_KEY_FILE}")
    return EXIT_OK


def main(args: argparse.Namespace) -> int:
    """``greentwin audit SUBCOMMAND``."""
    runs = {"verify": run_verify, "keygen": run_keygen, "baseline-access": run_baseline_access,
            "purge": run_purge}
    return runs[args.audit_command](args)
