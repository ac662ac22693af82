"""The status sync on its real stack (`sortie run --system statussync`): its own stack, not stack.native's (which
always starts PostgreSQL, Redis, RocketMQ and S3):

- MariaDB 10.11 (stack.mariadb; the schema and the registry installed as root, every process connecting as an
  application user with row rights only), behind one Toxiproxy link (``statussync-db``);
- Centrifugo v6 (stack.centrifugo, memory engine) with the ``task_user`` and ``task_detail`` namespaces (history of
  the scenario's size and TTL, ``force_recovery``); its server API behind ``centrifugo-api`` (the relays' link) and
  each client's WebSocket behind a link of its own (``ws-client-N``), so a fault can cut some clients; for a
  scenario that makes the server API answer errors (``centrifugo-errors``), an HTTP fault proxy (stack.http_faults)
  between that link and the server;
- the status API (reference.statussync.http.app) as two gunicorn replicas, two outbox relays, the health reconciler
  and the producers, each an OS process (systems.statussync.processes);
- the clients: centrifuge-python over real WebSockets (systems.statussync.native_client), in this process.

A run plays the scenario's workload at the simulation's draws (the same tasks, owners and times), its windows and the
processes' periods scaled by ``time_factor``; it waits until every task ended, every outbox row settled and every
online client shows the database (a condition, polled, with the scenario's recovery bound as a deadline), then judges
S1-S15 on the tables and the merged history with the simulation's checkers (systems.statussync.checkers).

What runs natively and what does not (docs/systems/statussync.md has the table): a scenario runs here only when
every part of its workload and every fault it names is mapped below (``unsupported``)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import secrets
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, func, insert, select

from harness.history import INFO, OK, History
from reference.statussync.bugs import BUGS, SEED, SEED_DEFECTS
from reference.statussync.bugs import ENV_VAR as BUGS_ENV_VAR
from reference.statussync.client import MAX_DETAIL_SUBSCRIPTIONS
from reference.statussync.http.auth import USER, issue_token
from reference.statussync.models import OUTBOX_DEAD, OUTBOX_PUBLISHED, ProducerLedger, Task, TaskOutbox
from reference.statussync.reconciler import HealthConfig
from reference.statussync.registry import STEPS, TENANT, install, next_version_rows
from reference.statussync.relay import RelayConfig
from reference.statussync.service import step_token
from scenarios.systems import StackRequest, StackUnavailable
from stack.centrifugo import CentrifugoConfig, LocalCentrifugo, Namespace
from stack.common import LOOPBACK, free_port
from stack.components import Component, python_module
from stack.http_faults import HttpFaultProxy
from stack.mariadb import LocalMariaDB
from stack.redis import LocalRedis
from stack.toxiproxy import LocalToxiproxy
from systems.statussync.checkers import INVARIANTS, SyncState
from systems.statussync.faults import DB_LINK, NODE_DOWN, SyncNemesis, node_of
from systems.statussync.native_client import NativeClient
from systems.statussync.sim import PRODUCERS_BY_OP, SyncSpec

CENTRIFUGO_PROXY = "centrifugo-api"
APP_USER, APP_PASSWORD = "statussync_app", "statussync-app-pw"
DATABASE = "statussync"
DEFAULT_TIME_FACTOR = 0.5
API_REPLICAS = 2
RELAYS = 2
SETTLE_POLL_S = 0.5
JOIN_WAIT_S = 30.0
SETTLE_SLACK_S = 120.0  # beyond the scaled recovery bound: process starts on a loaded machine take seconds each
# Workload parts the native runner plays (the rest: `unsupported` names them); faults it maps.
NATIVE_WORKLOAD = {"tasks", "users", "window_s", "parallel", "progress", "work_s", "failing", "flaky", "reordered",
                   "details", "join_at_s", "join_spread_s", "history_size", "history_ttl_s", "step_timeout_s",
                   "stale_after_s", "retries", "reuses", "forged", "registry_change_at", "late_workers",
                   "foreign_details", "batch_get_s", "lead_tasks",
                   "open_each"}  # the native client always opens each of its first `details` tasks once
NATIVE_FAULTS = {"relays-paused", "clients-cut", "crash-point", "centrifugo-restart", "db-outage", "db-error",
                 "centrifugo-errors", "centrifugo-node-down"}
# Faults that have no faithful native form (the scenario's why_not says why).
NO_NATIVE_FORM = {"delivery-reorder": "one WebSocket keeps TCP order: a real server never reorders two channels "
                                      "of one connection against each other"}


# Scenarios whose expectation rests on a model behaviour the real server does not have (none since the model's history
# TTL runs from a stream's last publication, as Centrifugo v6's does: tests/statussync/test_centrifugo_parity.py).
MODEL_DIFFERS: dict[str, str] = {}


def unsupported(scenario: Any) -> list[str]:
    """What of the scenario the native runner does not play yet (empty: it runs)."""
    if scenario.id in MODEL_DIFFERS:
        return [MODEL_DIFFERS[scenario.id]]
    defaults = SyncSpec()
    spec = scenario.workload
    parts = [f"workload {name}" for name in spec.__dataclass_fields__
             if name not in NATIVE_WORKLOAD and getattr(spec, name) != getattr(defaults, name)]
    return parts + [f"fault {f.fault}" + (f" (no native form: {NO_NATIVE_FORM[f.fault]})" if f.fault in NO_NATIVE_FORM
                                          else "") for f in scenario.faults if f.fault not in NATIVE_FAULTS]


class SyncStack:
    """MariaDB, Toxiproxy and Centrifugo for as long as the context lasts; the API, relays, reconciler, producers
    and clients per run (the scenario sets the history size and the processes' periods)."""

    def __init__(self, run_dir: Path | None = None) -> None:
        self._keep_run_dir = run_dir is not None
        self.run_dir = Path(run_dir or tempfile.mkdtemp(prefix="sortie-statussync-stack-"))
        self.mariadb = LocalMariaDB(self.run_dir / "mariadb", database=DATABASE)
        self.toxiproxy = LocalToxiproxy(self.run_dir / "toxiproxy")
        self.token_secret = secrets.token_hex(16)
        self.hmac_key = secrets.token_hex(32)
        self.api_key = secrets.token_hex(16)
        self.centrifugo: LocalCentrifugo | None = None  # the first node (the relays publish through it)
        self.nodes: list[LocalCentrifugo] = []
        self.redis: LocalRedis | None = None  # the nodes' shared engine, with two or more
        self.api_faults: HttpFaultProxy | None = None  # between the relays' link and the server API, when asked
        self.owner: Engine | None = None
        self.app_url = ""
        self.processes: dict[str, Component] = {}
        self.failpoints = self.run_dir / "failpoints.json"
        self.restarted: list[tuple[float, str]] = []  # (wall time, process) the supervisor started again
        self.bugs: tuple[str, ...] = ()  # known defects switched on in every process it starts (selfcheck)

    def __enter__(self) -> SyncStack:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.mariadb.start()
            self.owner = create_engine(self.mariadb.url(), pool_pre_ping=True)
            self.mariadb.create_app_user(APP_USER, APP_PASSWORD)
            self.toxiproxy.start()
            _, port = self.toxiproxy.client.create_proxy(DB_LINK, self.mariadb.address)
            self.app_url = self.mariadb.url(APP_USER, APP_PASSWORD).replace(
                f":{self.mariadb.port}/", f":{port}/")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_processes()
        self.stop_centrifugo()
        self.toxiproxy.stop()
        if self.owner is not None:
            self.owner.dispose()
        self.mariadb.stop()
        if not self._keep_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    # ------------------------------------------------------------------ per run

    def reset(self) -> None:
        """Fresh tables with the registry seeded; every link up and without toxics."""
        assert self.owner is not None
        with self.owner.begin() as conn:
            from reference.statussync.models import StatusBase

            StatusBase.metadata.drop_all(conn)
            install(conn)
        for stale in self.run_dir.glob("failpoints.json*"):
            stale.unlink()
        self.restarted.clear()
        for name in list(self.toxiproxy.client.proxies()):
            if name.startswith("ws-client-"):
                self.toxiproxy.client.delete_proxy(name)
            else:
                self.toxiproxy.client.set_enabled(name, True)

    def start_centrifugo(self, spec: SyncSpec, factor: float = 1.0, allowed_origins: tuple[str, ...] = (),
                         api_faults: bool = False, nodes: int = 1) -> None:
        """``allowed_origins``: the origins of pages in a browser that may connect (the status page's);
        ``api_faults``: the relays' link goes through an HTTP fault proxy (centrifugo-errors' native half), not
        straight to the server (a hop of Python the other runs and the loads do without); ``nodes`` above 1: that
        many nodes on one Redis engine (§11.5: publications, history and epochs shared), the relays publishing
        through the first, client n connecting to node ``node_of(client-n)``."""
        self.stop_centrifugo()
        ttl = max(1, round(spec.history_ttl_s * factor))  # scenario seconds, scaled like every other window
        engine: dict[str, Any] = {}
        if nodes > 1:
            self.redis = LocalRedis(self.run_dir / "redis").start()
            engine = {"engine": "redis", "redis_url": self.redis.url, "redis_prefix": f"sync{secrets.token_hex(4)}"}
        config = CentrifugoConfig(self.hmac_key, self.api_key, namespaces=(
            Namespace("task_user", spec.history_size, ttl), Namespace("task_detail", spec.history_size, ttl)),
            channel_limit=MAX_DETAIL_SUBSCRIPTIONS + 1, allowed_origins=allowed_origins, **engine)
        self.nodes = [LocalCentrifugo(self.run_dir / ("centrifugo" + (f"-{k}" if k else "")), config).start()
                      for k in range(nodes)]
        self.centrifugo = self.nodes[0]
        upstream = self.centrifugo.address
        if api_faults:  # a restarted server keeps its port: the proxy's upstream stays right
            self.api_faults = HttpFaultProxy(upstream, self.run_dir / "http-faults.log").start()
            upstream = self.api_faults.address
        proxies = self.toxiproxy.client.proxies()
        if CENTRIFUGO_PROXY in proxies:
            self.toxiproxy.client.delete_proxy(CENTRIFUGO_PROXY)
        self.toxiproxy.client.create_proxy(CENTRIFUGO_PROXY, upstream)

    def stop_centrifugo(self) -> None:
        if self.api_faults is not None:
            self.api_faults.stop()
            self.api_faults = None
        for node in self.nodes:
            node.stop()
        self.nodes, self.centrifugo = [], None
        if self.redis is not None:
            self.redis.stop()
            self.redis = None

    def node_down(self, k: int, down: bool) -> None:
        """Node ``k`` lost (SIGKILL), every link to it first moved to the next node (what a balancer does when a
        backend fails its health check; the moved links' connections close); started again at the heal on its port
        and the same Redis, the links staying where they are (clients are not sticky, §11.7)."""
        if not 0 <= k < len(self.nodes) or len(self.nodes) < 2:
            raise ValueError(f"node {k} of {len(self.nodes)}: a node can be lost only among two or more")
        node = self.nodes[k]
        if not down:
            node.start()
            return
        live = self.nodes[(k + 1) % len(self.nodes)].address
        for name, proxy in self.toxiproxy.client.proxies().items():
            if proxy.get("upstream") == node.address:
                self.toxiproxy.client.set_upstream(name, live)
        if node.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGKILL)
        node.stop()  # reaps it

    def proxied(self, name: str) -> str:
        return str(self.toxiproxy.client.proxy(name)["listen"])

    def client_link(self, n: int) -> str:
        """A WebSocket URL through the client's own link (created now), to its node."""
        assert self.nodes
        self.toxiproxy.client.create_proxy(f"ws-client-{n}", self.nodes[node_of(f"client-{n}", len(self.nodes))]
                                           .address)
        return f"ws://{self.proxied(f'ws-client-{n}')}/connection/websocket"

    def _common_env(self, history: Path | None) -> dict[str, str]:
        return {"SORTIE_STATUSSYNC_DATABASE_URL": self.app_url, "SORTIE_FAILPOINTS": str(self.failpoints),
                "SORTIE_STATUSSYNC_TOKEN_SECRET": self.token_secret,
                "SORTIE_STATUSSYNC_CENTRIFUGO_SECRET": self.hmac_key, BUGS_ENV_VAR: ",".join(self.bugs),
                **({"SORTIE_STATUSSYNC_HISTORY": str(history)} if history is not None else {})}

    def start_api(self, replicas: int = API_REPLICAS, history: Path | None = None, ports: list[int] | None = None,
                  js_client: Path | None = None) -> list[str]:
        """The API's gunicorn replicas (each one worker of 16 threads); returns their URLs. ``ports``: the caller's
        (a page's origin must be known before Centrifugo starts: allowed_origins), else free ones; ``js_client``: the
        JavaScript client's bundle the status page loads."""
        env = self._common_env(history) | ({"SORTIE_STATUSSYNC_JS_CLIENT": str(js_client)} if js_client else {})
        urls = []
        for r, port in enumerate(ports or [free_port() for _ in range(replicas)], start=1):
            self._start(f"api-{r}", python_module(
                "gunicorn", "--bind", f"{LOOPBACK}:{port}", "--workers", "1", "--worker-class", "gthread",
                "--threads", "16", "--timeout", "60", "--graceful-timeout", "2",
                "reference.statussync.http.app:create_app()"), f"http://{LOOPBACK}:{port}/health", env)
            urls.append(f"http://{LOOPBACK}:{port}")
        return urls

    def start_processes(self, config: dict[str, Any], history: Path, go: Path) -> list[str]:
        """The API replicas, the relays, the reconciler and the producers; returns the API's URLs."""
        urls = self.start_api(API_REPLICAS, history)
        roles = [*(("relay", f"relay-{r}") for r in range(1, RELAYS + 1)), ("reconciler", "health-1"),
                 ("producers", "producers")]
        self.start_background(roles, config, history, go, urls)
        return urls

    def start_background(self, roles: list[tuple[str, str]], config: dict[str, Any], history: Path, go: Path,
                         urls: list[str]) -> None:
        """The background processes, each (role, name): ``relay``, ``reconciler``, ``producers``; supervised."""
        env = {**self._common_env(history), "SORTIE_STATUSSYNC_CONFIG": json.dumps(config),
               "SORTIE_STATUSSYNC_GO": str(go),
               "SORTIE_STATUSSYNC_CENTRIFUGO_URL": f"http://{self.proxied(CENTRIFUGO_PROXY)}",
               "SORTIE_STATUSSYNC_CENTRIFUGO_KEY": self.api_key, "SORTIE_STATUSSYNC_API_URLS": ",".join(urls)}
        for role, name in roles:
            port = free_port()
            self._start(name, python_module("systems.statussync.processes", role, name, "--health-port", str(port)),
                        f"http://{LOOPBACK}:{port}/health", env)
        threading.Thread(target=self._supervise, args=(self.processes,), name="statussync-supervisor",
                         daemon=True).start()

    def _supervise(self, mine: dict[str, Component]) -> None:
        """Start a killed relay or reconciler again, as a process supervisor would (the simulation's
        SimWorld.supervise), until this set is stopped (stop_processes replaces it)."""
        while self.processes is mine:
            for name, comp in list(mine.items()):
                with contextlib.suppress(Exception):  # a point fired again while it was starting: next round
                    if comp.restart_if_died():
                        self.restarted.append((time.time(), name))
            time.sleep(0.2)

    def _start(self, name: str, command: list[str], health: str, env: dict[str, str]) -> None:
        comp = Component(name, command, health, env=env, log_path=self.run_dir / f"{name}.log")
        self.processes[name] = comp
        comp.start()

    def live_steps(self) -> int:
        """Step producers still running (the producers process's children): a run has not settled while one may
        still report (a late worker after its task ended)."""
        import psutil

        comp = self.processes.get("producers")
        if comp is None or comp.pid is None:
            return 0
        try:
            children = psutil.Process(comp.pid).children()
        except psutil.NoSuchProcess:
            return 0
        live = 0
        for child in children:  # each on its own: one that exited (a zombie not yet reaped) must not hide the others
            with contextlib.suppress(psutil.NoSuchProcess):  # ZombieProcess is one
                if child.status() != psutil.STATUS_ZOMBIE and " step " in " ".join(child.cmdline()) + " ":
                    live += 1
        return live

    def stop_processes(self) -> None:
        processes, self.processes = dict(self.processes), {}
        for comp in processes.values():
            comp.stop()


