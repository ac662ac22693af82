"""Consumer failures: every failed delivery is recorded; past the limit the message becomes a dead letter
with its history; a re-drive publishes it again through the outbox. Backoff stays within its bounds."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select

from reference.copilot.effects import Delivery, Jitter, Message, Sleep
from reference.copilot.errors import Conflict
from reference.copilot.models import DeadLetter, EventFailure, TaskAuditLog, TaskEventOutbox
from reference.copilot.policy import Policy, RetryPolicy
from reference.copilot.services.consumer import DISPATCHER, _dead_letter, _record_failure, consume_one, redrive
from reference.copilot.tasks import TASK_CREATED
from systems.copilot.sim import CopilotWorld


def _poison(world: CopilotWorld) -> Message:
    """A TaskCreated event for a task that does not exist: it can never succeed."""
    event_id, task_id = world.new_id(), world.new_id()

    def add(tx):
        tx.session.add(TaskEventOutbox(id=event_id, task_id=task_id, event_type=TASK_CREATED, task_version=0,
                                       payload={}, status="SENT", attempts=1, available_at=tx.now, created_at=tx.now,
                                       sent_at=tx.now))
    world.transact(add)
    return Message(str(event_id), TASK_CREATED, str(task_id), 0, {})


def _deliver(world: CopilotWorld, msg: Message, attempt: int, policy: Policy) -> bool:
    out: dict[str, object] = {}
    world.drive("dispatcher-1", consume_one(DISPATCHER, Delivery(msg, attempt, None), policy),
                on_done=lambda v, e: out.update(value=v, error=e))
    world.env.run()
    assert out["error"] is None
    return bool(out["value"])


def _count(world: CopilotWorld, model: type) -> int:
    with world.sessions() as s:
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


def test_poison_message_is_dead_lettered_with_history_and_can_be_redriven() -> None:
    world = CopilotWorld(7)
    policy = Policy(max_deliveries=3)
    msg = _poison(world)

    acks = [_deliver(world, msg, attempt, policy) for attempt in (1, 2)]
    assert acks == [False, False]  # left for redelivery
    assert _count(world, EventFailure) == 2
    assert _count(world, DeadLetter) == 0

    assert _deliver(world, msg, 3, policy) is True  # the last allowed delivery: dead-lettered and acked
    with world.sessions() as s:
        dl = s.scalars(select(DeadLetter)).one()
        assert str(dl.event_id) == msg.event_id and str(dl.task_id) == msg.task_id
        assert dl.consumer == DISPATCHER and dl.event_type == TASK_CREATED
        assert dl.error_code == "TASK_NOT_FOUND" and dl.attempts == 3
        assert [h["attempt"] for h in dl.history] == [1, 2, 3]
        assert all(h["code"] == "TASK_NOT_FOUND" for h in dl.history)
        dl_id = dl.id

    event_id = world.transact(lambda tx: redrive(tx, dl_id, "operator:alice"))
    assert event_id == msg.event_id
    with world.sessions() as s:
        row = s.get(TaskEventOutbox, uuid.UUID(msg.event_id))
        assert row is not None and row.status == "PENDING" and row.sent_at is None
        assert (row.attempts, row.dead_at) == (0, None)  # a fresh budget (seed 000 §5.5)
        assert s.get(DeadLetter, dl_id).redrive_count == 1
        audit = s.scalars(select(TaskAuditLog).where(TaskAuditLog.action == "DEAD_LETTER_REDRIVEN")).one()
        assert (audit.actor, str(audit.task_id), audit.detail) == (
            "operator:alice", msg.task_id, {"event_id": msg.event_id, "consumer": DISPATCHER})
    with pytest.raises(Conflict) as err:  # no second re-drive until it has failed again
        world.transact(lambda tx: redrive(tx, dl_id, "operator:alice"))
    assert err.value.code == "NOT_DEAD"

    # It fails again after the re-drive: one dead letter row keeps the whole history.
    for attempt in (1, 2, 3):
        _deliver(world, msg, attempt, policy)
    with world.sessions() as s:
        dl = s.scalars(select(DeadLetter)).one()
        assert len(dl.history) == 6 and dl.redriven_at is None and dl.attempts == 6


def test_a_failure_record_keeps_the_first_2000_characters_of_its_message() -> None:
    """A handler's error can be long (a driver's message quotes its statement): the record keeps a bounded prefix."""
    world = CopilotWorld(7)
    msg = _poison(world)
    long_message = "".join(f"{i:05d}" for i in range(500))  # 2,500 characters, each prefix distinct
    world.transact(lambda tx: _record_failure(tx, DISPATCHER, Delivery(msg, 1, None), "X", long_message))
    with world.sessions() as s:
        assert s.scalars(select(EventFailure.error_message)).one() == long_message[:2000]
    for _ in range(2):  # its dead letter, then the same letter dead again after a re-drive (the row kept)
        world.transact(lambda tx: _dead_letter(tx, DISPATCHER, Delivery(msg, 1, None), "X", long_message))
        with world.sessions() as s:
            assert s.scalars(select(DeadLetter.error_message)).one() == long_message[:2000]


def test_a_duplicate_delivery_of_a_processed_event_is_acked_without_effect() -> None:
    from scenarios.catalogue import load_catalogue
    CATALOGUE = load_catalogue("copilot")
    from scenarios.runner import simulate

    result = simulate(CATALOGUE["B1"], 2)
    assert result.passed, [v.as_json() for v in result.verdicts if v.status == "violated"]


@given(st.integers(min_value=0, max_value=40), st.floats(min_value=0.01, max_value=10),
       st.floats(min_value=0.1, max_value=600), st.floats(min_value=0, max_value=0.999999))
def test_backoff_is_equal_jitter_within_bounds(n: int, base: float, cap: float, u: float) -> None:
    """Sleep before retry n+1 is in [d/2, d) with d = min(cap, base * 2^n): never shorter than min_delay. The draw is
    a fraction of the jitter half (RetryPolicy.delay, which the outbox's rows use too)."""
    policy = RetryPolicy(attempts=5, base_s=base, cap_s=cap)
    step = min(cap, base * 2**n)
    gen = policy.backoff(n)
    jitter = next(gen)
    assert isinstance(jitter, Jitter)
    assert jitter.upper == 1.0
    sleep = gen.send(u * jitter.upper)
    assert isinstance(sleep, Sleep)
    assert sleep.seconds == pytest.approx(step / 2 + u * step / 2) == policy.delay(n, u)
    assert policy.min_delay(n) - 1e-9 <= sleep.seconds < step + 1e-9
    with pytest.raises(StopIteration):
        gen.send(None)


def test_retries_are_capped_by_the_policy() -> None:
    from reference.copilot import bugs

    assert list(RetryPolicy(attempts=4).tries()) == [0, 1, 2, 3]
    with bugs.injected(bugs.RETRY_NO_CAP):
        tries = iter(RetryPolicy(attempts=4).tries())
        assert [next(tries) for _ in range(10)] == list(range(10))
