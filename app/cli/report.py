"""Handlers behind ``greentwin report`` (build and sign a PDF) and ``greentwin report verify``.

Signing identity, in order: the PEM files named by ``GREENTWIN_REPORT_KEY`` and
``GREENTWIN_REPORT_CERT``; else (dev/demo only) a P-256 key and self-signed certificate kept in
``<state dir>/report-signing/`` and generated on first use, with a note saying so. Verification
trusts ``--cert``, else ``GREENTWIN_REPORT_CERT``, else that stored certificate.

The report embeds the sealed audit trail's verification result when audit keys are configured
(``GREENTWIN_AUDIT_KEYS`` / ``GREENTWIN_AUDIT_KEY`` and ``GREENTWIN_AUDIT_SIGNING_KEY``); unlike
``greentwin audit verify`` it never invents keys, because throw-away keys would print a false
"tampered" verdict into a signed document.

Heavy imports (reportlab, pyHanko) happen inside the handlers, so ``greentwin --help`` stays fast.
"""

from __future__ import annotations

import argparse
import getpass
import shlex
import socket
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.config import Settings
    from audit.signing import SigningIdentity
    from audit.store import GreenhouseVerifyResult

KEY_ENV = "GREENTWIN_REPORT_KEY"
CERT_ENV = "GREENTWIN_REPORT_CERT"
STATE_DIR_ENV = "GREENTWIN_STATE_DIR"
SIGNING_SUBDIR = "report-signing"
EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
REPORT_LANGUAGES = ("en", "zh-Hans")
"""What ``--language`` takes: the catalogue's languages (audit.wording.LANGUAGES, not imported here so that
``greentwin --help`` stays fast; a test checks they agree)."""


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``greentwin report`` and its ``verify`` subcommand (argparse only, no heavy imports)."""
    parser.add_argument("--greenhouse", metavar="GH", default=None)
    parser.add_argument("--from", dest="period_from", metavar="ISO", default=None,
                        help="period start, ISO-8601 with offset, inclusive (e.g. 2026-06-01T00:00:00Z)")
    parser.add_argument("--to", dest="period_to", metavar="ISO", default=None, help="period end, exclusive")
    parser.add_argument("--out", metavar="FILE.pdf", default=None)
    parser.add_argument("--url", default=None, help="default: GREENTWIN_DATABASE_URL")
    parser.add_argument("--state-dir", default=None,
                        help=f"where a dev/demo signing key is kept (default: ${STATE_DIR_ENV} or ./state)")
    parser.add_argument("--language", choices=REPORT_LANGUAGES, default="en",
                        help="the language of the report's words (default: en)")
    sub = parser.add_subparsers(dest="report_command", required=False)
    ver = sub.add_parser("verify", help="check a report's signature; non-zero exit when invalid")
    ver.add_argument("pdf", metavar="FILE.pdf")
    ver.add_argument("--cert", metavar="PEM", default=None,
                     help=f"trusted signer certificate (default: ${CERT_ENV}, else the dev/demo one)")
    ver.add_argument("--state-dir", default=None)


def main(args: argparse.Namespace) -> int:
    """Dispatch ``greentwin report`` / ``greentwin report verify``."""
    if getattr(args, "report_command", None) == "verify":
        return run_report_verify(args)
    return run_report(args)


def _settings() -> Settings:
    from app.core.config import get_settings

    return get_settings()


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(getattr(args, "state_dir", None) or _settings().state_dir)


def _dev_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    base = _state_dir(args) / SIGNING_SUBDIR
    return base / "report-key.pem", base / "report-cert.pem"


def _parse_iso(name: str, value: str | None) -> datetime:
    if not value:
        raise ValueError(f"--{name} is required")
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"--{name} {value!r} is not ISO-8601") from None
    if dt.tzinfo is None:
        raise ValueError(f"--{name} {value!r} needs a UTC offset (e.g. Z or +02:00)")
    return dt


def load_signing_identity(args: argparse.Namespace) -> SigningIdentity:
    """Configured key and certificate; in dev/demo, the stored (or a newly generated) self-signed pair."""
    from audit.signing import generate_identity, load_identity, save_identity

    settings = _settings()
    key_path, cert_path = settings.report_key, settings.report_cert
    if key_path and cert_path:
        return load_identity(key_path, cert_path)
    if key_path or cert_path:
        raise ValueError(f"set both {KEY_ENV} and {CERT_ENV}, or neither")
    env = settings.environment
    if env == "prod":
        raise ValueError(f"report signing key not configured: set {KEY_ENV} and {CERT_ENV}")
    dev_key, dev_cert = _dev_paths(args)
    if dev_key.is_file() and dev_cert.is_file():
        return load_identity(dev_key, dev_cert)
    identity = generate_identity()
    save_identity(identity, dev_key, dev_cert)
    print(f"note: no {KEY_ENV}/{CERT_ENV}; generated a self-signed report signing key in {dev_key.parent} "
          f"({env} only). Verifiers need {dev_cert}.", file=sys.stderr)
    return identity


def audit_verification(url: str, greenhouse_id: str, language: str = "en") -> str:
    """One line on the sealed audit trail of ``greenhouse_id``, for the report, in ``language`` (never raises)."""
    from app.audit_keys import load_keyring, load_retired_keys, load_signer
    from app.core.config import get_settings
    from app.core.db import make_engine
    from audit.errors import AuditError
    from audit.store import AuditStore
    from audit.wording import text

    try:
        settings = get_settings()
        keyring, signer, retired = load_keyring(settings), load_signer(settings), load_retired_keys(settings)
    except (AuditError, ValueError) as exc:
        return text("report.verification.unusable", language, error=exc)
    if keyring is None or signer is None:
        return text("report.verification.not_configured", language)
    engine = make_engine(url)
    try:
        [result] = AuditStore(engine, keyring, signer, retired_keys=retired).verify(greenhouse_id)
    except Exception as exc:  # the report still goes out, saying verification did not complete
        return text("report.verification.not_completed", language, error=f"{type(exc).__name__}: {exc}")
    finally:
        engine.dispose()
    return verification_words(result, language)


def verification_words(result: GreenhouseVerifyResult, language: str = "en") -> str:
    """The audit trail's verdict as the report prints it (the CLI and the API word it alike)."""
    from audit.wording import text

    if result.records_checked == 0 and result.ok:
        return text("report.verification.empty", language)
    if result.ok:
        return text("report.verification.passed", language, n=result.records_checked, head=result.head_seq)
    return text("report.verification.failed", language, seq=result.first_bad_seq, reason=result.reason)


