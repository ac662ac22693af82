"""R12 and its fault: the broker acknowledges TaskCreated messages and loses them, so only the reconciler's queueing
of a CREATED task whose event was SENT long ago (reference.services.reconcile._queue_created) moves those tasks on.
Before R12 no catalogue scenario needed that branch: a reconciler that never queued them passed every scenario
(mutation testing, 2026-12-05)."""

from __future__ import annotations

import random

import pytest

import reference.services.reconcile as reconcile
from harness.history import LOST_MESSAGE, History
from kernel.effects import Message
from scenarios.catalogue import load_catalogue
from scenarios.checkers import VIOLATED, CheckContext, check_i6
from scenarios.runner import simulate
from scenarios.sim.broker import SimBroker

R12 = load_catalogue("copilot")["R12"]


def _message(event_type: str, n: int) -> Message:
    return Message(event_id=f"e{n}", event_type=event_type, task_id=f"t{n}", task_version=0)


def test_the_broker_acknowledges_a_lost_message_and_never_delivers_it() -> None:
    broker = SimBroker(random.Random(1), {"dispatcher": frozenset({"TaskCreated", "TaskCancelRequested"})})
    lost: list[Message] = []
    broker.lose_types, broker.on_lost = frozenset({"TaskCreated"}), lost.append
    broker.publish(_message("TaskCreated", 1), 0.0)  # no error: the sender sees an acknowledged send
    broker.publish(_message("TaskCancelRequested", 2), 0.0)
    delivered = broker.receive("dispatcher", 10, 30.0, 1.0)
    assert [d.message.event_id for d in delivered] == ["e2"]
    assert [m.event_id for m in lost] == ["e1"] and broker.published == 2
    broker.lose_types = frozenset()
    broker.publish(_message("TaskCreated", 3), 2.0)
    assert [d.message.event_id for d in broker.receive("dispatcher", 10, 30.0, 3.0)] == ["e3"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tasks_whose_created_event_was_lost_are_queued_by_the_reconciler_and_fly(seed: int) -> None:
    result = simulate(R12, seed)
    lost = {op.value["task_id"] for op in result.history.ops if op.f == LOST_MESSAGE}
    queued = {a["task_id"] for a in result.state.audit if a["action"] == "QUEUED_BY_RECONCILER"}
    assert result.passed, (result.outcome, result.exercised)
    assert lost and lost <= queued
    assert all(t["status"] == "COMPLETED" for t in result.state.tasks if t["id"] in lost)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_reconciler_that_never_queues_a_created_task_is_caught(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reconcile, "_queue_created", lambda tx, task_id: False)
    result = simulate(R12, seed)
    assert "I3" in {v.invariant for v in result.verdicts if v.status == VIOLATED}


def test_i6_excuses_exactly_the_events_the_broker_was_seen_to_lose() -> None:
    result = simulate(R12, 1)
    assert check_i6(CheckContext(result.history, result.state)).status != VIOLATED
    unseen = History()
    for op in result.history.ops:
        if op.f != LOST_MESSAGE:
            unseen.add(op.time, op.process, op.type, op.f, op.value)
    verdict = check_i6(CheckContext(unseen, result.state))
    assert verdict.status == VIOLATED
    assert all("never took it" in v.message for v in verdict.violations)
