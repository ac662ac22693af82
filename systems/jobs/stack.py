"""The job system on the real stack: PostgreSQL (its schema and application role, reference.jobs.migrations) behind a
Toxiproxy
link, the service (systems.jobs.service_http) and two pool instances as OS processes (systems.jobs.worker), each
with real SIGKILL and SIGSTOP crash points (kernel.failpoints). A run enqueues jobs as producers would (two at
once with one key for a share of them), applies its faults, waits until every job settled (a condition on the
database, polled, with a deadline), then checks J1-J11 on the tables and the service's ledger: the same checkers
and the same state shape as the simulation (systems.jobs.checkers).

What differs from the simulation, and why: a crash point kills or stops the whole instance (one process per
machine, as in seed 004's deployment), not one worker of it; timestamps are the workers' clocks (one machine here,
so they agree); the pool's thresholds are seconds, not minutes, so a run fits a test."""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.orm import Session

from kernel.effects import Tx
from kernel.failpoints import CrashPoint, fired_pids, write_points
from kernel.logs import defects_in_log
from kernel.runtime import LOOP_ENDED
from reference.jobs.dag import Mission, MissionConflict, MissionRefused, create_mission
from reference.jobs.migrations import create_app_role, install
from reference.jobs.models import RUNNING, TERMINAL, Job, JobLog
from reference.jobs.pool import PoolConfig, dead_alerts_in_log
from reference.jobs.repo import REPOS
from reference.jobs.rows import NewJob
from scenarios.systems import StackRequest, StackUnavailable
from scenarios.verdicts import Verdict
from stack.common import LOOPBACK, free_port
from stack.components import Component, python_module
from stack.postgres import LocalPostgres
from stack.toxiproxy import LocalToxiproxy
from systems.jobs.checkers import INVARIANTS, JobsState, Stall, drain_windows, outclaimed_workers, stalls_from
from systems.jobs.faults import DB_PROXY, PROCESS_FAULTS, JobsNemesis
from systems.jobs.sim import read_rows
from systems.jobs.variants import SEED, injected, pool_config

INSTANCES = ("instance-a", "instance-b")
APP_ROLE, APP_PASSWORD = "jobs_app", "jobs-app-pw"
DATABASE = "jobs"
# Seconds, not minutes: a claim is stale after 6 s, renewed every 2 s by the fixed variant.
STACK_POOL: dict[str, Any] = {"stale_after_s": 6.0, "reclaim_every_s": 1.0, "heartbeat_s": 2.0, "poll_idle_s": 0.2,
              "handler_timeout_s": 30.0, "max_retry": 3, "claim_batch": 3}


@dataclass
class NativeCase:
    """One run on the stack: the jobs, the service's behaviour for some of them, the pool, and the faults."""

    jobs: int = 12
    work_s: float = 1.0
    same_key_ratio: float = 0.25
    failing: int = 0  # jobs whose work always fails (dead after MaxRetry + 1)
    crashing: int = 0  # jobs whose work kills the worker that runs it
    workers: int = 2  # per instance
    variant: str = "fixed"
    pool: dict[str, Any] = field(default_factory=dict)  # over STACK_POOL
    crash_points: list[CrashPoint] = field(default_factory=list)
    db_outage: tuple[float, float] | None = None  # (after the first enqueue, for how long): the link is cut
    settle_s: float = 300.0  # a safety deadline: a run ends when every job settled
    until_claims: int | None = None  # or when one job has been claimed this often (a job that never settles)
    graceful_stop: str | None = None  # an instance to SIGTERM once it holds a job: it drains and exits
    until_noted: str | None = None  # and settled only once an instance noted this (``resume``: a zombie woke up)
    # A paused worker's instance is woken (SIGCONT) as soon as a job that worker held was reclaimed and claimed again
    # by another worker: its crash point's seconds are then only a bound, and a run waits on the zombie's situation
    # (its late write meets a live claim of another), not on a pause long enough for it on a machine this busy.
    wake_once_outclaimed: bool = False