def _generated_by() -> str:
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return f"{user}@{socket.gethostname()} (greentwin report)"


def run_report(args: argparse.Namespace) -> int:
    """``greentwin report --greenhouse GH --from ISO --to ISO --out FILE.pdf [--url URL] [--language LANG]``."""
    from app.core.config import get_settings
    from app.core.db import SchemaOutOfDate, make_engine, make_session_factory, require_current_schema
    from app.reports import collect_report_data, site_energy_model
    from audit.report import render_report
    from audit.signing import sign_pdf

    try:
        if not args.greenhouse or not args.out:
            raise ValueError("--greenhouse and --out are required (or use `greentwin report verify FILE.pdf`)")
        start = _parse_iso("from", args.period_from)
        end = _parse_iso("to", args.period_to)
        if end <= start:
            raise ValueError("--to must be after --from")
        identity = load_signing_identity(args)
        settings = get_settings()  # a bad setting (a pydantic ValueError) is a usage error too
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    url = args.url or settings.database_url
    # Absolute paths: the line is printed into the report and must work from wherever it is run.
    cert = Path(settings.report_cert).resolve() if settings.report_cert else None
    check = verify_command(cert, _state_dir(args).resolve())
    engine = make_engine(url)
    try:
        require_current_schema(engine)
        lang = getattr(args, "language", None) or "en"
        verification = audit_verification(url, args.greenhouse, lang)
        with make_session_factory(engine)() as session:
            data = collect_report_data(session, args.greenhouse, start, end, verification=verification,
                                       energy=site_energy_model(settings),
                                       verify_command=check, language=lang)
    except (SchemaOutOfDate, LookupError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        engine.dispose()
    report_id = str(uuid.uuid4())
    pdf = render_report(data, generated_by=_generated_by(), generated_at=datetime.now(UTC), report_id=report_id)
    signed = sign_pdf(pdf, identity.key, identity.cert)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(signed)
    print(f"wrote {out} (report {report_id}, {data.decision_count} decisions, signed by "
          f"{identity.cert.subject.rfc4514_string()}); check it with: {check}")
    return EXIT_OK


def verify_command(report_cert: Path | None, state_dir: Path) -> str:
    """The ``greentwin report verify`` line that checks a report of the service configured so (the
    dashboard shows it): the configured certificate, else the state directory that keeps the dev/demo
    one. Without either the command looks in ``$GREENTWIN_STATE_DIR`` or ``./state``, which is not
    where a service started with ``--state-dir`` (``greentwin demo`` among them) keeps it."""
    source = f"--cert {shlex.quote(str(report_cert))}" if report_cert else f"--state-dir {shlex.quote(str(state_dir))}"
    return f"greentwin report verify FILE.pdf {source}"


def run_report_verify(args: argparse.Namespace) -> int:
    """``greentwin report verify FILE.pdf [--cert PEM]``: 0 valid, 1 invalid, 2 usage error."""
    from audit.signing import load_certificate, verify_pdf

    cert_path = getattr(args, "cert", None) or _settings().report_cert or _dev_paths(args)[1]
    try:
        trusted = load_certificate(cert_path)
        pdf = Path(args.pdf).read_bytes()
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    outcome = verify_pdf(pdf, trusted)
    if outcome.ok:
        print(f"ok   {args.pdf}: {outcome.reason} (signer: {outcome.signer})")
        return EXIT_OK
    print(f"FAIL {args.pdf}: {outcome.reason}" + (f" (signer: {outcome.signer})" if outcome.signer else ""))
    return EXIT_INVALID
