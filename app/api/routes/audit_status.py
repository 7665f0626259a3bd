"""The audit chain's verification status of one greenhouse, for agronomists and admins.

Verifying decrypts and checks every record since the last anchor, so a result is kept for a
minute per greenhouse and computed in a worker thread, never on the event loop.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import anyio
from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel

from app.api.deps import ReportReader, RuntimeDep, get_current_user
from app.api.instants import Instant
from app.runtime import Runtime

router = APIRouter(prefix="/api/greenhouses", tags=["audit"], dependencies=[Depends(get_current_user)])

CACHE_S = 60.0
_cache: dict[tuple[int, str], tuple[float, AuditStatus]] = {}
_lock = threading.Lock()


class AuditStatus(BaseModel):
    greenhouse_id: str
    ok: bool
    records_checked: int
    first_bad_seq: int | None
    reason: str | None
    checked_at: Instant


def _verify(runtime: Runtime, gh: str) -> AuditStatus:
    key = (id(runtime), gh)
    with _lock:
        hit = _cache.get(key)
    if hit is not None and time.monotonic() - hit[0] < CACHE_S:
        return hit[1]
    assert runtime.audit is not None
    [result] = runtime.audit.store.verify(gh)
    status = AuditStatus(greenhouse_id=gh, ok=result.ok, records_checked=result.records_checked,
                         first_bad_seq=result.first_bad_seq, reason=result.reason,
                         checked_at=datetime.now(UTC))
    with _lock:
        _cache[key] = (time.monotonic(), status)
    return status


@router.get("/{gh}/audit-status")
async def audit_status(gh: str, runtime: RuntimeDep, user: ReportReader) -> AuditStatus:
    """Whether this greenhouse's sealed chain verifies (checked at most once a minute)."""
    if gh not in runtime.controllers:
        raise HTTPException(status_code=404, detail=f"unknown greenhouse {gh!r}")
    if runtime.audit is None:
        raise HTTPException(status_code=503, detail="the service has no audit trail configured")
    return await anyio.to_thread.run_sync(_verify, runtime, gh)
