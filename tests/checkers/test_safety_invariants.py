"""The safety invariants I12-I17, I23 and I24 can fail, and hold on a correct run. As in test_checkers_fail: each case
builds a hand-made run twice, once with one defect (the checker must say 'violated', naming the task and exactly the
operations of the history that concern it) and once without it (the same checker must say 'held')."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
from checker_scene import (
    COMPLETED,
    OTHER_COMPLETED,
    T0,
    Scene,
    baseline,
)

from harness.history import AIRSPACE, FAIL, INFO, INVOKE, NEMESIS, OK, REVOKE_APPROVAL
from reference.copilot.policy import Policy
from scenarios.verdicts import HELD, VIOLATED, Verdict, Violation
from systems.copilot.checkers import INVARIANTS, CheckContext

SAFETY = ("I12", "I13", "I14", "I15", "I16", "I17", "I23", "I24")
NAMES = {
    "I12": "no_flight_into_closed_airspace",
    "I13": "no_flight_without_permission",
    "I14": "no_flight_without_approval_of_the_confirmed_version",
    "I15": "confirm_answer_is_own_task_of_that_draft",
    "I16": "no_redelivery_past_the_limit_without_dead_letter",
    "I17": "processed_events_took_effect",
    "I23": "no_flight_on_an_unfit_device",
    "I24": "answers_name_states_the_task_had",
}
NEW = "task-new"  # the task a case adds to the baseline; created at t=50 s: confirm 50, DISPATCH_STARTED 53,
START = 50.0  # create_flight 53.5 (invoke) and 53.7 (ok), EXECUTING 54, then one step a second
LIMIT = Policy().max_deliveries


@dataclass(frozen=True)
class Expect:
    task_id: str
    ops: list[int]  # exactly the operation indices the violation must name
    message: str  # a fragment of its message


@dataclass(frozen=True)
class Case:
    invariant: str
    name: str
    build: Callable[[bool], tuple[Scene, Expect]]


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


def safety_baseline() -> Scene:
    """The checker_scene baseline with the broker's deliveries of every processed event in its history."""
    s = baseline()
    s.deliver_all(20.0)
    return s


def airspace(s: Scene, at: float, areas: list[str], *, open_: bool) -> int:
    return s.op(at, NEMESIS, INFO, AIRSPACE, areas=areas, open=open_).index


def deliveries(s: Scene, event_id: str) -> list[int]:
    return [op.index for op in s.history.ops if op.f == "deliver" and op.value.get("event_id") == event_id]


def event_of(s: Scene, task_id: str, event_type: str) -> dict:  # type: ignore[type-arg]
    return next(o for o in s.events(task_id) if o["event_type"] == event_type)


# ---------------------------------------------------------------------------------------------- I12


@case("I12", "dispatched-into-closed-airspace")
def _closed_airspace(broken: bool) -> tuple[Scene, Expect]:
    """SITE-002 closes at 49 s. Broken: it reopens only at 70 s, after the pre-flight check at 53 s passed and
    the flight was requested. Fixed: it reopened at 52 s, before the check."""
    s = safety_baseline()
    closed = airspace(s, START - 1.0, ["SITE-002", "SITE-003"], open_=False)
    s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START, area="SITE-002")
    airspace(s, 70.0 if broken else START + 2.0, ["SITE-002", "SITE-003"], open_=True)
    return s, Expect(NEW, sorted([closed, *s.ops_of(NEW, ("create_flight",))]),
                     "while the airspace over SITE-002 was closed")


@case("I12", "closed-before-a-redispatch")
def _closed_before_redispatch(broken: bool) -> tuple[Scene, Expect]:
    """A first dispatch attempt at 53 s (open airspace) was not created; SITE-001 closes at 55 s. Broken: the
    second attempt's pre-flight check at 57 s passed anyway and flew. Fixed: the closure is of SITE-003."""
    s = safety_baseline()
    path = ["QUEUED", "VALIDATING", "DISPATCHING", "DISPATCH_FAILED", "QUEUED", "VALIDATING", "DISPATCHING",
            "EXECUTING", "COMPLETED"]
    closed = airspace(s, START + 5.0, ["SITE-001" if broken else "SITE-003"], open_=False)
    s.task(NEW, path, user="operator-004", key="k-1", start=START)
    return s, Expect(NEW, sorted([closed, *s.ops_of(NEW, ("create_flight",))]),
                     "pre-flight check passed at t=57.0s while the airspace over SITE-001 was closed")