# ---------------------------------------------------------------------- catalogue scenarios


def _plan(spec: SyncSpec, seed: int, factor: float) -> list[dict[str, Any]]:
    """The simulation's draws (systems.statussync.sim.SyncDeployment): the same tasks, kinds and times."""
    rng = random.Random(f"{seed}:statussync")
    kinds = ["failing"] * spec.failing + ["flaky"] * spec.flaky + ["reordered"] * spec.reordered
    kinds = kinds[:spec.tasks] + ["ok"] * (spec.tasks - len(kinds))
    rng.shuffle(kinds)
    return [{"taskId": task_id, "owner": spec.owner_of(i), "title": f"contract-{i}", "kind": kind,
             "at": rng.uniform(0.0, spec.window_s) * factor}
            for i, (task_id, kind) in enumerate(zip(spec.task_ids(), kinds, strict=True))]


def process_config(spec: SyncSpec, seed: int, factor: float) -> dict[str, Any]:
    """The processes' configuration in real seconds: the simulation's periods scaled by ``factor``."""
    relay = RelayConfig()
    health = HealthConfig(stale_after_s=spec.stale_after_s)
    groups = [["01_prepare", "02_parse"], ["03_store"]] if spec.parallel else [[s[0]] for s in STEPS]
    return {
        "factor": factor, "tasks": _plan(spec, seed, factor), "late_workers": spec.late_workers,
        "relay": {**relay.__dict__, "poll_s": relay.poll_s * factor, "lease_s": relay.lease_s * factor,
                  "backoff_base_s": relay.backoff_base_s * factor, "backoff_cap_s": relay.backoff_cap_s * factor},
        "health": {"stale_after_s": health.stale_after_s * factor, "every_s": health.every_s * factor},
        "coordinator": {"groups": groups, "step_timeout_s": spec.step_timeout_s * factor, "poll_s": 2.0 * factor},
        "work": {"progress": spec.progress, "work_s": spec.work_s * factor, "heartbeat_s": 5.0 * factor},
    }


