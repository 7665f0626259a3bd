"""Handlers behind ``greentwin report`` (build and sign a PDF) and ``greentwin report verify``: arguments
in, lines and exit codes out. The work is :mod:`app.services.reports` and
:mod:`app.services.report_signing`, which the API shares (signing identity, verdict, verify line).

Heavy imports (reportlab, pyHanko) happen inside the handlers, so ``greentwin --help`` stays fast.
"""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from app.services.report_signing import CERT_ENV, verify_command

if TYPE_CHECKING:
    from app.core.config import Settings
    from audit.signing import SigningIdentity

STATE_DIR_ENV = "GREENTWIN_STATE_DIR"
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
    """The signing identity for the state directory ``args`` names, saying so on stderr when a dev/demo
    pair was generated (verifiers must be told where its certificate is)."""
    from app.services.report_signing import signing_identity

    return signing_identity(_settings(), _state_dir(args),
                            note=lambda line: print(f"note: {line}", file=sys.stderr))


def _generated_by() -> str:
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return f"{user}@{socket.gethostname()} (greentwin report)"


def run_report(args: argparse.Namespace) -> int:
    """``greentwin report --greenhouse GH --from ISO --to ISO --out FILE.pdf [--url URL]
    [--language LANG]``."""
    from app.core.config import get_settings
    from app.core.db import SchemaOutOfDate, make_engine, make_session_factory, require_current_schema
    from app.services.reports import audit_verification, report_data, sign_report

    try:
        if not args.greenhouse or not args.out:
            raise ValueError("--greenhouse and --out are required (or use `greentwin report verify "
                             "FILE.pdf`)")
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
        verification = audit_verification(engine, args.greenhouse, lang)
        with make_session_factory(engine)() as session:
            data = report_data(session, args.greenhouse, start, end, settings, verification=verification,
                               verify_command=check, language=lang)
    except (SchemaOutOfDate, LookupError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        engine.dispose()
    signed = sign_report(data, identity, _generated_by())
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(signed.pdf)
    print(f"wrote {out} (report {signed.report_id}, {data.decision_count} decisions, signed by "
          f"{identity.cert.subject.rfc4514_string()}); check it with: {check}")
    return EXIT_OK


def run_report_verify(args: argparse.Namespace) -> int:
    """``greentwin report verify FILE.pdf [--cert PEM]``: 0 valid, 1 invalid, 2 usage error."""
    from app.services.report_signing import trusted_certificate
    from audit.signing import load_certificate, verify_pdf

    cert_path = getattr(args, "cert", None) or trusted_certificate(_settings(), _state_dir(args))
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
