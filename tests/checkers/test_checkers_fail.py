"""The invariant checkers can fail. Each case builds a hand-made run (checker_scene) twice: once with one
defect, where the matching checker must say 'violated' and name the task and the operations of the history
that concern it; once with the defect removed, where the same checker must say 'held' (so the checks are
not always-fail, and the defect is what they react to)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from checker_scene import (
    CANCELLED_IN_FLIGHT,
    COMPLETED,
    FAILED_PRECHECK,
    MANUAL_REVIEW,
    OTHER_COMPLETED,
    T0,
    Scene,
    baseline,
)

from harness.history import FAIL, INFO, INVOKE, OK
from scenarios.verdicts import HELD, VIOLATED, Verdict, Violation
from systems.copilot.checkers import INVARIANTS

CHECKED_HERE = ("I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8", "I21", "I22")


@dataclass(frozen=True)
class Expect:
    task_id: str
    ops: list[int]  # exactly the operation indices the violation must name
    message: str  # a fragment of its message


@dataclass(frozen=True)
class Case:
    invariant: str
    name: str
    build: Callable[[bool], tuple[Scene, Expect]]  # build(broken) -> (scene, what the violation must say)


CASES: list[Case] = []


def case(invariant: str, name: str) -> Callable[[Callable[[bool], tuple[Scene, Expect]]],
                                                Callable[[bool], tuple[Scene, Expect]]]:
    def register(fn: Callable[[bool], tuple[Scene, Expect]]) -> Callable[[bool], tuple[Scene, Expect]]:
        CASES.append(Case(invariant, name, fn))
        return fn
    return register


def run(inv: str, scene: Scene) -> Verdict:
    return INVARIANTS[inv](scene.ctx())


def matching(verdict: Verdict, expect: Expect) -> list[Violation]:
    return [v for v in verdict.violations if v.task_id == expect.task_id and expect.message in v.message]


# ---------------------------------------------------------------------------------------------- I1


@case("I1", "duplicate-flight")
def _duplicate_flight(broken: bool) -> tuple[Scene, Expect]:
    """The dispatcher resent a create after a timeout. Broken: the platform made a second flight for the
    task. Fixed: the resend carried the idempotency key and the platform answered with the same flight."""
    s = baseline()
    first = s.flights(COMPLETED)[0]
    s.op(20.0, "dispatcher-2", INVOKE, "create_flight", task_id=COMPLETED, method="create_flight", request_id=None)
    if broken:
        second = s.flight(COMPLETED, 20.1, "COMPLETED", ended_at=30.0)
        s.op(20.2, "dispatcher-2", OK, "create_flight", task_id=COMPLETED, method="create_flight",
             request_id=None, external_id=second["external_id"], status="EXECUTING")
    else:
        s.op(20.2, "dispatcher-2", OK, "create_flight", task_id=COMPLETED, method="create_flight",
             request_id=first["request_id"], external_id=first["external_id"], status="EXECUTING")
    return s, Expect(COMPLETED, s.ops_of(COMPLETED), "2 platform flights for one task")


# ---------------------------------------------------------------------------------------------- I2


@case("I2", "two-answers-two-tasks")
def _answers_name_two_tasks(broken: bool) -> tuple[Scene, Expect]:
    """operator-001 retries key k-1. Broken: the answer names another of its tasks. Fixed: the same task."""
    s = baseline()
    named = CANCELLED_IN_FLIGHT if broken else COMPLETED
    s.op(30.0, "user-retry-2", INVOKE, "confirm", user_id="operator-001", key="k-1", draft_id=f"draft-{COMPLETED}",
         draft_version=1, attempt=2)
    s.op(30.1, "user-retry-2", OK, "confirm", user_id="operator-001", key="k-1", draft_id=f"draft-{COMPLETED}",
         draft_version=1, attempt=2, task_id=named, replayed=True)
    answers = [op.index for op in s.history.ops if op.f == "confirm" and op.type == OK
               and op.value.get("user_id") == "operator-001" and op.value.get("key") == "k-1"]
    assert len(answers) == 3
    # The checker names the alphabetically first task; 'task-cancelled-in-flight' < 'task-completed'.
    return s, Expect(CANCELLED_IN_FLIGHT, answers, "answered with 2 different tasks")


DUP = "task-duplicate"


@case("I2", "two-tasks-one-key")
def _two_tasks_one_key(broken: bool) -> tuple[Scene, Expect]:
    """A second task row with operator-001's key k-1, created by a double click whose answer was lost
    (recorded as info). Fixed: the double click used its own key."""
    s = baseline()
    s.task(DUP, "CANCELLED_EARLY", user="operator-001", key="k-1" if broken else "k-7", start=40.0)
    ok = s.ops_of(DUP, ("confirm",))[-1]
    s.replace_op(ok, type_=INFO, drop=("replayed",), error="TIMEOUT")
    return s, Expect(COMPLETED, sorted(s.ops_of(COMPLETED) + s.ops_of(DUP)), "2 tasks for user operator-001 key k-1")


# ---------------------------------------------------------------------------------------------- I3

LOST = "task-lost"


@case("I3", "lost-task")
def _lost_task(broken: bool) -> tuple[Scene, Expect]:
    """A confirm was answered with a task. Broken: the database does not have it."""
    s = baseline()
    s.task(LOST, "COMPLETED", user="operator-004", key="k-1", start=50.0)
    if broken:
        s.forget_task(LOST)
    confirm_ok = [i for i in s.ops_of(LOST, ("confirm",)) if s.history.ops[i].type == OK]
    return s, Expect(LOST, confirm_ok, "lost task")


STUCK = "task-stuck"


@case("I3", "stuck-in-dispatching")
def _stuck(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the task is still DISPATCHING when the run ends. Fixed: the reconciler moved it to
    MANUAL_REVIEW (an outcome nobody could learn is settled by a person)."""
    s = baseline()
    s.task(STUCK, "DISPATCHING" if broken else "MANUAL_REVIEW", user="operator-004", key="k-2", start=60.0)
    return s, Expect(STUCK, s.ops_of(STUCK), "stuck in DISPATCHING")


