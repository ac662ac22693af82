"""The health reconciler (§3.5, §4.3, §4.4): a running step whose executor sent no heartbeat for ``stale_after_s``
becomes health=STALE, and HEALTHY again once heartbeats come back. Each change is a STEP_HEALTH_CHANGED with a new
version and outbox rows, under the task's row lock, and never touches the lifecycle: STALE means "running, not
confirmed", not FAILED. The reconciler is a producer of its own (its own sourceSeq per step attempt)."""

from __future__ import annotations

import functools
from collections.abc import Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.exc import DBAPIError

from kernel.effects import Sleep, Transact, Tx
from reference.statussync import coverage as cov
from reference.statussync.bugs import BUGS
from reference.statussync.models import FAILED, HEALTHY, RUNNING, STALE, TERMINAL, StepStream, Task, TaskStep
from reference.statussync.registry import RECONCILER
from reference.statussync.service import commit_health


@dataclass(frozen=True)
class HealthConfig:
    stale_after_s: float = 30.0
    every_s: float = 5.0


def _candidates(cfg: HealthConfig, tx: Tx) -> list[tuple[str, str, int, str]]:
    """(task, step, attempt, new health) of the running steps whose health should change."""
    old = tx.now - timedelta(seconds=cfg.stale_after_s)
    quiet = or_(TaskStep.last_heartbeat_at.is_(None), TaskStep.last_heartbeat_at < old)
    rows = tx.conn.execute(select(TaskStep.task_id, TaskStep.step_id, TaskStep.attempt, TaskStep.health)
                           .join(Task, Task.id == TaskStep.task_id).where(
        TaskStep.lifecycle_status == RUNNING, Task.lifecycle_status.not_in(sorted(TERMINAL)),
        or_(and_(TaskStep.health == HEALTHY, quiet), and_(TaskStep.health == STALE, ~quiet)))).all()
    return [(r.task_id, r.step_id, r.attempt, STALE if r.health == HEALTHY else HEALTHY) for r in rows]


def _change(cfg: HealthConfig, task_id: str, step_id: str, attempt: int, health: str, tx: Tx) -> bool:
    """Under the task's lock, re-judge the step (it may have ended or beaten since the read) and commit the change."""
    conn = tx.conn
    task = conn.execute(select(Task.__table__).where(Task.id == task_id).with_for_update()).one()
    step = conn.execute(select(TaskStep.__table__).where(
        TaskStep.task_id == task_id, TaskStep.step_id == step_id, TaskStep.attempt == attempt)).one()
    fresh = step.last_heartbeat_at is not None and \
        _aware(step.last_heartbeat_at) >= _aware(tx.now) - timedelta(seconds=cfg.stale_after_s)
    newest = conn.execute(select(func.max(TaskStep.attempt)).where(TaskStep.task_id == task_id,
                                                                   TaskStep.step_id == step_id)).scalar_one()
    if task.lifecycle_status in TERMINAL or attempt != newest:  # a superseded attempt has no executor to watch
        return False
    if step.lifecycle_status != RUNNING or (health == STALE) == fresh or step.health == health:
        return False
    if BUGS.active("health-shares-step-seq"):  # the seed's one task_step.source_seq for every producer of the step
        keys = {"task_id": task_id, "step_id": step_id, "attempt": attempt, "producer_id": step.service_name}
    else:
        keys = {"task_id": task_id, "step_id": step_id, "attempt": attempt, "producer_id": RECONCILER}
    seq = int(conn.execute(select(StepStream.source_seq).filter_by(**keys)).scalar() or 0) + 1
    conn.execute(StepStream.__table__.delete().filter_by(**keys))
    conn.execute(StepStream.__table__.insert().values(**keys, source_seq=seq))
    event = {"eventId": f"health:{task_id}:{step_id}:{attempt}:{seq}", "taskId": task_id, "taskAttempt": task.attempt,
             "stepId": step_id, "stepAttempt": attempt, "operationCode": step.operation_code,
             "producerId": RECONCILER, "sourceSeq": seq, "eventType": "STEP_HEALTH_CHANGED", "health": health}
    lifecycle = _stale(step.lifecycle_status) if health == STALE else step.lifecycle_status
    commit_health(conn, task, step, health, lifecycle, event, tx.now)
    if health == STALE:
        cov.COVERAGE.reached(cov.HEALTH_STALE)
    return True


def _stale(lifecycle: str) -> str:
    """The lifecycle a STALE step keeps: its own (a heartbeat timeout is not a failure)."""
    return FAILED if BUGS.active("stale-marks-failed") else lifecycle


def _aware(value: Any) -> Any:
    from datetime import UTC

    return value if value.tzinfo else value.replace(tzinfo=UTC)


def reconciler_loop(cfg: HealthConfig) -> Generator[Any, Any, None]:
    while True:
        yield Sleep(cfg.every_s)
        try:
            found = yield Transact(lambda tx: _candidates(cfg, tx), "health.scan")
            for task_id, step_id, attempt, health in found:
                yield Transact(functools.partial(_change, cfg, task_id, step_id, attempt, health), "health.change")
        except DBAPIError:  # the database away: the next round sees the same
            continue