class ClientLoop:
    """The clients' asyncio loop on a thread of its own (the runner's thread waits on conditions)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="statussync-clients", daemon=True)
        self.thread.start()

    def call(self, coro: Any, timeout_s: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def later(self, delay_s: float, coro_fn: Any) -> None:
        async def run() -> None:
            await asyncio.sleep(delay_s)
            await coro_fn()

        asyncio.run_coroutine_threadsafe(run(), self.loop)

    def close(self) -> None:
        async def cancel_rest() -> None:  # the SDK's background tasks: cancelled, not destroyed pending
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.call(cancel_rest(), 10.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10.0)


class SyncScenarioRunner:
    """A statussync catalogue scenario on the real stack (see the module's doc)."""

    def __init__(self, stack: SyncStack, time_factor: float = DEFAULT_TIME_FACTOR) -> None:
        self.stack, self.factor, self.time_factor = stack, time_factor, time_factor
        self.left_unsettled = 0
        self.planned = 0  # the run's tasks (their coordinators must all end before it settles)
        self.injection = contextlib.ExitStack()  # the bug on in the runner's own clients (switch_bug)

    def outside_pids(self) -> list[int]:
        return []

    def switch_bug(self, bug: str | None) -> None:
        """This bug on (scenarios.systems.BugSwitch; ``seed``: the seed-faithful variant's defects): run() starts
        every process of a scenario (Centrifugo, the APIs, the relays) with ``stack.bugs`` and stops them all at its
        end, so the next run has it in each and none keeps the last; here, in the runner's clients, the last one's
        switch is closed first. KeyError: an unknown bug."""
        bugs = tuple(sorted(BUGS.parse(SEED_DEFECTS if bug == SEED else bug or None)))
        self.injection.close()
        self.injection.enter_context(BUGS.injected(bugs))
        self.stack.bugs = bugs

    def run(self, scenario: Any, seed: int) -> Any:
        from scenarios.runner import ScenarioResult

        missing = unsupported(scenario)
        if missing:
            raise StackUnavailable(f"{scenario.id} does not run natively yet: {', '.join(missing)}")
        wall0 = time.perf_counter()
        stack, f, spec = self.stack, self.factor, scenario.workload
        stack.reset()
        self.planned = spec.tasks
        stack.start_centrifugo(spec, f, api_faults=any(x.fault == "centrifugo-errors" for x in scenario.faults),
                               nodes=max([int((x.params or {}).get("nodes", 2)) for x in scenario.faults
                                          if x.fault == NODE_DOWN], default=1))
        history_file = stack.run_dir / "statussync-history.jsonl"
        history_file.unlink(missing_ok=True)
        ops: list[tuple[float, str, str, str, dict[str, Any]]] = []
        lock = threading.Lock()
        go = stack.run_dir / "statussync-go"  # the producers start their clock when the runner writes it
        go.unlink(missing_ok=True)

        def record(process: str, f_: str, value: dict[str, Any], type_: str = INFO) -> None:
            with lock:
                ops.append((time.time(), process, type_, f_, value))

        clients_loop = ClientLoop()
        clients: list[NativeClient] = []
        try:
            urls = stack.start_processes(process_config(spec, seed, f), history_file, go)
            t0 = time.time() + 0.5  # every process answered its health check: scenario time starts now
            go.with_suffix(".tmp").write_text(repr(t0))
            go.with_suffix(".tmp").rename(go)  # whole, never half-written
            clients = self._clients(spec, seed, urls, clients_loop, record, t0)
            self._foreign_details(spec, seed, clients, clients_loop, t0)
            faults = SyncNemesis(stack, len(clients), f)
            _Adversaries(stack, spec, seed, urls, f, t0, record).start()
            if spec.registry_change_at >= 0:
                threading.Thread(target=self._registry_change, args=(t0 + spec.registry_change_at * f, record),
                                 name="operator", daemon=True).start()
            deadline = time.time() + (scenario.heal_time() + scenario.recovery_bound_s) * f + SETTLE_SLACK_S
            self._faults_then_settle(scenario, faults, clients, t0, deadline, record)
        finally:
            for client in clients:
                with contextlib.suppress(Exception):
                    clients_loop.call(client.disconnect(), 5.0)
            clients_loop.close()
            stack.stop_processes()
            stack.stop_centrifugo()
        end = time.time()
        ops += [(at, "supervisor", INFO, "restart", {"process": name}) for at, name in stack.restarted]
        history = _merged(ops, history_file, t0, f)
        state = self._state(history, clients, scenario, end, t0, f)
        verdicts = INVARIANTS.check(state, scenario.invariants)
        exercised = scenario.exercised(history, state)
        if self.left_unsettled:  # tasks, rows, producers or clients still moving: the verdicts judged a snapshot
            exercised = f"the run did not settle by its deadline ({self.left_unsettled} left)"
        passed = exercised is None and all(v.status != "violated" for v in verdicts)
        return ScenarioResult(
            id=scenario.id, slug=scenario.slug, title=scenario.title, seed=seed, passed=passed, verdicts=verdicts,
            exercised=exercised, history_digest=history.digest(), counts=state.counts(), virtual_s=(end - t0) / f,
            wall_s=time.perf_counter() - wall0, history=history, state=state,
            stats={"shell": "native", "time_factor": f, "clients": len(clients), "unsettled": self.left_unsettled})

    def _clients(self, spec: SyncSpec, seed: int, urls: list[str], loop: ClientLoop, record: Any, t0: float
                 ) -> list[NativeClient]:
        rng = random.Random(f"{seed}:statussync:clients")
        clients = []
        for u in range(spec.users):
            user = f"u{u}"
            bearer = issue_token(self.stack.token_secret, f"{TENANT}/{user}", USER, ttl_s=86400)
            client = NativeClient(f"client-{u}", TENANT, user, urls[u % len(urls)], self.stack.client_link(u),
                                  bearer, spec.details, record, spec.batch_get_s * self.factor,
                                  random.Random(f"{seed}:statussync:batch:{u}"))
            clients.append(client)
            join = (spec.join_at_s + rng.uniform(0.0, spec.join_spread_s)) * self.factor
            client.join_at = t0 + join
            loop.later(max(0.0, t0 + join - time.time()), client.connect)
        return clients

    def _foreign_details(self, spec: SyncSpec, seed: int, clients: list[NativeClient], loop: ClientLoop,
                         t0: float) -> None:
        """The first ``foreign_details`` clients each ask once, after the tasks were created (the simulation's
        client model: past window_s), for the detail of a task of another user."""
        rng = random.Random(f"{seed}:statussync:foreign")
        ids = spec.task_ids()
        for client in clients[:spec.foreign_details]:
            others = [t for i, t in enumerate(ids) if spec.owner_of(i) != client.user]
            if others:
                at = t0 + (spec.window_s + 1.0) * self.factor
                loop.later(max(0.0, at - time.time()), functools.partial(client.open_detail, rng.choice(others)))

    def _faults_then_settle(self, scenario: Any, faults: SyncNemesis, clients: list[NativeClient], t0: float,
                            deadline: float, record: Any) -> None:
        f = self.factor
        windows = sorted([(t0 + fault.at * f, True, fault) for fault in scenario.faults]
                         + [(t0 + (fault.at + (fault.duration or 0.0)) * f, False, fault)
                            for fault in scenario.faults], key=lambda w: w[0])
        for at, on, fault in windows:
            time.sleep(max(0.0, at - time.time()))
            self._joined_by(clients, at)
            faults.apply(fault.fault, dict(fault.params or {}), on=on)
            record("nemesis", "fault" if on else "heal", {"fault": fault.fault})
        while time.time() < deadline and self._unsettled(clients):
            time.sleep(SETTLE_POLL_S)
        self.left_unsettled = self._unsettled(clients)

    def _joined_by(self, clients: list[NativeClient], at: float) -> None:
        """A fault finds connected the clients that joined before it (the simulation's connect takes 3 s, its
        faults come later): on a loaded machine a real connect can take longer than the scaled gap, and a cut
        before the first connect would test nothing. Bounded: a client that never connects is S8's to judge."""
        due = [c for c in clients if c.join_at <= at]
        deadline = time.time() + JOIN_WAIT_S
        while time.time() < deadline and not all(c.started for c in due):
            time.sleep(0.1)

    def _registry_change(self, at: float, record: Any) -> None:
        """An operator publishes status definitions v4 (as root: the application user has row rights only)."""
        time.sleep(max(0.0, at - time.time()))
        assert self.stack.owner is not None
        with self.stack.owner.begin() as conn:
            for table, rows in next_version_rows():
                conn.execute(insert(table), rows)
        record("operator", "registry-change", {"version": 4})

    def _unsettled(self, clients: list[NativeClient]) -> int:
        assert self.stack.owner is not None
        with self.stack.owner.connect() as conn:
            rows = int(conn.execute(select(func.count()).select_from(TaskOutbox).where(
                TaskOutbox.status.not_in((OUTBOX_PUBLISHED, OUTBOX_DEAD)))).scalar() or 0)
            tasks = conn.execute(select(Task.id, Task.version, Task.owner_id, Task.lifecycle_status)).all()
        running = sum(1 for t in tasks if t.lifecycle_status in ("PENDING", "RUNNING"))
        versions = {t.id: int(t.version) for t in tasks}
        owners = {t.id: t.owner_id for t in tasks}
        lagging = sum(1 for c in clients if not c.started or c.lags(versions, owners))
        coordinating = self.planned - self._coordinators_done()  # planned: a task not created yet counts
        return rows + running + lagging + coordinating + self.stack.live_steps() + (0 if tasks else 1)

    def _coordinators_done(self) -> int:
        """Coordinators that noted their end (ok or fail) in the history file."""
        path = self.stack.run_dir / "statussync-history.jsonl"
        if not path.exists():
            return 0
        ended = 0
        for line in path.read_text().splitlines():
            if '"f": "task"' in line and '"type": "invoke"' not in line:
                ended += 1
        return ended

    def _state(self, history: History, clients: list[NativeClient], scenario: Any, end: float, t0: float,
               f: float) -> SyncState:
        from sqlalchemy.orm import Session

        from systems.statussync.checkers import read_state

        assert self.stack.owner is not None
        world = _World(Session(self.stack.owner), history, (end - t0) / f,
                       {c.name: c.peak_subscriptions for c in clients})
        # The history is in scenario seconds, so S7 judges the backoff the relays scaled by the factor unscaled
        return read_state(world, clients, RelayConfig(), None, scenario.heal_time())


class _Adversaries:
    """The workload's adversaries, over HTTP as a producer would (the simulation's SyncDeployment._adversary): an
    answered event sent again (a retry after a lost answer), its eventId reused with other content, a report for
    another step signed with this step's token. Each acts once, at a random moment after some events were
    answered, and records its ``retry`` / ``reuse`` / ``forged`` op with the answer, and the ``event.report``."""

    def __init__(self, stack: SyncStack, spec: SyncSpec, seed: int, urls: list[str], factor: float, t0: float,
                 record: Any) -> None:
        from systems.statussync.processes import StatusApi

        self.stack, self.spec, self.factor, self.t0, self.record = stack, spec, factor, t0, record
        self.api = StatusApi(urls, stack.token_secret)
        self.rng = random.Random(f"{seed}:statussync:adversaries")

    def start(self) -> None:
        acts = [("retry", n) for n in range(self.spec.retries)] + [("reuse", n) for n in range(self.spec.reuses)] \
            + [("forged", n) for n in range(self.spec.forged)]
        offset = {"retry": 0, "reuse": 100, "forged": 200}
        for kind, n in acts:
            at = self.t0 + (self.spec.window_s * 0.5 + self.rng.uniform(0.0, self.spec.window_s)) * self.factor
            threading.Thread(target=self._act, args=(f"adversary-{offset[kind] + n}", kind, n, at,
                                                     random.Random(self.rng.random())), daemon=True).start()

    def _answered(self) -> list[Any]:
        assert self.stack.owner is not None
        with self.stack.owner.connect() as conn:
            return list(conn.execute(select(ProducerLedger.__table__).where(
                ProducerLedger.answer == "ACCEPTED", ProducerLedger.step_id != "")
                .order_by(ProducerLedger.task_id, ProducerLedger.step_id, ProducerLedger.position)).all())

    def _act(self, name: str, kind: str, n: int, at: float, rng: random.Random) -> None:
        time.sleep(max(0.0, at - time.time()))
        for _ in range(60):
            rows = self._answered()
            if rows:
                self._send(name, kind, n, rng.choice(rows))
                return
            time.sleep(2.0 * self.factor)

    def _send(self, name: str, kind: str, n: int, row: Any) -> None:
        from systems.statussync.processes import report_value

        event = dict(row.event)
        token = step_token(row.task_id, row.step_id, row.attempt, event["operationCode"], event["producerId"])
        if kind == "reuse":
            event = {**event, "businessStatus": "WAITING_REVIEW", "occurredAt": "2026-01-01T00:00:00+00:00"}
        elif kind == "forged":
            other = next(s for s in STEPS if s[0] != row.step_id)
            event = {**event, "eventId": f"forged-{n}", "stepId": other[0], "operationCode": other[1],
                     "producerId": PRODUCERS_BY_OP[other[1]], "sourceSeq": 999, "eventType": "STEP_PROGRESS",
                     "businessStatus": other[2]}
            event.pop("data", None)
        self.record(name, kind, {"eventId": event["eventId"], "event": event, "phase": "invoke"})
        try:
            reported = self.api.report(event, token)
        except Exception:  # no answer: recorded as such, as the simulation's adversary does
            self.record(name, kind, {"eventId": event["eventId"], "answer": None, "phase": "fail"})
            return
        self.record(name, "event.report", report_value(reported), OK)
        self.record(name, kind, {"eventId": event["eventId"], "answer": reported.answer}, OK)


class _World:
    """What read_state asks of a world: sessions on the tables, the history, the end time, Centrifugo's peaks."""

    def __init__(self, session: Any, history: History, end: float, peaks: dict[str, int]) -> None:
        self._session, self.history = session, history
        self.env = type("Env", (), {"now": end})()
        # What each client held at most (the server refuses past its channel_limit of 1 + 20 anyway: 106)
        self.centrifugo = type("Peaks", (), {"peak_subscriptions": peaks,
                                             "max_subscriptions": MAX_DETAIL_SUBSCRIPTIONS + 1})()

    @contextlib.contextmanager
    def sessions(self) -> Iterator[Any]:
        try:
            yield self._session
        finally:
            self._session.close()


def _merged(ops: list[tuple[float, str, str, str, dict[str, Any]]], history_file: Path, t0: float, f: float
            ) -> History:
    """The runner's ops and the processes' history file in one history, in scenario seconds."""
    rows = list(ops)
    for line in history_file.read_text().splitlines() if history_file.exists() else ():
        o = json.loads(line)
        rows.append((o["time"], o["process"], o["type"], o["f"], o["value"]))
    history = History()
    for t, process, type_, name, value in sorted(rows, key=lambda o: o[0]):
        history.add(max(0.0, (t - t0) / f), process, type_, name, value)
    return history


@contextlib.contextmanager
def stack_runner(req: StackRequest) -> Iterator[SyncScenarioRunner]:
    """The status sync's real stack for `sortie run --system statussync` (scenarios.systems.System.stack_runner)."""
    if req.kind != "native":
        raise StackUnavailable(f"--stack {req.kind}: the status sync runs on its own native stack only")
    BUGS.parse(SEED_DEFECTS if req.inject_bug == SEED else req.inject_bug)  # KeyError: unknown, before a stack starts
    with SyncStack(req.run_dir) as stack:
        runner = SyncScenarioRunner(stack, req.time_factor or DEFAULT_TIME_FACTOR)
        with runner.injection:  # a known defect on in every process and in the runner's clients
            runner.switch_bug(req.inject_bug)
            yield runner