# ---------------------------------------------------------------------------------------------- I4

SKIPPER = "task-skipped-executing"


@case("I4", "illegal-transition")
def _illegal(broken: bool) -> tuple[Scene, Expect]:
    """Broken: DISPATCHING -> COMPLETED, skipping EXECUTING. Fixed: through EXECUTING."""
    s = baseline()
    path = ["QUEUED", "VALIDATING", "DISPATCHING", "COMPLETED"] if broken else "COMPLETED"
    s.task(SKIPPER, path, user="operator-004", key="k-3", start=70.0)
    return s, Expect(SKIPPER, s.ops_of(SKIPPER), "illegal transition DISPATCHING -> COMPLETED")


@case("I4", "terminal-task-changed")
def _terminal_changed(broken: bool) -> tuple[Scene, Expect]:
    """A late FAILED event for a COMPLETED task. Broken: applied. Fixed: recorded, but the task stays."""
    s = baseline()
    s.op(80.0, "platform-events", INFO, "late-event", task_id=COMPLETED, kind="failed")
    if broken:
        task = s.the_task(COMPLETED)
        v = task["version"]
        s.audit(COMPLETED, 80.1, "COMPLETED", "FAILED", v, v + 1, actor="platform-events", action="FLIGHT_FAILED")
        s.event(COMPLETED, "TaskStatusChanged", v + 1, 80.1)
        task.update(status="FAILED", version=v + 1, updated_at=T0 + 80.1)
        s.state.reports = [r for r in s.state.reports if r["task_id"] != COMPLETED]
    return s, Expect(COMPLETED, s.ops_of(COMPLETED), "terminal task changed: COMPLETED -> FAILED")


@case("I4", "lost-update-version")
def _lost_update_version(broken: bool) -> tuple[Scene, Expect]:
    """Two writers read the task at v3 (DISPATCHING); the dispatcher moved it to EXECUTING@v4. Broken: the
    reconciler's write from the same v3 also landed (its audit starts at v3, not v4)."""
    s = baseline()
    chain = s.chain(OTHER_COMPLETED)
    last = chain[-1]  # EXECUTING@4 -> COMPLETED@5
    assert (last["from"], last["from_version"], last["to"], last["to_version"]) == ("EXECUTING", 4, "COMPLETED", 5)
    if broken:
        last.update(from_version=3, to_version=4, actor="reconciler")
        next(o for o in s.events(OTHER_COMPLETED) if o["task_version"] == 5)["task_version"] = 4
        s.the_task(OTHER_COMPLETED)["version"] = 4
    return s, Expect(OTHER_COMPLETED, s.ops_of(OTHER_COMPLETED), "(lost update)")


