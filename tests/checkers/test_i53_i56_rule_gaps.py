"""I53-I56: the draft rows of the traceability matrix (systems/copilot/rules.py): a retried draft request gets the same
draft back (one draft per user and key, I53), only a READY draft version becomes a task (I54), and the audit rows of
a request carry its correlation id, a repeat writes none (I55); a platform call ends within its timeouts (I56).
Hand-made runs (checker_scene), each broken one way: the checker must name it, and hold on the run the reference
would leave."""

from __future__ import annotations

from typing import Any

from checker_scene import Scene

from harness.history import INFO, INVOKE, OK
from scenarios.verdicts import HELD, UNCHECKED, VIOLATED
from systems.copilot.checkers import INVARIANTS

USER = "operator-001"
KEY = "draft-1-0"


def _retried_draft(*, second_id: str = "draft-a", stored_key: str | None = KEY, stored_twice: bool = False) -> Scene:
    """A draft request whose first answer was lost and whose retry (same key) was answered with ``second_id``; the
    drafts as stored (``stored_key``: the key the first one was stored with)."""
    s = Scene()
    s.op(1.0, "user-0", INVOKE, "draft", user_id=USER, key=KEY, attempt=0)
    s.op(1.5, "user-0", INFO, "draft", user_id=USER, key=KEY, attempt=0, error="CONNECTION_RESET")
    s.op(3.0, "user-0", INVOKE, "draft", user_id=USER, key=KEY, attempt=1)
    s.op(3.2, "user-0", OK, "draft", user_id=USER, key=KEY, attempt=1, draft_id=second_id, replayed=True,
         draft_version=1, draft_status="READY")
    s.state.drafts.append({"id": "draft-a", "user_id": USER, "status": "READY", "version": 1,
                           "idempotency_key": stored_key})
    if stored_twice:
        s.state.drafts.append({"id": "draft-b", "user_id": USER, "status": "READY", "version": 1,
                               "idempotency_key": stored_key})
    return s


def _judge(name: str, s: Scene) -> str:
    verdict = INVARIANTS[name](s.ctx())
    assert verdict.checked, verdict.as_json()
    return verdict.status


def test_i53_holds_when_the_retry_gets_the_stored_draft() -> None:
    assert _judge("I53", _retried_draft()) == HELD


def test_i53_names_a_retry_answered_with_a_second_draft() -> None:
    s = _retried_draft(second_id="draft-b", stored_twice=True)
    s.state.drafts[1]["idempotency_key"] = None  # the second one, made by the retry, holds no key
    verdict = INVARIANTS["I53"](s.ctx())
    assert verdict.status == VIOLATED and "draft-b" in verdict.violations[0].message


def test_i53_names_a_draft_stored_without_its_key() -> None:
    assert _judge("I53", _retried_draft(stored_key=None)) == VIOLATED


def test_i53_names_two_drafts_stored_with_one_key() -> None:
    assert _judge("I53", _retried_draft(stored_twice=True)) == VIOLATED


def test_i53_names_one_key_answered_with_two_drafts() -> None:
    s = _retried_draft()
    s.op(4.0, "user-0", OK, "draft", user_id=USER, key=KEY, attempt=2, draft_id="draft-b", replayed=True)
    assert _judge("I53", s) == VIOLATED


def _planned(confirmed_version: int) -> Scene:
    """A draft made GENERATING (version 1), planned by a revision (version 2, READY); its task confirmed from
    ``confirmed_version``."""
    s = Scene()
    task = s.task("task-1", "COMPLETED", user=USER, key="k-1", start=100.0)
    draft = task["draft_id"]
    s.op(1.0, "user-0", OK, "draft", user_id=USER, key=KEY, draft_id=draft, draft_version=1,
         draft_status="GENERATING")
    s.op(5.0, "user-0", OK, "revise", user_id=USER, draft_id=draft, draft_version=2, draft_status="READY")
    task["draft_version"] = confirmed_version
    return s


def test_i54_holds_for_a_task_of_the_planned_version() -> None:
    assert _judge("I54", _planned(2)) == HELD


def test_i54_names_a_task_of_a_version_still_generating() -> None:
    verdict = INVARIANTS["I54"](_planned(1).ctx())
    assert verdict.status == VIOLATED and "GENERATING" in verdict.violations[0].message


def _drafted_with_request(row_id: str | None) -> Scene:
    """A draft made by a request with correlation id ``req-1``; its DRAFT_CREATED row carries ``row_id``."""
    s = Scene()
    s.op(1.0, "user-0", OK, "draft", user_id=USER, key=KEY, attempt=0, correlation_id="req-1", draft_id="draft-a",
         replayed=False)
    s.state.audit.append({"id": 1, "task_id": None, "draft_id": "draft-a", "action": "DRAFT_CREATED", "actor": USER,
                          "correlation_id": row_id})
    return s


def test_i55_holds_when_the_row_carries_the_requests_id() -> None:
    assert _judge("I55", _drafted_with_request("req-1")) == HELD


def test_i55_names_a_row_without_the_requests_id() -> None:
    for row_id in (None, "req-2"):
        assert _judge("I55", _drafted_with_request(row_id)) == VIOLATED, row_id


