"""Issue 11's adversarial kinds against the real API: PostgreSQL (a throwaway cluster, migrated to head, the
application role), the API under gunicorn as the native stack runs it (reference.copilot.http.wsgi:app with the
ProblemJsonWorker, configured by reference.copilot.settings' SORTIE_* environment, connected as the application role),
and
requests over real HTTP. The kinds are adversarial_kinds.KINDS, the one table test_adversarial.py runs on SQLite;
each is checked by Bench.refuse: the status, application/problem+json, the stable code, no stack trace, and no
table changed (row counts and a digest of every row, read as the schema owner) but the append-only security_log,
which gains exactly the row of a security-relevant refusal.

One cluster and one gunicorn per module (``--dist loadfile`` keeps the module on one xdist worker); the kinds
share one scene (adversarial_kinds.Scene) and change nothing, so their order does not matter."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import requests
from adversarial_kinds import KINDS, Bench, Kind, Request, http_sender, oracle_pairs
from api_support import SECRET, WEBHOOK_TOKEN, build_api
from sqlalchemy import create_engine, text

from reference.copilot.migrations import upgrade
from reference.copilot.migrations.roles import create_app_role
from reference.copilot.models import Base
from reference.copilot.settings import Settings
from stack.common import LOOPBACK, free_port
from stack.postgres import LocalPostgres, find_pg_bin

ROOT = Path(__file__).resolve().parents[2]
APP_ROLE = "sortie_app"  # stack.app_database.APP_ROLE
APP_PASSWORD = "adversarial-app-pw-'%-quoted"
WORKER_CLASS = "reference.copilot.http.gunicorn_worker.ProblemJsonWorker"  # as stack.native starts the API
APP = "reference.copilot.http.wsgi:app"
EXIT_DEADLINE_S = 30.0


def _seed_like_the_sqlite_tests(owner_url: str) -> None:
    """The fleet api_support.build_api seeds (seed_fleet, as test_adversarial.py's databases have it), copied row by
    row into PostgreSQL: one seeding, whatever it becomes."""
    source = build_api()
    target = create_engine(owner_url)
    try:
        with source.engine.connect() as src, target.begin() as dst:
            for table in Base.metadata.sorted_tables:
                rows = [dict(r._mapping) for r in src.execute(table.select())]
                if rows:
                    dst.execute(table.insert(), rows)
    finally:
        target.dispose()
        source.hub.close()
        source.engine.dispose()


def _gone(pids: list[int]) -> bool:
    import psutil  # mirakuru's own dependency

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return not any(alive(p) for p in pids)


def _stop_and_check(api: object, log_path: Path) -> None:
    """Stops gunicorn (SIGTERM to its process group, then SIGKILL) and fails if the master or a worker outlives it."""
    import psutil

    pid = api.pid  # type: ignore[attr-defined]
    pids = [pid] if pid is not None else []
    if pid is not None:
        try:
            pids += [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    api.stop()  # type: ignore[attr-defined]
    deadline = time.monotonic() + EXIT_DEADLINE_S
    while not _gone(pids):
        assert time.monotonic() < deadline, f"gunicorn processes {pids} outlived stop(); see {log_path}"
        time.sleep(0.05)  # polling a condition under a deadline


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    if find_pg_bin() is None:
        pytest.skip("PostgreSQL server binaries not installed (apt-get install postgresql)")
    pytest.importorskip("mirakuru", reason="the stack extra (process supervision) is not installed")
    from stack.components import Component

    logs = tmp_path_factory.mktemp("adversarial-pg")
    with ExitStack() as stack:
        # Not pytest's tmp_path for the cluster: its 0700 root-owned parents are closed to the 'postgres' OS user.
        run_dir = Path(tempfile.mkdtemp(prefix="sortie-pg-adversarial-"))
        stack.callback(shutil.rmtree, run_dir, ignore_errors=True)
        pg = LocalPostgres(run_dir)
        stack.callback(pg.stop)
        pg.start()
        owner_url = pg.url()
        upgrade(owner_url)
        owner = create_engine(owner_url, pool_size=2)
        stack.callback(owner.dispose)
        with owner.begin() as conn:
            create_app_role(conn, APP_ROLE, APP_PASSWORD)
        _seed_like_the_sqlite_tests(owner_url)

        port = free_port()
        env = Settings(database_url=pg.url(APP_ROLE, APP_PASSWORD), token_secret=SECRET,
                       webhook_token=WEBHOOK_TOKEN).as_env()
        api = Component("api", [sys.executable, "-m", "gunicorn", "--bind", f"{LOOPBACK}:{port}", "--workers", "1",
                                "--worker-class", WORKER_CLASS, "--threads", "2", "--timeout", "60",
                                "--graceful-timeout", "5", "--chdir", str(ROOT), APP],
                        health_url=f"http://{LOOPBACK}:{port}/health", env=env, log_path=logs / "api.log",
                        start_timeout_s=60.0)  # mirakuru polls /health until 200, or fails at the deadline
        stack.callback(_stop_and_check, api, logs / "api.log")
        api.start()

        session = requests.Session()
        stack.callback(session.close)
        yield Bench.on(http_sender(f"http://{LOOPBACK}:{port}", session), owner, gunicorn=True)


def test_the_api_is_gunicorn_on_postgresql_as_the_application_role(served: Bench) -> None:
    health = served.send(Request("GET", "/health"))
    assert health.status == 200 and "gunicorn" not in health.headers.get("Server", "").lower()
    with served.tables.engine.connect() as conn:
        users = set(conn.execute(text(
            "SELECT usename FROM pg_stat_activity WHERE application_name LIKE 'sortie-api-%'")).scalars())
    assert users == {APP_ROLE}


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.id)
def test_every_adversarial_kind_is_refused_over_http_and_writes_nothing(served: Bench, kind: Kind) -> None:
    served.refuse(kind)


@pytest.mark.parametrize("pair", sorted(oracle_pairs()))
def test_unknown_and_foreign_devices_and_areas_get_the_same_answer_over_http(served: Bench, pair: str) -> None:
    served.alike(*oracle_pairs()[pair])
