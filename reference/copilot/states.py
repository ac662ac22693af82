"""The task state machine (docs/systems/copilot.md, seed 000 §7): the one table of legal transitions."""

from __future__ import annotations

from enum import StrEnum


class TaskStatus(StrEnum):
    CREATED = "CREATED"
    QUEUED = "QUEUED"
    VALIDATING = "VALIDATING"
    DISPATCHING = "DISPATCHING"
    EXECUTING = "EXECUTING"
    COMPLETED = "COMPLETED"
    DISPATCH_FAILED = "DISPATCH_FAILED"
    FAILED = "FAILED"
    CANCEL_PENDING = "CANCEL_PENDING"
    CANCELLED = "CANCELLED"
    MANUAL_REVIEW = "MANUAL_REVIEW"


S = TaskStatus

TERMINAL: frozenset[TaskStatus] = frozenset({S.COMPLETED, S.FAILED, S.CANCELLED})

# Transitions the system makes on its own (workers, reconciler, platform events, user cancel).
SYSTEM_TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    S.CREATED: frozenset({S.QUEUED, S.CANCELLED}),
    S.QUEUED: frozenset({S.VALIDATING, S.CANCELLED}),
    S.VALIDATING: frozenset({S.DISPATCHING, S.FAILED, S.CANCELLED}),
    S.DISPATCHING: frozenset({S.EXECUTING, S.DISPATCH_FAILED, S.MANUAL_REVIEW}),
    # MANUAL_REVIEW: the platform has not answered for Policy.escalate_after_s (seed 000 §7.2: "if it cannot be
    # confirmed, manual review"): an operator decides, the reconciler stops guessing.
    S.EXECUTING: frozenset({S.COMPLETED, S.FAILED, S.CANCEL_PENDING, S.MANUAL_REVIEW}),
    # DISPATCH_FAILED -> CANCELLED: the user gives up the retry; the failed attempt made no flight (its outcome is
    # known: rejected or not created), so nothing needs stopping.
    S.DISPATCH_FAILED: frozenset({S.QUEUED, S.MANUAL_REVIEW, S.FAILED, S.CANCELLED}),
    S.CANCEL_PENDING: frozenset({S.CANCELLED, S.EXECUTING, S.COMPLETED, S.MANUAL_REVIEW}),
    S.MANUAL_REVIEW: frozenset(),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}

# Transitions only an operator may make (audited with the operator's id).
OPERATOR_TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    S.MANUAL_REVIEW: frozenset({S.QUEUED, S.EXECUTING, S.COMPLETED, S.FAILED, S.CANCELLED}),
}

def is_legal(frm: TaskStatus | str, to: TaskStatus | str, *, operator: bool = False) -> bool:
    frm, to = TaskStatus(frm), TaskStatus(to)
    if to in SYSTEM_TRANSITIONS[frm]:
        return True
    return operator and to in OPERATOR_TRANSITIONS.get(frm, frozenset())
