"""The job table's repository in two variants: ``SeedRepo`` is seed 004's ``Repo`` line for line (ported to
PostgreSQL; its GORM calls autocommit one statement each, so ``fail`` is a read and a write in two transactions
with a gap between them, as in the seed), and ``FixedRepo`` is the same with every defect the harness finds
repaired. Each method is a function of a transaction (kernel.effects.Tx); the worker loops (reference.jobs.pool) call
them
through ``Transact`` effects, so both shells run the same code and a crash or a competing commit can land between
any two of them.

Every status change appends its job_log row in the same transaction (seed 002 §4.4: "状态变更与日志写入在同一事务内
完成"); a change that matched no row logs nothing.

What the fixed variant changes, and why (docs/systems/jobs.md tells each with its failing schedule):
- ``claim`` also requires the job to be due (``next_run_at <= now``): the seed's claim re-checks only the status, so
  a candidate read before another instance failed it and put it back with a backoff is claimed at once, early;
- every claim gets a fencing token (``claim_token``, incremented), and ``done``, ``fail`` and ``heartbeat`` write
  only while the job is still this claim (owner and token): the seed's ``Done``/``Fail`` update by id and status,
  so a worker whose job was reclaimed and claimed again elsewhere still finishes or fails it;
- ``fail`` counts and decides in one conditional UPDATE: the seed reads ``retry``, then writes it back in another
  statement (a lost update when two writers fail it at once);
- ``reclaim_stale`` counts the reclaim as an attempt and buries the job after ``max_retry`` of them: the seed's
  reclaim puts a job whose handler kills its worker back forever; and it skips stale rows a live transaction holds
  (SKIP LOCKED): the seed's waits on them, so one worker stopped mid-transaction holds up every reclaim;
- a running worker renews its claim (``heartbeat``) so that a handler longer than the reclaim threshold is not
  reclaimed while it still runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import exc, insert, select, update

from kernel.effects import Tx
from reference.jobs import bugs, coverage
from reference.jobs.dag import release_children
from reference.jobs.models import DEAD, DONE, PENDING, RUNNING, Job, JobLog
from reference.jobs.rows import NewJob, log

_JOB = Job.__table__
MAX_BACKOFF_S = 3600.0  # 1 h: the seed's cap
RECLAIMER = "reclaimer"  # the job_log actor of a reclaim (whichever process ran it: detail.by)
OPERATOR_ACTOR = "operator:"  # the job_log actor of an operator's change starts with this (then who)


@dataclass(frozen=True)
class Candidate:
    """A claimable job as ``claimable`` read it: not yet this instance's (the seed: "候选≠已认领")."""

    id: int
    type: str
    payload: str
    idempotent_key: str
    retry: int


@dataclass(frozen=True)
class Reclaimed:
    """What one reclaim did: the stale claims it put back, and those it buried (their attempts spent)."""

    pending: tuple[int, ...] = ()
    dead: tuple[int, ...] = ()

    @property
    def count(self) -> int:
        return len(self.pending) + len(self.dead)


@dataclass(frozen=True)
class Claim:
    """A job this worker holds: the fixed variant fences its writes with ``token``; the seed's never reads it."""

    job_id: int
    owner: str
    token: int


def backoff_s(retry_before: int) -> float:
    """The seed's backoff: next_run_at = now + min(2^retry s, 1 h), ``retry`` counted before this failure (the
    first failure waits 1 s). The seed's comment and code disagree on when a job goes dead (its comment: "第 6 次
    失败→dead" with MaxRetry 6; its code: ``retry++; if retry > maxRetry``, the 7th): both variants follow the code."""
    return min(2.0 ** min(retry_before, 20), MAX_BACKOFF_S)


