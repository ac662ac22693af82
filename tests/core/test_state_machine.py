"""The task state machine (docs/systems/copilot.md): the transition table, checked pair by pair against a table
written out here from the design, and transition() exercised on a real SQLite row for every pair."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from datetime import datetime

import pytest
from core_db_support import Db, make_db

from reference.copilot.errors import StaleWrite
from reference.copilot.states import TERMINAL, TaskStatus, is_legal
from reference.copilot.tasks import (
    TASK_CANCEL_REQUESTED,
    TASK_COMPLETED,
    TASK_DISPATCH_RESULT,
    TASK_STATUS_CHANGED,
    IllegalTransition,
    TaskView,
    fresh,
    transition,
)

S = TaskStatus

# docs/systems/copilot.md, written out by hand (not derived from reference.copilot.states):
#   CREATED -> QUEUED -> VALIDATING -> DISPATCHING -> EXECUTING -> COMPLETED
#   VALIDATING -> FAILED
#   DISPATCHING -> DISPATCH_FAILED | MANUAL_REVIEW (outcome unknown)
#   EXECUTING -> FAILED | CANCEL_PENDING | MANUAL_REVIEW (the platform silent past Policy.escalate_after_s:
#                issue 11 adds this edge to the state machine, after seed 000 §7.2 "cannot confirm -> manual review")
#   DISPATCH_FAILED -> QUEUED (re-dispatch after check) | MANUAL_REVIEW | FAILED
#   CANCEL_PENDING -> CANCELLED | EXECUTING (cancel refused) | COMPLETED | MANUAL_REVIEW
#   CREATED | QUEUED | VALIDATING -> CANCELLED (nothing was sent yet)
#   DISPATCH_FAILED -> CANCELLED (issue 11: the user gives up the retry; the failed attempt made no flight)
SYSTEM_EXPECTED: dict[str, set[str]] = {
    "CREATED": {"QUEUED", "CANCELLED"},
    "QUEUED": {"VALIDATING", "CANCELLED"},
    "VALIDATING": {"DISPATCHING", "FAILED", "CANCELLED"},
    "DISPATCHING": {"EXECUTING", "DISPATCH_FAILED", "MANUAL_REVIEW"},
    "EXECUTING": {"COMPLETED", "FAILED", "CANCEL_PENDING", "MANUAL_REVIEW"},
    "COMPLETED": set(),
    "DISPATCH_FAILED": {"QUEUED", "MANUAL_REVIEW", "FAILED", "CANCELLED"},
    "FAILED": set(),
    "CANCEL_PENDING": {"CANCELLED", "EXECUTING", "COMPLETED", "MANUAL_REVIEW"},
    "CANCELLED": set(),
    "MANUAL_REVIEW": set(),
}
#   MANUAL_REVIEW -> QUEUED | EXECUTING | COMPLETED | FAILED | CANCELLED (operator only)
OPERATOR_EXPECTED: dict[str, set[str]] = {
    "MANUAL_REVIEW": {"QUEUED", "EXECUTING", "COMPLETED", "FAILED", "CANCELLED"},
}
TERMINAL_EXPECTED = {"COMPLETED", "FAILED", "CANCELLED"}
ALL = [s.value for s in TaskStatus]
PAIRS = [(a, b) for a in ALL for b in ALL]


def expected_legal(frm: str, to: str, operator: bool) -> bool:
    return to in SYSTEM_EXPECTED[frm] or (operator and to in OPERATOR_EXPECTED.get(frm, set()))


def test_expected_table_covers_every_status() -> None:
    assert set(SYSTEM_EXPECTED) == set(ALL) and len(ALL) == 11
    assert len(PAIRS) == 121


@pytest.mark.parametrize("operator", [False, True], ids=["system", "operator"])
@pytest.mark.parametrize(("frm", "to"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_is_legal_matches_design_table(frm: str, to: str, operator: bool) -> None:
    assert is_legal(frm, to, operator=operator) is expected_legal(frm, to, operator)
    assert is_legal(S(frm), S(to), operator=operator) is expected_legal(frm, to, operator)


def test_terminal_statuses_have_no_outgoing_transitions() -> None:
    assert {s.value for s in TERMINAL} == TERMINAL_EXPECTED
    for frm in TERMINAL_EXPECTED:
        for to in ALL:
            assert not is_legal(frm, to), (frm, to)
            assert not is_legal(frm, to, operator=True), (frm, to)


def test_operator_transitions_leave_only_manual_review() -> None:
    """Operator-only moves exist from MANUAL_REVIEW and nowhere else; without operator it is a dead end."""
    for frm in ALL:
        extra = {to for to in ALL if is_legal(frm, to, operator=True) and not is_legal(frm, to)}
        assert extra == OPERATOR_EXPECTED.get(frm, set()), frm
    assert not any(is_legal("MANUAL_REVIEW", to) for to in ALL)


# ------------------------------------------------------------------ transition() on a real row


@pytest.fixture(scope="module")
def db() -> Iterator[Db]:
    d = make_db(fleet=None)
    yield d
    d.dispose()


START_VERSION = 4


def _event_type(frm: str, to: str) -> str:
    if frm == "DISPATCHING":
        return TASK_DISPATCH_RESULT
    return {"CANCEL_PENDING": TASK_CANCEL_REQUESTED, "COMPLETED": TASK_COMPLETED}.get(to, TASK_STATUS_CHANGED)


def _view(db: Db, task_id: uuid.UUID) -> TaskView:
    view = db.runtime.transact(lambda tx: fresh(tx, task_id))
    assert view is not None
    return view


@pytest.mark.parametrize("operator", [False, True], ids=["system", "operator"])
@pytest.mark.parametrize(("frm", "to"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_transition_on_a_real_row(db: Db, frm: str, to: str, operator: bool) -> None:
    task_id = db.insert_task(frm, START_VERSION)
    view = _view(db, task_id)
    before_row, before_counts = db.task(task_id), db.counts()
    actor = "operator:alice" if operator else "dispatcher"
    seen: dict[str, object] = {}

    def fn(tx):  # type: ignore[no-untyped-def]
        seen["now"] = tx.now
        v = transition(tx, view, S(to), actor=actor, action="TEST_MOVE", operator=operator,
                       detail={"why": "test"}, correlation_id="corr-1")
        seen["changes"] = list(tx.changes)
        return v

    if not expected_legal(frm, to, operator):
        with db.count_commits() as commits, pytest.raises(IllegalTransition) as info:
            db.runtime.transact(fn)
        assert (info.value.frm, info.value.to, info.value.task_id) == (frm, to, task_id)
        assert commits == []
        assert db.task(task_id) == before_row
        assert db.counts() == before_counts
        assert db.audit(task_id) == [] and db.outbox(task_id) == [] and db.report(task_id) is None
        return

    with db.count_commits() as commits:
        new_version = db.runtime.transact(fn)
    assert len(commits) == 1, "the row, its audit and its outbox event are written by one transaction"
    now = seen["now"]
    assert isinstance(now, datetime)
    assert new_version == START_VERSION + 1
    row = db.task(task_id)
    assert row is not None
    assert (row["status"], row["version"], row["updated_at"]) == (to, START_VERSION + 1, now)

    audit = db.audit(task_id)
    assert len(audit) == 1
    a = audit[0]
    assert (a["from"], a["to"], a["from_version"], a["to_version"]) == (frm, to, START_VERSION, START_VERSION + 1)
    assert (a["actor"], a["action"], a["at"]) == (actor, "TEST_MOVE", now)

    outbox = db.outbox(task_id)
    assert len(outbox) == 1
    o = outbox[0]
    assert (o["task_version"], o["event_type"], o["status"], o["at"]) == (
        START_VERSION + 1, _event_type(frm, to), "PENDING", now)
    assert o["payload"]["from"] == frm and o["payload"]["to"] == to

    report = db.report(task_id)
    if to == "COMPLETED":
        assert report is not None and report["status"] == "PENDING" and report["at"] == now
    else:
        assert report is None
    expected_new = {"drone_task": 0, "task_audit_log": 1, "task_event_outbox": 1,
                    "task_report": 1 if to == "COMPLETED" else 0}
    after = db.counts()
    assert {k: after[k] - before_counts[k] for k in after} == expected_new
    assert seen["changes"] == [(task_id, "operator-001", to, START_VERSION + 1)]


@pytest.mark.parametrize(("frm", "to"), [(a, b) for a in ALL for b in sorted(SYSTEM_EXPECTED[a])]
                         + [("MANUAL_REVIEW", b) for b in sorted(OPERATOR_EXPECTED["MANUAL_REVIEW"])])
def test_a_failing_transaction_leaves_no_trace_of_the_transition(db: Db, frm: str, to: str) -> None:
    """Row, audit, outbox (and report) are one transaction: when it rolls back, none of them is there."""
    task_id = db.insert_task(frm, START_VERSION)
    view = _view(db, task_id)
    before_row, before_counts = db.task(task_id), db.counts()

    class Boom(Exception):
        pass

    def fn(tx):  # type: ignore[no-untyped-def]
        transition(tx, view, S(to), actor="operator:alice", action="TEST_MOVE", operator=True)
        raise Boom

    with pytest.raises(Boom):
        db.runtime.transact(fn)
    assert db.task(task_id) == before_row
    assert db.counts() == before_counts


@pytest.mark.parametrize("delta", [-1, +1, -START_VERSION])
@pytest.mark.parametrize(("frm", "to"), [("CREATED", "QUEUED"), ("EXECUTING", "COMPLETED"),
                                         ("EXECUTING", "CANCEL_PENDING"), ("DISPATCHING", "MANUAL_REVIEW")])
def test_stale_version_raises_stale_write_and_writes_nothing(db: Db, frm: str, to: str, delta: int) -> None:
    task_id = db.insert_task(frm, START_VERSION)
    stale = dataclasses.replace(_view(db, task_id), version=START_VERSION + delta)
    before_row, before_counts = db.task(task_id), db.counts()
    with db.count_commits() as commits, pytest.raises(StaleWrite) as info:
        db.runtime.transact(lambda tx: transition(tx, stale, S(to), actor="dispatcher", action="TEST_MOVE"))
    assert (info.value.task_id, info.value.expected_status, info.value.expected_version) == (
        task_id, frm, START_VERSION + delta)
    assert commits == []
    assert db.task(task_id) == before_row
    assert db.counts() == before_counts


def test_stale_status_raises_stale_write_and_writes_nothing(db: Db) -> None:
    """Same version, but the row's status is not the one the caller saw: fenced too."""
    task_id = db.insert_task("QUEUED", START_VERSION)
    stale = dataclasses.replace(_view(db, task_id), status=S.CREATED)
    before_row, before_counts = db.task(task_id), db.counts()
    with pytest.raises(StaleWrite):
        db.runtime.transact(lambda tx: transition(tx, stale, S.CANCELLED, actor="u", action="TEST_MOVE"))
    assert db.task(task_id) == before_row
    assert db.counts() == before_counts


