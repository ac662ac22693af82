"""A worker asked to stop (SIGTERM sets ``Runtime.stop_requested``) stops between units of work: the publisher after
the batch it claimed is published and marked sent, a consumer before its next receive. Before, it stopped only in a
sleep, and a worker with a backlog never sleeps: its supervisor killed it after 60 s, mid-unit."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from core_db_support import make_db
from sqlalchemy import select

from kernel.runtime import Stopping
from reference.copilot.effects import Ack, Delivery, Message, Receive, Transact, opens_unit
from reference.copilot.models import TaskEventOutbox
from reference.copilot.policy import Policy
from reference.copilot.services.consumer import DISPATCHER, consumer_loop
from reference.copilot.services.outbox import publisher_loop
from reference.copilot.tasks import add_outbox


def _never_idle(_seconds: float) -> None:
    raise AssertionError("the worker reached an idle sleep: it ran through the backlog instead of stopping")


class RecordingBroker:
    """Every receive hands out one more message (a backlog; past five receives the test fails); publishes and acks
    are recorded."""

    def __init__(self) -> None:
        self.published: list[Message] = []
        self.acked: list[str] = []
        self.receives = 0

    def publish(self, message: Message) -> None:
        self.published.append(message)

    def receive(self, group: str, max_messages: int, invisible_s: float) -> list[Delivery]:
        self.receives += 1
        if self.receives > 5:
            raise AssertionError("the consumer kept receiving: it never stopped")
        msg = Message(f"event-{self.receives}", "TaskCreated", "task", 0, {}, "2026-01-01T00:00:00+00:00")
        return [Delivery(msg, 1, self.receives)]

    def ack(self, group: str, delivery: Delivery) -> None:
        self.acked.append(delivery.message.event_id)


def test_a_publisher_with_a_backlog_stops_after_the_batch_it_claimed() -> None:
    db = make_db()
    task = db.insert_task("CREATED", 0)
    db.runtime.transact(lambda tx: [add_outbox(tx, task, "TaskCreated", i, {"n": i}) for i in range(7)])
    broker = RecordingBroker()
    runtime = dataclasses.replace(db.runtime, broker=broker, sleep=_never_idle,
                                  stop_requested=lambda: bool(broker.published))  # SIGTERM during the first publish
    with pytest.raises(Stopping):
        runtime.run(publisher_loop(Policy(outbox_batch=3)))
    with runtime.sessions() as s:
        rows = s.execute(select(TaskEventOutbox.status, TaskEventOutbox.attempts)).all()
    assert len(broker.published) == 3  # the claimed batch went out: stopping mid-unit would leave it to a lease
    assert sorted(r.status for r in rows) == ["PENDING"] * 4 + ["SENT"] * 3  # and was marked sent
    assert sorted(r.attempts for r in rows if r.status == "PENDING") == [0] * 4  # nothing more was claimed


def test_a_consumer_with_a_backlog_stops_before_its_next_receive() -> None:
    broker = RecordingBroker()
    runtime = dataclasses.replace(make_db(fleet=None).runtime, broker=broker, sleep=_never_idle,
                                  stop_requested=lambda: bool(broker.acked))

    def consume() -> Any:
        while True:  # the shape of services.consumer.consumer_loop: receive a batch, ack each delivery
            for d in (yield Receive("group", 1, 30.0)):
                yield Transact(lambda tx: None, "consume")
                yield Ack("group", d)

    with pytest.raises(Stopping):
        runtime.run(consume())
    assert (broker.receives, broker.acked) == (1, ["event-1"])


def test_the_workers_loops_open_each_unit_of_work_with_an_effect_a_stop_may_end_them_at() -> None:
    assert opens_unit(next(consumer_loop(DISPATCHER, Policy())))
    claim = next(publisher_loop(Policy()))
    assert isinstance(claim, Transact) and claim.name == "outbox.claim" and opens_unit(claim)
    assert not opens_unit(Transact(lambda tx: None, "outbox.mark_sent"))
