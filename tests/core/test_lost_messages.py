"""R12 and its fault: a stale consumer in the dispatchers' group acks TaskCreated messages unread, so only the
reconciler's queueing of a CREATED task whose event was SENT long ago
(reference.copilot.services.reconcile._queue_created)
moves those tasks on.
Before R12 no catalogue scenario needed that branch: a reconciler that never queued them passed every scenario
(mutation testing, 2026-12-05)."""

from __future__ import annotations

import pytest

import reference.copilot.services.reconcile as reconcile
from harness.history import LOST_MESSAGE, History
from kernel.effects import Ack, BrokerUnavailable, Delivery, Message, Receive, Sleep, run_sync
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import VIOLATED
from systems.copilot.checkers import CheckContext, check_i6
from systems.copilot.faults import FAULTS, stale_consumer

R12 = load_catalogue("copilot")["R12"]


def _delivery(event_type: str, n: int) -> Delivery:
    return Delivery(Message(event_id=f"e{n}", event_type=event_type, task_id=f"t{n}", task_version=0), 1, n)


def test_the_stale_consumer_acks_what_it_receives_unread_and_retries_when_the_broker_refuses() -> None:
    batches = [[_delivery("TaskCreated", 1), _delivery("TaskCancelRequested", 2)], BrokerUnavailable("down"),
               [_delivery("TaskCreated", 3)], []]
    acked: list[str] = []
    slept: list[float] = []
    lost: list[str] = []

    def perform(effect: object) -> object:
        if isinstance(effect, Receive):
            assert effect.group == "dispatcher"
            batch = batches.pop(0)
            if isinstance(batch, Exception):
                raise batch
            return batch
        if isinstance(effect, Ack):
            if effect.delivery.message.event_id == "e3":
                raise BrokerUnavailable("ack refused")  # not acked: the broker delivers it again, so not lost
            acked.append(effect.delivery.message.event_id)
            return None
        assert isinstance(effect, Sleep)
        slept.append(effect.seconds)
        return None

    run_sync(stale_consumer("dispatcher", lambda: not batches, lambda m: lost.append(m.event_id)), perform)
    assert acked == lost == ["e1", "e2"]
    assert len(slept) == 1 and not batches


def test_a_stale_consumer_outside_the_consumer_groups_is_refused() -> None:
    with pytest.raises(ValueError, match="not a consumer group"):
        FAULTS["stale-consumer"].validate({"group": "nobody"}, "native")
    FAULTS["stale-consumer"].validate({"group": "report-worker"}, "sim")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tasks_whose_created_event_was_lost_are_queued_by_the_reconciler_and_fly(seed: int) -> None:
    result = simulate(R12, seed)
    lost = {op.value["task_id"] for op in result.history.ops
            if op.f == LOST_MESSAGE and op.value["event_type"] == "TaskCreated"}
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
