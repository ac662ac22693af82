"""I35: a person's cancel is answered as the task's status says. From mutation testing of cancel.py (2026-12-06): a
repeated cancel refused as not cancellable, an accepted cancel of a task still dispatching, and a refusal that told
the user the wrong thing about retrying passed every check. Each case builds the cancel operations both shells record
(users.call: ok with the answer's status, fail with the problem's code, task_status and retryable)."""

from __future__ import annotations

import pytest
from checker_scene import Scene

from harness.history import FAIL, INVOKE, OK
from scenarios.verdicts import HELD, VIOLATED, Verdict
from systems.copilot.checkers import INVARIANTS

TASK = "task-1"


def _check(s: Scene) -> Verdict:
    return INVARIANTS["I35"](s.ctx())


def _accepted(s: Scene, t: float, status: str) -> None:
    s.op(t, "operator-1.cancel0", INVOKE, "cancel", user_id="u1", task_id=TASK, attempt=0)
    s.op(t + 0.1, "operator-1.cancel0", OK, "cancel", user_id="u1", task_id=TASK, attempt=0, status=status, version=4)


def _refused(s: Scene, t: float, task_status: str, retryable: bool) -> None:
    s.op(t, "operator-1.cancel1", INVOKE, "cancel", user_id="u1", task_id=TASK, attempt=0)
    s.op(t + 0.1, "operator-1.cancel1", FAIL, "cancel", user_id="u1", task_id=TASK, attempt=0,
         code="TASK_NOT_CANCELLABLE", status=409, task_status=task_status, retryable=retryable)


def test_accepted_cancels_and_right_refusals_hold() -> None:
    s = Scene()
    _accepted(s, 10.0, "CANCEL_PENDING")
    _accepted(s, 11.0, "CANCELLED")
    _refused(s, 12.0, "DISPATCHING", True)
    _refused(s, 13.0, "COMPLETED", False)
    _refused(s, 14.0, "MANUAL_REVIEW", False)
    verdict = _check(s)
    assert verdict.status == HELD and verdict.checked == 5


def test_an_accepted_cancel_of_a_dispatching_task_is_a_violation() -> None:
    s = Scene()
    _accepted(s, 10.0, "DISPATCHING")
    verdict = _check(s)
    assert verdict.status == VIOLATED
    assert "accepted with the task DISPATCHING" in verdict.violations[0].message


def test_a_repeated_cancel_refused_as_not_cancellable_is_a_violation() -> None:
    s = Scene()
    _accepted(s, 10.0, "CANCEL_PENDING")
    _refused(s, 10.3, "CANCEL_PENDING", False)
    verdict = _check(s)
    assert verdict.status == VIOLATED and len(verdict.violations) == 1
    assert "refused as not cancellable with the task CANCEL_PENDING" in verdict.violations[0].message


@pytest.mark.parametrize(("task_status", "retryable"), [("DISPATCHING", False), ("COMPLETED", True)])
def test_a_refusal_that_says_the_wrong_thing_about_retrying_is_a_violation(task_status: str, retryable: bool) -> None:
    s = Scene()
    _refused(s, 12.0, task_status, retryable)
    verdict = _check(s)
    assert verdict.status == VIOLATED
    assert f"retryable={retryable}" in verdict.violations[0].message


def test_other_refusals_and_no_answer_are_not_judged() -> None:
    s = Scene()
    s.op(10.0, "operator-1.cancel0", FAIL, "cancel", user_id="u1", task_id=TASK, attempt=0, code="TASK_NOT_FOUND",
         status=404)
    s.op(11.0, "operator-1.cancel0", FAIL, "cancel", user_id="u1", task_id=TASK, attempt=0,
         code="SERVICE_UNAVAILABLE", status=503)
    assert _check(s).checked == 0