def test_i12_a_closure_that_lands_during_the_check_is_not_judged() -> None:
    """The check reads somewhere between its transaction's start (53 s) and the flight request (53.5 s): a
    closure at 53.2 s may have come after the read, so it is not a violation; one at 52.9 s is."""
    for at, status in ((START + 3.2, HELD), (START + 2.9, VIOLATED)):
        s = safety_baseline()
        s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START, area="SITE-002")
        airspace(s, at, ["SITE-002"], open_=False)
        assert run("I12", s).status == status, (at, run("I12", s).as_json())


# ---------------------------------------------------------------------------------------------- I13


@case("I13", "flight-without-area-permission")
def _no_permission(broken: bool) -> tuple[Scene, Expect]:
    """Broken: operator-003 may not operate SITE-001, yet OTHER_COMPLETED (theirs, in SITE-001) flew. Fixed:
    operator-002 lost the permission instead; none of their tasks flew (one was cancelled, one refused)."""
    s = safety_baseline()
    s.state.area_permissions.discard(("operator-003" if broken else "operator-002", "SITE-001"))
    return s, Expect(OTHER_COMPLETED, s.ops_of(OTHER_COMPLETED, ("confirm", "create_flight")),
                     "operator-003, who may not operate area SITE-001")


@case("I13", "flight-without-device-permission")
def _no_device_permission(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the task's user may operate the site but not the drone it flew."""
    s = safety_baseline()
    s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START)
    if broken:
        s.state.device_permissions.discard(("operator-004", "DRONE-0001"))
    return s, Expect(NEW, s.ops_of(NEW, ("confirm", "create_flight")), "may not operate device DRONE-0001")


# ---------------------------------------------------------------------------------------------- I14


@case("I14", "approval-for-another-version")
def _approval_other_version(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the only approval of the task's draft is for version 2; the task was confirmed (and flown) at
    version 1. Fixed: version 1 was approved."""
    s = safety_baseline()
    s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START)
    if broken:
        next(a for a in s.state.approvals if a["draft_id"] == f"draft-{NEW}")["draft_version"] = 2
    return s, Expect(NEW, s.ops_of(NEW, ("confirm", "create_flight")), "the approvals are for version(s) v2")


@case("I14", "approval-after-the-flight-request")
def _approval_late(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the approval was decided at 60 s, after the flight was requested at 53.5 s."""
    s = safety_baseline()
    s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START)
    if broken:
        next(a for a in s.state.approvals if a["draft_id"] == f"draft-{NEW}")["decided_at"] = T0 + 60.0
    return s, Expect(NEW, s.ops_of(NEW, ("confirm", "create_flight")), "decided only at t=60.0s")


