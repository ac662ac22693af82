"""I42-I48: rules of the traceability matrix (systems/copilot/rules.py) that a scenario's expectation judged, or nothing
did, until issue 54 gave each an invariant. Hand-made runs (checker_scene), each broken one way: the checker must
name it, and hold on the run the reference would leave."""

from __future__ import annotations

import pytest
from checker_scene import Scene

from harness.history import FAIL, INFO, INVOKE, NEMESIS, OK
from scenarios.verdicts import HELD, VIOLATED
from systems.copilot.checkers import INVARIANTS

TASK = "task-1"
USER = "operator-001"


def _judge(name: str, s: Scene) -> str:
    return INVARIANTS[name](s.ctx()).status


# ------------------------------------------------------------------ I42: one task per draft version, whatever the key

def _confirmed_twice(*, second_task: bool, named_other: bool) -> Scene:
    s = Scene()
    first = s.task(TASK, "COMPLETED", user=USER, key="k-1", start=100.0)
    draft = first["draft_id"]
    # The same draft version confirmed again with another key (a client that lost its key).
    s.op(120.0, "user-again", INVOKE, "confirm", user_id=USER, key="k-2", draft_id=draft, draft_version=1, attempt=0)
    answer = "task-2" if named_other else TASK
    s.op(120.1, "user-again", OK, "confirm", user_id=USER, key="k-2", draft_id=draft, draft_version=1, attempt=0,
         task_id=answer, replayed=not named_other)
    if second_task:
        s.state.tasks.append({**first, "id": "task-2", "idempotency_key": "k-2"})
    return s


@pytest.mark.parametrize("second_task,named_other,status", [
    (False, False, HELD),  # answered with the version's task (the reference's replay)
    (True, False, VIOLATED),  # a second task of the version in the database
    (False, True, VIOLATED),  # an answer naming another task
], ids=["replayed", "second-task", "other-answer"])
def test_i42_one_task_per_draft_version(second_task: bool, named_other: bool, status: str) -> None:
    assert _judge("I42", _confirmed_twice(second_task=second_task, named_other=named_other)) == status


# ------------------------------------------------------------------ I43: security-relevant refusals are logged

def _refused(*, logged: bool, db_fault: bool = False) -> Scene:
    s = Scene()
    s.task(TASK, "COMPLETED", user=USER, key="k-1", start=100.0)
    if db_fault:
        s.op(129.0, NEMESIS, INFO, "start-fault", fault="db-outage", duration=5.0)
        s.op(134.0, NEMESIS, INFO, "stop-fault", fault="db-outage")
    s.op(130.0, "attacker-1", INVOKE, "draft", user_id="operator-002")
    s.op(130.1, "attacker-1", FAIL, "draft", user_id="operator-002", code="FORBIDDEN_AREA", status=403)
    if logged:
        s.state.security_log.append({"actor": "operator-002", "action": "CREATE_DRAFT", "code": "FORBIDDEN_AREA",
                                     "draft_id": None})
    return s


def test_i43_a_refusal_without_its_row_is_named() -> None:
    verdict = INVARIANTS["I43"](_refused(logged=False).ctx())
    assert verdict.status == VIOLATED and verdict.checked == 1, verdict.as_json()
    assert _judge("I43", _refused(logged=True)) == HELD


def test_i43_a_refusal_during_a_database_fault_is_not_owed_a_row() -> None:
    assert _judge("I43", _refused(logged=False, db_fault=True)) == HELD


# ------------------------------------------------------------------ I44: no create after a definite rejection

def _rejected_then(error: str, *, resend: bool, supervisor: bool = False) -> Scene:
    s = Scene()
    s.task(TASK, "FAILED_PRECHECK", user=USER, key="k-1", start=100.0)
    rid = f"{TASK}:1"
    s.op(110.0, "dispatcher-1", INVOKE, "create_flight", task_id=TASK, method="create_flight", request_id=rid,
         **{"try": 0})
    s.op(110.2, "dispatcher-1", FAIL, "create_flight", task_id=TASK, method="create_flight", request_id=rid,
         error=error, **{"try": 0})
    if supervisor:
        s.audit(TASK, 111.0, "FAILED", "FAILED", 3, 3, actor="operator:supervisor-1", action="REVIEW_RESOLVED")
    if resend:
        s.op(112.0, "dispatcher-1", INVOKE, "create_flight", task_id=TASK, method="create_flight", request_id=rid,
             **{"try": 1})
    return s