def test_second_writer_with_the_same_view_loses(db: Db) -> None:
    """Two workers read the same (status, version); the first move wins, the second is a StaleWrite."""
    task_id = db.insert_task("EXECUTING", START_VERSION)
    view = _view(db, task_id)
    db.runtime.transact(lambda tx: transition(tx, view, S.COMPLETED, actor="platform-events", action="DONE"))
    with pytest.raises(StaleWrite):
        db.runtime.transact(lambda tx: transition(tx, view, S.FAILED, actor="reconciler", action="LATE"))
    row = db.task(task_id)
    assert row is not None and (row["status"], row["version"]) == ("COMPLETED", START_VERSION + 1)
    assert [(a["from"], a["to"]) for a in db.audit(task_id)] == [("EXECUTING", "COMPLETED")]
    assert [o["task_version"] for o in db.outbox(task_id)] == [START_VERSION + 1]


def test_completed_writes_pending_report_in_the_same_transaction(db: Db) -> None:
    task_id = db.insert_task("EXECUTING", START_VERSION)
    view = _view(db, task_id)
    with db.count_commits() as commits:
        db.runtime.transact(lambda tx: transition(tx, view, S.COMPLETED, actor="platform-events",
                                                  action="FLIGHT_COMPLETED"))
    assert len(commits) == 1
    report, audit, outbox = db.report(task_id), db.audit(task_id), db.outbox(task_id)
    assert report is not None
    assert report["status"] == "PENDING"
    assert report["object_key"].endswith(f"{task_id}.json")
    assert report["at"] == audit[0]["at"] == outbox[0]["at"]
    assert outbox[0]["event_type"] == TASK_COMPLETED


