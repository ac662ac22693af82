"""The worker pool (seed 004 ``Pool``): each worker claims candidates one by one (RowsAffected == 1 wins), runs the
job's handler and records its outcome; a reclaimer puts stale running jobs back. Written as generators of effects
(kernel.effects, and ``Execute`` below), so both shells run this one copy and a crash point can land between any two
steps (claimed but not run, run but not recorded...).

The seed shows the repository, not the pool; what the pool does follows its comments: a batch of ``ClaimBatch``
candidates (10, "防单实例饿死另一实例"), an unparsable payload or an unregistered type goes dead at once without a
retry, ``ReclaimStale`` every 60 s with a threshold that "must be longer than the longest handler" (10 min), and a
graceful stop that drains what is in flight. A worker's process name is its owner id (``instance-a.1``: worker 1 of
instance a)."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from kernel.effects import Sleep, Transact, Work
from kernel.logs import DEFECT_MARK, FailedRounds, is_defect, one_line
from reference.jobs import bugs, coverage
from reference.jobs.dag import release_due_time_edges
from reference.jobs.repo import REPOS, Candidate, Claim, SeedRepo

ALERTS = "jobs.alerts"  # logger name of the dead-job alerts
DEAD_ALERT = "JOB_DEAD"  # their code
log = logging.getLogger("reference.jobs.pool")


def alert_dead(job_id: int, reason: str) -> None:
    """Seed 004: a job gone dead "进告警 + 人工介入". One ERROR record per job on the ``jobs.alerts`` logger, with a
    stable code in ``extra`` for a log pipeline to route (as the Copilot's reference.copilot.alerts); said once its
    transaction committed. The durable record is the job's dead job_log row."""
    logging.getLogger(ALERTS).error("ALERT %s job_id=%s reason=%s", DEAD_ALERT, job_id, reason,
                                    extra={"alert": DEAD_ALERT, "alert_fields": {"job_id": job_id, "reason": reason}})


# How an alert reads in a process's log (alert_dead's message): the real stack's harness finds them there.
_DEAD_ALERT_LINE = re.compile(rf"\bALERT {DEAD_ALERT} job_id=(\d+)\b")


def dead_alerts_in_log(text: str) -> list[dict[str, Any]]:
    """The dead-job alerts in a pool instance's log text, as {"code", "job_id"} (the simulation hears the records
    themselves)."""
    return [{"code": DEAD_ALERT, "job_id": int(m.group(1))} for m in _DEAD_ALERT_LINE.finditer(text)]


@dataclass(frozen=True)
class PoolConfig:
    """Seed 004's TaskCfg, with the fixed variant's heartbeat."""

    claim_batch: int = 10
    max_retry: int = 6
    stale_after_s: float = 600.0
    reclaim_every_s: float = 60.0
    poll_idle_s: float = 1.0
    heartbeat_s: float = 60.0  # the fixed variant renews a running claim this often (well under stale_after_s)
    handler_timeout_s: float = 300.0  # a handler's call gives up after this (the seed: "同步调用超时 60s × 重试 2")


@dataclass(frozen=True)
class Execute:
    """Do a job's work: the shell calls the service for the job's type (the simulation's service model, the platform
    simulator on the stack). The service starts each idempotency key's work once (a call with a key it has seen
    joins that work or returns its result) and keeps a ledger of every call; ``owner`` and ``token`` name the claim
    that made it. Returns True when the work is finished, False when it still runs after ``wait_s`` (None: wait
    for it); raises ServiceError when it failed."""

    job_id: int
    type: str
    key: str
    payload: Any
    owner: str
    token: int
    wait_s: float | None = None

    @property
    def crash_name(self) -> str:
        return "execute"


class ServiceError(Exception):
    """The service refused or failed the work (retryable: the job fails and is retried after its backoff)."""


# Job types with a handler (the Copilot's multi-step missions: survey, then inspect, then report).
HANDLED_TYPES = frozenset({"survey", "inspect", "report"})


def _claim_and_run(repo: SeedRepo, cfg: PoolConfig, owner: str, job: Candidate) -> Work[bool]:
    """One candidate: claim it, then run it and record how it went. False: another worker had it."""
    claim: Claim | None = yield Transact(lambda tx: repo.claim(tx, job.id, owner), "job.claim",
                                          takes_work=not bugs.BUGS.active(bugs.CLAIM_IGNORES_THE_DRAIN))
    if claim is None:
        return False
    try:
        payload = json.loads(job.payload)
    except ValueError:
        yield from _bury(repo, claim, "payload is not JSON")
        return True
    if job.type not in HANDLED_TYPES:
        yield from _bury(repo, claim, f"no handler for type {job.type!r}")
        return True
    # The seed calls its handler and waits (up to the handler's timeout); the fixed variant waits a heartbeat at a time
    # and renews its claim in between.
    wait = min(cfg.heartbeat_s, cfg.handler_timeout_s) if repo.renews_claims else cfg.handler_timeout_s
    waited = 0.0
    try:
        while not (yield Execute(job.id, job.type, job.idempotent_key, payload, owner, claim.token, wait)):
            waited += wait
            if waited >= cfg.handler_timeout_s:
                raise ServiceError(f"the handler did not finish within {cfg.handler_timeout_s:g} s")
            if not (yield Transact(lambda tx: repo.heartbeat(tx, claim), "job.heartbeat")):
                coverage.COVERAGE.reached(coverage.OUTCOME_SUPERSEDED)
                return True  # the claim is gone (reclaimed): its new owner will see the work through
    except ServiceError as err:
        reason = str(err) if bugs.BUGS.active(bugs.REASON_KEEPS_THE_STACK) else str(err)[:256]
        retry = yield Transact(lambda tx: repo.read_retry(tx, claim), "job.fail.read")
        alive = yield Transact(lambda tx: repo.fail_with(tx, claim, retry, cfg.max_retry, reason), "job.fail")
        if alive is None:
            coverage.COVERAGE.reached(coverage.OUTCOME_SUPERSEDED)
        elif not alive:
            alert_dead(job.id, reason)
        return True
    if not (yield Transact(lambda tx: repo.done(tx, claim), "job.done")):
        coverage.COVERAGE.reached(coverage.OUTCOME_SUPERSEDED)
    return True


def _bury(repo: SeedRepo, claim: Claim, reason: str) -> Work[None]:
    if (yield Transact(lambda tx: repo.bury(tx, claim, reason), "job.bury")):
        alert_dead(claim.job_id, reason)


def worker_loop(variant: str, cfg: PoolConfig, owner: str) -> Work[None]:
    """One pool worker: candidates, then claim and run each in turn; idle, sleep a poll interval."""
    repo = REPOS[variant]
    candidates = FailedRounds(log, f"{owner}: candidates read")
    while True:
        try:
            batch = yield Transact(lambda tx: repo.claimable(tx, cfg.claim_batch), "job.claimable",
                                   takes_work=True)
            candidates.succeeded()
        except Exception as exc:  # the database is away: the seed skips the round (a WARN)
            if bugs.BUGS.active(bugs.LOOP_ENDS_ON_DB_ERROR):
                raise  # INJECTED BUG loop-ends-on-db-error: the error leaves the loop, the thread stops
            candidates.failed(exc)
            batch = []
        if not batch:
            yield Sleep(cfg.poll_idle_s)
            continue
        for job in batch:
            try:
                yield from _claim_and_run(repo, cfg, owner, job)
            except Exception as exc:  # a failed claim or outcome write: the job stays as it was, reclaim settles it
                if is_defect(exc):  # with its traceback and the mark a harness reads: a defect, not an outage
                    log.error("%s: job %s left as it was %s%s", owner, job.id, DEFECT_MARK, one_line(exc),
                              exc_info=exc)
                else:
                    log.warning("%s: job %s left as it was: %s", owner, job.id, one_line(exc))


def reclaimer_loop(variant: str, cfg: PoolConfig, owner: str) -> Work[None]:
    """Every period: stale claims back (ReclaimStale), then time edges whose parent ran past its timeout
    (reference.jobs.dag)."""
    repo = REPOS[variant]
    rounds = FailedRounds(log, f"{owner}: reclaim")
    while True:
        yield Sleep(cfg.reclaim_every_s)
        try:
            reclaimed = yield Transact(lambda tx: repo.reclaim_stale(tx, cfg.stale_after_s, cfg.max_retry, owner),
                                       "job.reclaim", takes_work=True)
            if reclaimed.count:
                coverage.COVERAGE.reached(coverage.STALE_RECLAIMED)
                log.warning("%s: reclaimed %d stale claim(s): %d pending again, %d dead", owner, reclaimed.count,
                            len(reclaimed.pending), len(reclaimed.dead))
            for job_id in reclaimed.dead:
                alert_dead(job_id, "reclaimed: stale claim, attempts spent")
            if (yield Transact(release_due_time_edges, "job.release_time_edges", takes_work=True)):
                coverage.COVERAGE.reached(coverage.TIME_EDGE_RELEASED)
            rounds.succeeded()
        except Exception as exc:  # the seed: "下一周期再试"
            rounds.failed(exc)
