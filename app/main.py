"""create_app(settings): the FastAPI service; the lifespan starts and stops the runtime."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from app.anchoring import HeadAnchoring
from app.api.body_limit import BodyLimitMiddleware
from app.api.client_address import ForwardedClientMiddleware
from app.api.dashboard import Dashboard
from app.api.edge_status import EdgeStatusWatcher
from app.api.input_guard import InputGuardMiddleware
from app.api.routes import (
    alarms,
    audit_status,
    auth,
    forecast,
    greenhouses,
    health,
    live,
    lockouts,
    me,
    notifications,
    policy,
    reports,
    users,
)
from app.api.routes import settings as settings_routes
from app.api.validation_reply import validation_error_reply
from app.audit_keys import load_retired_keys
from app.audit_sink import AuditSink, record_at_start, record_key_in_use, service_audit_keys
from app.auth.service import AuthService, service_secret_key
from app.auth.throttle import LoginThrottle
from app.auth.tokens import TokenSigner
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory, require_current_schema
from app.forecast.setup import forecast_worker
from app.journal import JournalUnwritable
from app.runtime import Runtime
from app.web import api_docs, pages
from app.web.security import SecurityMiddleware
from audit.store import AuditStore


def create_app(settings: Settings | None = None, *, state_dir: Path | None = None,
               runtime: Runtime | None = None) -> FastAPI:
    """Build the app; nothing connects until the lifespan starts (not at import time)."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        rt = runtime
        if rt is None:
            engine = make_engine(settings.database_url)
            require_current_schema(engine)  # refuse to run on a schema that is behind
            folder = state_dir or settings.state_dir
            keyring, signer = service_audit_keys(settings, folder)  # refuses outside demo without keys
            store = AuditStore(engine, keyring, signer, retired_keys=load_retired_keys(settings))
            # a rotated key shows in the trail from the first start on it
            record_at_start(record_key_in_use, store)
            rt = Runtime(settings, make_session_factory(engine), state_dir=folder, audit=AuditSink(store))
        # refuses outside demo without GREENTWIN_SECRET_KEY
        secret = service_secret_key(settings, rt.state_dir)
        app.state.auth = AuthService(
            sessions=rt.sessions, signer=TokenSigner(secret, settings.access_token_ttl_s),
            throttle=LoginThrottle(per_pair=settings.login_max_failures,
                                   per_address=settings.login_max_failures_per_address,
                                   per_account=settings.login_max_failures_per_account,
                                   window_s=settings.login_window_s),
            lockout_s=settings.login_lockout_s, metrics=rt.metrics,
            audit=rt.audit.store if rt.audit is not None else None)
        await rt.start()
        anchoring = None if rt.audit is None else HeadAnchoring.from_settings(settings, rt.audit.store,
                                                                              rt.state_dir)
        anchor_task = None if anchoring is None else asyncio.create_task(anchoring.run())
        edge = EdgeStatusWatcher(rt.settings.mqtt_target(), rt.settings.mqtt_tls(),
                                 rt.settings.mqtt_topic_root)
        edge.start()
        app.state.dashboard = dash = Dashboard(rt, edge)
        dash.start()
        app.state.forecast = forecasts = forecast_worker(rt)
        forecast_task = asyncio.create_task(forecasts.run()) if forecasts.enabled else None
        app.state.runtime = rt
        try:
            yield
        finally:
            dash.stop()
            edge.stop()
            for task in (anchor_task, forecast_task):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            await rt.stop()
            if anchoring is not None:  # the heads the writer sealed last leave with the service
                try:
                    await asyncio.to_thread(anchoring.anchor_now)
                except Exception:  # noqa: BLE001 - a stop must finish; the last export stands
                    logging.getLogger(__name__).exception("audit anchors: export at shutdown failed")

    # FastAPI's own /docs and /redoc load their scripts from a CDN; app.web.api_docs serves them from here.
    app = FastAPI(title="greentwin", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.exception_handler(JournalUnwritable)
    async def _journal_full(_request: Request, exc: JournalUnwritable) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503)  # the operator retries once there is room

    app.exception_handler(RequestValidationError)(validation_error_reply)  # a NaN in a body: 422, not 500

    app.include_router(health.router)
    app.include_router(auth.router)
    app.include_router(greenhouses.router)
    app.include_router(settings_routes.router)
    app.include_router(forecast.router)
    app.include_router(reports.router)
    app.include_router(live.router)
    app.include_router(alarms.router)
    app.include_router(me.router)
    app.include_router(notifications.router)
    app.include_router(audit_status.router)
    app.include_router(users.router)
    app.include_router(lockouts.router)
    app.include_router(policy.router)
    app.include_router(pages.router)
    app.include_router(api_docs.router)
    app.mount("/static", pages.static_files(), name="static")
    app.add_middleware(InputGuardMiddleware)  # inside the security headers: its 400s carry them too
    app.add_middleware(SecurityMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_request_bytes)  # before anything reads
    # Outermost: every part inside sees the client a trusted proxy named, or the peer.
    app.add_middleware(ForwardedClientMiddleware, trusted=settings.trusted_proxy_networks())
    return app