class SeedRepo:
    """Seed 004 ``Repo``: Enqueue, Claimable, Claim, Done, Fail, ReclaimStale, as written."""

    variant = "seed"
    renews_claims = False  # a running job's claim ages from its claim alone

    # ---------------------------------------------------------------- enqueue

    def enqueue(self, tx: Tx, new: NewJob) -> int:
        """Idempotent enqueue: a second job with the same key returns the first one's id. The seed detects the
        duplicate by MySQL's message ("Duplicate entry"); the port asks the driver's unique violation instead
        (PostgreSQL says "duplicate key value", and the seed's match would fail every duplicate there). The
        insert runs in a savepoint so that a duplicate leaves the transaction usable, as autocommit does."""
        if not new.type or not new.idempotent_key:
            raise ValueError("task: Enqueue 要求 Type 与 IdempotentKey 非空")
        payload = json.dumps(new.payload)
        try:
            with tx.session.begin_nested():
                job_id = tx.conn.execute(insert(_JOB).returning(_JOB.c.id), {
                    "type": new.type, "mission_id": new.mission_id, "payload": payload, "status": PENDING,
                    "idempotent_key": new.idempotent_key, "retry": 0, "next_run_at": tx.now, "owner": "",
                    "claim_token": 0, "trace_id": new.trace_id, "timeout_s": new.timeout_s, "unmet": new.unmet,
                    "enqueued_by": new.enqueued_by, "created_at": tx.now, "updated_at": tx.now}).scalar_one()
        except exc.IntegrityError:
            existing = tx.conn.execute(
                select(_JOB.c.id).where(_JOB.c.idempotent_key == new.idempotent_key)).scalar_one_or_none()
            if existing is None:
                raise
            coverage.COVERAGE.reached(coverage.KEY_COLLISION)
            return int(existing)
        log(tx, job_id, None, PENDING, "enqueue", detail={"type": new.type, "key": new.idempotent_key})
        return int(job_id)

    # ---------------------------------------------------------------- claiming

    def claimable(self, tx: Tx, limit: int) -> list[Candidate]:
        """status=pending and due, FIFO by id, no lock: candidates, not claims."""
        rows = tx.conn.execute(
            select(_JOB.c.id, _JOB.c.type, _JOB.c.payload, _JOB.c.idempotent_key, _JOB.c.retry)
            .where(_JOB.c.status == PENDING, _JOB.c.next_run_at <= tx.now,
                   *(() if bugs.BUGS.active(bugs.CLAIMABLE_IGNORES_DEPENDENCIES) else (_JOB.c.unmet == 0,)))
            .order_by(*((_JOB.c.next_run_at,) if bugs.BUGS.active(bugs.CANDIDATES_BY_DUE_TIME) else ()),  # INJECTED
                      _JOB.c.id).limit(limit if limit > 0 else 10)).all()
        return [Candidate(r.id, r.type, r.payload, r.idempotent_key, r.retry) for r in rows]

    def _claim_where(self, tx: Tx, job_id: int) -> tuple[Any, ...]:
        return (_JOB.c.id == job_id, _JOB.c.status == PENDING)

    def claim(self, tx: Tx, job_id: int, owner: str) -> Claim | None:
        """UPDATE ... SET status='running', owner, claimed_at WHERE id AND status='pending'; RowsAffected==1. Both
        variants count claims in ``claim_token`` (the history names a claim by it); only the fixed one reads it."""
        token = tx.conn.execute(
            update(_JOB).where(*self._claim_where(tx, job_id))
            .values(status=RUNNING, owner=owner, claimed_at=tx.now, updated_at=tx.now,
                    claim_token=_JOB.c.claim_token + 1,
                    started_at=_started(tx.now))
            .returning(_JOB.c.claim_token)).scalar_one_or_none()
        if token is None:
            coverage.COVERAGE.reached(coverage.CLAIM_LOST)
            if bugs.BUGS.active(bugs.LOST_CLAIM_COUNTED):  # INJECTED BUG lost-claim-counted: the try is counted
                tx.conn.execute(update(_JOB).where(_JOB.c.id == job_id, _JOB.c.status.in_((PENDING, RUNNING)))
                                .values(retry=_JOB.c.retry + 1))
            return None
        if not bugs.BUGS.active(bugs.CLAIM_UNLOGGED):  # INJECTED BUG claim-unlogged: the change, not its row
            log(tx, job_id, PENDING, RUNNING, owner, detail={"token": int(token)})
        return Claim(job_id, owner, int(token))

    def _held(self, claim: Claim) -> tuple[Any, ...]:
        """The seed writes by id and status only: whoever runs the job now, this claim or another."""
        return (_JOB.c.id == claim.job_id, _JOB.c.status == RUNNING)

    # ---------------------------------------------------------------- outcomes

    def done(self, tx: Tx, claim: Claim) -> bool:
        """UPDATE status='done' WHERE id AND status='running'. True if it changed the row."""
        changed = tx.conn.execute(
            update(_JOB).where(*self._held(claim)).values(status=DONE, updated_at=tx.now)
            .execution_options(preserve_rowcount=True)).rowcount == 1
        if changed:
            log(tx, claim.job_id, RUNNING, DONE, claim.owner, detail={"token": claim.token})
            release_children(tx, claim.job_id, DONE, claim.owner)
        return changed

    def read_retry(self, tx: Tx, claim: Claim) -> int:
        """Fail's first statement (the seed: ``Where("id = ?", id).Take(&t)``)."""
        return int(tx.conn.execute(select(_JOB.c.retry).where(_JOB.c.id == claim.job_id))
                   .scalar_one())

    def fail_with(self, tx: Tx, claim: Claim, retry_before: int, max_retry: int, reason: str) -> bool | None:
        """Fail's second statement, from the retry count the first read: dead past ``max_retry``, else pending again
        after the backoff. True: still alive; False: dead; None: the row was not running (nothing changed)."""
        retry = retry_before + 1
        held = self._held(claim)
        if retry > max_retry:  # the seed sets the status only (``Update("status", StatusDead)``)
            changed = tx.conn.execute(
                update(_JOB).where(*held).values(status=DEAD, updated_at=tx.now)
                .execution_options(preserve_rowcount=True)).rowcount == 1
            if changed:
                log(tx, claim.job_id, RUNNING, DEAD, claim.owner, reason, {"retry": retry, "token": claim.token})
                release_children(tx, claim.job_id, DEAD, claim.owner)
            return False if changed else None
        due = tx.now + timedelta(seconds=backoff_s(retry_before))
        changed = tx.conn.execute(
            update(_JOB).where(*held).values(status=PENDING, retry=retry, next_run_at=due, updated_at=tx.now)
            .execution_options(preserve_rowcount=True)).rowcount == 1
        if changed:
            log(tx, claim.job_id, RUNNING, PENDING, claim.owner, reason,
                {"retry": retry, "next_run_at": due.isoformat(), "token": claim.token})
        return True if changed else None

    def bury(self, tx: Tx, claim: Claim, reason: str) -> bool:
        """Straight to dead, no retry: a payload that does not parse or a type nobody handles (the seed's comments:
        "载荷损坏重试也不会好", "未注册类型消费时直接置 dead + 告警")."""
        changed = tx.conn.execute(
            update(_JOB).where(*self._held(claim)).values(status=DEAD, updated_at=tx.now)
            .execution_options(preserve_rowcount=True)).rowcount == 1
        if changed:
            log(tx, claim.job_id, RUNNING, DEAD, claim.owner, reason, {"token": claim.token})
            release_children(tx, claim.job_id, DEAD, claim.owner)
        return changed

    def heartbeat(self, tx: Tx, claim: Claim) -> bool:
        """The seed has no heartbeat (``renews_claims`` is False): the pool waits out the handler's timeout instead."""
        raise NotImplementedError("seed 004 renews no claim")

    # ---------------------------------------------------------------- reclaim

    def reclaim_stale(self, tx: Tx, stale_after_s: float, max_retry: int, actor: str) -> Reclaimed:
        """UPDATE status='pending', owner='' WHERE status='running' AND claimed_at < now - staleAfter. The seed does
        not count it as an attempt."""
        ids = tx.conn.execute(
            update(_JOB).where(_JOB.c.status == RUNNING,
                               _JOB.c.claimed_at < tx.now - timedelta(seconds=stale_after_s))
            .values(status=PENDING, owner="", updated_at=tx.now).returning(_JOB.c.id)).scalars().all()
        for job_id in sorted(ids):
            log(tx, job_id, RUNNING, PENDING, RECLAIMER, "reclaimed: stale claim", {"by": actor})
        return Reclaimed(pending=tuple(sorted(ids)))


