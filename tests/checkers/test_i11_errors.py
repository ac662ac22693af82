"""I11 (errors are structured with stable codes; a refusal writes nothing) can fail, and holds on good runs."""

from __future__ import annotations

from typing import Any

import pytest

from harness.history import FAIL, INVOKE, OK, History
from scenarios.verdicts import HELD, VIOLATED
from systems.copilot.checkers import CheckContext, check_i11
from systems.copilot.state import FinalState

GOOD = {"code": "STALE_DRAFT_VERSION", "status": 409, "structured": True, "trace": False}


def _run(answer: dict[str, Any], *, task_for_refused_key: bool = False) -> CheckContext:
    h = History()
    h.add(1.0, "user-1", INVOKE, "confirm", {"user_id": "u1", "key": "k1"})
    h.add(1.2, "user-1", FAIL, "confirm", {"user_id": "u1", "key": "k1", **answer})
    h.add(2.0, "user-2", INVOKE, "confirm", {"user_id": "u2", "key": "k2"})
    h.add(2.2, "user-2", OK, "confirm", {"user_id": "u2", "key": "k2", "task_id": "t2"})
    state = FinalState(tasks=[{"id": "t2", "user_id": "u2", "idempotency_key": "k2", "status": "COMPLETED"}])
    if task_for_refused_key:
        state.tasks.append({"id": "t1", "user_id": "u1", "idempotency_key": "k1", "status": "CREATED"})
    return CheckContext(h, state)


def test_structured_refusals_without_writes_hold() -> None:
    verdict = check_i11(_run(GOOD))
    assert verdict.status == HELD
    assert verdict.checked == 2  # one error answer, one refused key


@pytest.mark.parametrize(("broken", "fragment"), [
    ({"code": None}, "stable code"),
    ({"code": "oops, something broke"}, "stable code"),
    ({"structured": False, "content_type": "text/html"}, "not problem+json"),
    ({"trace": True}, "stack trace"),
])
def test_a_malformed_error_answer_violates_i11(broken: dict[str, Any], fragment: str) -> None:
    verdict = check_i11(_run({**GOOD, **broken}))
    assert verdict.status == VIOLATED
    assert fragment in verdict.violations[0].message
    assert verdict.violations[0].ops == [1]


def test_a_task_behind_a_refused_key_is_a_partial_write() -> None:
    verdict = check_i11(_run(GOOD, task_for_refused_key=True))
    assert verdict.status == VIOLATED
    assert verdict.violations[0].task_id == "t1" and "partial write" in verdict.violations[0].message
