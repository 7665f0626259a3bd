"""The operators' dashboard: server-rendered pages; their data comes from the JSON API under ``/api/``.

A page needs the session cookie set by ``POST /api/auth/login``; without a valid one it sends
the browser to ``/login``. Controls are rendered only for the ``operator`` role (the API refuses
everyone else anyway). Each page carries the CSRF token of its session in a ``<meta>`` tag.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from app.api.deps import SESSION_COOKIE
from app.auth.service import AuthService, Principal
from app.auth.tokens import TokenError
from app.services.report_signing import verify_command
from app.web.security import csrf_token
from audit import wording

HERE = Path(__file__).resolve().parent
templates = Jinja2Templates(directory=HERE / "templates")
router = APIRouter(include_in_schema=False)


def static_files() -> StaticFiles:
    return StaticFiles(directory=HERE / "static")


def _user(request: Request) -> tuple[Principal, str] | None:
    auth: AuthService | None = getattr(request.app.state, "auth", None)
    token = request.cookies.get(SESSION_COOKIE)
    if auth is None or not token:
        return None
    try:
        return auth.authenticate(token), token
    except TokenError:
        return None


def _to_login(request: Request) -> RedirectResponse:
    target = request.url.path
    return RedirectResponse(f"/login?next={target}", status_code=303)


PAGE_WORDS = ("nav.", "gh.", "col.", "kv.", "tile.", "value.", "alarms.", "severity.", "unit.days",
              "language.", "zone", "list.sep", "page.", "badge.", "soil.")
"""The catalogue's keys the pages' scripts label themselves with (handed over in a ``<meta>`` tag)."""


def _login_language(request: Request) -> str:
    """The login page's language before anyone is known: the browser's first preference that the catalogue
    has (``Accept-Language``), else English; after login the user's own choice rules."""
    for part in request.headers.get("accept-language", "").split(","):
        tag = part.split(";")[0].strip()
        if tag and wording.language(tag) != wording.DEFAULT_LANGUAGE:
            return wording.language(tag)
        if tag.lower().startswith("en"):
            return wording.DEFAULT_LANGUAGE
    return wording.DEFAULT_LANGUAGE


def _render(request: Request, name: str, session: tuple[Principal, str], **context: Any) -> Response:
    user, token = session
    runtime = request.app.state.runtime
    lang = wording.language(user.language)
    return templates.TemplateResponse(request, name, {
        "lang": lang, "languages": wording.LANGUAGES, "words": wording.texts(PAGE_WORDS, lang),
        "t": lambda key, **values: wording.text(key, lang, **values),
        "user": user, "roles": sorted(user.roles), "is_operator": "operator" in user.roles,
        "can_report": bool(user.roles & {"agronomist", "admin"}), "is_admin": "admin" in user.roles,
        "can_edit_settings": bool(user.roles & {"agronomist", "admin"}),
        "csrf": csrf_token(token), "site_tz": runtime.settings.site_timezone,
        "greenhouses": [(gh, ctl.setup.name or gh) for gh, ctl in sorted(runtime.controllers.items())],
        **context}, headers={"Cache-Control": "no-store"})


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: str = "/") -> Response:
    # Only a path on this site: '//host' and '/\\host' are other sites to a browser.
    safe_next = (next if next.startswith("/") and not next.startswith(("//", "/\\")) and "\\" not in next
                 else "/")
    if _user(request) is not None:
        return RedirectResponse(safe_next, status_code=303)
    lang = _login_language(request)
    return templates.TemplateResponse(request, "login.html", {
        "next": safe_next, "lang": lang, "t": lambda key, **values: wording.text(key, lang, **values)},
        headers={"Cache-Control": "no-store"})


def _page(request: Request, name: str, **context: Any) -> Response:
    session = _user(request)
    if session is None:
        return _to_login(request)
    return _render(request, name, session, **context)


@router.get("/", response_class=HTMLResponse)
def overview_page(request: Request) -> Response:
    return _page(request, "overview.html", page="overview")


@router.get("/greenhouses/{gh}", response_class=HTMLResponse)
def greenhouse_page(gh: str, request: Request) -> Response:
    if gh not in request.app.state.runtime.controllers:
        raise HTTPException(status_code=404, detail=f"unknown greenhouse {gh!r}")
    runtime = request.app.state.runtime
    return _page(request, "greenhouse.html", page="greenhouse", gh=gh,
                 gh_name=runtime.controllers[gh].setup.name or gh,
                 verify_command=verify_command(runtime.settings.report_cert, runtime.state_dir))


@router.get("/alarms", response_class=HTMLResponse)
def alarms_page(request: Request) -> Response:
    return _page(request, "alarms.html", page="alarms")


def _admin_page(request: Request, name: str, page: str) -> Response:
    session = _user(request)
    if session is not None and "admin" not in session[0].roles:
        raise HTTPException(status_code=403, detail="forbidden: needs role admin")
    return _page(request, name, page=page)


@router.get("/admin/users", response_class=HTMLResponse)
def users_page(request: Request) -> Response:
    return _admin_page(request, "users.html", "users")


@router.get("/admin/greenhouses", response_class=HTMLResponse)
def greenhouses_admin_page(request: Request) -> Response:
    return _admin_page(request, "admin_greenhouses.html", "admin-greenhouses")


@router.get("/admin/policy", response_class=HTMLResponse)
def policy_page(request: Request) -> Response:
    return _admin_page(request, "policy.html", "policy")
