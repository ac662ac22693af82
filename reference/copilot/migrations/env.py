"""Alembic environment for the reference schema (PostgreSQL).

The database comes from, in order: a Connection passed in ``config.attributes["connection"]``, a URL in
``config.attributes["url"]`` (what :func:`reference.copilot.migrations.upgrade` uses), the ``SORTIE_DATABASE_URL``
environment variable, or ``sqlalchemy.url`` in the ini file.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from reference.copilot.models import Base

URL_ENV = "SORTIE_DATABASE_URL"

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def database_url() -> str:
    url = config.attributes.get("url") or os.environ.get(URL_ENV) or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError(f"no database URL: set {URL_ENV} or sqlalchemy.url in alembic.ini")
    return str(url)


def _configure(**kwargs: object) -> None:
    context.configure(target_metadata=target_metadata, compare_type=True, **kwargs)  # type: ignore[arg-type]


def run_migrations_offline() -> None:
    """Emit SQL to stdout (``alembic upgrade head --sql``)."""
    _configure(url=database_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def _run_with(connection: Connection) -> None:
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_with(connection)
        return
    engine = create_engine(database_url(), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            _run_with(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