@dataclass
class NativeRun:
    state: JobsState
    verdicts: list[Verdict]
    notes: list[str]
    fired: dict[str, int]  # "<instance>:<effect>@<when>" -> how often its crash point fired

    @property
    def violated(self) -> list[str]:
        return [v.invariant for v in self.verdicts if v.status == "violated"]


class JobsStack:
    """PostgreSQL, Toxiproxy and the service for as long as the context lasts; instances per run."""

    def __init__(self, run_dir: Path | None = None, postgres: LocalPostgres | None = None) -> None:
        self._keep_run_dir = run_dir is not None  # a directory the caller gave keeps its logs
        self.run_dir = Path(run_dir or tempfile.mkdtemp(prefix="sortie-jobs-stack-"))
        self._own_pg = postgres is None
        # Its own mkdtemp: the 'postgres' OS user must traverse every parent (LocalPostgres opens run_dir up).
        self.pg = postgres or LocalPostgres(Path(tempfile.mkdtemp(prefix="sortie-jobs-pg-")))
        self.toxiproxy = LocalToxiproxy(self.run_dir / "toxiproxy")
        self.failpoints = self.run_dir / "failpoints.json"
        self.service_port = free_port()
        self.service = Component("jobs-service", python_module("systems.jobs.service_http", "--port",
                                                               str(self.service_port)),
                                 f"http://{LOOPBACK}:{self.service_port}/health",
                                 log_path=self.run_dir / "jobs-service.log")
        self.instances: dict[str, Component] = {}
        self.loops = 0  # the pool loops the running instances started (start_instances)
        self.api: Component | None = None
        self.stopped_at: tuple[str, datetime, datetime] | None = None  # the last graceful stop: instance, began, ended
        self.owner: Engine | None = None
        self.app_url = ""
        self.token_secret = secrets.token_hex(16)  # the job API's bearer tokens are signed with it (start_api)

    def __enter__(self) -> JobsStack:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self._own_pg:
            self.pg.start()
        self.pg.create_database(DATABASE, exist_ok=True)
        self.owner = create_engine(self.pg.url(database=DATABASE))
        with self.owner.begin() as conn:
            install(conn)
            create_app_role(conn, APP_ROLE, APP_PASSWORD)
        self.toxiproxy.start()
        host, port = self.toxiproxy.client.create_proxy(DB_PROXY, f"{LOOPBACK}:{self.pg.port}")
        self.app_url = self.pg.url(APP_ROLE, APP_PASSWORD, DATABASE).replace(f":{self.pg.port}/", f":{port}/")
        self.service.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_instances()
        self.stop_api()
        self.service.stop()
        self.toxiproxy.stop()
        if self.owner is not None:
            self.owner.dispose()
        if self._own_pg:
            self.pg.stop()
            shutil.rmtree(self.pg.run_dir, ignore_errors=True)
        if not self._keep_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    # ------------------------------------------------------------------ a run

    def run(self, case: NativeCase) -> NativeRun:
        assert self.owner is not None
        self.reset(case)
        cfg = PoolConfig(**{**STACK_POOL, **case.pool})
        write_points(str(self.failpoints), case.crash_points)
        news = _jobs(case)
        self.reset_service({"work_s": case.work_s,
                            "failing_keys": [n.idempotent_key for n in news if ":failing" in n.idempotent_key],
                            "crashing_keys": [n.idempotent_key for n in news if ":crashing" in n.idempotent_key]})
        self.history_file().unlink(missing_ok=True)
        self.start_instances(case, cfg, history=self.history_file())
        notes: list[str] = []
        try:
            enqueued = self._produce(case, news, notes)
            self.settle(case, cfg, notes)
        finally:
            self.stop_instances()
        return self.check(cfg, enqueued, notes)

    def _wake_paused(self, conn: Any) -> None:
        """SIGCONT the instance of each worker noted as paused (more often than resumed) once a job it held was
        reclaimed and claimed again by another worker (its own helper would, later)."""
        notes = self._notes()

        def by_worker(f: str) -> Counter[str]:
            return Counter(n["value"]["process"] for n in notes if n["f"] == f)

        paused = by_worker("pause") - by_worker("resume")
        if not paused:
            return
        log = conn.execute(select(JobLog.job_id, JobLog.actor, JobLog.to_status, JobLog.detail)
                           .order_by(JobLog.id)).mappings()
        for worker in sorted(set(paused) & outclaimed_workers(log)):
            self.instances[worker.split(".")[0]].resume()

    def _noted(self) -> list[str]:
        return [n["f"] for n in self._notes()]

    def _notes(self) -> list[dict[str, Any]]:
        path = self.history_file()
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def history_file(self) -> Path:
        """Where the instances note what happened to them (crash points fired, drains)."""
        return self.run_dir / "jobs-history.jsonl"

    def note(self, f: str, value: dict[str, Any]) -> None:
        """The harness's own act on an instance (a SIGKILL of the nemesis), noted as the instances note theirs."""
        line = json.dumps({"time": time.time(), "process": "nemesis", "type": "info", "f": f, "value": value})
        with self.history_file().open("a") as fh:
            fh.write(line + "\n")

    def log_sizes(self) -> dict[str, int]:
        """Each instance log's size now: where what a run logs begins (logs_since)."""
        return {name: path.stat().st_size for name in INSTANCES if (path := self._log_path(name)).exists()}

    def logs_since(self, sizes: dict[str, int]) -> dict[str, str]:
        """Each instance's log text written after ``sizes`` (log_sizes), restarts included (a log is appended to)."""
        texts = {}
        for name in INSTANCES:
            if (path := self._log_path(name)).exists():
                with path.open("rb") as fh:
                    fh.seek(sizes.get(name, 0))
                    texts[name] = fh.read().decode(errors="replace")
        return texts

    def _log_path(self, instance: str) -> Path:
        return self.run_dir / f"{instance}.log"

    def reset(self, case: NativeCase) -> None:
        """Empty tables, no crash points armed, the database's link up: a run starts from here."""
        assert self.owner is not None
        with self.owner.begin() as conn:
            conn.execute(text("TRUNCATE job, job_log, job_dependency RESTART IDENTITY CASCADE"))
        for stale in self.run_dir.glob("failpoints.json*"):
            stale.unlink()
        self.toxiproxy.client.set_enabled(DB_PROXY, True)

    def start_instances(self, case: NativeCase, cfg: PoolConfig, history: Path | None = None,
                        bug: str | None = None) -> None:
        env = {"SORTIE_JOBS_DATABASE_URL": self.app_url,
               "SORTIE_JOBS_SERVICE_URL": f"http://{LOOPBACK}:{self.service_port}",
               "SORTIE_JOBS_POOL": json.dumps(cfg.__dict__), "SORTIE_FAILPOINTS": str(self.failpoints),
               **({"SORTIE_JOBS_HISTORY": str(history)} if history is not None else {}),
               **({"SORTIE_JOBS_BUG": bug} if bug else {})}
        starting = []
        self.loops = len(INSTANCES) * (case.workers + 1)  # each instance's pool workers and its reclaimer
        for name in INSTANCES:
            port = free_port()
            comp = Component(name, python_module("systems.jobs.worker", name, "--workers", str(case.workers),
                                                 "--variant", case.variant, "--health-port", str(port)),
                             f"http://{LOOPBACK}:{port}/health", env=env, log_path=self._log_path(name))
            self.instances[name] = comp
            starting.append(comp)
        with ThreadPoolExecutor(len(starting)) as pool:
            list(pool.map(lambda c: c.start(), starting))
        threading.Thread(target=self._supervise, args=(self.instances,), name="jobs-supervisor", daemon=True).start()

    def _supervise(self, mine: dict[str, Component]) -> None:
        """Restart a killed instance, as a process supervisor would (the simulation's SimWorld.supervise), until
        this set of instances is stopped (stop_instances replaces it)."""
        while self.instances is mine:
            for comp in list(mine.values()):
                with contextlib.suppress(Exception):  # a crash point fired again while it was starting: next round
                    comp.restart_if_died()
            time.sleep(0.2)

    def stop_instances(self) -> None:
        instances, self.instances = dict(self.instances), {}
        for comp in instances.values():
            comp.stop()

    def start_api(self, variant: str, workers: int = 2, threads: int = 16) -> str:
        """The job API (reference.jobs.http.app) under gunicorn, on the application role's proxied link, its tokens
        signed with ``token_secret``, until stop_api() or the end of the stack; returns its URL."""
        self.stop_api()
        self.api, url = api_component(self.app_url, variant, self.token_secret, self.run_dir / "jobs-api.log",
                                      workers, threads)
        self.api.start()
        return url

    def stop_api(self) -> None:
        if self.api is not None:
            self.api.stop()
            self.api = None

    def _produce(self, case: NativeCase, news: list[NewJob], notes: list[str]) -> list[dict[str, Any]]:
        """Enqueue through the proxied link as the application role; a duplicate click is a second enqueue of the
        same key at the same moment; an enqueue refused by an outage is retried with its key."""
        engine = create_engine(self.app_url, pool_size=4, max_overflow=4)
        repo = REPOS[case.variant]
        answered: list[dict[str, Any]] = []
        lock = threading.Lock()

        def enqueue(new: NewJob) -> None:
            deadline = time.monotonic() + case.settle_s
            while time.monotonic() < deadline:
                try:
                    with Session(engine) as session, session.begin():
                        job_id = repo.enqueue(Tx(session, datetime.now(UTC), _no_ids), new)
                except Exception:  # the link is cut: retry with the same key
                    time.sleep(0.5)
                    continue
                with lock:
                    answered.append({"key": new.idempotent_key, "job_id": job_id})
                return

        if case.graceful_stop is not None:
            threading.Thread(target=self._graceful_stop, args=(case, notes), daemon=True).start()
        outage = threading.Thread(target=self._outage, args=(case, notes), daemon=True) if case.db_outage else None
        if outage is not None:
            outage.start()
        clicks = [n for i, n in enumerate(news) for _ in range(2 if _twice(i, case.same_key_ratio) else 1)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(enqueue, clicks))
        if outage is not None:
            outage.join()
        engine.dispose()
        return answered

    def _graceful_stop(self, case: NativeCase, notes: list[str]) -> None:
        assert case.graceful_stop is not None and self.owner is not None
        name = case.graceful_stop
        deadline = time.monotonic() + case.settle_s
        while time.monotonic() < deadline:  # until it holds a job (a condition, polled)
            with self.owner.connect() as conn:
                if conn.execute(select(Job.id).where(Job.status == RUNNING, Job.owner.like(f"{name}.%"))
                                .limit(1)).first() is not None:
                    break
            time.sleep(0.05)
        self.instances[name].stop()  # SIGTERM, then waits for the exit (SIGKILL only past mirakuru's timeout)
        notes.append(f"{name} stopped gracefully")
        drains = [json.loads(line)["value"] for line in self.history_file().read_text().splitlines()
                  if json.loads(line)["f"] == "drain"] if self.history_file().exists() else []
        began = next(datetime.fromisoformat(d["at"]) for d in drains if d["process"] == name)
        self.stopped_at = (name, began, datetime.now(UTC))

    def _outage(self, case: NativeCase, notes: list[str]) -> None:
        assert case.db_outage is not None
        after, seconds = case.db_outage
        nemesis = JobsNemesis(self)
        time.sleep(after)
        nemesis.apply("db-outage", {}, on=True)
        notes.append(f"database link cut for {seconds:g} s")
        time.sleep(seconds)
        nemesis.apply("db-outage", {}, on=False)

    def settle(self, case: NativeCase, cfg: PoolConfig, notes: list[str]) -> None:
        """Wait until every job settled (or ``case`` says the run is over), noting why it ended otherwise."""
        assert self.owner is not None
        deadline = time.monotonic() + case.settle_s
        while time.monotonic() < deadline:
            with self.owner.connect() as conn:
                left = conn.execute(select(func.count()).select_from(Job.__table__)
                                    .where(Job.status.not_in(sorted(TERMINAL)))).scalar_one()
                most = conn.execute(select(func.count()).select_from(JobLog.__table__)
                                    .where(JobLog.to_status == RUNNING).group_by(JobLog.job_id)
                                    .order_by(func.count().desc()).limit(1)).scalar() or 0
                if case.wake_once_outclaimed:
                    self._wake_paused(conn)
            if left == 0 and (case.until_noted is None or case.until_noted in self._noted()):
                return
            if case.until_claims is not None and most >= case.until_claims:
                notes.append(f"a job was claimed {most} times")
                return
            time.sleep(0.2)
        notes.append(f"not settled after {case.settle_s:g} s")

    def check(self, cfg: PoolConfig, enqueued: list[dict[str, Any]], notes: list[str]) -> NativeRun:
        """J1-J11 on the tables and the service's ledger, with what the producers were answered."""
        assert self.owner is not None
        ledger = self._service("ledger")
        with Session(self.owner) as session:
            jobs, log, edges = read_rows(session)
        state = JobsState(jobs, log, ledger["calls"], ledger["effects"], enqueued, edges, datetime.now(UTC),
                          cfg.max_retry, loops=self.loops,
                          loop_ends=[n["value"] for n in self._notes() if n["f"] == LOOP_ENDED])
        fired = {}
        for marker in self.run_dir.glob("failpoints.json.*.fired"):
            fired[marker.name.removeprefix("failpoints.json.").removesuffix(".fired").replace(".", ":", 1)] = \
                len(fired_pids(str(marker)))
        return NativeRun(state, INVARIANTS.check(state), notes, fired)

    def observe(self, state: JobsState, log_sizes: dict[str, int], workers: int, cfg: PoolConfig) -> None:
        """What the run's processes did besides their rows, into ``state`` (its t0 set): their kills and stops (J16-J18
        excuse a stale claim of theirs, J13 an alert they had no time to say), their drains (J23: the drain fault's,
        and the graceful stop at the run's end), the dead-job alerts and the defects their logs hold since
        ``log_sizes`` (J13, J14), and the pool's handler timeout (J18)."""
        notes = self._notes()
        state.kills = instance_stops(notes, state.t0, workers)
        state.drains = instance_drains(notes, state.t0, workers)
        logs = self.logs_since(log_sizes)
        state.alerts = [a for text in logs.values() for a in dead_alerts_in_log(text)]
        state.defects = [{"t": round(d["at"] - state.t0, 3), "logger": d["logger"], "error": d["error"],
                          "where": d["where"]} for text in logs.values() for d in defects_in_log(text)]
        state.handler_timeout_s, state.heartbeat_s = cfg.handler_timeout_s, cfg.heartbeat_s
        state.stalls = instance_stalls(notes, state.t0, workers)
        state.stale_after_s, state.reclaim_every_s, state.reclaimers = cfg.stale_after_s, cfg.reclaim_every_s, INSTANCES

    def reset_service(self, behaviour: dict[str, Any]) -> None:
        """The service's ledger emptied and its behaviour for the next run (work times, failing keys...)."""
        self._service("reset", behaviour)

    def _service(self, what: str, body: dict[str, Any] | None = None) -> Any:
        url = f"http://{LOOPBACK}:{self.service_port}/{what}"
        resp = requests.post(url, json=body, timeout=10) if body is not None else requests.get(url, timeout=10)
        resp.raise_for_status()
        return resp.json()


