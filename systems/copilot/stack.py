"""The Copilot's real stack for `sortie run`, `sortie selfcheck --stack native` (System.stack_runner) and `sortie
stack up` (System.stack): a provider's stack (stack.providers: native processes, Docker containers or external
services) with the Copilot's deployment on it (:class:`CopilotApp`: its schema and role, its topic and consumer
groups, its processes), and the catalogue's scenarios run on it by systems.copilot.stack_run.

Its processes, started after the services: the platform simulator, the API (gunicorn), the stream tier, the
workers of its topology; finally the simulator's webhook is pointed at the API (through its proxy)."""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import requests

from reference.copilot.http.notify import STREAMS_PER_USER
from reference.copilot.topology import Topology
from scenarios.systems import StackRequest, StackUnavailable
from stack.common import LOOPBACK, free_port
from stack.components import Component, python_module

DEFAULT_TIME_FACTOR = 0.25  # the catalogue's fault windows, quartered: the native catalogue fits a CI run
WORKER_MODULE = "reference.copilot.worker"  # `python -m` it with a role of the topology

# How long the API keeps an idle client connection open (gunicorn's default is 2 s). A client that sends on a
# connection just as the server closes it gets "connection reset" or "closed without response": 3 of 51,724
# requests of a 25-minute 5x run, whose operators often pause longer than 2 s. A server should keep idle
# connections longer than its clients (and any load balancer) do; 75 s is nginx's default.
API_KEEPALIVE_S = 75


# gunicorn's request limits: a request line and at most 32 headers of 4 KiB each (a JWT is ~200 bytes). Its
# defaults (100 headers of 8 KiB) let one request's headers take 800 KiB of a worker; beyond these, 431 (or 414).
API_LIMITS = ("--limit-request-line", "4094", "--limit-request-fields", "32", "--limit-request-field_size", "4096")


