"""cancel_task: a flying task is CANCEL_PENDING until the platform confirms (seed 000 §7.2)."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass

from reference.copilot import bugs, coverage
from reference.copilot import platform as p
from reference.copilot.effects import CallPlatform, Transact, Tx, Work
from reference.copilot.errors import Conflict, Forbidden, NotFound, StaleWrite
from reference.copilot.models import UserDevicePermission
from reference.copilot.policy import Policy
from reference.copilot.services.settle import settle
from reference.copilot.states import TaskStatus as S
from reference.copilot.tasks import item_correlation, load, transition

NOT_SENT_YET = frozenset({S.CREATED, S.QUEUED, S.VALIDATING})
CANCELLING = frozenset({S.CANCEL_PENDING, S.CANCELLED})  # a cancel was taken: a repeated one answers the status
# What a cancel does from each status it is taken in: the status it moves to and the audit action.
_CANCEL_MOVES = {
    **{s: (S.CANCELLED, "CANCELLED_BEFORE_DISPATCH") for s in NOT_SENT_YET},
    # the failed attempt made no flight: no retry, nothing to stop
    S.DISPATCH_FAILED: (S.CANCELLED, "CANCELLED_AFTER_FAILED_DISPATCH"),
    S.EXECUTING: (S.CANCEL_PENDING, "CANCEL_REQUESTED"),
}


@dataclass(frozen=True)
class CancelAnswer:
    task_id: str
    status: str
    version: int
    # True when this request took the cancel (moved the task and wrote its audit row); False for a repeat, which finds
    # the task already cancelling (an earlier or a parallel request took it) and writes nothing.
    taken: bool = True


def request_cancel(tx: Tx, task_id: str, user_id: str) -> CancelAnswer:
    try:
        tid = uuid.UUID(str(task_id))
    except ValueError:
        raise NotFound("TASK_NOT_FOUND", f"task {task_id} does not exist") from None
    task = load(tx, tid)
    if task is None or task.user_id != user_id:
        raise NotFound("TASK_NOT_FOUND", f"task {task_id} does not exist")
    # Permissions gate starting a flight, never stopping one (INJECTED BUG cancel-needs-permission: they gate both)
    if bugs.active(bugs.CANCEL_NEEDS_PERMISSION) and tx.session.get(UserDevicePermission,
                                                                   (user_id, task.device_id)) is None:
        raise Forbidden("FORBIDDEN_DEVICE", f"user may not operate device {task.device_id}", device_id=task.device_id)
    status = S(task.status)
    move = _CANCEL_MOVES.get(status)
    if move is not None:
        try:
            v = transition(tx, task, move[0], actor=user_id, action=move[1], correlation_id=item_correlation(str(tid)))
        except StaleWrite:
            # Another request moved it first. A parallel cancel that got there is answered as a repeated one (the
            # task is cancelling); anything else is the lost race it is (TASK_CHANGED: read again).
            now = load(tx, tid)
            if now is None or now.status not in CANCELLING:
                raise
            return CancelAnswer(str(tid), S(now.status), now.version, taken=False)
        return CancelAnswer(str(tid), move[0], v)
    if status in CANCELLING:
        return CancelAnswer(str(tid), status, task.version, taken=False)  # repeated request: same answer
    # DISPATCHING: whether a flight exists is not known yet; the answer says to retry once the dispatch result is
    # in (TaskDispatchResult). MANUAL_REVIEW: a supervisor decides (POST /v1/tasks/{id}/review, "cancelled").
    raise Conflict("TASK_NOT_CANCELLABLE", f"a task in {status} cannot be cancelled now",
                   task_status=status.value, retryable=status == S.DISPATCHING)


CANCEL_UNCONFIRMED = coverage.window(
    "cancel-sent→confirmed", "a fault hit a cancel the platform may have received before its answer was "
    "written: the dispatcher died or stopped after the answer, its write failed, or the call timed out",
    ("cancel_flight",), ("cancel.answer",), roles=("dispatcher", "reconciler"))


def send_cancel(task_id: uuid.UUID | str, policy: Policy) -> Work[str]:
    """Ask the platform to stop the flight. Only its confirmation (answer, event or query) cancels."""
    tid = uuid.UUID(str(task_id))
    ext = yield Transact(lambda tx: _pending_flight(tx, tid), "cancel.read")
    if ext is None:
        return "not-pending"
    retry = policy.platform_retry
    for n in retry.tries():
        if n:
            yield from retry.backoff(n - 1)
        try:
            result = yield CallPlatform("cancel_flight", (ext,), str(tid), n)
        except p.PlatformError as exc:
            if exc.retryable and exc.outcome_known:
                continue
            coverage.reached(CANCEL_UNCONFIRMED)  # sent, the answer lost
            if bugs.active(bugs.CANCEL_UNCONFIRMED):
                return (yield Transact(lambda tx: _cancelled_unconfirmed(tx, tid), "cancel.answer"))
            if bugs.active(bugs.CANCEL_TIMEOUT_FLIES_ON):
                # INJECTED BUG cancel-timeout-flies-on: a lost answer taken for a refusal
                refused = p.CancelResult(accepted=False, status=p.FLIGHT_EXECUTING)
                return (yield Transact(functools.partial(_answer, tid=tid, ext=ext, result=refused), "cancel.answer"))
            return "unknown"  # timeout: CANCEL_PENDING stays until the platform says so
        if result.status in p.FLIGHT_TERMINAL or not result.accepted:
            path = yield Transact(functools.partial(_answer, tid=tid, ext=ext, result=result), "cancel.answer")
            return path
        if bugs.active(bugs.CANCEL_UNCONFIRMED):
            return (yield Transact(lambda tx: _cancelled_unconfirmed(tx, tid), "cancel.answer"))
        return "accepted"  # the flight is returning home; the cancelled event settles it
    return "retries-exhausted"


def _pending_flight(tx: Tx, tid: uuid.UUID) -> str | None:
    task = load(tx, tid)
    if task is None or task.status != S.CANCEL_PENDING or not task.external_task_id:
        return None
    return task.external_task_id


def _cancelled_unconfirmed(tx: Tx, tid: uuid.UUID) -> str:
    """INJECTED BUG cancel-unconfirmed: the request went out (or timed out), so the task is marked
    CANCELLED without the platform's confirmation (its cancelled event or a query)."""
    task = load(tx, tid)
    if task is None or task.status != S.CANCEL_PENDING:
        return task.status if task is not None else "missing"
    transition(tx, task, S.CANCELLED, actor="dispatcher", action="CANCEL_SENT")
    return S.CANCELLED


def _answer(tx: Tx, tid: uuid.UUID, ext: str, result: p.CancelResult) -> str:
    path = settle(tx, tid, result.status, ext, actor="dispatcher", reason="cancel answer")
    if path:
        return path[-1]
    task = load(tx, tid)
    if task is not None and task.status == S.CANCEL_PENDING and not result.accepted:
        transition(tx, task, S.EXECUTING, actor="dispatcher", action="CANCEL_REFUSED",
                   detail={"platform_status": result.status})
        return S.EXECUTING
    return task.status if task is not None else "missing"