@case("I14", "no-approval-at-all")
def _no_approval(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the draft was never approved. Fixed: the same, in a site that does not require approval."""
    s = safety_baseline()
    s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START, area="SITE-003")
    s.state.approvals = [a for a in s.state.approvals if a["draft_id"] != f"draft-{NEW}"]
    if not broken:
        next(a for a in s.state.areas if a["id"] == "SITE-003")["requires_approval"] = False
    return s, Expect(NEW, s.ops_of(NEW, ("confirm", "create_flight")), "the draft has no approval")


@case("I14", "approval-revoked-before-the-check")
def _approval_revoked(broken: bool) -> tuple[Scene, Expect]:
    """The approver revokes the approval of the task's draft version (answered ok). Broken: at 52 s, before the
    pre-flight check at 53 s. Fixed: at 53.8 s, after the flight was requested (not the check's to see)."""
    s = safety_baseline()
    s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START)
    value = {"task_id": NEW, "draft_id": f"draft-{NEW}", "draft_version": 1}
    at = START + 2.0 if broken else START + 3.8
    s.op(at - 0.1, "approver", INVOKE, REVOKE_APPROVAL, **value)
    revoked = s.op(at, "approver", OK, REVOKE_APPROVAL, **value).index
    return s, Expect(NEW, sorted([revoked, *s.ops_of(NEW, ("create_flight",))]), "revoked at t=52.0s")


# ---------------------------------------------------------------------------------------------- I23


def _device_answer(s: Scene, task_id: str, **answer: object) -> int:
    """Replace the task's device answer (ok, online at 80%) by ``answer`` (type, online, battery, time, error)."""
    ops = s.history.ops
    i = next(n for n, op in enumerate(ops) if op.f == "get_device" and op.type == OK and op.value["task_id"] == task_id)
    value = {k: v for k, v in {**ops[i].value, **answer}.items() if k not in ("type", "time")}
    ops[i] = replace(ops[i], type=answer.get("type", OK), time=answer.get("time", ops[i].time), value=value)
    return ops[i].index


@case("I23", "offline-device-flew")
def _offline(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the platform said the device was offline just before the pre-flight check, and it flew."""
    s = safety_baseline()
    s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START)
    answer = _device_answer(s, NEW, online=not broken)
    return s, Expect(NEW, sorted([answer, *s.ops_of(NEW, ("create_flight",))]), "was offline")


@case("I23", "battery-under-the-minimum-flew")
def _low_battery(broken: bool) -> tuple[Scene, Expect]:
    """Broken: 24.9% against the 25% minimum. Fixed: exactly 25% (the minimum flies)."""
    s = safety_baseline()
    s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START)
    minimum = Policy().min_battery
    answer = _device_answer(s, NEW, battery=minimum - 0.1 if broken else minimum)
    return s, Expect(NEW, sorted([answer, *s.ops_of(NEW, ("create_flight",))]), f"< {minimum:g}%")


@case("I23", "unknown-device-flew")
def _unknown_device(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the platform refused the device check (DEVICE_NOT_FOUND) and the task flew anyway."""
    s = safety_baseline()
    s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START)
    answer = _device_answer(s, NEW, **({"type": FAIL, "error": "DEVICE_NOT_FOUND"} if broken else {}))
    return s, Expect(NEW, sorted([answer, *s.ops_of(NEW, ("create_flight",))]), "refused the device check")


@case("I23", "no-device-check-before-the-pre-flight-check")
def _no_device_check(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the only device answer came at 53.2 s, after the pre-flight check at 53 s had passed."""
    s = safety_baseline()
    s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START)
    if broken:
        _device_answer(s, NEW, time=START + 3.2)
    return s, Expect(NEW, s.ops_of(NEW, ("create_flight",)), "no device check was answered")


# ---------------------------------------------------------------------------------------------- I24
# CANCELLED_IN_FLIGHT: QUEUED@1 VALIDATING@2 DISPATCHING@3 EXECUTING@4 CANCEL_PENDING@5 CANCELLED@6


def _answered(f: str, status: str, version: int) -> tuple[Scene, int]:
    """The baseline and a CANCELLED_IN_FLIGHT task whose owner was answered ``status``@``version`` by a ``f`` at
    54.6 s; the answer's operation index."""
    s = safety_baseline()
    s.task(NEW, "CANCELLED_IN_FLIGHT", user="operator-004", key="k-1", start=START)
    value = {"user_id": "operator-004", "task_id": NEW}
    s.op(START + 4.5, "user-x", INVOKE, f, **value)
    return s, s.op(START + 4.6, "user-x", OK, f, **value, status=status, version=version).index


@case("I24", "cancel-answered-with-the-version-before-it")
def _cancel_answer_version(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the cancel was answered CANCEL_PENDING at v4, the version of the EXECUTING it replaced."""
    s, answer = _answered("cancel", "CANCEL_PENDING", 4 if broken else 5)
    return s, Expect(NEW, [answer], "CANCEL_PENDING@v4")


@case("I24", "read-of-a-state-never-committed")
def _phantom_read(broken: bool) -> tuple[Scene, Expect]:
    """Broken: a read answered EXECUTING@v5; the task was EXECUTING at v4, and v5 is CANCEL_PENDING."""
    s, answer = _answered("read", "EXECUTING", 5 if broken else 4)
    return s, Expect(NEW, [answer], "EXECUTING@v5")


# ---------------------------------------------------------------------------------------------- I15


def _answer(s: Scene, user: str, key: str, draft: str, version: int, *, task_id: str | None) -> int:
    """A confirm and its answer: OK naming ``task_id``, or (None) a refusal."""
    value = {"user_id": user, "key": key, "draft_id": draft, "draft_version": version}
    s.op(30.0, "user-x", INVOKE, "confirm", **value)
    if task_id is None:
        return s.op(30.1, "user-x", FAIL, "confirm", **value, code="IDEMPOTENCY_KEY_REUSED").index
    return s.op(30.1, "user-x", OK, "confirm", **value, task_id=task_id, replayed=True).index


@case("I15", "key-returns-another-drafts-task")
def _other_draft(broken: bool) -> tuple[Scene, Expect]:
    """operator-001 reuses key k-1 to confirm another draft. Broken: answered with the task of the first
    draft. Fixed: refused (IDEMPOTENCY_KEY_REUSED)."""
    s = safety_baseline()
    i = _answer(s, "operator-001", "k-1", "draft-other", 1, task_id=COMPLETED if broken else None)
    return s, Expect(COMPLETED, [i], f"which was built from draft draft-{COMPLETED}")


@case("I15", "answer-names-another-users-task")
def _other_user(broken: bool) -> tuple[Scene, Expect]:
    """Broken: operator-004's confirm is answered with operator-001's task (same draft id, same key)."""
    s = safety_baseline()
    i = _answer(s, "operator-004", "k-1", f"draft-{COMPLETED}", 1, task_id=COMPLETED if broken else None)
    return s, Expect(COMPLETED, [i], "which belongs to operator-001")


@case("I15", "answer-names-another-version")
def _other_version(broken: bool) -> tuple[Scene, Expect]:
    """Broken: a confirm of version 2 is answered with the task built from version 1. Fixed: version 1."""
    s = safety_baseline()
    i = _answer(s, "operator-001", "k-1", f"draft-{COMPLETED}", 2 if broken else 1, task_id=COMPLETED)
    return s, Expect(COMPLETED, [i], "which was built from version 1")


# ---------------------------------------------------------------------------------------------- I16


def _delivered(s: Scene, event: dict, attempts: range, *, fail: range, at: float = START) -> list[int]:  # type: ignore[type-arg]
    """Deliveries of ``event`` to the dispatcher, one every 30 s (the invisible time), the handling of those in
    ``fail`` failing (recorded by the consumer)."""
    out = []
    for a in attempts:
        t = at + 30.0 * (a - 1)
        out.append(s.op(t, "dispatcher-1", INFO, "deliver", group="dispatcher", event_id=event["id"],
                        event_type=event["event_type"], task_id=event["task_id"], attempt=a).index)
        if a in fail:
            s.state.event_failures.append({"consumer": "dispatcher", "event_id": event["id"], "attempt": a,
                                           "code": "OperationalError", "at": T0 + t + 0.01})
    return out


def _dead_letter(s: Scene, event: dict, at: float) -> None:  # type: ignore[type-arg]
    s.state.dead_letters.append({"id": len(s.state.dead_letters) + 1, "consumer": "dispatcher",
                                 "event_id": event["id"], "task_id": event["task_id"],
                                 "event_type": event["event_type"], "error_code": "OperationalError",
                                 "attempts": LIMIT, "history": [], "redriven": True, "created_at": T0 + at})


@case("I16", "retried-past-the-limit")
def _past_the_limit(broken: bool) -> tuple[Scene, Expect]:
    """TaskCreated fails on every delivery for a while. Broken: the consumer keeps retrying past the limit (6
    failures recorded) and the 7th delivery takes effect; no dead letter. Fixed: dead-lettered at the 5th
    failure; the operator's re-drive is delivered afresh (attempt 1) and takes effect."""
    s = safety_baseline()
    s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START)
    ev = event_of(s, NEW, "TaskCreated")
    if broken:
        ops = _delivered(s, ev, range(1, LIMIT + 3), fail=range(1, LIMIT + 2))
    else:
        ops = _delivered(s, ev, range(1, LIMIT + 1), fail=range(1, LIMIT + 1))
        _dead_letter(s, ev, START + 30.0 * (LIMIT - 1) + 0.02)
        ops += _delivered(s, ev, range(1, 2), fail=range(0), at=400.0)
    return s, Expect(NEW, ops, f"its handling failed at attempt {LIMIT} (OperationalError)")


@case("I16", "dead-lettered-too-late")
def _too_late(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the dead letter is written only after two more deliveries past the failure at the limit."""
    s = safety_baseline()
    s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START)
    ev = event_of(s, NEW, "TaskCreated")
    s.state.processed = [p for p in s.state.processed if p["event_id"] != ev["id"]]
    last = LIMIT + 2 if broken else LIMIT
    ops = _delivered(s, ev, range(1, last + 1), fail=range(1, last + 1))
    _dead_letter(s, ev, START + 30.0 * (last - 1) + 0.02)
    return s, Expect(NEW, ops, "was dead-lettered only at t=230.0s, after it was delivered again at t=200.0s")


@case("I16", "past-the-limit-neither-dead-nor-taken")
def _lost_past_the_limit(broken: bool) -> tuple[Scene, Expect]:
    """Deliveries whose failures nobody could record (the database was down) went past the limit. Broken: the
    message was in the end neither dead-lettered nor taken. Fixed: the broker's dead-letter queue was drained
    into a dead letter."""
    s = safety_baseline()
    s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START)
    ev = event_of(s, NEW, "TaskCreated")
    s.state.processed = [p for p in s.state.processed if p["event_id"] != ev["id"]]
    ops = _delivered(s, ev, range(1, LIMIT + 3), fail=range(0))
    if not broken:
        _dead_letter(s, ev, 500.0)
    return s, Expect(NEW, ops, "was neither dead-lettered nor taken")


def test_i16_a_consumer_that_died_before_its_dead_letter_is_excused() -> None:
    """The failure at the limit was recorded, then the dispatcher was killed before it wrote the dead letter; the
    redelivery took effect. Correct behaviour: held. Without the kill it is a violation."""
    for killed, status in ((True, HELD), (False, VIOLATED)):
        s = safety_baseline()
        s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START)
        ev = event_of(s, NEW, "TaskCreated")
        _delivered(s, ev, range(1, LIMIT + 2), fail=range(1, LIMIT + 1))
        if killed:
            s.history.add(START + 30.0 * (LIMIT - 1) + 0.015, NEMESIS, INFO, "kill",
                          {"process": "dispatcher-1", "why": "kill-worker"})
        assert run("I16", s).status == status, run("I16", s).as_json()


def test_i16_uses_the_runs_limit() -> None:
    s = safety_baseline()
    s.task(NEW, "COMPLETED", user="operator-004", key="k-1", start=START)
    _delivered(s, event_of(s, NEW, "TaskCreated"), range(1, 8), fail=range(1, 7))
    assert INVARIANTS["I16"](CheckContext(s.history, s.state, policy=Policy(max_deliveries=7))).status == HELD
    verdict = INVARIANTS["I16"](CheckContext(s.history, s.state, policy=Policy(max_deliveries=5)))
    assert verdict.status == VIOLATED and "limit 5" in verdict.note


# ---------------------------------------------------------------------------------------------- I17


@case("I17", "task-created-processed-without-effect")
def _created_no_effect(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the dispatcher recorded TaskCreated as processed, yet the task is still CREATED (it committed
    processed_event without the transition). Fixed: the task was cancelled before dispatch (it left CREATED)."""
    s = baseline()
    s.task(NEW, [] if broken else ["CANCELLED"], user="operator-004", key="k-1", start=START)
    s.deliver_all(100.0)
    ev = event_of(s, NEW, "TaskCreated")
    return s, Expect(NEW, deliveries(s, ev["id"]), "the task never left CREATED")


@case("I17", "cancel-processed-never-sent")
def _cancel_not_sent(broken: bool) -> tuple[Scene, Expect]:
    """The dispatcher recorded TaskCancelRequested as processed. Broken: the task is still CANCEL_PENDING and
    no cancel_flight was ever sent. Fixed: the reconciler sent the cancel after the request."""
    s = baseline()
    s.task(NEW, ["QUEUED", "VALIDATING", "DISPATCHING", "EXECUTING", "CANCEL_PENDING"], user="operator-004",
           key="k-1", start=START)
    if not broken:
        s.op(START + 70.0, "reconciler", INVOKE, "cancel_flight", task_id=NEW, method="cancel_flight")
    s.deliver_all(100.0)
    ev = event_of(s, NEW, "TaskCancelRequested")
    return s, Expect(NEW, deliveries(s, ev["id"]), "still CANCEL_PENDING@v5 and the platform was never asked")


@case("I17", "completed-processed-without-report")
def _completed_no_report(broken: bool) -> tuple[Scene, Expect]:
    """Broken: the report worker took TaskCompleted but the task has no report row."""
    s = safety_baseline()
    if broken:
        s.state.reports = [r for r in s.state.reports if r["task_id"] != OTHER_COMPLETED]
    ev = event_of(s, OTHER_COMPLETED, "TaskCompleted")
    return s, Expect(OTHER_COMPLETED, deliveries(s, ev["id"]), "the task has no report row")


def test_i17_an_earlier_cancel_does_not_count_for_a_later_request() -> None:
    """A cancel sent for the first request (refused: back to EXECUTING) says nothing about the second one."""
    s = baseline()
    path = ["QUEUED", "VALIDATING", "DISPATCHING", "EXECUTING", "CANCEL_PENDING", "EXECUTING", "CANCEL_PENDING"]
    s.task(NEW, path, user="operator-004", key="k-1", start=START)
    s.op(START + 5.5, "dispatcher-1", INVOKE, "cancel_flight", task_id=NEW, method="cancel_flight")
    verdict = run("I17", s)
    assert verdict.status == VIOLATED
    assert [v.task_id for v in verdict.violations] == [NEW] and "CANCEL_PENDING@v7" in verdict.violations[0].message
    s.op(START + 8.0, "reconciler", INVOKE, "cancel_flight", task_id=NEW, method="cancel_flight")
    assert run("I17", s).status == HELD


# ---------------------------------------------------------------------------------------------- tests

IDS = [f"{c.invariant}-{c.name}" for c in CASES]


def test_the_safety_invariants_are_in_every_scenario_by_their_descriptive_names() -> None:
    assert set(SAFETY) <= set(INVARIANTS.ids)
    assert {i: INVARIANTS[i].checker.__name__ for i in SAFETY} == NAMES
    assert [v.invariant for v in INVARIANTS.check(safety_baseline().ctx())] == list(INVARIANTS)


def test_the_baseline_run_holds_every_safety_invariant_non_vacuously() -> None:
    s = safety_baseline()
    for inv in SAFETY:
        verdict = run(inv, s)
        assert verdict.status == HELD, verdict.as_json()
        assert verdict.checked > 0, f"{inv} examined nothing: a vacuous pass"


def test_every_safety_invariant_has_a_failing_case() -> None:
    assert {c.invariant for c in CASES} == set(SAFETY)


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
    assert any(v.ops == expect.ops for v in found), f"expected operations {expect.ops}, got {[v.ops for v in found]}"


def test_the_permission_and_approval_checks_need_the_sites() -> None:
    s = safety_baseline()
    s.state = replace(s.state, areas=[])
    assert {run(i, s).status for i in ("I13", "I14")} == {"unchecked"}
