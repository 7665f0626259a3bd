"""Alembic environment: the URL comes from the caller, never from alembic.ini.

Order: an open connection in ``config.attributes["connection"]`` (tests, the service),
``config.attributes["url"]`` (``app.cli.db``), ``alembic -x url=...``, then ``Settings().database_url``.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection, pool

from app.core.config import Settings
from app.core.db import make_engine
from app.models import SCHEMA

config = context.config
# The service's tables and the audit trail's live on separate metadatas; Alembic compares both.
target_metadata = list(SCHEMA)

# Only the `alembic` command line configures logging; programmatic callers keep theirs.
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    """Resolve the database URL for offline mode or for a fresh engine."""
    url = config.attributes.get("url") or context.get_x_argument(as_dictionary=True).get("url")
    return str(url) if url else Settings().database_url


def _configure(connection: Connection) -> None:
    """Shared options; batch mode lets SQLite alter tables by copying them."""
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )


def run_migrations_offline() -> None:
    """Emit SQL for review (``alembic upgrade head --sql``) without a database."""
    url = _url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        compare_type=True,
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate over the caller's connection, or over a short-lived engine of our own."""
    connection: Connection | None = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(_url(), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
