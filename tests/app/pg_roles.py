"""Two throw-away PostgreSQL roles and a database, as production runs them: an owner that migrates,
a restricted role the service connects as (``greentwin db grant``). Unique names, dropped after."""

from __future__ import annotations

import contextlib
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import create_engine, make_url, text


@dataclass(frozen=True)
class RoleDatabase:
    """URLs of one database as its owner and as the service's restricted role."""

    owner_url: str
    app_url: str
    owner: str
    app: str
    database: str


@contextlib.contextmanager
def owner_and_app_roles(pg_url: str, prefix: str) -> Iterator[RoleDatabase]:
    """Create ``<prefix>_owner_*`` (owns the database) and ``<prefix>_app_*`` (may only connect);
    the caller migrates as the owner and grants the app role. Everything is dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    owner, app, database = f"{prefix}_owner_{tag}", f"{prefix}_app_{tag}", f"{prefix}_db_{tag}"
    owner_pw, app_pw = secrets.token_hex(12), secrets.token_hex(12)
    base = make_url(pg_url)
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE ROLE \"{owner}\" LOGIN PASSWORD '{owner_pw}'"))
            conn.execute(text(f"CREATE ROLE \"{app}\" LOGIN PASSWORD '{app_pw}'"))
            conn.execute(text(f'CREATE DATABASE "{database}" OWNER "{owner}"'))
            conn.execute(text(f'REVOKE ALL ON DATABASE "{database}" FROM PUBLIC'))
            conn.execute(text(f'GRANT CONNECT, TEMPORARY ON DATABASE "{database}" TO "{app}"'))
        as_owner = base.set(username=owner, password=owner_pw, database=database)
        as_app = base.set(username=app, password=app_pw, database=database)
        yield RoleDatabase(as_owner.render_as_string(hide_password=False),
                           as_app.render_as_string(hide_password=False), owner, app, database)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
            conn.execute(text(f'DROP ROLE IF EXISTS "{app}"'))
            conn.execute(text(f'DROP ROLE IF EXISTS "{owner}"'))
        admin.dispose()
