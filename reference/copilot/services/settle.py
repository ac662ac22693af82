"""Settling a task from the platform's word: the one mapping of a platform flight status onto our
task, used by the dispatcher's write-back, the reconciler and platform events alike."""

from __future__ import annotations

from sqlalchemy import bindparam, update

from reference.copilot import platform as p
from reference.copilot.effects import Tx
from reference.copilot.models import DispatchAttempt
from reference.copilot.states import TaskStatus as S
from reference.copilot.tasks import load, transition

_ADOPTABLE = {p.FLIGHT_ACCEPTED, p.FLIGHT_EXECUTING, *p.FLIGHT_TERMINAL}


def settle(tx: Tx, task_id: object, flight_status: str, external_id: str, *, actor: str,
           reason: str, cause: str | None = None) -> list[str]:
    """Apply what the platform says about the task's flight. Returns the statuses passed through.

    A terminal task never changes (late or duplicate events are recorded but do nothing)."""
    path: list[str] = []
    for _ in range(3):  # at most DISPATCHING -> EXECUTING -> terminal
        task = load(tx, task_id)  # type: ignore[arg-type]
        if task is None:
            return path
        status = S(task.status)
        detail = {"platform_status": flight_status, "external_task_id": external_id, "reason": reason}
        if cause:
            detail["cause"] = cause
        if status == S.DISPATCHING and flight_status in _ADOPTABLE:
            transition(tx, task, S.EXECUTING, actor=actor, action="FLIGHT_CONFIRMED",
                       set_values={"external_task_id": external_id}, detail=detail)
            _close_attempt(tx, task.id, task.dispatch_attempts, "ACCEPTED", external_id)
        elif status == S.EXECUTING and flight_status == p.FLIGHT_COMPLETED:
            transition(tx, task, S.COMPLETED, actor=actor, action="FLIGHT_COMPLETED", detail=detail)
        elif status == S.EXECUTING and flight_status == p.FLIGHT_FAILED:
            transition(tx, task, S.FAILED, actor=actor, action="FLIGHT_FAILED",
                       set_values={"last_error_code": "FLIGHT_FAILED"}, detail=detail)
        elif status == S.EXECUTING and flight_status == p.FLIGHT_CANCELLED:
            # Cancelled on the platform without our request: the task did not complete.
            transition(tx, task, S.FAILED, actor=actor, action="FLIGHT_CANCELLED_EXTERNALLY",
                       set_values={"last_error_code": "FLIGHT_CANCELLED_EXTERNALLY"}, detail=detail)
        elif status == S.CANCEL_PENDING and flight_status == p.FLIGHT_CANCELLED:
            transition(tx, task, S.CANCELLED, actor=actor, action="CANCEL_CONFIRMED", detail=detail)
        elif status == S.CANCEL_PENDING and flight_status == p.FLIGHT_COMPLETED:
            transition(tx, task, S.COMPLETED, actor=actor, action="FLIGHT_COMPLETED", detail=detail)
        elif status == S.CANCEL_PENDING and flight_status == p.FLIGHT_FAILED:
            transition(tx, task, S.MANUAL_REVIEW, actor=actor, action="FLIGHT_FAILED_DURING_CANCEL",
                       set_values={"last_error_code": "FLIGHT_FAILED"}, detail=detail)
        else:
            return path
        path.append(load(tx, task_id).status)  # type: ignore[union-attr, arg-type]
    return path


_ATTEMPT = DispatchAttempt.__table__
# One conditional UPDATE, built once: only a PENDING attempt is closed (a closed one keeps its first outcome).
_CLOSE_ATTEMPT = (update(_ATTEMPT)
                  .where(_ATTEMPT.c.task_id == bindparam("w_task_id"), _ATTEMPT.c.attempt == bindparam("w_attempt"),
                         _ATTEMPT.c.outcome == "PENDING")
                  .values(outcome=bindparam("outcome"), external_task_id=bindparam("external_task_id"),
                          error_code=bindparam("error_code"),
                          finished_at=bindparam("finished_at", type_=_ATTEMPT.c.finished_at.type)))


def _close_attempt(tx: Tx, task_id: object, attempt: int, outcome: str, external_id: str | None,
                   error_code: str | None = None) -> None:
    tx.flushed().execute(_CLOSE_ATTEMPT, {
        "w_task_id": task_id, "w_attempt": attempt, "outcome": outcome, "external_task_id": external_id,
        "error_code": error_code, "finished_at": tx.now})


def close_attempt(tx: Tx, task_id: object, attempt: int, outcome: str, error_code: str | None = None, *,
                  external_id: str | None = None) -> None:
    _close_attempt(tx, task_id, attempt, outcome, external_id, error_code)