@pytest.mark.parametrize("error,resend,supervisor,status", [
    ("DEVICE_REJECTED", False, False, HELD),  # rejected, not sent again
    ("DEVICE_REJECTED", True, False, VIOLATED),  # the same create sent again after its rejection
    ("DEVICE_OFFLINE", True, True, HELD),  # a supervisor decided in between: a person's act
    ("THROTTLED", True, False, HELD),  # a throttle is retried, as the policy says
], ids=["not-resent", "resent", "supervisor", "throttled"])
def test_i44_no_create_after_a_definite_rejection(error: str, resend: bool, supervisor: bool, status: str) -> None:
    assert _judge("I44", _rejected_then(error, resend=resend, supervisor=supervisor)) == status


# ------------------------------------------------------------------ I45: back to EXECUTING only on a refused cancel

FLIES_ON = ["QUEUED", "VALIDATING", "DISPATCHING", "EXECUTING", "CANCEL_PENDING", "EXECUTING", "COMPLETED"]


def _cancel_answered(answer: str | None) -> Scene:
    """CANCEL_PENDING at t=105, back to EXECUTING at t=106; the cancel's answer at t=105.5."""
    s = Scene()
    s.task(TASK, FLIES_ON, user=USER, key="k-1", start=100.0)
    s.op(105.3, "dispatcher-1", INVOKE, "cancel_flight", task_id=TASK, method="cancel_flight", **{"try": 0})
    if answer == "refused":
        s.op(105.5, "dispatcher-1", OK, "cancel_flight", task_id=TASK, method="cancel_flight", accepted=False,
             status="EXECUTING", **{"try": 0})
    elif answer == "timeout":
        s.op(105.5, "dispatcher-1", INFO, "cancel_flight", task_id=TASK, method="cancel_flight", error="TIMEOUT",
             delivery="timeout", **{"try": 0})
    return s


@pytest.mark.parametrize("answer,status", [("refused", HELD), ("timeout", VIOLATED), (None, VIOLATED)])
def test_i45_back_to_executing_only_on_a_refused_cancel(answer: str | None, status: str) -> None:
    verdict = INVARIANTS["I45"](_cancel_answered(answer).ctx())
    assert verdict.checked == 1 and verdict.status == status, verdict.as_json()


# ------------------------------------------------------------------ I46: MANUAL_REVIEW only after the silence

UNANSWERED = ["QUEUED", "VALIDATING", "DISPATCHING", "EXECUTING"]


def _reviewed(quiet_s: float, *, blind_platform: bool = False, actor: str = "reconciler") -> Scene:
    """EXECUTING at t=104 (the scene's steps are a second apart), MANUAL_REVIEW ``quiet_s`` later."""
    s = Scene()
    s.task(TASK, UNANSWERED, user=USER, key="k-1", start=100.0)
    if blind_platform:
        s.op(0.0, NEMESIS, INFO, "start-fault", fault="platform", idempotency_key=False, query_supported=False)
    s.audit(TASK, 104.0 + quiet_s, "EXECUTING", "MANUAL_REVIEW", 4, 5, actor=actor, action="OUTCOME_UNKNOWN")
    s.the_task(TASK).update(status="MANUAL_REVIEW", version=5)
    return s


@pytest.mark.parametrize("quiet_s,blind,actor,status", [
    (1800.0, False, "reconciler", HELD),  # silent for the policy's whole escalate_after_s
    (1799.0, False, "reconciler", VIOLATED),  # a second short of it
    (10.0, True, "reconciler", HELD),  # neither key nor query: nothing to wait for
    (10.0, False, "operator:supervisor-1", HELD),  # a person's decision is not the reconciler's guess
], ids=["waited", "early", "no-key-no-query", "person"])
def test_i46_manual_review_only_after_the_silence(quiet_s: float, blind: bool, actor: str, status: str) -> None:
    s = _reviewed(quiet_s, blind_platform=blind, actor=actor)
    assert s.ctx().policy.escalate_after_s == 1800.0
    verdict = INVARIANTS["I46"](s.ctx())
    assert verdict.status == status, verdict.as_json()