@case("I4", "lost-update-status")
def _lost_update_status(broken: bool) -> tuple[Scene, Expect]:
    """Broken: after DISPATCHING@3 -> MANUAL_REVIEW@4, a stale writer's DISPATCHING@3 -> EXECUTING@4 is
    audited too. Fixed: the stale write was fenced (nothing audited)."""
    s = baseline()
    if broken:
        s.audit(MANUAL_REVIEW, 90.0, "DISPATCHING", "EXECUTING", 3, 4, actor="dispatcher-zombie",
                action="FLIGHT_CONFIRMED")
        s.event(MANUAL_REVIEW, "TaskStatusChanged", 4, 90.0)
        s.the_task(MANUAL_REVIEW).update(status="EXECUTING")
        s.state.tasks.sort(key=lambda t: t["created_at"])
    return s, Expect(MANUAL_REVIEW, s.ops_of(MANUAL_REVIEW), "starts from DISPATCHING@v3 but the task was "
                     "MANUAL_REVIEW@v4 (lost update)")


# ---------------------------------------------------------------------------------------------- I5


@case("I5", "task-without-outbox")
def _task_without_outbox(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the task and its creation audit were committed without the TaskCreated outbox event."""
    s = baseline()
    if broken:
        created = next(o for o in s.events(FAILED_PRECHECK) if o["event_type"] == "TaskCreated")
        s.state.outbox.remove(created)
        s.state.processed = [p for p in s.state.processed if p["event_id"] != created["id"]]
    return s, Expect(FAILED_PRECHECK, s.ops_of(FAILED_PRECHECK, ("confirm",)),
                     "half-written creation: has task, creation audit; missing TaskCreated outbox")


GHOST = "task-ghost"


@case("I5", "outbox-without-task")
def _outbox_without_task(broken: bool) -> tuple[Scene, Expect]:
    """A confirm crashed half-way. Broken: its TaskCreated event was committed without the task (and was
    published and delivered). Fixed: the whole creation rolled back; the client's answer was a 503."""
    s = baseline()
    s.op(100.0, "user-ghost", INVOKE, "confirm", user_id="operator-004", key="k-5", draft_id="draft-g",
         draft_version=1)
    # The API answered the half-written creation with the id it had assigned (then failed), and the client
    # recorded it: the operation that concerns the ghost task.
    s.op(100.5, "user-ghost", INFO, "confirm", user_id="operator-004", key="k-5", draft_id="draft-g",
         draft_version=1, task_id=GHOST, error="INTERNAL_ERROR")
    if broken:
        s.event(GHOST, "TaskCreated", 0, 100.2)
    return s, Expect(GHOST, s.ops_of(GHOST, ("confirm",)),
                     "half-written creation: has TaskCreated outbox; missing task, creation audit")


# ---------------------------------------------------------------------------------------------- I6


@case("I6", "unpublished-outbox")
def _unpublished(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the TaskCancelRequested event of a cancelled flight is still PENDING in the outbox."""
    s = baseline()
    if broken:
        ev = next(o for o in s.events(CANCELLED_IN_FLIGHT) if o["event_type"] == "TaskCancelRequested")
        ev.update(status="PENDING", sent_at=None)
        s.state.processed = [p for p in s.state.processed if p["event_id"] != ev["id"]]
    return s, Expect(CANCELLED_IN_FLIGHT, s.ops_of(CANCELLED_IN_FLIGHT), "was never published")


@case("I6", "task-created-processed-twice")
def _processed_twice(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the dispatcher's dedup lost a race and recorded TaskCreated twice."""
    s = baseline()
    ev = next(o for o in s.events(COMPLETED) if o["event_type"] == "TaskCreated")
    s.op(110.0, "dispatcher-1", INFO, "deliver", group="dispatcher", event_id=ev["id"], event_type="TaskCreated",
         task_id=COMPLETED, attempt=2)
    if broken:
        s.state.processed.append({"consumer": "dispatcher", "event_id": ev["id"], "task_id": COMPLETED})
    return s, Expect(COMPLETED, s.ops_of(COMPLETED), "dispatcher processed TaskCreated")


@case("I6", "task-created-took-effect-twice")
def _took_effect_twice(broken: bool) -> tuple[Scene, Expect]:
    """Broken: a redelivered TaskCreated queued the task a second time (CREATED -> QUEUED audited twice)."""
    s = baseline()
    if broken:
        s.audit(FAILED_PRECHECK, 120.0, "CREATED", "QUEUED", 0, 1, action="QUEUED")
    return s, Expect(FAILED_PRECHECK, s.ops_of(FAILED_PRECHECK), "TaskCreated took effect 2 times")


@case("I6", "published-never-consumed")
def _never_consumed(broken: bool) -> tuple[Scene, Expect]:
    """Broken: TaskCompleted was published but the report worker never took it (nor dead-lettered it)."""
    s = baseline()
    if broken:
        ev = next(o for o in s.events(OTHER_COMPLETED) if o["event_type"] == "TaskCompleted")
        s.state.processed = [p for p in s.state.processed if p["event_id"] != ev["id"]]
    return s, Expect(OTHER_COMPLETED, s.ops_of(OTHER_COMPLETED), "report-worker never took it")


# ---------------------------------------------------------------------------------------------- I7


@case("I7", "cancelled-while-flying")
def _cancelled_while_flying(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the task says CANCELLED but the platform's flight is still EXECUTING."""
    s = baseline()
    if broken:
        s.flights(CANCELLED_IN_FLIGHT)[0].update(status="EXECUTING", cancelled_at=None, ended_at=None)
    return s, Expect(CANCELLED_IN_FLIGHT, s.ops_of(CANCELLED_IN_FLIGHT), "is EXECUTING on the platform")


@case("I7", "cancelled-before-platform-confirmed")
def _cancelled_early(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the task went CANCELLED on the request, minutes before the platform confirmed the cancel."""
    s = baseline()
    if broken:
        flight = s.flights(CANCELLED_IN_FLIGHT)[0]
        flight.update(cancelled_at=flight["cancelled_at"] + 300.0, ended_at=flight["ended_at"] + 300.0)
    return s, Expect(CANCELLED_IN_FLIGHT, s.ops_of(CANCELLED_IN_FLIGHT), "before the platform confirmed")


@case("I7", "cancelled-on-the-request-alone")
def _cancelled_unconfirmed(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the dispatcher marked the task CANCELLED when it sent the cancel; the platform's confirmation
    never reached the audit. Caught by the audit alone, whatever the two clocks say."""
    s = baseline()
    s.state.ledger_clock_comparable = False
    if broken:
        row = next(a for a in s.state.audit if a["task_id"] == CANCELLED_IN_FLIGHT and a["to"] == "CANCELLED")
        row.update(action="CANCEL_SENT", actor="dispatcher")
    return s, Expect(CANCELLED_IN_FLIGHT, s.ops_of(CANCELLED_IN_FLIGHT), "not by the platform's confirmation")


# ---------------------------------------------------------------------------------------------- I8


def _report(s: Scene, task_id: str) -> dict:  # type: ignore[type-arg]
    return next(r for r in s.state.reports if r["task_id"] == task_id)


@case("I8", "report-not-uploaded")
def _report_failed(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the report upload kept failing and the run ended with it UPLOAD_FAILED."""
    s = baseline()
    if broken:
        r = _report(s, COMPLETED)
        r.update(status="UPLOAD_FAILED", sha256=None, attempts=20, last_error="object store unavailable")
        s.state.objects.pop(r["object_key"])
    return s, Expect(COMPLETED, s.ops_of(COMPLETED), "report is UPLOAD_FAILED")


@case("I8", "no-report-record")
def _no_report(broken: bool) -> tuple[Scene, Expect]:
    """Broken: COMPLETED was written without its report row."""
    s = baseline()
    if broken:
        s.state.reports = [r for r in s.state.reports if r["task_id"] != OTHER_COMPLETED]
    return s, Expect(OTHER_COMPLETED, s.ops_of(OTHER_COMPLETED), "COMPLETED without a report record")


@case("I8", "object-missing")
def _object_missing(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the report row says UPLOADED but the object store has no such object."""
    s = baseline()
    if broken:
        s.state.objects.pop(_report(s, COMPLETED)["object_key"])
    return s, Expect(COMPLETED, s.ops_of(COMPLETED), "has no such object")


@case("I8", "object-differs")
def _object_differs(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the stored object is not the one the report row describes."""
    s = baseline()
    if broken:
        s.state.objects[_report(s, COMPLETED)["object_key"]] = "sha-of-something-else"
    return s, Expect(COMPLETED, s.ops_of(COMPLETED), "different content")


# ---------------------------------------------------------------------------------------------- I21


def _attempt(s: Scene, task_id: str) -> dict:  # type: ignore[type-arg]
    return next(a for a in s.state.dispatch_attempts if a["task_id"] == task_id)


@case("I21", "settled-attempt-left-open")
def _attempt_left_open(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the write-back moved the task on but never closed its dispatch attempt (the reconciler would read a
    request still in flight)."""
    s = baseline()
    if broken:
        _attempt(s, COMPLETED).update(outcome="PENDING", external_task_id=None)
    return s, Expect(COMPLETED, s.ops_of(COMPLETED), "still PENDING but the task is COMPLETED")


@case("I21", "accepted-names-another-flight")
def _accepted_other_flight(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the attempt closed ACCEPTED names a flight made for another task."""
    s = baseline()
    if broken:
        _attempt(s, COMPLETED)["external_task_id"] = s.flights(OTHER_COMPLETED)[0]["external_id"]
    return s, Expect(COMPLETED, s.ops_of(COMPLETED), "under no request of this attempt")


@case("I21", "not-created-but-flying")
def _not_created_but_flying(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the attempt was closed NOT_CREATED while the platform had made its flight (the reconciler declared
    "not created" without asking). Fixed: the query found nothing and the attempt closed so."""
    s = baseline()
    a = _attempt(s, MANUAL_REVIEW)
    a.update(outcome="NOT_CREATED", error_code="NOT_CREATED")
    if broken:
        s.flight(MANUAL_REVIEW, 5.5, "EXECUTING")
    return s, Expect(MANUAL_REVIEW, s.ops_of(MANUAL_REVIEW), "closed NOT_CREATED but the platform made flight")


@case("I21", "flight-without-a-recorded-request")
def _unrecorded_request(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the platform was called before the attempt was written (its request id is on record nowhere)."""
    s = baseline()
    if broken:
        s.state.dispatch_attempts = [a for a in s.state.dispatch_attempts if a["task_id"] != OTHER_COMPLETED]
    return s, Expect(OTHER_COMPLETED, s.ops_of(OTHER_COMPLETED), "which is no recorded attempt of its task")


# ---------------------------------------------------------------------------------------------- I22


@case("I22", "foreign-cancel-answered")
def _foreign_cancel_answered(broken: bool) -> tuple[Scene, Expect]:
    """Another operator asked to cancel operator-001's task. Broken: the API answered it. Fixed: refused as if the
    task did not exist."""
    s = baseline()
    s.op(12.0, "attacker-0", INVOKE, "cancel", user_id="operator-002", task_id=COMPLETED, attempt=0)
    if broken:
        answer = s.op(12.1, "attacker-0", OK, "cancel", user_id="operator-002", task_id=COMPLETED, attempt=0,
                      status="CANCEL_PENDING", version=9)
    else:
        answer = s.op(12.1, "attacker-0", FAIL, "cancel", user_id="operator-002", task_id=COMPLETED, attempt=0,
                      code="TASK_NOT_FOUND", status=404)
    return s, Expect(COMPLETED, [answer.index], "operator-002 was answered a cancel of operator-001's task")


@case("I22", "foreign-cancel-audited")
def _foreign_cancel_audited(broken: bool) -> tuple[Scene, Expect]:
    """The cancel of a flying task is audited with its actor. Broken: the actor is not the task's owner."""
    s = baseline()
    row = next(a for a in s.chain(CANCELLED_IN_FLIGHT) if a["to"] == "CANCEL_PENDING")
    row.update(action="CANCEL_REQUESTED", actor="operator-003" if broken else "operator-001")
    return s, Expect(CANCELLED_IN_FLIGHT, s.ops_of(CANCELLED_IN_FLIGHT), "operator-003 took CANCEL_REQUESTED")


# ---------------------------------------------------------------------------------------------- tests

IDS = [f"{c.invariant}-{c.name}" for c in CASES]


def test_the_baseline_run_holds_every_invariant_non_vacuously() -> None:
    s = baseline()
    for inv in CHECKED_HERE:
        verdict = run(inv, s)
        assert verdict.status == HELD, verdict.as_json()
        assert verdict.checked > 0, f"{inv} examined nothing: a vacuous pass"


def test_every_invariant_has_a_failing_case() -> None:
    assert {c.invariant for c in CASES} == set(CHECKED_HERE)


@pytest.mark.parametrize("c", CASES, ids=IDS)
def test_without_the_defect_the_checker_holds(c: Case) -> None:
    scene, _ = c.build(False)
    verdict = run(c.invariant, scene)
    assert verdict.status == HELD, verdict.as_json()
    assert verdict.violations == []


@pytest.mark.parametrize("c", CASES, ids=IDS)
def test_the_defect_is_reported_with_task_and_operations(c: Case) -> None:
    scene, expect = c.build(True)
    verdict = run(c.invariant, scene)
    assert verdict.status == VIOLATED, verdict.as_json()
    assert expect.ops, "the fixture must give the checker operations to point at"
    assert all(0 <= i < len(scene.history.ops) for i in expect.ops)
    found = matching(verdict, expect)
    assert found, f"no violation names {expect.task_id} with {expect.message!r}: {verdict.as_json()}"
    good = [v for v in found if v.ops == expect.ops]
    assert good, f"expected operations {expect.ops}, got {[v.ops for v in found]}"
    # The report form carries the same.
    js = verdict.as_json()
    assert js["status"] == VIOLATED and js["violation_count"] == len(verdict.violations)
    assert any(v["task_id"] == expect.task_id and v["ops"] == good[0].ops for v in js["violations"])


def test_the_combined_i2_fixture_reports_both_the_rows_and_the_answers() -> None:
    """Two tasks for one (user, key) *and* two confirm answers naming them: two violations."""
    s = baseline()
    s.task(DUP, "CANCELLED_EARLY", user="operator-001", key="k-1", start=40.0)
    verdict = run("I2", s)
    assert verdict.status == VIOLATED
    rows = [v for v in verdict.violations if "2 tasks for user operator-001 key k-1" in v.message]
    answers = [v for v in verdict.violations if "answered with 2 different tasks" in v.message]
    assert len(rows) == 1 and len(answers) == 1, verdict.as_json()
    assert COMPLETED in rows[0].message and DUP in rows[0].message
    assert rows[0].task_id == COMPLETED and rows[0].ops == sorted(s.ops_of(COMPLETED) + s.ops_of(DUP))
    expected = [op.index for op in s.history.ops if op.f == "confirm" and op.type == OK
                and (op.value["user_id"], op.value["key"]) == ("operator-001", "k-1")]
    assert answers[0].task_id in (COMPLETED, DUP) and answers[0].ops == expected


def test_i3_late_settlement_is_reported() -> None:
    """Settling after the recovery bound (counted from heal / creation / flight end) is a violation too."""
    s = baseline()
    chain = s.chain(MANUAL_REVIEW)
    assert run("I3", s).status == HELD
    chain[-1]["at"] = T0 + 5.0 + 4.0 + 600.0 + 60.0  # created at 5 s, settled 660 s after its last cause
    verdict = run("I3", s)
    assert verdict.status == VIOLATED
    assert [(v.task_id, v.ops) for v in verdict.violations] == [(MANUAL_REVIEW, s.ops_of(MANUAL_REVIEW))]
    assert "after the recovery bound" in verdict.violations[0].message