def api_component(database_url: str, variant: str, token_secret: str, log_path: Path, workers: int = 2,
                  threads: int = 16) -> tuple[Component, str]:
    """The job API as the stack serves it (gunicorn, gthread workers, ``reference.jobs.http.app:create_app()``) on a
    free loopback port, not started; and its URL."""
    port = free_port()
    comp = Component("jobs-api", python_module(
        "gunicorn", "--bind", f"{LOOPBACK}:{port}", "--workers", str(workers), "--worker-class", "gthread",
        "--threads", str(threads), "--timeout", "60", "--graceful-timeout", "5",
        "reference.jobs.http.app:create_app()"), f"http://{LOOPBACK}:{port}/health",
        env={"SORTIE_JOBS_DATABASE_URL": database_url, "SORTIE_JOBS_VARIANT": variant,
             "SORTIE_JOBS_TOKEN_SECRET": token_secret}, log_path=log_path)
    return comp, f"http://{LOOPBACK}:{port}"


def instance_stops(notes: list[dict[str, Any]], t0: float, workers: int) -> list[tuple[float, str]]:
    """(seconds since ``t0``, process) of each kill and SIGSTOP a run noted: a crash point, a job that crashed its
    worker, the nemesis's SIGKILL. Each acts on the whole instance (one process), so it names every worker of it
    (``instance-a.1``...) and the instance (its reclaimer writes as the instance): none of them renews anything from
    then (the simulation kills one process at a time)."""
    out: list[tuple[float, str]] = []
    for n in notes:
        if n["process"] != "nemesis" or n["f"] not in ("kill", "pause"):
            continue
        instance, at = str(n["value"]["process"]).split(".")[0], n["time"] - t0
        out += [(at, instance), *((at, f"{instance}.{w}") for w in range(1, workers + 1))]
    return out


