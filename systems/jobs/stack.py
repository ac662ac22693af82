"""The job system on the real stack: PostgreSQL (its schema and application role, jobs.migrations) behind a Toxiproxy
link, the service (systems.jobs.service_http) and two pool instances as OS processes (systems.jobs.worker), each
with real SIGKILL and SIGSTOP crash points (reference.failpoints). A run enqueues jobs as producers would (two at
once with one key for a share of them), applies its faults, waits until every job settled (a condition on the
database, polled, with a deadline), then checks J1-J10 on the tables and the service's ledger: the same checkers
and the same state shape as the simulation (systems.jobs.checkers).

What differs from the simulation, and why: a crash point kills or stops the whole instance (one process per
machine, as in seed 004's deployment), not one worker of it; timestamps are the workers' clocks (one machine here,
so they agree); the pool's thresholds are seconds, not minutes, so a run fits a test."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.orm import Session

from jobs.migrations import create_app_role, install
from jobs.models import RUNNING, TERMINAL, Job, JobLog
from jobs.pool import PoolConfig
from jobs.repo import REPOS
from jobs.rows import NewJob
from kernel.effects import Tx
from reference.failpoints import CrashPoint, write_points
from scenarios.checkers import Verdict
from stack.common import LOOPBACK, free_port
from stack.components import Component, python_module
from stack.postgres import LocalPostgres
from stack.toxiproxy import LocalToxiproxy
from systems.jobs.checkers import JobsState, check_all
from systems.jobs.sim import read_rows

INSTANCES = ("instance-a", "instance-b")
APP_ROLE, APP_PASSWORD = "jobs_app", "jobs-app-pw"
DATABASE = "jobs"
DB_PROXY = "jobs-db"
# Seconds, not minutes: a claim is stale after 6 s, renewed every 2 s by the fixed variant.
STACK_POOL = {"stale_after_s": 6.0, "reclaim_every_s": 1.0, "heartbeat_s": 2.0, "poll_idle_s": 0.2,
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
        self.stopped_at: tuple[str, datetime, datetime] | None = None  # the last graceful stop: instance, began, ended
        self.owner: Engine | None = None
        self.app_url = ""

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
        self.service.stop()
        self.toxiproxy.stop()
        if self.owner is not None:
            self.owner.dispose()
        if self._own_pg:
            self.pg.stop()
            shutil.rmtree(self.pg.run_dir, ignore_errors=True)
            shutil.rmtree(self.run_dir, ignore_errors=True)

    # ------------------------------------------------------------------ a run

    def run(self, case: NativeCase) -> NativeRun:
        assert self.owner is not None
        self._reset(case)
        cfg = PoolConfig(**{**STACK_POOL, **case.pool})
        write_points(str(self.failpoints), case.crash_points)
        news = _jobs(case)
        self._service("reset", {"work_s": case.work_s, "failing_keys": [n.idempotent_key for n in news
                                                                        if ":failing" in n.idempotent_key],
                                "crashing_keys": [n.idempotent_key for n in news if ":crashing" in n.idempotent_key]})
        self.start_instances(case, cfg)
        notes: list[str] = []
        try:
            enqueued = self._produce(case, news, notes)
            self._settle(case, cfg, notes)
        finally:
            self.stop_instances()
        return self._check(cfg, enqueued, notes)

    def _reset(self, case: NativeCase) -> None:
        assert self.owner is not None
        with self.owner.begin() as conn:
            conn.execute(text("TRUNCATE job, job_log, job_dependency RESTART IDENTITY CASCADE"))
        for stale in self.run_dir.glob("failpoints.json*"):
            stale.unlink()
        self.toxiproxy.client.set_enabled(DB_PROXY, True)

    def start_instances(self, case: NativeCase, cfg: PoolConfig) -> None:
        env = {"SORTIE_JOBS_DATABASE_URL": self.app_url,
               "SORTIE_JOBS_SERVICE_URL": f"http://{LOOPBACK}:{self.service_port}",
               "SORTIE_JOBS_POOL": json.dumps(cfg.__dict__), "SORTIE_FAILPOINTS": str(self.failpoints)}
        starting = []
        for name in INSTANCES:
            port = free_port()
            comp = Component(name, python_module("systems.jobs.worker", name, "--workers", str(case.workers),
                                                 "--variant", case.variant, "--health-port", str(port)),
                             f"http://{LOOPBACK}:{port}/health", env=env, log_path=self.run_dir / f"{name}.log")
            self.instances[name] = comp
            starting.append(comp)
        with ThreadPoolExecutor(len(starting)) as pool:
            list(pool.map(lambda c: c.start(), starting))
        threading.Thread(target=self._supervise, name="jobs-supervisor", daemon=True).start()

    def _supervise(self) -> None:
        """Restart a killed instance, as a process supervisor would (the simulation's SimWorld.supervise)."""
        while self.instances:
            for comp in list(self.instances.values()):
                if comp.wanted and not comp.running():
                    with contextlib.suppress(Exception):
                        comp.start()
            time.sleep(0.2)

    def stop_instances(self) -> None:
        instances, self.instances = dict(self.instances), {}
        for comp in instances.values():
            comp.stop()

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
        began = datetime.now(UTC)
        self.instances[name].stop()  # SIGTERM, then waits for the exit (SIGKILL only past mirakuru's timeout)
        notes.append(f"{name} stopped gracefully")
        self.stopped_at = (name, began, datetime.now(UTC))

    def _outage(self, case: NativeCase, notes: list[str]) -> None:
        assert case.db_outage is not None
        after, seconds = case.db_outage
        time.sleep(after)
        self.toxiproxy.client.set_enabled(DB_PROXY, False)
        notes.append(f"database link cut for {seconds:g} s")
        time.sleep(seconds)
        self.toxiproxy.client.set_enabled(DB_PROXY, True)

    def _settle(self, case: NativeCase, cfg: PoolConfig, notes: list[str]) -> None:
        assert self.owner is not None
        deadline = time.monotonic() + case.settle_s
        while time.monotonic() < deadline:
            with self.owner.connect() as conn:
                left = conn.execute(select(func.count()).select_from(Job.__table__)
                                    .where(Job.status.not_in(sorted(TERMINAL)))).scalar_one()
                most = conn.execute(select(func.count()).select_from(JobLog.__table__)
                                    .where(JobLog.to_status == RUNNING).group_by(JobLog.job_id)
                                    .order_by(func.count().desc()).limit(1)).scalar() or 0
            if left == 0:
                return
            if case.until_claims is not None and most >= case.until_claims:
                notes.append(f"a job was claimed {most} times")
                return
            time.sleep(0.2)
        notes.append(f"not settled after {case.settle_s:g} s")

    def _check(self, cfg: PoolConfig, enqueued: list[dict[str, Any]], notes: list[str]) -> NativeRun:
        assert self.owner is not None
        ledger = self._service("ledger")
        with Session(self.owner) as session:
            jobs, log, edges = read_rows(session)
        state = JobsState(jobs, log, ledger["calls"], ledger["effects"], enqueued, edges, datetime.now(UTC),
                          cfg.max_retry)
        fired = {}
        for marker in self.run_dir.glob("failpoints.json.*.fired"):
            fired[marker.name.removeprefix("failpoints.json.").removesuffix(".fired").replace(".", ":", 1)] = \
                len(marker.read_bytes())
        return NativeRun(state, check_all(state), notes, fired)

    def _service(self, what: str, body: dict[str, Any] | None = None) -> Any:
        url = f"http://{LOOPBACK}:{self.service_port}/{what}"
        resp = requests.post(url, json=body, timeout=10) if body is not None else requests.get(url, timeout=10)
        resp.raise_for_status()
        return resp.json()


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
