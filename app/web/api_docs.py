"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), served whole by the app.

FastAPI's own pages load their scripts from a CDN, which leaves a blank page on a site without
internet access. These are FastAPI's pages pointed at copies of the same bundles under
``/static/vendor/`` (versions and licences beside them), so the documentation works offline and a
Content-Security-Policy can hold it to this origin. The pages are built once at import: their one
inline script never changes, so the policy admits it by its hash instead of allowing inline script.
"""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import APIRouter
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, swagger_ui_default_parameters
from fastapi.responses import HTMLResponse

OPENAPI_URL = "/openapi.json"
TITLE = "greentwin API"
SWAGGER_JS = "/static/vendor/swagger-ui/swagger-ui-bundle.js"
SWAGGER_CSS = "/static/vendor/swagger-ui/swagger-ui.css"
REDOC_JS = "/static/vendor/redoc/redoc.standalone.js"
FAVICON = "/static/favicon.svg"

router = APIRouter(include_in_schema=False)

# validatorUrl None: Swagger UI would otherwise send the document to validator.swagger.io.
_SWAGGER_PAGE = get_swagger_ui_html(
    openapi_url=OPENAPI_URL, title=f"{TITLE} - Swagger UI", swagger_js_url=SWAGGER_JS,
    swagger_css_url=SWAGGER_CSS, swagger_favicon_url=FAVICON,
    swagger_ui_parameters={**swagger_ui_default_parameters, "validatorUrl": None}).body
# No Google Fonts: ReDoc falls back to the system's fonts rather than reach another site.
_REDOC_PAGE = get_redoc_html(openapi_url=OPENAPI_URL, title=f"{TITLE} - ReDoc", redoc_js_url=REDOC_JS,
                             redoc_favicon_url=FAVICON, with_google_fonts=False).body

_INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)


def _script_hashes(*pages: bytes) -> str:
    """CSP sources admitting exactly the inline scripts of ``pages`` (``'sha256-...'``, space-separated)."""
    bodies = [body for page in pages for body in _INLINE_SCRIPT.findall(page)]
    return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b).digest()).decode()}'" for b in bodies)


DOCS_CSP = (
    f"default-src 'self'; script-src 'self' {_script_hashes(_SWAGGER_PAGE, _REDOC_PAGE)}; "
    # Both bundles style their elements at run time (style attributes and <style> tags), and ReDoc
    # runs its search index in a worker made from a blob: URL.
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
    "worker-src 'self' blob:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""The Content-Security-Policy of the documentation pages: nothing from another origin."""
DOCS_PATHS = ("/docs", "/redoc")


@router.get("/docs", response_class=HTMLResponse)
def swagger_ui() -> HTMLResponse:
    """Swagger UI over the app's OpenAPI document: every operation, with "try it out"."""
    return HTMLResponse(_SWAGGER_PAGE)


@router.get("/redoc", response_class=HTMLResponse)
def redoc() -> HTMLResponse:
    """ReDoc over the app's OpenAPI document: the same operations as one readable page."""
    return HTMLResponse(_REDOC_PAGE)
