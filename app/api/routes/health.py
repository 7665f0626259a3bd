"""Liveness and readiness (open), and Prometheus metrics (behind the metrics token)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from app.api.deps import RuntimeDep
from app.api.metrics_access import check_metrics_access

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process answers."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(runtime: RuntimeDep, response: Response) -> dict[str, object]:
    """Ready when the database answers, the broker connection is up, audit sealing and the recording of
    decisions keep up and the journal takes writes (without it nothing is commanded)."""
    checks: dict[str, object] = {}
    try:
        with runtime.sessions() as session:
            session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:  # any driver error means not ready
        checks["database"] = f"down: {exc.__class__.__name__}"
    checks["mqtt"] = "ok" if runtime.bridge is not None and runtime.bridge.connected else "down"
    checks["spooled_decisions"] = runtime.recorder.spooled
    limit = runtime.settings.audit_seal_stuck_s
    stuck = runtime.writer.sealing_stuck_s(limit)
    checks["audit_sealing"] = "ok" if stuck is None else (
        f"stuck: {runtime.writer.audit_pending} events waiting {stuck:.0f} s (limit {limit:.0f} s)")
    failing = runtime.dispatch.journal_failing_since
    checks["journal"] = "ok" if failing is None else (
        f"unwritable since {failing.isoformat(timespec='seconds')}")
    behind, allowed = runtime.writer.behind_s(), runtime.settings.writer_behind_s
    checks["recording"] = "ok" if behind <= allowed else (
        f"behind: {runtime.writer.backlog} records journaled, the oldest {behind:.0f} s ago "
        f"(limit {allowed:.0f} s)")
    ready = (checks["database"] == "ok" and checks["mqtt"] == "ok" and stuck is None and failing is None
             and behind <= allowed)
    response.status_code = 200 if ready else 503
    return {"ready": ready, "checks": checks}


@router.get("/metrics")
def metrics(runtime: RuntimeDep, request: Request) -> Response:
    """Prometheus metrics, for the holder of the metrics token (``app.api.metrics_access``)."""
    check_metrics_access(request, runtime.settings)
    return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)
