"""Operators leave MANUAL_REVIEW (seed 000 §7.1: "execution result uncertain, needs reconciliation or a person"):
a supervisor resolves a task as executing, completed, failed or cancelled, with a reason, after the platform has
been asked what became of the flight. A resolution the platform contradicts is refused; a platform that does not
answer refuses every resolution (a person must not guess either). Each resolution is an audited operator
transition (reference.copilot.states.OPERATOR_TRANSITIONS) with the supervisor's id, the reason and the platform's
answer.

A task the platform has no flight for may instead be re-dispatched (MANUAL_REVIEW -> QUEUED) under the same
platform key: its dispatch attempt is reopened, so the dispatcher sends the same request id again (a platform that
did create the flight after all dedupes it: never a second flight), after its pre-flight checks, as any QUEUED task
(the reconciler dispatches QUEUED tasks that wait). Only for a task whose flight was never confirmed (no external
id): a flight the platform knew and then lost is not flown again by this path.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import select

from reference.copilot import platform as p
from reference.copilot.effects import CallPlatform, Transact, Tx, Work
from reference.copilot.errors import Conflict, DomainError, NotFound, ValidationFailed
from reference.copilot.models import DispatchAttempt, DroneTask, UserAreaPermission
from reference.copilot.services.dispatch import Outcome, query_outcome
from reference.copilot.states import TaskStatus as S
from reference.copilot.tasks import load, transition

MAX_REASON_CHARS = 2000
# resolution -> (the status it moves to, the platform answers that allow it; None: the platform has no flight)
RESOLUTIONS: dict[str, tuple[S, frozenset[str | None]]] = {
    "executing": (S.EXECUTING, frozenset({p.FLIGHT_ACCEPTED, p.FLIGHT_EXECUTING})),
    "completed": (S.COMPLETED, frozenset({p.FLIGHT_COMPLETED})),
    "failed": (S.FAILED, frozenset({p.FLIGHT_FAILED, None})),
    "cancelled": (S.CANCELLED, frozenset({p.FLIGHT_CANCELLED, None})),
    "redispatch": (S.QUEUED, frozenset({None})),
}


@dataclass(frozen=True)
class Resolved:
    task_id: str
    status: str
    version: int
    platform_status: str | None  # None: the platform has no flight for the task


@dataclass(frozen=True)
class _Target:
    task_id: uuid.UUID
    version: int
    external_id: str | None
    request_id: str | None  # of the last dispatch attempt


def _target(tx: Tx, task_id: str, supervisor: str) -> _Target:
    try:
        tid = uuid.UUID(str(task_id))
    except ValueError:
        raise NotFound("TASK_NOT_FOUND", f"task {task_id} does not exist") from None
    task = tx.session.get(DroneTask, tid)
    if task is None or tx.session.get(UserAreaPermission, (supervisor, task.area_id)) is None:
        raise NotFound("TASK_NOT_FOUND", f"task {task_id} does not exist")  # no oracle for other areas
    if task.status != S.MANUAL_REVIEW:
        raise Conflict("TASK_NOT_IN_REVIEW", f"task is {task.status}, not MANUAL_REVIEW", task_status=task.status)
    rid = tx.session.scalars(select(DispatchAttempt.request_id).where(DispatchAttempt.task_id == tid)
                             .order_by(DispatchAttempt.attempt.desc())).first()
    return _Target(tid, task.version, task.external_task_id, rid)


def _platform_says(target: _Target) -> Work[str | None]:
    """The flight's status on the platform; None if it has no flight for the task. Raises when it cannot say."""
    unavailable = DomainError("PLATFORM_UNAVAILABLE", "the platform did not answer; resolve again later", status=503)
    if target.external_id:
        try:
            flight = yield CallPlatform("get_flight", (target.external_id,), str(target.task_id))
        except p.PlatformNotFound:
            return None
        except p.PlatformError:
            raise unavailable from None
        return str(flight.status)
    if target.request_id is None:
        return None  # never dispatched
    caps = yield CallPlatform("capabilities", (), str(target.task_id))
    found = yield from query_outcome(target.request_id, caps, str(target.task_id))
    if found is Outcome.UNKNOWN:
        raise unavailable
    return None if found is Outcome.NOT_FOUND else str(found.status)


def resolve_review(task_id: str, supervisor: str, resolution: str, reason: str) -> Work[Resolved]:
    if resolution not in RESOLUTIONS:
        raise ValidationFailed("INVALID_PARAMETERS", f"resolution must be one of {', '.join(RESOLUTIONS)}",
                               field="resolution")
    if not reason.strip() or len(reason) > MAX_REASON_CHARS:
        raise ValidationFailed("INVALID_PARAMETERS", f"reason must be 1..{MAX_REASON_CHARS} characters", field="reason")
    target = yield Transact(lambda tx: _target(tx, task_id, supervisor), "review.read")
    says = yield from _platform_says(target)
    to, allowed = RESOLUTIONS[resolution]
    if to == S.QUEUED and target.external_id is not None:
        raise Conflict("REDISPATCH_NOT_ALLOWED", "the platform confirmed a flight for this task before: it is not "
                       "flown again by a re-dispatch", external_task_id=target.external_id)
    if says not in allowed:
        raise Conflict("RESOLUTION_CONTRADICTS_PLATFORM",
                       f"the platform says {says or 'no flight'}; '{resolution}' contradicts it",
                       platform_status=says)

    def apply(tx: Tx) -> Resolved:
        task = load(tx, target.task_id)
        if task is None or task.version != target.version:
            raise Conflict("TASK_CHANGED", "the task changed while the platform was asked; resolve again")
        # A re-dispatch reopens the last attempt: the dispatcher's next attempt number is that one again, and so is
        # its request id (reference.copilot.services.dispatch._begin).
        reopen = ({"dispatch_attempts": task.dispatch_attempts - 1} if to == S.QUEUED and task.dispatch_attempts
                  else None)
        version = transition(tx, task, to, actor=f"operator:{supervisor}", action="REVIEW_RESOLVED", operator=True,
                             set_values=reopen,
                             detail={"resolution": resolution, "reason": reason, "platform_status": says,
                                     **({"request_id": target.request_id} if reopen else {})})
        return Resolved(str(target.task_id), to.value, version, says)

    return (yield Transact(apply, "review.resolve"))
