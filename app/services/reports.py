"""Building a greenhouse's signed PDF report: what ``greentwin report`` and the API's download share.

The report embeds the sealed audit trail's verdict. The command line checks the trail with the keys
configured (``GREENTWIN_AUDIT_KEYS`` / ``GREENTWIN_AUDIT_KEY`` and ``GREENTWIN_AUDIT_SIGNING_KEY``) and,
unlike ``greentwin audit verify``, never invents keys, because throw-away keys would print a false
"tampered" verdict into a signed document; the service checks it with its own audit store. Both word
the verdict with :func:`verification_words`.

reportlab and pyHanko load inside the functions, so ``greentwin --help`` stays fast.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session

    from app.core.config import Settings
    from audit.report.data import ReportData
    from audit.signing import SigningIdentity
    from audit.store import AuditStore, GreenhouseVerifyResult


@dataclass(frozen=True)
class SignedReport:
    pdf: bytes
    report_id: str
    """A fresh id printed into the document, so two reports of the same period can be told apart."""


def verification_words(result: GreenhouseVerifyResult, language: str = "en") -> str:
    """The audit trail's verdict as the report prints it (the CLI and the API word it alike)."""
    from audit.wording import text

    if result.records_checked == 0 and result.ok:
        return text("report.verification.empty", language)
    if result.ok:
        return text("report.verification.passed", language, n=result.records_checked, head=result.head_seq)
    return text("report.verification.failed", language, seq=result.first_bad_seq, reason=result.reason)


def audit_verification(engine: Engine, greenhouse_id: str, language: str = "en") -> str:
    """One line on the sealed audit trail of ``greenhouse_id``, checked with the configured keys on the
    report's own database connection, in ``language`` (never raises: the report goes out either way,
    saying what it could check)."""
    from app.audit_keys import load_keyring, load_retired_keys, load_signer
    from app.core.config import get_settings
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

    def verify() -> list[GreenhouseVerifyResult]:
        # Opened inside the check: a store that cannot open is a check that did not complete.
        return AuditStore(engine, keyring, signer, retired_keys=retired).verify(greenhouse_id)

    return _verdict(verify, language)


def store_verification(store: AuditStore | None, greenhouse_id: str, language: str = "en") -> str:
    """The audit-trail line of the report from an open store (the service's own keys); ``None`` is a
    service without a trail. Never raises."""
    from audit.wording import text

    if store is None:
        return text("report.verification.no_trail", language)
    return _verdict(lambda: store.verify(greenhouse_id), language)


def _verdict(verify: Callable[[], list[GreenhouseVerifyResult]], language: str) -> str:
    """The words for one greenhouse's check, or for the check failing to complete."""
    from audit.wording import text

    try:
        [result] = verify()
    except Exception as exc:  # the report still goes out, saying verification did not complete
        return text("report.verification.not_completed", language, error=f"{type(exc).__name__}: {exc}")
    return verification_words(result, language)


def report_data(session: Session, greenhouse_id: str, start: datetime, end: datetime, settings: Settings, *,
                verification: str, verify_command: str, language: str = "en") -> ReportData:
    """The period's data at the site's prices, with the audit verdict and the line that checks the
    signature. ``LookupError`` for an unknown greenhouse, ``ValueError`` for a bad period."""
    from app.reports import collect_report_data, site_energy_model

    return collect_report_data(session, greenhouse_id, start, end, verification=verification,
                               energy=site_energy_model(settings), verify_command=verify_command,
                               language=language)


def sign_report(data: ReportData, identity: SigningIdentity, generated_by: str) -> SignedReport:
    """Render ``data`` as a PDF, stamped with who asked and when, and sign it."""
    from audit.report import render_report
    from audit.signing import sign_pdf

    report_id = str(uuid.uuid4())
    pdf = render_report(data, generated_by=generated_by, generated_at=datetime.now(UTC), report_id=report_id)
    return SignedReport(sign_pdf(pdf, identity.key, identity.cert), report_id)
