"""The native provider: every part on loopback, on free ports, in one run directory, started by the
project itself (DESIGN.md §2). The reference components reach PostgreSQL, Redis, RocketMQ, the S3
server and the platform simulator only through Toxiproxy, so chaos can cut, slow and reset each link.

Start order: Toxiproxy, PostgreSQL (migrated; the application role cannot change the audit log),
Redis, RocketMQ (topic and consumer groups), the S3 server (bucket), the platform simulator, the API
(gunicorn), the workers; finally the simulator's webhook is pointed at the API (through its proxy).
Everything is stopped in reverse order, also when start fails half-way or the run is interrupted."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import secrets
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import requests

from kernel.failpoints import CrashPoint, write_points
from reference.copilot.topology import Topology
from stack.common import LOOPBACK, MissingDependency, free_port
from stack.components import Component, python_module
from stack.guardian import Guardian

log = logging.getLogger("sortie.stack")

APP_ROLE = "sortie_app"
DATABASE = "sortie"

# Links that pass through Toxiproxy; the names are what chaos refers to.
LINKS = ("postgres", "redis", "rocketmq", "s3", "platform", "webhook")


@dataclass
class Endpoints:
    run_dir: str
    api_url: str = ""
    # GET /v1/stream: the stream tier's address (reference/copilot/http/stream_asgi.py), or the API's without the tier
    stream_url: str = ""
    platform_control_url: str = ""  # the harness's direct line to the simulator (faults, ledger)
    admin_database_url: str = ""  # superuser, direct: the checkers read the final state here
    database_url: str = ""  # the application role, through Toxiproxy
    redis_url: str = ""
    rocketmq_endpoint: str = ""
    namesrv_addr: str = ""
    s3_endpoint: str = ""
    s3_access_key: str = ""
    s3_secret_key: str = ""
    s3_bucket: str = "sortie-reports"
    platform_url: str = ""
    toxiproxy_api: str = ""
    token_secret: str = ""
    webhook_token: str = ""
    proxies: dict[str, str] = field(default_factory=dict)
    pids: dict[str, int | None] = field(default_factory=dict)
    health: dict[str, str] = field(default_factory=dict)  # component -> its health URL

    def write(self, path: Path) -> None:
        """Atomically (write, then rename): a reader never sees half a file."""
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> Endpoints:
        return cls(**json.loads(path.read_text()))


# How long the API keeps an idle client connection open (gunicorn's default is 2 s). A client that sends on a
# connection just as the server closes it gets "connection reset" or "closed without response": 3 of 51,724
# requests of a 25-minute 5x run, whose operators often pause longer than 2 s. A server should keep idle
# connections longer than its clients (and any load balancer) do; 75 s is nginx's default.
API_KEEPALIVE_S = 75


@dataclass
class NativeOptions:
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
    inject_bug: str = ""  # reference.copilot.bugs: a known defect switched on in the API and every worker


def install() -> dict[str, str]:
    """Idempotent: builds or fetches every binary and jar into the cache; returns what is where."""
    from stack import postgres, redis, rocketmq, s3, toxiproxy

    redis.ensure_installed()
    if postgres.find_pg_bin() is None:
        raise MissingDependency("PostgreSQL server binaries not found: apt-get install postgresql")
    return {
        "postgres": str(postgres.find_pg_bin()),
        "redis": shutil.which("redis-server") or "",
        "rocketmq": str(rocketmq.install()),
        "s3": str(s3.install()),
        "toxiproxy": str(toxiproxy.install()),
    }


class NativeStack:
    def __init__(self, run_dir: Path, options: NativeOptions | None = None) -> None:
        self.run_dir = run_dir
        self.options = options or NativeOptions()
        self.endpoints = Endpoints(run_dir=str(run_dir))
        self._stops: list[tuple[str, Any]] = []  # (name, stop callable), reversed on teardown
        self.components: dict[str, Component] = {}
        self.services: dict[str, Any] = {}
        self.toxiproxy: Any = None
        self.restarts: dict[str, int] = {}
        self._stopping = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Endpoints:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        # First, so every part inherits the stack's id; stopped last (stop() unwinds _stops in reverse).
        guardian = Guardian(self.run_dir)
        guardian.start()
        self._stops.append(("guardian", guardian.stop))
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.endpoints.pids = {n: c.pid for n, c in self.components.items()}
        self.endpoints.health = {n: c.health_url for n, c in self.components.items()}
        self.endpoints.write(self.run_dir / "stack.json")
        threading.Thread(target=self._supervise, name="supervisor", daemon=True).start()
        return self.endpoints

    def stop(self) -> None:
        self._stopping.set()
        while self._stops:
            name, stop = self._stops.pop()
            t0 = time.monotonic()
            try:
                stop()
            except Exception:
                log.warning("stopping %s failed", name, exc_info=True)
            log.info("stopped %s in %.1f s", name, time.monotonic() - t0)
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    def __enter__(self) -> NativeStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ parts

    def _service(self, name: str, service: Any) -> Any:
        t0 = time.monotonic()
        service.start()
        log.info("started %s in %.1f s", name, time.monotonic() - t0)
        self.services[name] = service
        self._stops.append((name, service.stop))
        return service

    def _proxy(self, name: str, upstream: str) -> str:
        host, port = self.toxiproxy_client.create_proxy(name, upstream)
        self.endpoints.proxies[name] = f"{host}:{port}"
        return f"{host}:{port}"

    def _start(self) -> None:
        self.endpoints.token_secret, self.endpoints.webhook_token = secrets.token_hex(16), secrets.token_hex(16)
        self._start_dependencies()
        self._start_components()

    def _start_dependencies(self) -> None:
        """Toxiproxy, PostgreSQL, Redis, RocketMQ and the S3 server (the part each provider replaces)."""
        from stack.postgres import LocalPostgres
        from stack.providers import app_database_url, prepare_database, provision_broker
        from stack.redis import LocalRedis
        from stack.rocketmq import LocalRocketMQ
        from stack.s3 import LocalS3
        from stack.toxiproxy import LocalToxiproxy, ToxiproxyClient

        ep, rd = self.endpoints, self.run_dir

        tp = self._service("toxiproxy", LocalToxiproxy(rd / "toxiproxy"))
        ep.toxiproxy_api = tp.api_url
        self.toxiproxy_client = ToxiproxyClient(tp.api_url)

        # The server runs as the 'postgres' OS user, which must traverse every parent of its data
        # directory: a run dir under /root or a 0700 temp dir would block it, so the cluster gets its own.
        pg_dir = Path(tempfile.mkdtemp(prefix="sortie-pg-"))
        pg_dir.chmod(0o711)
        self._stops.append(("postgres dir", lambda: shutil.rmtree(pg_dir, ignore_errors=True)))
        (rd / "postgres-dir").write_text(str(pg_dir) + "\n")
        pg = self._service("postgres", LocalPostgres(pg_dir))
        pg.create_database(DATABASE, exist_ok=True)
        ep.admin_database_url = pg.url(database=DATABASE)
        app_password = prepare_database(ep.admin_database_url)
        pg_proxy = self._proxy("postgres", f"{LOOPBACK}:{pg.port}")
        ep.database_url = app_database_url(pg_proxy, app_password, DATABASE)

        redis = self._service("redis", LocalRedis(rd / "redis"))
        ep.redis_url = f"redis://{self._proxy('redis', f'{LOOPBACK}:{redis.port}')}/0"

        mq = self._service("rocketmq", LocalRocketMQ(rd / "rocketmq"))
        t0 = time.monotonic()
        provision_broker(mq.admin_client())
        log.info("provisioned the broker's topics and groups in %.1f s", time.monotonic() - t0)
        ep.namesrv_addr = mq.namesrv_addr
        ep.rocketmq_endpoint = self._proxy("rocketmq", mq.endpoint)

        ep.s3_access_key, ep.s3_secret_key = "sortie" + secrets.token_hex(4), secrets.token_hex(16)
        s3 = self._service("s3", LocalS3(rd / "s3", ep.s3_access_key, ep.s3_secret_key))
        ep.s3_endpoint = self._proxy("s3", s3.endpoint)

    def _start_components(self) -> None:
        """The platform simulator, the API and the workers: host processes, the same for every provider."""
        ep, rd, opt = self.endpoints, self.run_dir, self.options
        sim_port = free_port()
        sim = Component(
            "simulator", python_module("simulator", "--host", LOOPBACK, "--port", str(sim_port), "--seed",
                                       str(opt.seed), "--time-scale", str(opt.time_scale), "--devices",
                                       str(opt.devices)),
            health_url=f"http://{LOOPBACK}:{sim_port}/control/health", log_path=rd / "simulator.log")
        self._component(sim)
        ep.platform_control_url = f"http://{LOOPBACK}:{sim_port}"
        ep.platform_url = f"http://{self._proxy('platform', f'{LOOPBACK}:{sim_port}')}"

        from reference.copilot.settings import Settings

        settings = Settings(
            database_url=ep.database_url, rocketmq_endpoint=ep.rocketmq_endpoint, platform_url=ep.platform_url,
            platform_read_timeout_s=opt.platform_read_timeout_s, s3_endpoint=ep.s3_endpoint,
            s3_access_key=ep.s3_access_key, s3_secret_key=ep.s3_secret_key, s3_bucket=ep.s3_bucket,
            redis_url=ep.redis_url, token_secret=ep.token_secret, webhook_token=ep.webhook_token,
            policy=opt.policy, failpoint_file=str(self.failpoint_file), history_dir=str(self.history_dir),
            inject_bug=opt.inject_bug, server_timing=True)
        self.history_dir.mkdir(parents=True, exist_ok=True)
        env = settings.as_env()
        self._ensure_bucket(settings)

        api_port = free_port()
        api = Component(
            "api", [sys.executable, "-m", "gunicorn", "--bind", f"{LOOPBACK}:{api_port}", "--workers",
                    str(opt.api_workers), "--worker-class",
                    # gthread, answering gunicorn's own refusals (414, 431, malformed requests) in problem+json
                    "reference.copilot.http.gunicorn_worker.ProblemJsonWorker", "--threads", str(opt.api_threads),
                    # gthread accepts connections up to this and queues requests beyond its threads; keep room for
                    # idle keep-alive connections next to threads held by SSE streams
                    "--worker-connections", str(opt.api_threads + 1000), "--timeout", "60", "--graceful-timeout", "5",
                    "--keep-alive", str(API_KEEPALIVE_S), "reference.copilot.http.wsgi:app"],
            health_url=f"http://{LOOPBACK}:{api_port}/health", env=dict(env), log_path=rd / "api.log")
        self._component(api)
        ep.api_url = f"http://{LOOPBACK}:{api_port}"
        webhook = self._proxy("webhook", f"{LOOPBACK}:{api_port}")
        self._proxy("api", f"{LOOPBACK}:{api_port}")  # for clients whose link a scenario cuts (SSE streams, B7)
        ep.stream_url = ep.api_url
        if opt.stream_tier:
            self._start_stream_tier(env)

        workers = []
        for name, role in opt.topology.workers():
            port = free_port()
            workers.append(Component(
                name, python_module("reference.copilot.worker", role, "--health-port", str(port)),
                health_url=f"http://{LOOPBACK}:{port}/health", env=dict(env), log_path=rd / f"{name}.log"))
        self._components_at_once(workers)

        resp = requests.post(f"{ep.platform_control_url}/control/webhook", timeout=5, json={
            "url": f"http://{webhook}/v1/platform/events", "headers": {"X-Webhook-Token": ep.webhook_token}})
        resp.raise_for_status()

    def _start_stream_tier(self, env: dict[str, str]) -> None:
        """GET /v1/stream as its own process (reference/copilot/http/stream_asgi.py, whose docstring says why clients
        get its URL from the endpoints file rather than through the API): fed by the Redis channel the API and
        the workers publish to, through the same Redis link (so a Redis fault reaches it too). Clients whose
        link a scenario cuts reach it through the ``stream`` proxy (B7)."""
        ep, rd = self.endpoints, self.run_dir
        port = free_port()
        tier = Component(
            "stream", python_module("reference.copilot.http.stream_asgi", "--host", LOOPBACK, "--port", str(port)),
            health_url=f"http://{LOOPBACK}:{port}/health", env=dict(env), log_path=rd / "stream.log")
        self._component(tier)
        ep.stream_url = f"http://{LOOPBACK}:{port}"
        self._proxy("stream", f"{LOOPBACK}:{port}")

    # ------------------------------------------------------------------ fault hooks

    @property
    def history_dir(self) -> Path:
        return self.run_dir / "history"

    def clear_history(self) -> None:
        # Truncate, not delete: the processes keep appending to the files they opened.
        for path in self.history_dir.glob("*.jsonl"):
            path.open("w").close()

    def read_history(self) -> list[dict[str, Any]]:
        ops: list[dict[str, Any]] = []
        for path in sorted(self.history_dir.glob("*.jsonl")):
            with path.open() as fh:
                ops.extend(json.loads(line) for line in fh if line.strip())
        return ops

    def log_sizes(self) -> dict[str, int]:
        """Each component log's size now: where the part of it that a scenario writes begins (logs_since)."""
        return {name: c.log_path.stat().st_size for name, c in self.components.items()
                if c.log_path is not None and c.log_path.exists()}

    def logs_since(self, sizes: dict[str, int]) -> dict[str, str]:
        """Each component's log text written after ``sizes`` (log_sizes): what a scenario's defects (I27) and operator
        alerts (I31) are read from, once, at its end."""
        texts: dict[str, str] = {}
        for name, c in sorted(self.components.items()):
            if c.log_path is None or not c.log_path.exists():
                continue
            with c.log_path.open("rb") as fh:
                fh.seek(sizes.get(name, 0))
                texts[name] = fh.read().decode(errors="replace")
        return texts

    @property
    def failpoint_file(self) -> Path:
        return self.run_dir / "failpoints.json"

    def arm_crash_points(self, points: list[CrashPoint]) -> None:
        write_points(str(self.failpoint_file), points)

    def clear_failpoints(self) -> None:
        self.failpoint_file.unlink(missing_ok=True)
        for marker in self.run_dir.glob("failpoints.json.*.fired"):
            marker.unlink(missing_ok=True)

    def set_policy(self, overrides: dict[str, Any]) -> None:
        """The reference's Policy overrides (a scenario's own, over the stack's): every component that reads them
        restarts with the new ones when they change, the API and the workers at once."""
        if overrides == self.options.policy:
            return
        self.options = replace(self.options, policy=dict(overrides))
        value = json.dumps(self.options.policy)
        changed = [c for c in self.components.values() if "SORTIE_POLICY" in c.env and c.env["SORTIE_POLICY"] != value]
        for comp in changed:
            comp.env["SORTIE_POLICY"] = value
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(changed) or 1) as pool:
            for future in [pool.submit(c.restart) for c in changed]:
                future.result()

    def set_platform_capabilities(self, idempotency_key: bool, query: bool) -> None:
        """What the deployment is told about its platform (the reference cannot ask): dispatchers and the
        reconciler restart with the new setting when it changes."""
        env = {"SORTIE_PLATFORM_IDEMPOTENCY_KEY": "true" if idempotency_key else "false",
               "SORTIE_PLATFORM_QUERY": "true" if query else "false"}
        for name, comp in self.components.items():
            if name.startswith(("dispatcher", "reconciler")) and any(comp.env.get(k) != v for k, v in env.items()):
                comp.env.update(env)
                comp.restart()

    def object_digests(self) -> dict[str, str]:
        from minio import Minio

        ep = self.endpoints
        client = Minio(ep.s3_endpoint, access_key=ep.s3_access_key, secret_key=ep.s3_secret_key, secure=False,
                       region="us-east-1")
        out: dict[str, str] = {}
        for obj in client.list_objects(ep.s3_bucket, recursive=True):
            resp = client.get_object(ep.s3_bucket, obj.object_name)
            try:
                out[obj.object_name] = hashlib.sha256(resp.read()).hexdigest()
            finally:
                resp.close()
                resp.release_conn()
        return dict(sorted(out.items()))

    # ------------------------------------------------------------------ supervision

    def _supervise(self) -> None:
        """Restart components that died (crash points SIGKILL them), like systemd's Restart=always."""
        while not self._stopping.wait(1.0):
            for name, comp in list(self.components.items()):
                if self._stopping.is_set():
                    break
                try:
                    if comp.restart_if_died():
                        log.info("%s died; restarted", name)
                        self.restarts[name] = self.restarts.get(name, 0) + 1
                except Exception as exc:  # e.g. a crash point fired again while it was starting
                    log.info("restart of %s did not come up (%s); retrying", name, exc)

    def _component(self, component: Component) -> Component:
        component.start()
        self.components[component.name] = component
        self._stops.append((component.name, component.stop))
        return component

    def _components_at_once(self, components: list[Component]) -> None:
        """Start independent components concurrently (each waits for its own health check); registered
        first, so a failure stops the ones that did come up."""
        from concurrent.futures import ThreadPoolExecutor

        for c in components:
            self.components[c.name] = c
            self._stops.append((c.name, c.stop))
        with ThreadPoolExecutor(max_workers=len(components) or 1) as pool:
            for future in [pool.submit(c.start) for c in components]:
                future.result()

    @staticmethod
    def _ensure_bucket(settings: Any) -> None:
        from reference.copilot.adapters.objectstore_s3 import S3ObjectStore

        S3ObjectStore(settings.s3_endpoint, settings.s3_access_key, settings.s3_secret_key, settings.s3_bucket,
                      timeout_s=5.0).ensure_bucket()

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, comp in self.components.items():
            out[name] = {"pid": comp.pid, "running": comp.running()}
        for name, svc in self.services.items():
            running = getattr(svc, "running", None)
            out[name] = {"running": bool(running() if callable(running) else running)}
        return out
