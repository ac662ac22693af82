"""An application's database on any provider's PostgreSQL: the role its components connect as, its schema and role
put in place, the URL they connect with, and the refusal of a database that is someone else's. Below every provider
(stack.native, stack.containers, stack.external) and the chooser among them (stack.providers)."""

from __future__ import annotations

import secrets
from typing import Protocol

from stack.common import ProviderUnavailable

APP_ROLE = "sortie_app"
DATABASE = "sortie"


class AppSchema(Protocol):
    """What the database wiring asks of an application (stack.native.Application has it)."""

    def migrate(self, admin_url: str) -> None:
        """Its schema, migrated to the newest version as the owner (idempotent)."""

    def create_app_role(self, admin_url: str, role: str, password: str) -> None:
        """The role its components connect as, with the rights it needs and no more (idempotent)."""

    def schema_revisions(self) -> set[str]:
        """Every schema version (Alembic revision) its migrations know: a database at another one is not its."""


class ForeignDatabase(ProviderUnavailable):
    """The database holds tables but is not the application's: migrating it could damage someone's data."""


def check_database_is_ours(app: AppSchema, admin_url: str) -> None:
    """Refuse a non-empty database without the application's Alembic history (tables of someone else)."""
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(admin_url)
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
            if not tables:
                return
            if "alembic_version" in tables:
                rev = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
                ours = app.schema_revisions()
                if rev and all(r in ours for r in rev):
                    return
                raise ForeignDatabase(f"the database has an Alembic history that is not Sortie's ({rev}; Sortie "
                                      f"knows {sorted(ours)})")
            sample = ", ".join(sorted(tables)[:5])
            raise ForeignDatabase(f"the database is not empty and not a Sortie database ({len(tables)} tables: "
                                  f"{sample}...); pass --allow-foreign-database to migrate it anyway")
    finally:
        engine.dispose()


def prepare_database(app: AppSchema, admin_url: str, app_password: str | None = None, role: str = APP_ROLE) -> str:
    """The application's schema (migrated as its owner), then its role. Returns the role's password (generated
    unless given)."""
    app.migrate(admin_url)
    password = app_password or secrets.token_hex(12)
    app.create_app_role(admin_url, role, password)
    return password


def app_database_url(host_port: str, password: str, database: str, role: str = APP_ROLE) -> str:
    from urllib.parse import quote

    return f"postgresql+psycopg://{quote(role, safe='')}:{quote(password, safe='')}@{host_port}/{database}"
