"""One throwaway PostgreSQL cluster per test session (stack.postgres.LocalPostgres).

Skipped, with the reason, when the server binaries are missing; CI installs them and runs these tests.
Each test module that needs its own data gets its own database in the shared cluster.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine

from stack.postgres import LocalPostgres, find_pg_bin

APP_ROLE = "sortie_app"
APP_PASSWORD = "app-pw-'quoted'-%-ok"  # a quote and a percent sign: role DDL must escape both


@dataclass(frozen=True)
class Database:
    name: str
    owner_url: str  # the superuser: owns the schema, runs migrations
    app_url: str  # the application's role (reference.copilot.migrations.roles.create_app_role)
    app_role: str = APP_ROLE
    app_password: str = APP_PASSWORD


@pytest.fixture(scope="session")
def pg() -> Iterator[LocalPostgres]:
    if find_pg_bin() is None:
        pytest.skip("PostgreSQL server binaries not installed (apt-get install postgresql)")
    # Not pytest's tmp_path: its 0700 root-owned parents are closed to the 'postgres' OS user.
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-pg-test-"))
    cluster = LocalPostgres(run_dir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def migrated_database(pg: LocalPostgres) -> Callable[[str], Database]:
    """``migrated_database(name)``: a database at the head revision with the app role's grants (cached)."""
    from reference.copilot.migrations import upgrade
    from reference.copilot.migrations.roles import create_app_role

    made: dict[str, Database] = {}

    def make(name: str) -> Database:
        if name not in made:
            pg.create_database(name, exist_ok=True)
            owner_url = pg.url(database=name)
            upgrade(owner_url)
            engine = create_engine(owner_url)
            try:
                with engine.begin() as conn:
                    create_app_role(conn, APP_ROLE, APP_PASSWORD)
            finally:
                engine.dispose()
            made[name] = Database(name, owner_url, pg.url(APP_ROLE, APP_PASSWORD, name))
        return made[name]

    return make


@pytest.fixture(scope="session")
def engines(pg: LocalPostgres) -> Iterator[Callable[[str], Engine]]:
    """Engines by URL, disposed at the end of the session (before the cluster stops)."""
    cache: dict[str, Engine] = {}

    def get(url: str) -> Engine:
        if url not in cache:
            cache[url] = create_engine(url, pool_size=5, max_overflow=5)
        return cache[url]

    yield get
    for engine in cache.values():
        engine.dispose()
