"""How fast the job system claims on the real stack, against the database's own ceiling for the same statement,
in one run on one PostgreSQL (`sortie stack bench-jobs`).

- **The pool**: JOBS jobs enqueued up front (work of 1 ms at the service), then two instances of WORKERS workers
  each started; claims per second from the first claim to the last outcome, read from job_log's own timestamps.
  Each claim is the pool's whole round: the candidates' read, the conditional claim with its log row, the service
  call over HTTP, the outcome with its log row and the edges' release, each its own transaction through Toxiproxy.
- **pgbench**: the claim's conditional UPDATE and its log row, in one transaction, on a scratch copy of the two
  tables holding PGBENCH_ROWS pending jobs (a random id each: almost every UPDATE matches), as many clients as the
  pool has workers, direct to PostgreSQL (superuser, prepared statements).

``ratio = pool claims/s / pgbench tps`` says how much of the claim statement's ceiling the pool's round reaches."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from kernel.effects import Tx
from reference.jobs.models import DONE, RUNNING, Job, JobLog
from reference.jobs.repo import REPOS
from reference.jobs.rows import NewJob

SCHEMA = "pgb_jobs"
PGBENCH_ROWS = 200_000
CLAIM_SCRIPT = """\\set id random(1, {rows})
BEGIN;
UPDATE pgb_jobs.job SET status = 'running', owner = 'pgbench.' || :client_id, claimed_at = now(), updated_at = now(),
  claim_token = claim_token + 1, started_at = coalesce(started_at, now())
  WHERE id = :id AND status = 'pending' AND next_run_at <= now() AND unmet = 0;
INSERT INTO pgb_jobs.job_log (job_id, from_status, to_status, actor, message, detail, created_at)
  VALUES (:id, 'pending', 'running', 'pgbench.' || :client_id, '', '{{"token": 1}}', now());
END;
"""


def _pool(stack: Any, jobs: int, workers: int, variant: str) -> dict[str, Any]:
    from systems.jobs.stack import STACK_POOL, NativeCase, _no_ids

    assert stack.owner is not None
    case = NativeCase(jobs=jobs, workers=workers, variant=variant)
    stack.reset(case)
    stack.reset_service({"work_s": 0.001})
    repo = REPOS[variant]
    now = datetime.now(UTC)
    with Session(stack.owner) as session, session.begin():  # up front, in one transaction: not what is measured
        tx = Tx(session, now, _no_ids)
        for i in range(jobs):
            repo.enqueue(tx, NewJob("survey", f"bench-{i}", {"n": i}))
    from reference.jobs.pool import PoolConfig

    cfg = PoolConfig(**{**STACK_POOL, "claim_batch": 10, "poll_idle_s": 0.05})
    stack.start_instances(case, cfg)
    try:
        deadline = time.monotonic() + 600.0
        while time.monotonic() < deadline:
            with stack.owner.connect() as conn:
                left = conn.execute(select(func.count()).select_from(Job.__table__)
                                    .where(Job.status != DONE)).scalar_one()
            if left == 0:
                break
            time.sleep(0.2)
    finally:
        stack.stop_instances()
    with stack.owner.connect() as conn:
        claims = conn.execute(select(func.count(), func.min(JobLog.created_at))
                              .where(JobLog.to_status == RUNNING)).one()
        last = conn.execute(select(func.max(JobLog.created_at)).where(JobLog.to_status == DONE)).scalar_one()
        lost = conn.execute(select(func.count()).select_from(Job.__table__).where(Job.status != DONE)).scalar_one()
    seconds = (last - claims[1]).total_seconds()
    return {"jobs": jobs, "instances": 2, "workers_per_instance": workers, "variant": variant,
            "claims": int(claims[0]), "seconds": round(seconds, 2), "claims_per_s": round(claims[0] / seconds, 1),
            "not_done": int(lost), "connection": "application role through Toxiproxy, SQLAlchemy + psycopg"}


def _pgbench(stack: Any, clients: int, seconds: float) -> dict[str, Any]:
    from loadtests.pgbench import find_pgbench, run_script

    binary = find_pgbench(getattr(stack.pg, "bin_dir", None))
    if binary is None:
        return {"error": "pgbench not found"}
    assert stack.owner is not None
    with stack.owner.begin() as conn:
        conn.execute(text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        conn.execute(text(f"CREATE SCHEMA {SCHEMA}"))
        for table in ("job", "job_log"):
            conn.execute(text(f"CREATE TABLE {SCHEMA}.{table} (LIKE public.{table} INCLUDING ALL)"))
        conn.execute(text(
            f"INSERT INTO {SCHEMA}.job (id, type, mission_id, payload, status, idempotent_key, retry, next_run_at, "
            "owner, claim_token, trace_id, timeout_s, unmet, enqueued_by, created_at, updated_at) "
            "SELECT g, 'survey', '', '{}', 'pending', 'pgb-' || g, 0, now() - interval '1 s', '', 0, '', 300, 0, "
            f"'pgbench', now(), now() FROM generate_series(1, {PGBENCH_ROWS}) g"))
        conn.execute(text(f"ANALYZE {SCHEMA}.job"))
    script = CLAIM_SCRIPT.format(rows=PGBENCH_ROWS)
    try:
        proc = run_script(binary, stack.pg, script, clients, seconds, "jobs")
    finally:
        with stack.owner.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
    out = proc.stdout + proc.stderr
    tps = re.search(r"tps = ([0-9.]+)", out)
    if proc.returncode != 0 or tps is None:
        return {"error": f"pgbench exited {proc.returncode}: {out[-800:]}"}
    lat = re.search(r"latency average = ([0-9.]+) ms", out)
    return {"tps": float(tps[1]), "latency_avg_ms": float(lat[1]) if lat else None, "clients": clients,
            "seconds": seconds, "rows": PGBENCH_ROWS, "connection": "direct (superuser, no Toxiproxy), prepared",
            "script": script}


def bench_claims(jobs: int = 2000, workers: int = 2, pgbench_seconds: float = 10.0,
                 variant: str = "fixed") -> dict[str, Any]:
    from systems.jobs.stack import JobsStack

    with JobsStack() as stack:
        pool = _pool(stack, jobs, workers, variant)
        pgbench = _pgbench(stack, clients=2 * workers, seconds=pgbench_seconds) if pgbench_seconds > 0 else {}
    ratio = round(pool["claims_per_s"] / pgbench["tps"], 3) if pgbench.get("tps") else None
    return {"pool": pool, "pgbench": pgbench, "ratio_pool_to_pgbench": ratio}