def instance_stalls(notes: list[dict[str, Any]], t0: float, workers: int) -> list[Stall]:
    """The stalls (stalls_from) of the kills and SIGSTOPs a run noted, with when each stopped instance ran again: each
    stops the whole instance, every worker of it and its reclaimer (instance_stops)."""
    def whole(process: str) -> list[str]:
        instance = process.split(".")[0]
        return [instance, *(f"{instance}.{w}" for w in range(1, workers + 1))]

    events = [(n["time"] - t0, n["f"], n["value"]) for n in notes
              if n["process"] == "nemesis" and n["f"] in ("kill", "pause", "resume")]
    return stalls_from(events, whole)


def instance_drains(notes: list[dict[str, Any]], t0: float, workers: int) -> list[dict[str, Any]]:
    """Each drain of each worker (drain_windows) from the notes: an instance notes when its drain began (SIGTERM; the
    exact time after which it takes no work), the harness when it started the instance again."""
    events = []
    for n in notes:
        if n["process"] != "nemesis" or n["f"] not in ("drain", "restart"):
            continue
        at = datetime.fromisoformat(n["value"]["at"]).timestamp() if "at" in n["value"] else n["time"]
        events += [(at - t0, n["f"], f"{n['value']['process']}.{w}") for w in range(1, workers + 1)]
    return drain_windows(sorted(events))


