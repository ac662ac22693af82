"""The broker's dead letters (reference/copilot/services/dlq.py, seed 000 §5.5: a message past its retry policy is kept
with its event id, task id, error and retry record, for a person to look into and re-drive after review), on the
reference's database (CopilotWorld's SQLite) and the harness's broker (scenarios.sim.broker: RocketMQ's redelivery and
its %DLQ%<group>). The simulation's consumers dead-letter a message themselves before the broker's limit, so no
scenario reaches this path; tests/stack/test_rocketmq.py runs it on a real RocketMQ. It is the mutation judge of
dlq.py (systems/copilot/mutation.yaml)."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from sqlalchemy import select

from kernel.effects import Delivery, Message
from reference.copilot.errors import Conflict, NotFound
from reference.copilot.models import DeadLetter, EventFailure, TaskAuditLog
from reference.copilot.services.consumer import DISPATCHER
from reference.copilot.services.dlq import BROKER_DLQ, UNDECODABLE, drain_broker_dead_letters, redrive_to_broker
from reference.copilot.tasks import TASK_CREATED
from scenarios.sim.broker import SimBroker
from systems.copilot.sim import CopilotWorld

LIMIT = 2  # deliveries before the broker moves a message to its dead-letter queue
OPERATOR = "operator-7"


class _Broker:
    """The harness's broker at the world's clock: the two calls dlq.py makes of a broker adapter."""

    def __init__(self, world: CopilotWorld) -> None:
        self.world = world
        self.sim = SimBroker(random.Random(7), {DISPATCHER: frozenset({TASK_CREATED, UNDECODABLE})},
                             max_attempts=LIMIT)

    def publish(self, message: Message) -> None:
        self.sim.publish(message, self.world.env.now)

    def dead_letters(self, group: str, max_messages: int = 256, **kw: Any) -> list[Delivery]:
        return self.sim.dead_letters(group, max_messages, **kw)

    def deliveries(self) -> list[Delivery]:
        """Every delivery until the broker gives up (never acked: the consumer dies on each)."""
        out: list[Delivery] = []
        for _ in range(LIMIT + 1):
            out += self.sim.receive(DISPATCHER, 1_000, 0.0, self.world.env.now)
        return out


def _message(task_id: uuid.UUID | None = None, event_type: str = TASK_CREATED) -> Message:
    return Message(str(uuid.uuid4()), event_type, str(task_id or uuid.uuid4()), 0, {"user_id": "operator-001"})


def _failed(world: CopilotWorld, deliveries: list[Delivery], code: str = "WORKER_CRASHED") -> None:
    """What the consumer managed to record of each delivery before it died."""
    for d in deliveries:
        world.transact(lambda tx, d=d: tx.session.add(EventFailure(
            consumer=DISPATCHER, event_id=uuid.UUID(d.message.event_id), delivery_attempt=d.delivery_attempt,
            error_code=code, error_message="killed mid-handling", at=tx.now)))


def _dead(world: CopilotWorld) -> list[DeadLetter]:
    with world.sessions() as s:
        return list(s.scalars(select(DeadLetter).order_by(DeadLetter.id)))


@pytest.fixture
def world() -> CopilotWorld:
    return CopilotWorld(7)


def test_a_message_the_broker_gave_up_on_is_recorded_with_its_record_then_acked(world: CopilotWorld) -> None:
    broker = _Broker(world)
    assert drain_broker_dead_letters(broker, world.transact, DISPATCHER) == 0  # nothing died yet
    doomed = _message()
    broker.publish(doomed)
    deliveries = broker.deliveries()
    assert [d.delivery_attempt for d in deliveries] == [1, 2]
    _failed(world, deliveries)

    assert drain_broker_dead_letters(broker, world.transact, DISPATCHER) == 1
    assert drain_broker_dead_letters(broker, world.transact, DISPATCHER) == 0  # acked after the commit
    [dl] = _dead(world)
    assert (str(dl.event_id), str(dl.task_id), dl.event_type, dl.consumer) == (
        doomed.event_id, doomed.task_id, TASK_CREATED, DISPATCHER)
    assert [(h["attempt"], h["code"]) for h in dl.history] == [(1, "WORKER_CRASHED"), (2, "WORKER_CRASHED"),
                                                                (1, BROKER_DLQ)]  # its reader's first delivery
    # the error is the consumer's last one (what a person looks into), the count the failed deliveries it recorded
    assert (dl.error_code, dl.attempts, dl.redrive_count, dl.redriven_at) == ("WORKER_CRASHED", 2, 0, None)
    assert Message.from_json(dl.payload) == doomed


def test_a_message_that_died_unrecorded_names_the_brokers_verdict(world: CopilotWorld) -> None:
    broker = _Broker(world)
    doomed = _message()
    broker.publish(doomed)
    broker.deliveries()  # the consumer died before it could record anything
    assert drain_broker_dead_letters(broker, world.transact, DISPATCHER) == 1
    [dl] = _dead(world)
    assert [h["code"] for h in dl.history] == [BROKER_DLQ] and dl.error_code == BROKER_DLQ
    # the count is what the broker's message says: its first delivery to the dead-letter reader
    assert "%DLQ%" + DISPATCHER in dl.error_message and dl.attempts == 1


def test_the_error_is_the_consumers_last_one(world: CopilotWorld) -> None:
    broker = _Broker(world)
    doomed = _message()
    broker.publish(doomed)
    first, _ = broker.deliveries()
    _failed(world, [first], code="ONLY_ONE_RECORDED")  # the second delivery died before recording anything
    drain_broker_dead_letters(broker, world.transact, DISPATCHER)
    [dl] = _dead(world)
    assert [h["code"] for h in dl.history] == ["ONLY_ONE_RECORDED", BROKER_DLQ]
    assert (dl.error_code, dl.attempts) == ("ONLY_ONE_RECORDED", 1)


def test_one_drain_reads_at_most_its_batch_the_rest_the_next(world: CopilotWorld) -> None:
    broker = _Broker(world)
    for _ in range(257):
        broker.publish(_message())
    broker.deliveries()
    assert drain_broker_dead_letters(broker, world.transact, DISPATCHER) == 256  # the default batch
    assert drain_broker_dead_letters(broker, world.transact, DISPATCHER) == 1


def test_a_live_dead_letter_is_not_recorded_twice(world: CopilotWorld) -> None:
    broker = _Broker(world)
    doomed = _message()
    broker.publish(doomed)
    broker.deliveries()
    assert drain_broker_dead_letters(broker, world.transact, DISPATCHER) == 1
    broker.publish(doomed)  # the same message dies in the broker again while its dead letter waits for a person
    broker.deliveries()
    assert drain_broker_dead_letters(broker, world.transact, DISPATCHER) == 0
    assert len(_dead(world)) == 1


def test_a_batch_whose_record_fails_stays_in_the_queue(world: CopilotWorld) -> None:
    broker = _Broker(world)
    broker.publish(_message())
    broker.deliveries()

    def failing(fn: Any) -> Any:
        raise RuntimeError("database down")

    with pytest.raises(RuntimeError):
        drain_broker_dead_letters(broker, failing, DISPATCHER)
    assert drain_broker_dead_letters(broker, world.transact, DISPATCHER) == 1  # offered again, recorded now


def test_a_re_drive_publishes_the_same_event_once_audited_then_refuses_until_it_dies_again(
        world: CopilotWorld) -> None:
    broker = _Broker(world)
    doomed = _message()
    broker.publish(doomed)
    _failed(world, broker.deliveries())
    drain_broker_dead_letters(broker, world.transact, DISPATCHER)
    [dl] = _dead(world)

    assert redrive_to_broker(broker, world.transact, dl.id, OPERATOR) == doomed.event_id
    again = broker.sim.receive(DISPATCHER, 16, 60.0, world.env.now)  # invisible for a minute after this delivery
    assert [(d.message, d.delivery_attempt) for d in again] == [(doomed, 1)]  # the same event id: consumers dedupe
    [dl] = _dead(world)
    assert dl.redriven_at is not None and dl.redrive_count == 1
    with world.sessions() as s:
        audits = list(s.scalars(select(TaskAuditLog).where(TaskAuditLog.action == "DEAD_LETTER_REDRIVEN")))
    assert [(str(a.task_id), a.actor, a.detail["event_id"], a.detail["via"]) for a in audits] == [
        (doomed.task_id, OPERATOR, doomed.event_id, "broker")]
    with pytest.raises(Conflict) as refused:  # not dead again: a second click changes nothing
        redrive_to_broker(broker, world.transact, dl.id, OPERATOR)
    assert refused.value.code == "NOT_DEAD"
    assert broker.sim.receive(DISPATCHER, 16, 60.0, world.env.now) == []  # nothing published by the refusal

    # It dies in the broker again: the same row, its record grown, waiting for a person again.
    assert [d.delivery_attempt for d in broker.sim.receive(DISPATCHER, 16, 0.0, world.env.now + 61.0)] == [2]
    _failed(world, [Delivery(doomed, 1, None), Delivery(doomed, 2, None)], code="STILL_BROKEN")
    assert drain_broker_dead_letters(broker, world.transact, DISPATCHER) == 1
    [dl] = _dead(world)
    assert [h["code"] for h in dl.history] == ["WORKER_CRASHED", "WORKER_CRASHED", "STILL_BROKEN", "STILL_BROKEN",
                                               BROKER_DLQ]
    assert (dl.error_code, dl.attempts, dl.redriven_at, dl.redrive_count) == (BROKER_DLQ, LIMIT + 1, None, 1)
    assert redrive_to_broker(broker, world.transact, dl.id, OPERATOR) == doomed.event_id
    assert _dead(world)[0].redrive_count == 2


def test_what_cannot_be_re_driven_is_refused(world: CopilotWorld) -> None:
    broker = _Broker(world)
    with pytest.raises(NotFound) as missing:
        redrive_to_broker(broker, world.transact, 999, OPERATOR)
    assert missing.value.code == "DEAD_LETTER_NOT_FOUND"
    foreign = Message(str(uuid.uuid4()), UNDECODABLE, "", 0, {"body": "not ours"})  # a body that is not our message
    broker.publish(foreign)
    broker.deliveries()  # left unacked on purpose, until the broker gives up on it
    assert drain_broker_dead_letters(broker, world.transact, DISPATCHER) == 1
    [dl] = _dead(world)
    assert dl.task_id is None and dl.event_type == UNDECODABLE
    with pytest.raises(Conflict) as refused:
        redrive_to_broker(broker, world.transact, dl.id, OPERATOR)
    assert refused.value.code == "NOT_REDRIVABLE"
    assert broker.sim.receive(DISPATCHER, 16, 0.0, world.env.now) == []  # nothing published
