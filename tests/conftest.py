"""Shared fixtures for tests that need the PostgreSQL or MQTT services.

Outside CI a missing service skips its tests with the reason; under ``CI=true`` it fails them,
so a broken CI service container can never turn into a green run that tested nothing.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

PG_URLS = (
    "postgresql+psycopg://postgres@127.0.0.1:5432/test",
    "postgresql+psycopg://root@127.0.0.1:5432/test",
)
MQTT_HOST = os.environ.get("GREENTWIN_TEST_MQTT_HOST", "127.0.0.1")
MQTT_PORT = int(os.environ.get("GREENTWIN_TEST_MQTT_PORT", "1883"))
# MQTT 3.1.1 CONNECT, clean session, keepalive 10 s, client id "gt-probe".
_MQTT_CONNECT = b"\x10\x14\x00\x04MQTT\x04\x02\x00\x0a\x00\x08gt-probe"


def _unavailable(reason: str) -> NoReturn:
    """Skip locally, fail in CI."""
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"{reason} (CI=true: required services must be present)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_url() -> str:
    """URL of a reachable PostgreSQL ``test`` database (``GREENTWIN_TEST_PG_URL`` overrides)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    override = os.environ.get("GREENTWIN_TEST_PG_URL")
    errors: list[str] = []
    for url in (override,) if override else PG_URLS:
        engine = create_engine(url, connect_args={"connect_timeout": 3})
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return url
        except OperationalError as exc:
            where = engine.url.render_as_string(hide_password=True)
            errors.append(f"{where}: {str(exc.orig).strip().splitlines()[0]}")
        finally:
            engine.dispose()
    _unavailable(f"PostgreSQL not reachable ({'; '.join(errors)})")


@pytest.fixture(scope="session")
def mqtt_available() -> tuple[str, int]:
    """(host, port) of an MQTT broker that answered a CONNECT with a CONNACK."""
    try:
        with socket.create_connection((MQTT_HOST, MQTT_PORT), timeout=3) as sock:
            sock.settimeout(3)
            sock.sendall(_MQTT_CONNECT)
            reply = sock.recv(4)
            sock.sendall(b"\xe0\x00")  # DISCONNECT
    except OSError as exc:
        _unavailable(f"MQTT broker not reachable on {MQTT_HOST}:{MQTT_PORT}: {exc}")
    if len(reply) < 4 or reply[0] != 0x20 or reply[3] != 0:
        _unavailable(f"MQTT broker on {MQTT_HOST}:{MQTT_PORT} refused the connection: {reply!r}")
    return MQTT_HOST, MQTT_PORT


@contextlib.contextmanager
def temporary_pg_database(pg_url: str, prefix: str) -> Iterator[str]:
    """A throw-away PostgreSQL database next to ``pg_url``, dropped (forcefully) afterwards."""
    from sqlalchemy import create_engine, make_url, text

    base = make_url(pg_url)
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def make_pg_database(pg_url: str):  # type: ignore[no-untyped-def]
    """``with make_pg_database("prefix") as url:`` a throw-away database (needs PostgreSQL)."""
    return lambda prefix: temporary_pg_database(pg_url, prefix)


@pytest.fixture(scope="session")
def pdftotext() -> str:
    """Path of poppler's ``pdftotext``, which reads a report's pages back as a person's viewer shows them
    (``apt-get install -y poppler-utils poppler-data``; ``.ci/run`` installs them). Without poppler-data's
    CMaps it reads the Chinese report's CID font back as nothing at all."""
    import shutil

    found = shutil.which("pdftotext")
    if found is None:
        _unavailable("pdftotext not installed (apt-get install -y poppler-utils poppler-data)")
    if not Path("/usr/share/poppler/cMap").is_dir():
        _unavailable("poppler-data not installed: pdftotext cannot read CID fonts "
                     "(apt-get install -y poppler-data)")
    return found