def api_max_streams(api_threads: int) -> int:
    """Streams one API worker may hold (each holds a gthread thread): half its threads, so requests keep the rest."""
    return max(1, api_threads // 2)


def api_command(bind: str, workers: int, threads: int) -> list[str]:
    """The API's gunicorn command line, as the stack runs it (tests start the same)."""
    return [sys.executable, "-m", "gunicorn", "--bind", bind, "--workers", str(workers), "--worker-class",
            # gthread, answering gunicorn's own refusals (414, 431, malformed requests) in problem+json, with a read
            # timeout on each request's socket (SORTIE_API_READ_TIMEOUT_S)
            "reference.copilot.http.gunicorn_worker.ProblemJsonWorker", "--threads", str(threads),
            # gthread accepts connections up to this and queues requests beyond its threads; keep room for
            # idle keep-alive connections next to threads held by SSE streams
            "--worker-connections", str(threads + 1000), "--timeout", "60", "--graceful-timeout", "5",
            "--keep-alive", str(API_KEEPALIVE_S), *API_LIMITS, "reference.copilot.http.wsgi:app"]


@dataclass
class CopilotOptions:
    """What the Copilot's processes start with on a stack."""

    time_scale: float = 60.0  # simulator model seconds per wall second: a 10-minute flight takes 10 s
    devices: int = 200
    seed: int = 0
    api_workers: int = 2
    api_threads: int = 8  # gthread threads per API worker; each open SSE stream *at the API* holds one
    # Serve GET /v1/stream from the async stream tier (its own process): streams then hold no API thread
    stream_tier: bool = True
    topology: Topology = field(default_factory=Topology)
    policy: dict[str, Any] = field(default_factory=dict)
    platform_read_timeout_s: float = 2.0
    streams_per_user: int = STREAMS_PER_USER  # at the API and at the stream tier (reference/copilot/http/notify.py)
    api_max_streams: int = 0  # streams one API worker holds at most; 0: api_max_streams(api_threads)
    inject_bug: str = ""  # reference.copilot.bugs: a known defect switched on in the API and every worker


class CopilotApp:
    """The Copilot's deployment on a provider's services (stack.native.Application)."""

    def __init__(self, options: CopilotOptions | None = None) -> None:
        self.options = options or CopilotOptions()

    def migrate(self, admin_url: str) -> None:
        from reference.copilot.migrations import upgrade

        upgrade(admin_url)

    def create_app_role(self, admin_url: str, role: str, password: str) -> None:
        """SELECT/INSERT only on the audit log."""
        from sqlalchemy import create_engine

        from reference.copilot.migrations.roles import create_app_role

        admin = create_engine(admin_url)
        try:
            with admin.begin() as conn:
                create_app_role(conn, role, password)
        finally:
            admin.dispose()

    def schema_revisions(self) -> set[str]:
        from alembic.script import ScriptDirectory

        from reference.copilot.migrations import alembic_config

        return {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}

    def provision_broker(self, admin: Any) -> None:
        """Its topic, consumer groups, their dead-letter topics and readers."""
        from reference.copilot.adapters.broker_rocketmq import dead_letter_reader_group, dead_letter_topic
        from reference.copilot.services.consumer import HANDLERS
        from reference.copilot.settings import TOPIC
        from stack.rocketmq import provision

        provision(admin, TOPIC, list(HANDLERS), lambda g: (dead_letter_topic(g), dead_letter_reader_group(g)))

    def broker_topics(self) -> tuple[str, ...]:
        from reference.copilot.settings import TOPIC

        return (TOPIC,)

    def start_components(self, stack: Any) -> None:
        """The platform simulator, the API, the stream tier and the workers: host processes, the same for every
        provider; then the simulator's webhook, through its proxy, at the API."""
        ep, rd, opt = stack.endpoints, stack.run_dir, self.options
        ep.app["token_secret"], ep.app["webhook_token"] = secrets.token_hex(16), secrets.token_hex(16)
        sim_port = free_port()
        sim = Component(
            "simulator", python_module("simulator", "--host", LOOPBACK, "--port", str(sim_port), "--seed",
                                       str(opt.seed), "--time-scale", str(opt.time_scale), "--devices",
                                       str(opt.devices)),
            health_url=f"http://{LOOPBACK}:{sim_port}/control/health", log_path=rd / "simulator.log")
        stack.start_component(sim)
        ep.app["platform_control_url"] = f"http://{LOOPBACK}:{sim_port}"
        ep.app["platform_url"] = f"http://{stack.proxy('platform', f'{LOOPBACK}:{sim_port}')}"

        from reference.copilot.settings import Settings

        settings = Settings(
            database_url=ep.database_url, rocketmq_endpoint=ep.rocketmq_endpoint, platform_url=ep.app["platform_url"],
            platform_read_timeout_s=opt.platform_read_timeout_s, s3_endpoint=ep.s3_endpoint,
            s3_access_key=ep.s3_access_key, s3_secret_key=ep.s3_secret_key, s3_bucket=ep.s3_bucket,
            redis_url=ep.redis_url, token_secret=ep.app["token_secret"], webhook_token=ep.app["webhook_token"],
            policy=opt.policy, failpoint_file=str(stack.failpoint_file), history_dir=str(stack.history_dir),
            inject_bug=opt.inject_bug, server_timing=True, streams_per_user=opt.streams_per_user,
            api_max_streams=opt.api_max_streams or api_max_streams(opt.api_threads))
        env = settings.as_env()
        _ensure_bucket(settings)

        api_port = free_port()
        api = Component(
            "api", api_command(f"{LOOPBACK}:{api_port}", opt.api_workers, opt.api_threads),
            health_url=f"http://{LOOPBACK}:{api_port}/health", env=dict(env), log_path=rd / "api.log")
        stack.start_component(api)
        ep.api_url = f"http://{LOOPBACK}:{api_port}"
        webhook = stack.proxy("webhook", f"{LOOPBACK}:{api_port}")
        stack.proxy("api", f"{LOOPBACK}:{api_port}")  # for clients whose link a scenario cuts (SSE streams, B7)
        ep.app["stream_url"] = ep.api_url
        if opt.stream_tier:
            self._start_stream_tier(stack, env)

        workers = []
        for name, role in opt.topology.workers():
            port = free_port()
            workers.append(Component(
                name, python_module(WORKER_MODULE, role, "--health-port", str(port)),
                health_url=f"http://{LOOPBACK}:{port}/health", env=dict(env), log_path=rd / f"{name}.log"))
        stack.start_components_together(workers)

        resp = requests.post(f"{ep.app['platform_control_url']}/control/webhook", timeout=5, json={
            "url": f"http://{webhook}/v1/platform/events", "headers": {"X-Webhook-Token": ep.app["webhook_token"]}})
        resp.raise_for_status()

    @staticmethod
    def _start_stream_tier(stack: Any, env: dict[str, str]) -> None:
        """GET /v1/stream as its own process (reference/copilot/http/stream_asgi.py, whose docstring says why clients
        get its URL from the endpoints file rather than through the API): fed by the Redis channel the API and
        the workers publish to, through the same Redis link (so a Redis fault reaches it too). Clients whose
        link a scenario cuts reach it through the ``stream`` proxy (B7)."""
        ep, rd = stack.endpoints, stack.run_dir
        port = free_port()
        tier = Component(
            "stream", python_module("reference.copilot.http.stream_asgi", "--host", LOOPBACK, "--port", str(port)),
            health_url=f"http://{LOOPBACK}:{port}/health", env=dict(env), log_path=rd / "stream.log")
        stack.start_component(tier)
        ep.app["stream_url"] = f"http://{LOOPBACK}:{port}"
        stack.proxy("stream", f"{LOOPBACK}:{port}")

    def set_policy(self, stack: Any, overrides: dict[str, Any]) -> None:
        """Every component that reads the Policy (SORTIE_POLICY) restarts with the new one when it changes, the API
        and the workers at once."""
        if overrides == self.options.policy:
            return
        self.options = replace(self.options, policy=dict(overrides))
        stack.restart_with_env({"SORTIE_POLICY": json.dumps(self.options.policy)})

    def set_platform_capabilities(self, stack: Any, idempotency_key: bool | None, query: bool | None) -> None:
        """What the deployment is told about its platform (the reference cannot ask): dispatchers and the
        reconciler restart with the new setting when it changes. None: that capability stays as it is."""
        given = {"SORTIE_PLATFORM_IDEMPOTENCY_KEY": idempotency_key, "SORTIE_PLATFORM_QUERY": query}
        stack.restart_with_env({k: "true" if v else "false" for k, v in given.items() if v is not None},
                               names=lambda name: name.startswith(("dispatcher", "reconciler")))


def _ensure_bucket(settings: Any) -> None:
    from reference.copilot.adapters.objectstore_s3 import S3ObjectStore

    S3ObjectStore(settings.s3_endpoint, settings.s3_access_key, settings.s3_secret_key, settings.s3_bucket,
                  timeout_s=5.0).ensure_bucket()


def copilot_stack(kind: str | None, run_dir: Path, options: CopilotOptions | None = None, *,
                  external_config: str | Path | None = None, allow_foreign_database: bool = False) -> Any:
    """The Copilot on a provider's stack (stack.providers.provider), not started yet; ProviderUnavailable when the
    provider cannot run here."""
    from stack.providers import provider

    return provider(kind, run_dir, CopilotApp(options), external_config=external_config,
                    allow_foreign_database=allow_foreign_database)


def stack_for(req: StackRequest) -> Any:
    """`sortie stack up` (System.stack): the Copilot on the request's provider, not started."""
    from stack.common import ProviderUnavailable

    options = CopilotOptions(seed=req.seed, inject_bug=req.inject_bug or "")
    if req.time_scale is not None:
        options = replace(options, time_scale=req.time_scale)
    try:
        return copilot_stack(req.kind, req.run_dir, options, external_config=req.external_config,
                             allow_foreign_database=req.allow_foreign_database)
    except ProviderUnavailable as exc:  # nothing was started
        raise StackUnavailable(str(exc)) from None


class _Runner:
    def __init__(self, stack: Any, time_factor: float) -> None:
        from systems.copilot.stack_run import StackScenarioRunner

        self.stack, self.time_factor = stack, time_factor
        self._runner = StackScenarioRunner(stack, time_factor=time_factor)

    def run(self, scenario: Any, seed: int) -> Any:
        return self._runner.run(scenario, seed)

    def switch_bug(self, bug: str) -> None:
        """Another bug on this stack (scenarios.systems.BugSwitch): the API, the stream tier and every worker (all
        that read SORTIE_INJECT_BUG) restart with it; restart_with_env checks each process runs with it. The
        simulator has no bug; each scenario's run resets the database, the platform and the faults."""
        self.stack.app.options = replace(self.stack.app.options, inject_bug=bug)
        self.stack.restart_with_env({"SORTIE_INJECT_BUG": bug})

    def outside_pids(self) -> list[int]:
        """PostgreSQL's postmaster, if this stack started one (pg_ctl daemonises it: not sortie's child)."""
        pg = getattr(self.stack, "services", {}).get("postgres")
        pid = pg._postmaster_pid() if pg is not None and hasattr(pg, "_postmaster_pid") else None
        return [pid] if pid else []


@contextmanager
def stack_runner(req: StackRequest) -> Iterator[_Runner]:
    from stack.common import ProviderUnavailable
    from systems.copilot.stack_run import STACK_POLICY

    options = CopilotOptions(seed=req.seed, policy=dict(STACK_POLICY), inject_bug=req.inject_bug or "")
    try:
        stack = copilot_stack(req.kind, req.run_dir, options, external_config=req.external_config,
                              allow_foreign_database=req.allow_foreign_database)
    except ProviderUnavailable as exc:  # nothing was started
        raise StackUnavailable(str(exc)) from None
    try:
        try:
            stack.start()
        except ProviderUnavailable as exc:  # e.g. an external database that is not Sortie's
            raise StackUnavailable(str(exc)) from None
        yield _Runner(stack, req.time_factor or DEFAULT_TIME_FACTOR)
    finally:
        stack.stop()