@pytest.mark.parametrize("steps,status", [
    # explore seed 1 run 727: the key went at t=0, the query at t=0.6; both gone by the escalation
    ([{"idempotency_key": False}, {"query_supported": False}], HELD),
    ([{"query_supported": False}], VIOLATED),  # the key is still there: the task was resendable
    ([{"idempotency_key": False, "query_supported": False}, {"idempotency_key": True}], VIOLATED),  # the key came back
], ids=["lost-in-two-steps", "query-only", "key-back"])
def test_i46_the_platforms_capabilities_are_what_its_steps_left(steps: list[dict[str, bool]], status: str) -> None:
    """Each platform step sets the capabilities it names and leaves the other: two steps can blind the platform."""
    s = _reviewed(10.0)
    for n, caps in enumerate(steps):
        s.op(float(n), NEMESIS, INFO, "start-fault", fault="platform", **caps)
        s.op(float(n), NEMESIS, INFO, "stop-fault", fault="platform")
    assert _judge("I46", s) == status


def test_i15_lets_a_version_answer_another_key_with_the_task_it_made() -> None:
    """The re-confirm with a new key names the version's task, created with the first key: I15 holds (seed 000 §6.3);
    another user's task under that key is still named."""
    s = _confirmed_twice(second_task=False, named_other=False)
    assert _judge("I15", s) == HELD
    s.the_task(TASK)["user_id"] = "operator-002"
    assert _judge("I15", s) == VIOLATED


# ------------------------------------------------------------------ I47: the audit log is never rewritten

def _watched(change: str | None) -> Scene:
    s = Scene()
    s.task(TASK, "COMPLETED", user=USER, key="k-1", start=100.0)
    s.state.audit_seen = [dict(a) for a in s.state.audit]  # the watcher's reads, as the rows were then
    if change == "rewritten":
        s.state.audit[1]["actor"] = "someone-else"
    elif change == "deleted":
        del s.state.audit[1]
    return s


@pytest.mark.parametrize("change,status", [(None, HELD), ("rewritten", VIOLATED), ("deleted", VIOLATED)])
def test_i47_no_audit_row_changes_once_written(change: str | None, status: str) -> None:
    assert _judge("I47", _watched(change)) == status


def test_i47_is_unchecked_where_nothing_watched_the_log() -> None:
    s = _watched(None)
    s.state.audit_seen = None
    assert _judge("I47", s) == "unchecked"


# ------------------------------------------------------------------ I48: a re-driven dead letter takes effect

def _redriven(*, processed: bool, lost: bool = False) -> Scene:
    s = Scene()
    s.task(TASK, "COMPLETED", user=USER, key="k-1", start=100.0)
    event = next(o for o in s.state.outbox if o["event_type"] == "TaskCompleted")
    s.state.processed = [p for p in s.state.processed if p["event_id"] != event["id"]]
    s.state.dead_letters.append({"id": 1, "consumer": "report-worker", "event_id": event["id"], "task_id": TASK,
                                 "event_type": "TaskCompleted", "error_code": "BOOM", "attempts": 3, "history": [],
                                 "redriven": True, "redrive_count": 1, "created_at": None})
    if processed:
        s.state.processed.append({"consumer": "report-worker", "event_id": event["id"], "task_id": TASK})
    if lost:
        s.op(120.0, NEMESIS, INFO, "lose-message", group="report-worker", event_id=event["id"], task_id=TASK)
    return s


@pytest.mark.parametrize("processed,lost,status", [(True, False, HELD), (False, False, VIOLATED),
                                                   (False, True, HELD)], ids=["took-effect", "never", "lost"])
def test_i48_a_redriven_dead_letter_takes_effect(processed: bool, lost: bool, status: str) -> None:
    verdict = INVARIANTS["I48"](_redriven(processed=processed, lost=lost).ctx())
    assert verdict.checked == 1 and verdict.status == status, verdict.as_json()
