"""Who may read ``/metrics``: whoever holds the metrics token; in the demo, this machine too.

The metrics name greenhouses, alarm kinds and login-failure counts, so they are not public. A
site sets ``GREENTWIN_METRICS_TOKEN`` (``greentwin init`` writes one into the secrets folder) and
Prometheus sends it as a bearer token (``authorization: credentials_file``). Without a token the
demo answers requests from the loopback address that came through no proxy, so a newcomer can
open the page on the machine the demo runs on; everywhere else no token means no metrics.
"""

from __future__ import annotations

import hmac
import ipaddress

from fastapi import HTTPException, Request

from app.api.deps import bearer_token
from app.core.config import Settings

NEEDS_TOKEN = ("metrics need the token of GREENTWIN_METRICS_TOKEN (greentwin init makes one) "
               "as 'Authorization: Bearer <token>'")


def _from_this_machine(request: Request) -> bool:
    if request.client is None or "x-forwarded-for" in request.headers:
        return False
    try:
        return ipaddress.ip_address(request.client.host).is_loopback
    except ValueError:
        return False


def check_metrics_access(request: Request, settings: Settings) -> None:
    """Return if the request may read the metrics; 401 otherwise."""
    token = settings.metrics_token.get_secret_value().strip() if settings.metrics_token is not None else ""
    if not token:
        allowed = settings.environment == "demo" and _from_this_machine(request)
    else:
        sent = bearer_token(request.headers.get("authorization"))
        allowed = sent is not None and hmac.compare_digest(sent.encode(), token.encode())
    if not allowed:
        raise HTTPException(status_code=401, detail=NEEDS_TOKEN, headers={"WWW-Authenticate": "Bearer"})
