"""I30: an outbox row backs off a broker that refuses it, and its budget lasts as its policy says. From mutation
testing of outbox.py (2026-12-06): no check bounded how often a broker that was down was retried; building this one
found that a row's backoff followed its publisher's failed rounds, which an empty claim reset, so a 20-minute outage
sent rows DEAD that the policy promised an hour. The policy here: a row's retry n waits at least min(cap, base*2^n)/2.
(A publisher's own pause after failed rounds is I37's: test_i36_i37_outbox_rounds.)"""

from __future__ import annotations

from checker_scene import T0, Scene

from harness.history import FAIL, INFO, INVOKE, NEMESIS, OK
from kernel.runtime import PUBLISH
from reference.copilot.policy import Policy, RetryPolicy
from scenarios.verdicts import HELD, VIOLATED, Verdict
from systems.copilot.checkers import INVARIANTS, CheckContext

TASK = "task-1"
POLICY = Policy(outbox_retry=RetryPolicy(attempts=4, base_s=1.0, cap_s=4.0))
SHORTEST_DEAD_S = 0.5 + 1.0 + 2.0  # min_delay(0) + min_delay(1) + min_delay(2): four claims, three waits


def _publish(s: Scene, at: float, process: str, event_id: str, refused: bool) -> None:
    value = {"event_id": event_id, "task_id": TASK, "event_type": "TaskCreated"}
    s.op(at, process, INVOKE, PUBLISH, **value)
    if refused:
        s.op(at, process, FAIL, PUBLISH, **value, error="broker unavailable")
    else:
        s.op(at + 0.01, process, OK, PUBLISH, **value)


def _i30(s: Scene) -> Verdict:
    return INVARIANTS["I30"](CheckContext(s.history, s.state, policy=POLICY, fast_path_modelled=True))


def _scene(times: list[tuple[float, str, str, bool]]) -> Scene:
    s = Scene()
    for at, process, event_id, refused in times:
        _publish(s, at, process, event_id, refused)
    return s


def test_backing_off_as_the_policy_says_holds_and_is_counted() -> None:
    # the row waits at least 0.5 s, then 1 s (a publisher's own pause: I37)
    s = _scene([(10.0, "publisher-1", "e1", True), (11.0, "publisher-1", "e1", True),
                (13.0, "publisher-1", "e1", False)])
    verdict = _i30(s)
    assert verdict.status == HELD and verdict.checked == 2, verdict.as_json()


def test_a_row_published_again_before_its_backoff_violates_even_by_another_publisher() -> None:
    # refused twice: its next try waits at least min_delay(1) = 1 s; publisher-2 has no refusal of its own
    s = _scene([(10.0, "publisher-1", "e1", True), (11.0, "publisher-1", "e1", True),
                (11.5, "publisher-2", "e1", False)])
    verdict = _i30(s)
    assert verdict.status == VIOLATED
    assert [(v.task_id, v.message) for v in verdict.violations] == [
        (TASK, "outbox event e1 published again 0.500s after it was refused 2 time(s) (policy: at least 1.000s)")]


def test_a_redrive_gives_the_row_a_fresh_budget() -> None:
    s = _scene([(10.0, "publisher-1", "e1", True), (11.0, "publisher-1", "e1", True)])
    s.op(11.1, "supervisor", OK, "redrive", kind="outbox", id="e1")
    _publish(s, 11.2, "publisher-2", "e1", False)
    assert _i30(s).status == HELD


def _dead(s: Scene, written: float, at: float, attempts: int) -> None:
    s.state.outbox.append({"id": "e1", "task_id": TASK, "event_type": "TaskCreated", "task_version": 0,
                           "status": "DEAD", "created_at": T0 + written, "sent_at": None, "attempts": attempts})
    s.state.outbox_budget.append({"action": "OUTBOX_DEAD", "event_id": "e1", "at": T0 + at, "attempts": attempts})


def test_a_row_goes_dead_after_its_budget_of_claims_and_no_sooner_than_they_can_take() -> None:
    s = Scene()
    _dead(s, 0.0, SHORTEST_DEAD_S, 4)
    assert _i30(s).status == HELD and _i30(s).checked == 1

    s = Scene()
    _dead(s, 0.0, 60.0, 5)
    assert [v.message for v in _i30(s).violations] == ["outbox event e1 went DEAD after 5 claims (policy: 4)"]

    s = Scene()
    _dead(s, 0.0, 3.0, 4)
    assert [v.message for v in _i30(s).violations] == [
        "outbox event e1 went DEAD 3.0s after it was written or re-driven (policy: 4 claims take at least 3.5s)"]


def test_a_second_death_counts_from_the_redrive() -> None:
    s = Scene()
    _dead(s, 0.0, 100.0, 4)
    s.state.outbox_budget.append({"action": "OUTBOX_REDRIVEN", "event_id": "e1", "at": T0 + 100.0, "attempts": 4})
    s.state.outbox_budget.append({"action": "OUTBOX_DEAD", "event_id": "e1", "at": T0 + 102.0, "attempts": 4})
    assert [v.message for v in _i30(s).violations] == [
        "outbox event e1 went DEAD 2.0s after it was written or re-driven (policy: 4 claims take at least 3.5s)"]


def test_a_restarted_publisher_counts_from_zero_and_a_redrive_counts_from_its_request() -> None:
    s = _scene([(10.0, "publisher-1", "e1", True), (11.0, "publisher-1", "e2", True)])
    s.history.add(11.5, NEMESIS, INFO, "restart", {"process": "publisher-1"})
    _publish(s, 11.6, "publisher-1", "e3", True)
    s.op(11.7, "supervisor", INVOKE, "redrive", kind="outbox", id="e3")
    _publish(s, 11.8, "publisher-2", "e3", False)  # before the supervisor's answer is recorded
    s.op(11.9, "supervisor", OK, "redrive", kind="outbox", id="e3")
    assert _i30(s).status == HELD


def test_a_publisher_that_was_stopped_may_publish_what_it_claimed_before_another_s_refusal() -> None:
    """Its claim's lease ran out while it was stopped: another publisher claimed the row and was refused; the stopped
    one goes on with the batch it holds. Once it is refused itself, or a lease after it went on, it is judged again."""
    s = Scene()
    s.history.add(5.0, NEMESIS, INFO, "pause", {"process": "publisher-1", "seconds": 40.0})
    _publish(s, 40.0, "publisher-2", "e1", True)
    _publish(s, 45.1, "publisher-1", "e1", False)  # its old claim's copy, 0.1 s after the refusal
    assert _i30(s).status == HELD
    _publish(s, 46.0, "publisher-2", "e2", False)
    _publish(s, 47.0, "publisher-1", "e3", True)  # its round ends
    _publish(s, 48.0, "publisher-2", "e3", True)
    _publish(s, 48.1, "publisher-1", "e3", False)
    assert [v.message for v in _i30(s).violations] == [
        "outbox event e3 published again 0.100s after it was refused 2 time(s) (policy: at least 1.000s)"]