def test_i55_judges_no_replayed_answer() -> None:
    s = _drafted_with_request("req-1")
    s.op(2.0, "user-0", OK, "draft", user_id=USER, key=KEY, attempt=1, correlation_id="req-9", draft_id="draft-a",
         replayed=True)
    assert _judge("I55", s) == HELD


def _acted(process: str, f: str, action: str, row_id: str | None, **value: object) -> Scene:
    """A request ``f`` with correlation id ``req-1`` answered ok, whose ``action`` row on task-1 carries ``row_id``."""
    s = Scene()
    s.op(1.0, process, OK, f, correlation_id="req-1", **value)
    s.state.audit.append({"id": 1, "task_id": "task-1", "draft_id": None, "action": action, "actor": process,
                          "correlation_id": row_id})
    return s


# a person's actions on a task beside drafts and confirms: (process, op, the audit action it writes, its value)
ACTIONS_ON_A_TASK = [
    ("user-0.cancel0", "cancel", "CANCEL_REQUESTED", {"task_id": "task-1", "replayed": False}),
    ("user-0.cancel0", "cancel", "CANCELLED_BEFORE_DISPATCH", {"task_id": "task-1", "replayed": False}),
    ("supervisor", "review", "REVIEW_RESOLVED", {"task_id": "task-1", "resolution": "completed"}),
    ("supervisor", "redrive", "OUTBOX_REDRIVEN", {"kind": "outbox", "id": "event-1"}),
    ("supervisor", "redrive", "REPORT_REDRIVEN", {"kind": "report", "id": "task-1"}),
    ("operator", "redrive", "DEAD_LETTER_REDRIVEN", {"dead_letter": 7, "event_id": "event-1"}),
]


def test_i55_judges_cancels_reviews_and_redrives_by_their_requests_id() -> None:
    for process, f, action, value in ACTIONS_ON_A_TASK:
        assert _judge("I55", _acted(process, f, action, "req-1", **value)) == HELD, (f, action)
        for row_id in (None, "task-1", "event-1"):  # none, or the item's id (bug audit-correlated-to-the-item)
            assert _judge("I55", _acted(process, f, action, row_id, **value)) == VIOLATED, (f, action, row_id)


def test_i55_names_a_redrive_whose_row_is_of_another_kind() -> None:
    s = _acted("supervisor", "redrive", "REPORT_REDRIVEN", "req-1", kind="outbox", id="event-1")
    assert _judge("I55", s) == VIOLATED


def test_i55_names_a_repeated_cancel_that_wrote_a_row() -> None:
    """A repeat (answered 200: the cancel was taken before) writes nothing: a row under its id is a violation."""
    repeat = {"task_id": "task-1", "replayed": True}
    assert _judge("I55", _acted("user-0.cancel1", "cancel", "CANCEL_REQUESTED", "req-1", **repeat)) == VIOLATED
    assert _judge("I55", _acted("user-0.cancel1", "cancel", "CANCEL_REQUESTED", "req-0", **repeat)) == HELD


def _platform_call(took_s: float | None, *, paused: bool = False, process: str = "dispatcher-1",
                   killed: dict[str, Any] | None = None) -> Scene:
    """A create whose answer came ``took_s`` after it was sent (None: never); the run goes on to t=100 s.
    ``killed``: the nemesis's kill (its value) at t=11 s."""
    s = Scene()
    s.op(10.0, process, INVOKE, "create_flight", method="create_flight", task_id="task-1", attempt=0)
    if paused:
        s.history.add(11.0, "nemesis", INFO, "pause", {"process": process})
    if killed is not None:
        s.history.add(11.0, "nemesis", INFO, "kill", killed)
    if took_s is not None:
        s.op(10.0 + took_s, process, OK, "create_flight", method="create_flight", task_id="task-1")
    s.op(100.0, "nemesis", INFO, "end")
    return s


def _judge_within(s: Scene, limit_s: float | None = 3.0) -> str:
    ctx = s.ctx()
    ctx.platform_call_limit_s = limit_s
    return INVARIANTS["I56"](ctx).status


def test_i56_holds_for_a_call_within_its_timeouts_and_is_unchecked_in_simulation() -> None:
    assert _judge_within(_platform_call(2.5)) == HELD
    assert _judge_within(_platform_call(30.0), limit_s=None) == UNCHECKED


def test_i56_names_a_call_that_outlasts_its_timeouts_or_never_ends() -> None:
    assert _judge_within(_platform_call(12.0)) == VIOLATED
    assert _judge_within(_platform_call(None)) == VIOLATED


def test_i56_excuses_a_call_whose_process_was_paused() -> None:
    assert _judge_within(_platform_call(12.0, paused=True)) == HELD


def test_i56_excuses_a_call_whose_process_a_native_kill_named_by_its_pid() -> None:
    """Natively a process's records name it role-pid (dispatcher-2254) and the nemesis kills a component
    (dispatcher-2): the kill's pid ties the two (the nightly's kill-each-process test of 59b5326 was judged violated
    here: the call of a killed dispatcher never ended)."""
    own = "dispatcher-2254"
    assert _judge_within(_platform_call(None, process=own, killed={"process": "dispatcher-2", "pid": 2254})) == HELD
    assert _judge_within(_platform_call(None, process=own, killed={"process": "dispatcher-2", "pid": 2255})) == VIOLATED
    assert _judge_within(_platform_call(None, process=own, killed={"process": "dispatcher-2"})) == VIOLATED