def test_a_walk_through_the_happy_path_builds_a_continuous_chain(db: Db) -> None:
    task_id = db.insert_task("CREATED", 0)
    path = ["QUEUED", "VALIDATING", "DISPATCHING", "EXECUTING", "CANCEL_PENDING", "EXECUTING", "COMPLETED"]
    for to in path:
        view = _view(db, task_id)
        db.runtime.transact(lambda tx, v=view, t=to: transition(tx, v, S(t), actor="w", action="STEP"))
    audit = db.audit(task_id)
    assert [(a["from"], a["to"]) for a in audit] == list(zip(["CREATED", *path], path, strict=False))
    assert [(a["from_version"], a["to_version"]) for a in audit] == [(i, i + 1) for i in range(len(path))]
    assert [o["task_version"] for o in db.outbox(task_id)] == list(range(1, len(path) + 1))
    row = db.task(task_id)
    assert row is not None and (row["status"], row["version"]) == ("COMPLETED", len(path))
    for to in ALL:  # and now nothing moves it
        view = _view(db, task_id)
        with pytest.raises(IllegalTransition):
            db.runtime.transact(lambda tx, v=view, t=to: transition(tx, v, S(t), actor="operator:x", action="X",
                                                                    operator=True))


def test_a_published_message_says_when_its_change_was_committed(db: Db) -> None:
    """Seed 000 §4: messages carry eventId, taskId, eventType, occurredAt and the version; the occurredAt of a
    claimed outbox row is the commit time of the change it announces, and survives the broker's JSON."""
    from reference.copilot.effects import Message
    from reference.copilot.services.outbox import claim

    task_id = db.insert_task("DISPATCHING", START_VERSION)
    view = _view(db, task_id)
    seen: dict[str, datetime] = {}

    def move(tx):  # type: ignore[no-untyped-def]
        seen["now"] = tx.now
        return transition(tx, view, S.EXECUTING, actor="dispatcher", action="TEST_MOVE")

    db.runtime.transact(move)
    messages = [m for m in db.runtime.transact(lambda tx: claim(tx, 1000, 30.0)) if m.task_id == str(task_id)]
    [m] = messages
    assert m.event_type == TASK_DISPATCH_RESULT and m.task_version == START_VERSION + 1
    assert datetime.fromisoformat(m.occurred_at) == seen["now"]
    assert Message.from_json(m.as_json()) == m
