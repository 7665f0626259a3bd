"""The 422 answer to a request its models refuse, for every route, whatever number it carried.

Python's JSON reader takes ``NaN``, ``Infinity`` and ``-Infinity`` (and ``1e400`` overflows to
infinity); the models refuse them, but FastAPI's own answer echoes each refused input, and a JSON
response has no spelling for a non-finite number: it would fail to encode and answer 500, even at
the login, which needs no token. Here each such number is echoed as the string JSON's
extensions spell it, so the answer still says which field and why.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse


def finite_json(value: Any) -> Any:
    """``value`` (JSON-ready) with each non-finite float replaced by ``"NaN"``, ``"Infinity"`` or
    ``"-Infinity"``."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(item) for item in value]
    return value


async def validation_error_reply(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 (``{"detail": [{"loc", "msg", "type", "input", ...}]}``), encodable whatever came in."""
    return JSONResponse({"detail": finite_json(jsonable_encoder(exc.errors()))}, status_code=422)
