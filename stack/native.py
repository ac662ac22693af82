"""The native provider: every part on loopback, on free ports, in one run directory, started by the
project itself. A system's components reach PostgreSQL, Redis, RocketMQ and the S3 server only through
Toxiproxy, so chaos can cut, slow and reset each link.

What runs is split in two: the services (this module and the other providers) and the system's own
deployment, an :class:`Application` (its schema and application role, its topics and consumer groups, its
processes and their command lines), which the system builds (``systems/<name>/stack.py``) and hands in.

Start order: Toxiproxy, PostgreSQL (the application's schema and role), Redis, RocketMQ (its topics and
groups), the S3 server, then the application's components. Everything is stopped in reverse order, also
when start fails half-way or the run is interrupted."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kernel.failpoints import CrashPoint, write_points
from stack.app_database import AppSchema
from stack.common import LOOPBACK, MissingDependency
from stack.components import Component
from stack.guardian import Guardian

log = logging.getLogger("sortie.stack")




@dataclass
class Endpoints:
    run_dir: str
    api_url: str = ""  # the system's HTTP API, where it has one
    admin_database_url: str = ""  # superuser, direct: the checkers read the final state here
    database_url: str = ""  # the application role, through Toxiproxy
    redis_url: str = ""
    rocketmq_endpoint: str = ""
    namesrv_addr: str = ""
    s3_endpoint: str = ""
    s3_access_key: str = ""
    s3_secret_key: str = ""
    s3_bucket: str = "sortie-reports"
    toxiproxy_api: str = ""
    # The system's own addresses and secrets, which its Application fills (the Copilot's: its stream tier, the
    # platform simulator's public and control URLs, the token and webhook secrets).
    app: dict[str, str] = field(default_factory=dict)
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


class Application(AppSchema, Protocol):
    """A system's deployment on a provider's services: what every provider (native, containers, external) asks of
    the system, in start order (its schema and role first: stack.app_database.AppSchema). ``options`` is what its
    processes start with (a scenario runner reads e.g. its ``policy`` and ``time_scale``)."""

    options: Any

    def provision_broker(self, admin: Any) -> None:
        """Its topics and consumer groups with their dead-letter topics (stack.rocketmq.provision)."""

    def broker_topics(self) -> tuple[str, ...]:
        """The topics it produces to (a broker someone else provisioned must route them)."""

    def start_components(self, stack: NativeStack) -> None:
        """Its processes (stack.start_component), once the services and their links are up."""

    def set_policy(self, stack: NativeStack, overrides: dict[str, Any]) -> None:
        """Its policy overrides (a scenario's own over the stack's): the components that read them restart."""


def install() -> dict[str, str]:
    """Idempotent: builds or fetches every binary and jar into the cache; returns what is where."""
    from stack import centrifugo, mariadb, postgres, rabbitmq, redis, rocketmq, s3, toxiproxy

    redis.ensure_installed()
    if postgres.find_pg_bin() is None:
        raise MissingDependency("PostgreSQL server binaries not found: apt-get install postgresql")
    return {
        "postgres": str(postgres.find_pg_bin()),
        "mariadb": str(mariadb.require_binaries()[0]),
        "rabbitmq": str(rabbitmq.require_sbin()),
        "redis": shutil.which("redis-server") or "",
        "rocketmq": str(rocketmq.install()),
        "s3": str(s3.install()),
        "toxiproxy": str(toxiproxy.install()),
        "centrifugo": str(centrifugo.install()),
        "centrifuge-js": str(centrifugo.install_js_client()),
    }


class NativeStack:
    def __init__(self, run_dir: Path, app: Application) -> None:
        self.run_dir = run_dir
        self.app = app
        self.endpoints = Endpoints(run_dir=str(run_dir))
        self._stops: list[tuple[str, Any]] = []  # (name, stop callable), reversed on teardown
        self.components: dict[str, Component] = {}
        self.services: dict[str, Any] = {}
        self.toxiproxy: Any = None
        self.restarts: dict[str, int] = {}
        self._stopping = threading.Event()

    @property
    def options(self) -> Any:
        return self.app.options

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

    def proxy(self, name: str, upstream: str) -> str:
        """A Toxiproxy link ``name`` in front of ``upstream``; its address (what a component connects to)."""
        host, port = self.toxiproxy_client.create_proxy(name, upstream)
        self.endpoints.proxies[name] = f"{host}:{port}"
        return f"{host}:{port}"

    def _start(self) -> None:
        self._start_dependencies()
        self.history_dir.mkdir(parents=True, exist_ok=True)
        self.app.start_components(self)

    def _start_dependencies(self) -> None:
        """Toxiproxy, PostgreSQL, Redis, RocketMQ and the S3 server (the part each provider replaces)."""
        from stack.app_database import DATABASE, app_database_url, prepare_database
        from stack.postgres import LocalPostgres
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
        app_password = prepare_database(self.app, ep.admin_database_url)
        pg_proxy = self.proxy("postgres", f"{LOOPBACK}:{pg.port}")
        ep.database_url = app_database_url(pg_proxy, app_password, DATABASE)

        redis = self._service("redis", LocalRedis(rd / "redis"))
        ep.redis_url = f"redis://{self.proxy('redis', f'{LOOPBACK}:{redis.port}')}/0"

        mq = self._service("rocketmq", LocalRocketMQ(rd / "rocketmq"))
        t0 = time.monotonic()
        self.app.provision_broker(mq.admin_client())
        log.info("provisioned the broker's topics and groups in %.1f s", time.monotonic() - t0)
        ep.namesrv_addr = mq.namesrv_addr
        ep.rocketmq_endpoint = self.proxy("rocketmq", mq.endpoint)

        ep.s3_access_key, ep.s3_secret_key = "sortie" + secrets.token_hex(4), secrets.token_hex(16)
        s3 = self._service("s3", LocalS3(rd / "s3", ep.s3_access_key, ep.s3_secret_key))
        ep.s3_endpoint = self.proxy("s3", s3.endpoint)

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
        """The application's policy overrides (Application.set_policy)."""
        self.app.set_policy(self, overrides)

    def restart_with_env(self, env: dict[str, str], names: Any = None) -> None:
        """Give each component (of ``names``, default every one that already reads a variable of ``env``) the values
        of ``env``, and restart those whose values changed, all at once."""
        chosen = [c for n, c in self.components.items()
                  if (names(n) if names is not None else any(k in c.env for k in env))]
        changed = [c for c in chosen if any(c.env.get(k) != v for k, v in env.items())]
        for comp in changed:
            comp.env.update(env)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(changed) or 1) as pool:
            for future in [pool.submit(c.restart) for c in changed]:
                future.result()
        # Every chosen process, as the OS sees it, runs with env (a switched bug must be on in all, the last in none)
        if stale := {c.name: pids for c in chosen if (pids := c.pids_without(env))}:
            raise RuntimeError(f"restarted with {sorted(env)} but these processes run without them: {stale}")

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

    def start_component(self, component: Component) -> Component:
        """Start one component (it waits for its health check) under the stack's supervision."""
        component.start()
        self.components[component.name] = component
        self._stops.append((component.name, component.stop))
        return component

    def start_components_together(self, components: list[Component]) -> None:
        """Start independent components concurrently (each waits for its own health check); registered
        first, so a failure stops the ones that did come up."""
        from concurrent.futures import ThreadPoolExecutor

        for c in components:
            self.components[c.name] = c
            self._stops.append((c.name, c.stop))
        with ThreadPoolExecutor(max_workers=len(components) or 1) as pool:
            for future in [pool.submit(c.start) for c in components]:
                future.result()

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, comp in self.components.items():
            out[name] = {"pid": comp.pid, "running": comp.running()}
        for name, svc in self.services.items():
            running = getattr(svc, "running", None)
            out[name] = {"running": bool(running() if callable(running) else running)}
        return out
