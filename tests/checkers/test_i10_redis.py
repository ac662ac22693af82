"""I10 (no outcome depends on Redis) is checked only where Redis was lost, and it can fail."""

from __future__ import annotations

from harness.history import FAIL, INVOKE, OK, History
from scenarios.verdicts import HELD, UNCHECKED, VIOLATED
from systems.copilot.checkers import CheckContext, check_i10
from systems.copilot.state import FinalState


def _history(with_window: bool, failure_status: int | None) -> History:
    h = History()
    if with_window:
        h.fault_start(10.0, "redis-loss")
    h.add(12.0, "user-1", INVOKE, "confirm", {"key": "k1"})
    if failure_status is None:
        h.add(12.5, "user-1", OK, "confirm", {"key": "k1", "task_id": "t1"})
    else:
        h.add(12.5, "user-1", FAIL, "confirm", {"key": "k1", "code": "SERVICE_UNAVAILABLE",
                                                "status": failure_status})
    if with_window:
        h.fault_stop(20.0, "redis-loss")
    return h


def test_a_server_error_while_redis_is_lost_violates_i10() -> None:
    verdict = check_i10(CheckContext(_history(True, 503), FinalState()))
    assert verdict.status == VIOLATED
    assert verdict.violations[0].ops == [2] and "Redis" in verdict.violations[0].message


def test_answers_while_redis_is_lost_hold_i10() -> None:
    verdict = check_i10(CheckContext(_history(True, None), FinalState()))
    assert verdict.status == HELD and verdict.checked == 1


def test_a_client_error_is_not_blamed_on_redis() -> None:
    assert check_i10(CheckContext(_history(True, 409), FinalState())).status == HELD


def test_without_a_redis_fault_i10_is_unchecked_not_held() -> None:
    verdict = check_i10(CheckContext(_history(False, 503), FinalState()))
    assert verdict.status == UNCHECKED and "no Redis fault" in verdict.note