class FixedRepo(SeedRepo):
    """Seed 004 with its defects repaired (the module docstring lists each)."""

    variant = "fixed"
    renews_claims = True

    def _claim_where(self, tx: Tx, job_id: int) -> tuple[Any, ...]:
        where: tuple[Any, ...] = (_JOB.c.id == job_id, _JOB.c.status == PENDING)
        if not bugs.BUGS.active(bugs.CLAIM_IGNORES_BACKOFF):  # INJECTED BUG claim-ignores-backoff: the seed's claim
            where += (_JOB.c.next_run_at <= tx.now,)
        if not bugs.BUGS.active(bugs.CLAIMABLE_IGNORES_DEPENDENCIES):
            where += (_JOB.c.unmet == 0,)
        return where

    def _held(self, claim: Claim) -> tuple[Any, ...]:
        if bugs.BUGS.active(bugs.UNFENCED_OUTCOME):  # INJECTED BUG unfenced-outcome: the seed's Done/Fail
            return super()._held(claim)
        return (_JOB.c.id == claim.job_id, _JOB.c.status == RUNNING, _JOB.c.owner == claim.owner,
                _JOB.c.claim_token == claim.token)

    def read_retry(self, tx: Tx, claim: Claim) -> int:
        return -1  # not read: fail_with counts in SQL

    def fail_with(self, tx: Tx, claim: Claim, retry_before: int, max_retry: int, reason: str) -> bool | None:
        """One conditional UPDATE per outcome, from the row's own retry count (no read-then-write)."""
        conn = tx.conn
        held = self._held(claim)
        dead = conn.execute(
            update(_JOB).where(*held, _JOB.c.retry >= max_retry)
            .values(status=DEAD, retry=_JOB.c.retry + 1, updated_at=tx.now).returning(_JOB.c.retry)).scalar()
        if dead is not None:
            log(tx, claim.job_id, RUNNING, DEAD, claim.owner, reason, {"retry": int(dead), "token": claim.token})
            release_children(tx, claim.job_id, DEAD, claim.owner)
            return False
        row = conn.execute(select(_JOB.c.retry).where(*held)).scalar()
        if row is None:
            return None
        exponent = int(row)
        if bugs.BUGS.active(bugs.BACKOFF_COUNTS_THE_FAILURE):  # INJECTED BUG backoff-counts-the-failure: retry after
            exponent += 1
        due = tx.now + timedelta(seconds=backoff_s(exponent))
        retry = conn.execute(
            update(_JOB).where(*held, _JOB.c.retry == row)
            .values(status=PENDING, retry=_JOB.c.retry + 1, next_run_at=due, updated_at=tx.now)
            .returning(_JOB.c.retry)).scalar()
        if retry is None:
            return None
        log(tx, claim.job_id, RUNNING, PENDING, claim.owner, reason,
            {"retry": int(retry), "next_run_at": due.isoformat(), "token": claim.token})
        return True

    def heartbeat(self, tx: Tx, claim: Claim) -> bool:
        """Renew the claim while the handler runs; False when it is no longer this claim (stop working on it)."""
        renewed = tx.conn.execute(
            update(_JOB).where(*self._held(claim)).values(claimed_at=tx.now)
            .execution_options(preserve_rowcount=True)).rowcount == 1
        if renewed and bugs.BUGS.active(bugs.RENEWAL_REWRITES_THE_CLAIM_ROW):  # INJECTED BUG: progress in the log row
            tx.conn.execute(update(JobLog.__table__).where(
                JobLog.job_id == claim.job_id, JobLog.to_status == RUNNING, JobLog.actor == claim.owner)
                .values(detail={"token": claim.token, "renewed_at": tx.now.isoformat()}))
        return renewed

    def reclaim_stale(self, tx: Tx, stale_after_s: float, max_retry: int, actor: str) -> Reclaimed:
        """A stale claim is an attempt that did not finish: counted, and past ``max_retry`` the job is dead."""
        if bugs.BUGS.active(bugs.RECLAIM_NOT_COUNTED):  # INJECTED BUG reclaim-not-counted: the seed's ReclaimStale
            return super().reclaim_stale(tx, stale_after_s, max_retry, actor)
        conn = tx.conn
        # Only rows no live transaction holds (SKIP LOCKED): a worker stopped mid-transaction keeps its row locks,
        # and a plain UPDATE would wait on them with every other stale claim behind it. The held row is taken back
        # in a later period, once its holder commits or dies.
        free = select(_JOB.c.id).where(
            _JOB.c.status == RUNNING, _JOB.c.claimed_at < tx.now - timedelta(seconds=stale_after_s)
        ).with_for_update(skip_locked=True).scalar_subquery()
        stale = (_JOB.c.id.in_(free),)
        dead = conn.execute(update(_JOB).where(*stale, _JOB.c.retry >= max_retry)
                            .values(status=DEAD, owner="", retry=_JOB.c.retry + 1, updated_at=tx.now)
                            .returning(_JOB.c.id)).scalars().all()
        back = conn.execute(update(_JOB).where(*stale)
                            .values(status=PENDING, owner="", retry=_JOB.c.retry + 1, updated_at=tx.now)
                            .returning(_JOB.c.id)).scalars().all()
        for job_id in sorted(dead):
            log(tx, job_id, RUNNING, DEAD, RECLAIMER, "reclaimed: stale claim, attempts spent", {"by": actor})
            release_children(tx, job_id, DEAD, RECLAIMER)
        for job_id in sorted(back):
            log(tx, job_id, RUNNING, PENDING, RECLAIMER, "reclaimed: stale claim", {"by": actor})
        return Reclaimed(pending=tuple(sorted(back)), dead=tuple(sorted(dead)))


def _started(now: datetime) -> Any:
    from sqlalchemy import func

    return func.coalesce(_JOB.c.started_at, now)


REPOS: dict[str, SeedRepo] = {"seed": SeedRepo(), "fixed": FixedRepo()}


def redrive(tx: Tx, job_id: int, actor: str) -> bool:
    """An operator puts a dead job back to pending, due now, with its retry count at 0 (seed 004: dead "进告警 +
    人工介入", a person takes over; this is what they do). False when the job is not dead (nothing written). Only this
    job runs again: children its death cancelled stay cancelled, its released edges stay released."""
    # INJECTED BUG redrive-keeps-retry: the spent count stays, so the next failure buries the job again
    afresh = {} if bugs.BUGS.active(bugs.REDRIVE_KEEPS_RETRY) else {"retry": 0}
    changed = tx.conn.execute(
        update(_JOB).where(_JOB.c.id == job_id, _JOB.c.status == DEAD)
        .values(status=PENDING, **afresh, next_run_at=tx.now, owner="", updated_at=tx.now)
        .execution_options(preserve_rowcount=True)).rowcount == 1
    if changed:
        log(tx, job_id, DEAD, PENDING, actor, "re-driven by an operator")
    return changed
