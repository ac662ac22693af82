"""The external provider against services it did not start: PostgreSQL, Redis, RocketMQ and the S3
server are started here as separate parts (stack/postgres.py, redis.py, rocketmq.py, s3.py), as a user's
own services would be; ExternalStack starts only Toxiproxy, the simulator and the reference components
against them, migrates the database, provisions the broker, and at teardown stops only what it started.
The end-to-end check is the native one (tests/stack/test_end_to_end.py), run through this provider."""

from __future__ import annotations

import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from test_end_to_end import SPEC
from test_end_to_end import test_a_confirmed_draft_flies_completes_and_gets_its_report as confirm_flies_and_reports

from reference.copilot.topology import Topology

pytestmark = [pytest.mark.stack,
              pytest.mark.filterwarnings("ignore:The 'warn' method is deprecated:DeprecationWarning")]
# The tests that start the services (PostgreSQL, Redis, RocketMQ, the S3 server) and a stack on them are marked
# whole_stack and nightly (docs/ci.md); the configuration's own test runs in the test command.


@pytest.fixture(scope="module")
def services() -> Iterator[dict[str, Any]]:
    """The user's services: each started on its own, none by the provider."""
    from stack.postgres import LocalPostgres
    from stack.redis import LocalRedis
    from stack.rocketmq import LocalRocketMQ
    from stack.s3 import LocalS3

    root = Path(tempfile.mkdtemp(prefix="sortie-ext-"))
    pg_dir = Path(tempfile.mkdtemp(prefix="sortie-ext-pg-"))
    pg_dir.chmod(0o711)  # the postgres OS user must traverse it
    started: list[Any] = []
    try:
        pg = LocalPostgres(pg_dir).start()
        started.append(pg)
        pg.create_database("sortie", exist_ok=True)
        redis = LocalRedis(root / "redis").start()
        started.append(redis)
        mq = LocalRocketMQ(root / "rocketmq", stop_timeout_s=3).start()
        started.append(mq)
        key, secret = "ext" + secrets.token_hex(4), secrets.token_hex(16)
        s3 = LocalS3(root / "s3", key, secret).start()
        started.append(s3)
        yield {"pg": pg, "redis": redis, "mq": mq, "s3": s3, "key": key, "secret": secret, "root": root}
    finally:
        for svc in reversed(started):
            svc.stop()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(pg_dir, ignore_errors=True)


def _config(services: dict[str, Any], database: str = "sortie") -> Any:
    from stack.external import ExternalConfig

    mq = services["mq"]
    return ExternalConfig(
        postgres_url=services["pg"].url(database=database), redis_url=services["redis"].url,
        rocketmq_endpoint=mq.endpoint, rocketmq_namesrv=mq.namesrv_addr, rocketmq_broker_addr=mq.broker_addr,
        s3_endpoint=services["s3"].endpoint, s3_access_key=services["key"], s3_secret_key=services["secret"],
        s3_bucket="ext-reports", toxiproxy_api="local")


@pytest.fixture(scope="module")
def native(services: dict[str, Any]) -> Iterator[Any]:
    """Named like test_end_to_end's fixture so its check runs unchanged through this provider."""
    from stack.external import ExternalStack
    from systems.copilot.stack import CopilotApp, CopilotOptions

    stack = ExternalStack(services["root"] / "run", CopilotApp(CopilotOptions(
        time_scale=60.0, devices=SPEC.devices, topology=Topology(publishers=1, dispatchers=1), api_workers=1,
        policy={"reconcile_interval_s": 2.0, "invisible_s": 10.0})), _config(services))
    began = time.monotonic()
    stack.start()
    print(f"\nexternal stack up in {time.monotonic() - began:.1f}s {stack.timings}")
    try:
        yield stack
    finally:
        stack.stop()


def test_config_from_file_and_environment(tmp_path: Path) -> None:
    from stack.common import ProviderUnavailable
    from stack.external import ExternalConfig

    path = tmp_path / "ext.yaml"
    path.write_text("postgres_url: postgresql+psycopg://o:p@db:5432/s\nredis_url: redis://r:6379/0\n"
                    "rocketmq_endpoint: mq:8081\ns3_endpoint: s3:9000\ns3_access_key: k\ns3_secret_key: s\n")
    cfg = ExternalConfig.load(path, env={"SORTIE_EXTERNAL_S3_BUCKET": "b", "SORTIE_EXTERNAL_ROCKETMQ_PROVISION": "no"})
    assert (cfg.s3_bucket, cfg.rocketmq_provision, cfg.toxiproxy_api) == ("b", False, "local")
    with pytest.raises(ProviderUnavailable, match="SORTIE_EXTERNAL_POSTGRES_URL"):
        ExternalConfig.load(None, env={})
    path.write_text("postgres_urll: x\n")
    with pytest.raises(ProviderUnavailable, match="unknown setting"):
        ExternalConfig.load(path, env={})


@pytest.mark.whole_stack
@pytest.mark.nightly
def test_a_foreign_database_is_refused_and_nothing_is_left(services: dict[str, Any]) -> None:
    from stack.app_database import ForeignDatabase
    from stack.external import ExternalStack
    from systems.copilot.stack import CopilotApp

    pg = services["pg"]
    pg.create_database("someone_elses", exist_ok=True)
    pg.execute("CREATE TABLE IF NOT EXISTS invoices (id int primary key)", database="someone_elses")
    stack = ExternalStack(services["root"] / "refused", CopilotApp(), _config(services, "someone_elses"))
    with pytest.raises(ForeignDatabase, match="not a Sortie database"):
        stack.start()
    assert not stack.components and stack._stops == []  # the Toxiproxy it had started is stopped
    engine = create_engine(pg.url(database="someone_elses"))
    with engine.connect() as conn:  # untouched: no migration ran
        tables = set(conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname='public'")).scalars())
    engine.dispose()
    assert tables == {"invoices"}


@pytest.mark.whole_stack
@pytest.mark.nightly
def test_end_to_end_through_the_external_provider(native: Any, fleet: Any) -> None:
    ep = native.endpoints
    assert set(ep.proxies) == {"postgres", "redis", "rocketmq", "s3", "platform", "webhook", "api", "stream"}
    assert "sortie_app" in ep.database_url and ep.database_url.split("@")[1].startswith(ep.proxies["postgres"])
    confirm_flies_and_reports(native, fleet)


@pytest.mark.whole_stack
@pytest.mark.nightly
def test_teardown_stops_only_what_it_started(services: dict[str, Any], native: Any) -> None:
    pids = [c.pid for c in native.components.values()]
    native.stop()
    import os

    for pid in pids:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert all(svc.running for svc in (services["pg"], services["redis"], services["mq"], services["s3"]))
    engine = create_engine(services["pg"].url(database="sortie"))
    with engine.connect() as conn:  # the user's database keeps Sortie's data
        assert conn.execute(text("SELECT count(*) FROM drone_task")).scalar_one() >= 1
    engine.dispose()
