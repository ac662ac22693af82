"""Alembic migrations of the reference schema for PostgreSQL, shipped inside the package.

    from reference.copilot.migrations import upgrade
    upgrade("postgresql+psycopg://owner@127.0.0.1:5432/sortie")

Run them as the schema owner; then give the application its own role with
:func:`reference.copilot.migrations.roles.create_app_role` (deployment, not schema: re-run it after every
upgrade that adds tables). The command line works too, from any directory:
``alembic -c <site-packages>/reference/alembic.ini upgrade head`` with ``SORTIE_DATABASE_URL`` set.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent
INI_PATH = MIGRATIONS_DIR.parent / "alembic.ini"


def alembic_config(url: str | None = None) -> Config:
    """A Config built in code: no ini file, no dependency on the working directory, no logging setup.

    The URL travels in ``config.attributes`` (never through configparser, which would choke on the
    ``%`` of a URL-encoded password)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        cfg.attributes["url"] = url
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def current_heads() -> tuple[str, ...]:
    """The head revision(s) of the shipped scripts."""
    from alembic.script import ScriptDirectory

    return tuple(ScriptDirectory.from_config(alembic_config()).get_heads())
