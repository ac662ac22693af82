"""I32-I34: what a consumer does with a delivery that fails, and with an ack the broker refuses. From mutation testing
of consumer.py (2026-12-06): a dead letter at the first failure, a dead-lettered message left unacked, an ack of a
delivery whose failure was never recorded, and a refused ack that ended the consumer's loop each passed every check.
Each case builds the history both shells record (deliver, ack, loop-ended) and the rows of the final state."""

from __future__ import annotations

from checker_scene import T0, Scene

from harness.history import FAIL, INFO, NEMESIS, OK
from kernel.runtime import ACK, LOOP_ENDED
from scenarios.verdicts import HELD, VIOLATED, Verdict
from systems.copilot.checkers import INVARIANTS

TASK, EVENT, GROUP = "task-1", "evt-1", "dispatcher"
LIMIT = 5  # Policy().max_deliveries


def _check(inv: str, s: Scene) -> Verdict:
    return INVARIANTS[inv](s.ctx())


def _delivery(s: Scene, t: float, attempt: int, process: str = "dispatcher-1") -> None:
    s.op(t, process, INFO, "deliver", group=GROUP, event_id=EVENT, event_type="TaskCreated", task_id=TASK,
         attempt=attempt)


def _ack(s: Scene, t: float, attempt: int, type_: str = OK, process: str = "dispatcher-1") -> None:
    s.op(t, process, type_, ACK, group=GROUP, event_id=EVENT, event_type="TaskCreated", task_id=TASK,
         attempt=attempt)


def _failure(s: Scene, t: float, attempt: int) -> None:
    s.state.event_failures.append({"consumer": GROUP, "event_id": EVENT, "attempt": attempt, "code": "E", "at": T0 + t})


def _dead_letter(s: Scene, t: float, attempts: int) -> None:
    s.state.dead_letters.append({"id": 1, "consumer": GROUP, "event_id": EVENT, "task_id": TASK,
                                 "event_type": "TaskCreated", "error_code": "E", "attempts": attempts, "history": [],
                                 "redriven": False, "created_at": T0 + t})


def _poison(s: Scene, failures: int, *, ack_last: bool = True) -> None:
    """A message that fails ``failures`` deliveries 30 s apart; dead-lettered at the last one (acked if asked)."""
    for a in range(1, failures + 1):
        t = 30.0 * a
        _delivery(s, t, a)
        _failure(s, t + 0.5, a)
        if a < failures:
            continue
        _dead_letter(s, t + 0.6, a)
        if ack_last:
            _ack(s, t + 0.7, a)


def test_a_dead_letter_at_the_limit_then_acked_holds() -> None:
    s = Scene()
    _poison(s, LIMIT)
    verdict = _check("I32", s)
    assert verdict.status == HELD and verdict.checked == 2  # the dead letter, and the failure at the limit


def test_a_dead_letter_before_the_limit_violates() -> None:
    s = Scene()
    _poison(s, 1)
    assert [v.message for v in _check("I32", s).violations] == [
        "dispatcher dead-lettered TaskCreated evt-1 with failures recorded at attempts [1]: the limit is 5"]


def test_a_dead_lettered_message_delivered_again_unacked_violates_unless_its_consumer_died() -> None:
    s = Scene()
    _poison(s, LIMIT, ack_last=False)
    _delivery(s, 30.0 * LIMIT + 30.0, LIMIT + 1)
    verdict = _check("I32", s)
    assert verdict.status == VIOLATED
    assert verdict.violations[0].message == ("TaskCreated evt-1 failed its delivery 5 to dispatcher at t=150.5s "
                                             "(limit 5) and was delivered again at t=180.0s: the consumer never "
                                             "acked it")
    s.history.add(151.0, NEMESIS, INFO, "kill", {"process": "dispatcher-1"})
    assert _check("I32", s).status == HELD


def test_a_refused_ack_of_a_dead_letter_is_the_brokers_doing() -> None:
    s = Scene()
    _poison(s, LIMIT, ack_last=False)
    _ack(s, 150.7, LIMIT, FAIL)
    _delivery(s, 180.0, LIMIT + 1)
    assert _check("I32", s).status == HELD


def test_an_ack_after_the_outcome_holds_and_one_before_it_violates() -> None:
    s = Scene()
    _delivery(s, 10.0, 1)
    s.state.processed.append({"consumer": GROUP, "event_id": EVENT, "task_id": TASK, "at": T0 + 10.5})
    _ack(s, 11.0, 1)
    assert _check("I33", s).status == HELD and _check("I33", s).checked == 1
    s.state.processed[-1]["at"] = T0 + 40.0  # taken only at a later delivery: the first ack lost the message
    assert [v.message for v in _check("I33", s).violations] == [
        "dispatcher-1 acked TaskCreated evt-1 (delivery 1) at t=11.0s before the event was processed or dead-lettered "
        "(processed at t=40.0s): the message was lost"]


def test_an_ack_of_a_dead_letter_holds_and_a_stale_consumers_ack_is_not_judged() -> None:
    s = Scene()
    _poison(s, LIMIT)
    assert _check("I33", s).status == HELD
    _ack(s, 5.0, 1, process="stale-consumer")  # a fault acking unread on purpose
    assert _check("I33", s).checked == 1


def test_a_loop_that_ends_on_its_own_violates() -> None:
    s = Scene()
    _delivery(s, 10.0, 1, process="dispatcher-2")
    assert _check("I34", s).status == HELD and _check("I34", s).checked == 1
    s.history.add(12.0, "dispatcher-2", INFO, LOOP_ENDED,
                  {"process": "dispatcher-2", "error": "BrokerUnavailable: broker unavailable"})
    assert [v.message for v in _check("I34", s).violations] == [
        "dispatcher-2's loop ended at t=12.0s without being stopped: BrokerUnavailable: broker unavailable"]
