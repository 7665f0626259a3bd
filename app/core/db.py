"""Database plumbing: the service's metadata with stable constraint names, engines, sessions, schema check."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import DateTime, Dialect, Engine, MetaData, TypeDecorator, create_engine, event
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

# Explicit names make constraints droppable by name in later migrations, on SQLite batch mode too.
NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# The checkout root, or site-packages after a wheel install: `migrations` ships as a top-level
# package next to `app` (pyproject.toml), so the same path holds in both.
REPO_ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS_DIR = REPO_ROOT / "migrations"
ALEMBIC_INI = REPO_ROOT / "alembic.ini"


class Base(DeclarativeBase):
    """Declarative base for every service table; ``app.models.SCHEMA`` lists it for Alembic."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UtcDateTime(TypeDecorator[datetime]):
    """``DateTime(timezone=True)`` that stores and hands back UTC on every backend.

    SQLite has no time zone type: it keeps the wall-clock digits it is given and returns a naive
    datetime, so a reading stamped ``+02:00`` would come back two hours late and sort among the
    wrong rows. Converting to UTC on the way in and marking UTC on the way out makes SQLite agree
    with PostgreSQL (which converts by itself) and lets raw SQL read the stored digits as UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """The instant in UTC; a naive value is refused, since its zone would only be a guess."""
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive timestamp {value.isoformat()} for a time zone column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """An aware UTC datetime, whatever the driver handed back."""
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class SchemaOutOfDate(RuntimeError):
    """The database is not at the migration head; run ``greentwin db upgrade`` first."""


@event.listens_for(Engine, "connect")
def _sqlite_foreign_keys(dbapi_connection: Any, _record: Any) -> None:
    """SQLite ignores foreign keys unless every connection asks for them; other drivers are untouched."""
    if isinstance(dbapi_connection, sqlite3.Connection):
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Engine with pre-ping, so a restarted PostgreSQL does not surface as a failed control step."""
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, **kwargs)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions keep loaded objects usable after commit (the loop logs them after writing)."""
    return sessionmaker(bind=engine, expire_on_commit=False)


def alembic_config(url: str | None = None) -> Config:
    """Alembic config pointing at the repository's migrations, whatever the working directory.

    The URL travels in ``config.attributes`` rather than ``sqlalchemy.url``, so ``%`` in a
    password never meets configparser interpolation.
    """
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        cfg.attributes["url"] = url
    return cfg


def head_revisions() -> set[str]:
    """Revision ids at the head of the migration scripts shipped with this code."""
    return set(ScriptDirectory.from_config(alembic_config()).get_heads())


def current_revisions(engine: Engine) -> set[str]:
    """Revision ids recorded in the database (empty when it was never migrated)."""
    with engine.connect() as conn:
        return set(MigrationContext.configure(conn).get_current_heads())


def schema_is_current(engine: Engine) -> bool:
    """True when the database is exactly at the scripts' head; the service refuses to start otherwise."""
    return current_revisions(engine) == head_revisions()


def require_current_schema(engine: Engine) -> None:
    """Raise :class:`SchemaOutOfDate` with both revisions, for a start-up error that says what to do."""
    current, head = current_revisions(engine), head_revisions()
    if current != head:
        raise SchemaOutOfDate(
            f"database at {sorted(current) or 'no revision'}, code expects {sorted(head)}: "
            "run `greentwin db upgrade`"
        )


@contextmanager
def migrated_session(url: str) -> Iterator[Session]:
    """A session on the database at ``url`` for a one-off command; ``SchemaOutOfDate`` if the schema
    is behind. The engine is disposed afterwards (a command should not leave a pool behind)."""
    engine = make_engine(url)
    try:
        require_current_schema(engine)
        with make_session_factory(engine)() as session:
            yield session
    finally:
        engine.dispose()
