"""S1's foreign-task attack: an operator reads and cancels another operator's task. Both are refused as if the task
did not exist (TASK_NOT_FOUND), and the task flies on. Before S1 sent it, a reference whose cancel did not check the
task's owner passed every scenario (mutation testing, 2026-12-05); it now violates I22 (a user reads and cancels only
their own tasks)."""

from __future__ import annotations

import uuid

import pytest

import reference.copilot.api as api
import reference.copilot.services.queries as queries
from reference.copilot.services.cancel import request_cancel
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import VIOLATED

S1 = load_catalogue("copilot")["S1"]


def _foreign(ops: list) -> list:  # type: ignore[type-arg]
    return [op for op in ops if op.value.get("kind") == "foreign-task" and op.f in ("read", "cancel")]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_another_operators_task_is_neither_read_nor_cancelled(seed: int) -> None:
    result = simulate(S1, seed)
    assert result.passed, (result.outcome, result.exercised)
    answers = [op for op in _foreign(result.history.ops) if op.type != "invoke"]
    assert {op.f for op in answers} == {"read", "cancel"}
    assert all(op.type == "fail" and op.value["code"] == "TASK_NOT_FOUND" for op in answers)
    victims = {op.value["task_id"] for op in answers}
    assert all(t["status"] == "COMPLETED" for t in result.state.tasks if t["id"] in victims)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_cancel_that_does_not_check_the_owner_violates_i22(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    def as_the_owner(tx, task_id, user_id):  # type: ignore[no-untyped-def]
        task = queries.load(tx, uuid.UUID(str(task_id)))
        return request_cancel(tx, task_id, task.user_id if task is not None else user_id)

    monkeypatch.setattr(api, "request_cancel", as_the_owner)
    result = simulate(S1, seed)
    assert "I22" in {v.invariant for v in result.verdicts if v.status == VIOLATED}