def _twice(i: int, ratio: float) -> bool:
    """Every 1/ratio-th job is enqueued twice at once (deterministic, no draw)."""
    return ratio > 0 and int((i + 1) * ratio) != int(i * ratio)


def _no_ids() -> Any:
    raise AssertionError("the job system draws no UUIDs")


def _jobs(case: NativeCase) -> list[NewJob]:
    kinds = ["failing"] * case.failing + ["crashing"] * case.crashing
    kinds += ["ok"] * max(0, case.jobs - len(kinds))
    return [NewJob(("survey", "inspect", "report")[i % 3], f"job-{i}:{kind}", {"n": i}) for i, kind in
            enumerate(kinds)]


# ---------------------------------------------------------------------- catalogue scenarios

DEFAULT_TIME_FACTOR = 0.1  # a 60 s reclaim threshold lasts 6 s: the job catalogue fits a CI run
SCALED = ("stale_after_s", "reclaim_every_s", "heartbeat_s", "handler_timeout_s")
STACK_POLL_IDLE_S = 0.2


class JobsScenarioRunner:
    """A job-system catalogue scenario (YAML, the simulation's own) on the real stack: the same jobs, keys and
    missions as the simulation draws from the seed, enqueued at their times scaled by ``time_factor``; the pool's
    thresholds, the work and the faults' windows scaled alike (the retry backoff is the seed's formula in real
    seconds); faults through the crash points file and Toxiproxy; the same checkers."""

    def __init__(self, stack: JobsStack, time_factor: float = DEFAULT_TIME_FACTOR, variant: str | None = None,
                 bug: str | None = None) -> None:
        self.stack, self.factor, self.variant, self.bug = stack, time_factor, variant, bug
        self.time_factor = time_factor

    def outside_pids(self) -> list[int]:
        """PostgreSQL's postmaster (pg_ctl daemonises it: not sortie's child), for the run's footprint."""
        pid = self.stack.pg._postmaster_pid() if hasattr(self.stack.pg, "_postmaster_pid") else None
        return [pid] if pid else []

    def _config(self, policy: dict[str, Any]) -> PoolConfig:
        cfg = pool_config(policy)
        scaled = {k: getattr(cfg, k) * self.factor for k in SCALED}
        return PoolConfig(**{**cfg.__dict__, **scaled, "poll_idle_s": STACK_POLL_IDLE_S})

    def run(self, scenario: Any, seed: int) -> Any:
        import random

        from harness.history import FAIL, INVOKE, OK, History
        from scenarios.runner import ScenarioResult
        from scenarios.timeline import run_realtime
        from systems.jobs.sim import _enqueue_job, _jobs, mission_answers, mission_post, missions, plan_times

        wall0 = time.perf_counter()
        stack, f, spec = self.stack, self.factor, scenario.workload
        variant = self.variant or scenario.params.get("variant", "fixed")
        cfg = self._config(scenario.policy)
        case = NativeCase(workers=spec.workers_per_instance, variant=variant)
        stack.reset(case)
        history_file = stack.history_file()
        history_file.unlink(missing_ok=True)
        rng = random.Random(f"{seed}:jobs")  # the simulation's draws: the same jobs, keys and times
        news = _jobs(spec, rng)

        def keys(kind: str) -> list[str]:
            singles = [n.idempotent_key for n in news if n.idempotent_key.endswith(f":{kind}")]
            steps = [f"mission-dag-{m}:{s}" for m in range(spec.missions) for s in spec.failing_steps] \
                if kind == "failing" else []
            return singles + steps

        stack.reset_service({"work_s": spec.work_median_s * f, "work_sigma": spec.work_sigma,
                             "fail_rate": spec.fail_rate, "seed": seed, "failing_keys": keys("failing"),
                             "hanging_keys": keys("hanging"), "crashing_keys": keys("crashing"),
                             "fail_first": dict.fromkeys(keys("flaky"), 1)})
        plan: list[tuple[float, str, Any]] = []  # (scenario time, process, NewJob | Mission)
        for i, new in enumerate(news):
            at = rng.uniform(0.0, spec.window_s)
            plan.append((at, f"client-{i}", new))
            if rng.random() < spec.same_key_ratio:
                plan.append((at, f"client-{10_000 + i}", new))
        posts: dict[str, dict[str, Any]] = {}  # planner -> its invoke's value
        for m, ((mission, defect), at) in enumerate(zip(missions(spec, f), plan_times(spec, rng), strict=True)):
            plan.append((at, f"planner-{m}", mission))
            posts[f"planner-{m}"] = mission_post(mission, defect, m, spec)
        log_sizes = stack.log_sizes()
        stack.start_instances(case, cfg, history=history_file, bug=self.bug)
        history = History()
        t0_mono, t0_epoch = time.monotonic(), time.time()

        def now() -> float:
            return (time.monotonic() - t0_mono) / f  # scenario seconds

        lock = threading.Lock()
        enqueued: list[dict[str, Any]] = []
        engine = create_engine(self.stack.app_url, pool_size=4, max_overflow=8)
        repo = REPOS[variant]

        def op(process: str, type_: str, name: str, value: dict[str, Any]) -> None:
            with lock:
                history.add(now(), process, type_, name, value)

        def produce(item: tuple[float, str, Any]) -> None:
            at, process, what = item
            time.sleep(max(0.0, t0_mono + at * f - time.monotonic()))
            mission = isinstance(what, Mission)
            for attempt in range(8):
                op(process, INVOKE, "create-mission" if mission else "enqueue",
                   posts[process] if mission else {"key": what.idempotent_key, "try": attempt})
                try:
                    with Session(engine) as session, session.begin():
                        tx = Tx(session, datetime.now(UTC), _no_ids)
                        got = create_mission(tx, what, repo.enqueue) if mission else _enqueue_job(repo, tx, what)
                except (MissionRefused, MissionConflict) as refused:  # an answer: the same again is refused again
                    op(process, FAIL, "create-mission", {"mission": what.id, "refused": str(refused)})
                    return
                except Exception:  # no answer (the link is cut): the same again, with the same key
                    op(process, FAIL, "create-mission" if mission else "enqueue",
                       {"mission": what.id} if mission else {"key": what.idempotent_key, "try": attempt})
                    time.sleep(2.0 * 2 ** attempt * f)
                    continue
                with lock:
                    if isinstance(got, dict):  # a mission's jobs by step name
                        enqueued.extend({"key": f"{what.id}:{n}", "job_id": j} for n, j in got.items())
                    else:
                        enqueued.append({"key": what.idempotent_key, "job_id": got})
                op(process, OK, "create-mission" if mission else "enqueue",
                   {"mission": what.id, "jobs": got} if mission else {"key": what.idempotent_key, "job_id": got})
                return

        faults = JobsNemesis(stack, f)

        def apply(fault: str, params: dict[str, Any], on: bool) -> None:
            faults.apply(fault, params, on=on)

        nemesis = threading.Thread(target=run_realtime, args=(scenario.faults, apply, history, now, f),
                                   name="nemesis")
        try:
            nemesis.start()
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(produce, sorted(plan, key=lambda p: (p[0], p[1]))))
            nemesis.join()
            notes: list[str] = []
            self.stack.settle(NativeCase(settle_s=scenario.recovery_bound_s * f + 60.0, wake_once_outclaimed=True),
                               cfg, notes)
        finally:
            stack.stop_instances()
            engine.dispose()
        ops = [(op.time, op.process, op.type, op.f, op.value) for op in history.ops]
        for line in history_file.read_text().splitlines() if history_file.exists() else ():
            o = json.loads(line)
            ops.append(((o["time"] - t0_epoch) / f, o["process"], o["type"], o["f"], o["value"]))
        history = History()
        for t, process, type_, name, value in sorted(ops, key=lambda o: o[0]):
            history.add(t, process, type_, name, value)
        run = self.stack.check(cfg, enqueued, notes)
        state = run.state
        state.t0, state.heal_time, state.end_time = t0_epoch, scenario.heal_time(), now()
        state.missions = mission_answers(history)
        stack.observe(state, log_sizes, spec.workers_per_instance, cfg)
        # The windows that cut the workers off the database, in the seconds the checkers read the rows in (unscaled).
        state.outages = [(w.start * f, None if w.end is None else w.end * f) for w in history.fault_windows()
                         if w.fault not in PROCESS_FAULTS]
        run.verdicts[:] = INVARIANTS.check(state)  # with what the planners were answered (J15)
        wanted = set(scenario.invariants)
        verdicts = [v for v in run.verdicts if v.invariant in wanted]
        exercised = scenario.exercised(history, state)
        passed = exercised is None and all(v.status != "violated" for v in verdicts)
        return ScenarioResult(
            id=scenario.id, slug=scenario.slug, title=scenario.title, seed=seed, passed=passed, verdicts=verdicts,
            exercised=exercised, history_digest=history.digest(), counts=state.counts(), virtual_s=now(),
            wall_s=time.perf_counter() - wall0, history=history, state=state,
            stats={"shell": "native", "time_factor": f, "variant": variant, "fired": run.fired, "notes": notes})



@contextlib.contextmanager
def stack_runner(req: StackRequest) -> Iterator[JobsScenarioRunner]:
    """The job system's real stack for `sortie run --system jobs` and `sortie selfcheck --stack native --system
    jobs` (scenarios.systems.System.stack_runner). An injected defect of reference.jobs.bugs is on in the instances
    (their
    SORTIE_JOBS_BUG) and in this process, whose producers enqueue; ``seed`` runs the seed-faithful variant."""
    if req.kind != "native":
        raise StackUnavailable(f"--stack {req.kind}: the job system runs on its own native stack only")
    bug = req.inject_bug
    with JobsStack(req.run_dir) as stack, injected(bug) if bug else contextlib.nullcontext():
        yield JobsScenarioRunner(stack, req.time_factor or DEFAULT_TIME_FACTOR, variant=SEED if bug == SEED else None,
                                 bug=bug if bug not in (None, SEED) else None)

