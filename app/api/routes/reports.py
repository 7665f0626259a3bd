"""Signed PDF report of one greenhouse's period, and its summary as CSV, for agronomists (and admins).

The document is built by the same services as ``greentwin report`` (:mod:`app.services.reports` to
collect, render and sign, :mod:`app.services.report_signing` for the signing identity), in a worker
thread so the event loop keeps serving the control loops; at most two builds run at once. The CSV is
the same collected data (:func:`audit.report.report_csv`), unsigned.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal, TypeVar

import anyio
from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response

from app.api.deps import ReportReader, RuntimeDep, get_current_user
from app.api.instants import parse_instant
from app.core.config import get_settings
from app.core.db import SchemaOutOfDate
from app.models import Greenhouse
from app.runtime import Runtime
from app.services import reports as report_service
from app.services.report_signing import signing_identity, verify_command
from audit.report.data import ReportData
from audit.wording import DEFAULT_LANGUAGE
from audit.wording import language as language_of

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/greenhouses", tags=["reports"], dependencies=[Depends(get_current_user)])

MAX_PERIOD = timedelta(days=400)
MAX_CONCURRENT_BUILDS = 2


class SigningUnavailable(RuntimeError):
    """No usable report signing key (e.g. none configured in prod)."""


def validate_period(start: datetime, end: datetime) -> None:
    if end <= start:
        raise HTTPException(status_code=422, detail="'to' must be after 'from'")
    if end - start > MAX_PERIOD:
        raise HTTPException(status_code=422, detail=f"period longer than {MAX_PERIOD.days} days: split it")


def report_data(runtime: Runtime, gh: str, start: datetime, end: datetime,
                lang: str = DEFAULT_LANGUAGE) -> ReportData:
    """The period's data in ``lang``, with the audit verdict and the verify line the dashboard shows
    (blocking)."""
    store = runtime.audit.store if runtime.audit is not None else None
    verification = report_service.store_verification(store, gh, lang)
    with runtime.sessions() as session:
        return report_service.report_data(
            session, gh, start, end, runtime.settings, verification=verification,
            verify_command=verify_command(runtime.settings.report_cert, runtime.state_dir), language=lang)


def build_signed_report(runtime: Runtime, gh: str, start: datetime, end: datetime, generated_by: str,
                        lang: str = DEFAULT_LANGUAGE) -> bytes:
    """Collect, render and sign (blocking: run it in a worker thread). ``LookupError`` for an unknown
    greenhouse."""
    with runtime.sessions() as session:
        if session.get(Greenhouse, gh) is None:
            raise LookupError(f"unknown greenhouse {gh!r}")
    try:
        # The key is the environment's, as `greentwin report` reads it; only the dev/demo pair is per
        # state dir.
        identity = signing_identity(get_settings(), runtime.state_dir, note=log.warning)
    except (ValueError, OSError) as exc:
        raise SigningUnavailable(f"report cannot be signed: {exc}") from exc
    return report_service.sign_report(report_data(runtime, gh, start, end, lang), identity, generated_by).pdf


def _build_limiter(request: Request) -> anyio.CapacityLimiter:
    limiter: anyio.CapacityLimiter | None = getattr(request.app.state, "report_limiter", None)
    if limiter is None:  # created on the event loop, where anyio wants it
        limiter = request.app.state.report_limiter = anyio.CapacityLimiter(MAX_CONCURRENT_BUILDS)
    return limiter


def report_period(
    period_from: Annotated[str, Query(alias="from",
                                      description="period start, ISO-8601 with offset, inclusive")],
    period_to: Annotated[str, Query(alias="to", description="period end, ISO-8601 with offset, exclusive")],
) -> tuple[datetime, datetime]:
    """A report request's ``[from, to)``, parsed and checked (422 otherwise): the PDF and the CSV take
    the same."""
    start, end = parse_instant("from", period_from), parse_instant("to", period_to)
    validate_period(start, end)
    return start, end


Period = Annotated[tuple[datetime, datetime], Depends(report_period)]
LanguageQuery = Annotated[Literal["en", "zh-Hans"] | None, Query(
    description="the language of the PDF's words (en or zh-Hans); default: the caller's own (PUT /api/me)")]
_T = TypeVar("_T")


async def _in_worker(request: Request, work: Callable[[], _T]) -> _T:
    """Run a build in a worker thread (at most two at once), its failures as HTTP errors."""
    try:
        return await anyio.to_thread.run_sync(work, limiter=_build_limiter(request))
    except LookupError as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from exc
    except (SchemaOutOfDate, SigningUnavailable) as exc:
        raise HTTPException(status_code=503, detail=str(exc)) from exc


def _attachment(gh: str, start: datetime, end: datetime, ext: str) -> dict[str, str]:
    name = f"{gh}-{start.astimezone(UTC):%Y%m%dT%H%MZ}-{end.astimezone(UTC):%Y%m%dT%H%MZ}.{ext}"
    return {"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"}


@router.get("/{gh}/report.pdf", response_class=Response,
            responses={200: {"content": {"application/pdf": {}}, "description": "the signed PDF report"}})
async def report_pdf(gh: str, request: Request, runtime: RuntimeDep, user: ReportReader, period: Period,
                     language: LanguageQuery = None) -> Response:
    """The signed PDF report of ``[from, to)`` (agronomist or admin) in the caller's language, or the one
    ``language`` names; check it with ``greentwin report verify``."""
    start, end = period
    lang = language or language_of(user.language)
    pdf = await _in_worker(request, functools.partial(build_signed_report, runtime, gh, start, end,
                                                      f"{user.username} via the greentwin API", lang))
    return Response(pdf, media_type="application/pdf", headers=_attachment(gh, start, end, "pdf"))


def _csv(runtime: Runtime, gh: str, start: datetime, end: datetime) -> str:
    """The CSV is for spreadsheets and scripts: its columns, sections and items are stable machine names and
    its words English whatever the caller reads, so one integration reads every user's export."""
    from audit.report import report_csv

    return report_csv(report_data(runtime, gh, start, end, DEFAULT_LANGUAGE))


@router.get("/{gh}/report.csv", response_class=Response,
            responses={200: {"content": {"text/csv": {}}, "description": "the report's summary as CSV"}})
async def report_csv_export(gh: str, request: Request, runtime: RuntimeDep, reader: ReportReader,
                            period: Period) -> Response:
    """The report's summary of ``[from, to)`` as CSV (agronomist or admin): the first page's numbers, the
    events and every hour's row, one long table (``section, item, zone, zone_name, start, value, unit``)."""
    del reader  # the role check is its only use
    start, end = period
    text = await _in_worker(request, functools.partial(_csv, runtime, gh, start, end))
    return Response(text, media_type="text/csv; charset=utf-8", headers=_attachment(gh, start, end, "csv"))
