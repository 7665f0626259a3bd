"""Each user's own alarm notifications: which channels, from which severity up (``/api/me/notifications``)."""

from __future__ import annotations

from datetime import UTC, datetime

import anyio
from fastapi import APIRouter, HTTPException

from app.alarm_models import NotificationPref
from app.alarms.recipients import check_webhook_url
from app.api.alarm_schemas import NotificationPrefs
from app.api.deps import CurrentUser
from app.api.routes.live import DashboardDep

router = APIRouter(prefix="/api/me", tags=["alarms"])


@router.get("/notifications")
async def my_notifications(user: CurrentUser, dash: DashboardDep) -> NotificationPrefs:
    """Your notification preferences (none stored: nothing is sent to you)."""
    def read() -> NotificationPrefs:
        with dash.runtime.sessions() as s:
            row = s.get(NotificationPref, user.username)
        if row is None:
            return NotificationPrefs()
        return NotificationPrefs(min_severity=row.min_severity, email=row.email,  # type: ignore[arg-type]
                                 email_enabled=row.email_enabled, webhook_url=row.webhook_url,
                                 webhook_enabled=row.webhook_enabled)
    return await anyio.to_thread.run_sync(read)


@router.put("/notifications")
async def set_my_notifications(body: NotificationPrefs, user: CurrentUser,
                               dash: DashboardDep) -> NotificationPrefs:
    """Choose your channels and minimum severity: e-mail to your address, and the webhook (yours, on a host
    the site allows, or the site's). A channel switched on needs its address: 422 otherwise."""
    settings = dash.runtime.settings
    if body.email_enabled and not body.email:
        raise HTTPException(status_code=422, detail="e-mail is switched on without an address")
    url = None if body.webhook_url is None else str(body.webhook_url)
    if url is not None:
        try:
            check_webhook_url(url, settings)
        except ValueError as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from None
    elif body.webhook_enabled and not settings.notify_webhook_url:
        raise HTTPException(status_code=422, detail="webhook is switched on without a URL, and the site "
                                                    "has no webhook (GREENTWIN_NOTIFY_WEBHOOK_URL)")

    def store() -> None:
        with dash.runtime.sessions.begin() as s:
            s.merge(NotificationPref(username=user.username, email=body.email,
                                     email_enabled=body.email_enabled, webhook_url=url,
                                     webhook_enabled=body.webhook_enabled, min_severity=body.min_severity,
                                     updated_at=datetime.now(UTC)))
        dash.notifier.invalidate()

    await anyio.to_thread.run_sync(store)
    return body
