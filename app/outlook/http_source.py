"""What the site's HTTP sources (weather forecast, day-ahead prices) share: one bounded GET of a JSON
body, how its failures are named, and which of them are worth another attempt.

A source answers within its time-out or not at all: httpx bounds each connect, send and read step, and
the body is abandoned at the first chunk after the deadline or past :data:`MAX_BODY` bytes, so a
dribbling or bloated server costs one time-out per attempt, never more.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from twin.source_data import SourceDataError

MAX_BODY = 1 << 20
"""Largest response body read [bytes]: a day of hourly data is a few kB."""


def get_json(client: httpx.Client, url: str, timeout_s: float, error: type[SourceDataError],
             params: dict[str, Any] | None = None) -> Any:
    """One GET within ``timeout_s`` in all; the decoded JSON (``error`` for a bad or oversized body)."""
    deadline = time.monotonic() + timeout_s
    with client.stream("GET", url, params=params) as resp:
        resp.raise_for_status()
        body = bytearray()
        for chunk in resp.iter_bytes():
            body += chunk
            if len(body) > MAX_BODY:
                raise error(f"response larger than {MAX_BODY} bytes")
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout(f"response took longer than {timeout_s} s", request=resp.request)
    try:
        return json.loads(bytes(body))
    except (ValueError, RecursionError) as exc:
        raise error(f"response is not valid JSON: {exc}") from exc


def error_kind(exc: BaseException) -> str:
    """A short name for a failed attempt (logs, counters, the reason a source fell back)."""
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.TransportError):
        return "transport"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"http_{exc.response.status_code // 100}xx"
    return "bad_data" if isinstance(exc, SourceDataError | httpx.DecodingError) else "unexpected"


def retryable(exc: BaseException) -> bool:
    """Server errors, transport trouble and bad data may pass; a 4xx will not."""
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code >= 500
    return isinstance(exc, httpx.TransportError | httpx.DecodingError | SourceDataError)


def retrying(retries: int) -> Retrying:
    """``retries`` more attempts after the first, 0.05, 0.1, 0.2 ... s apart (at most 0.5 s)."""
    return Retrying(stop=stop_after_attempt(retries + 1), reraise=True,
                    wait=wait_exponential(multiplier=0.05, min=0.05, max=0.5),
                    retry=retry_if_exception(retryable))
