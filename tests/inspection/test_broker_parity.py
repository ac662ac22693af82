"""Parity (issue 57): the simulation's RabbitMQ model (systems/inspection/broker.py) and a real RabbitMQ node
(stack/rabbitmq.py) run the same sequences (stack/amqp_sequence.py) and must show the same outcome: per publish ack,
nack or returned-before-ack; per delivery the id, the redelivered flag and x-delivery-count; the ready queue's order,
what each channel still holds, and the dead letters with their reason.

Not in the table, because the model cannot show them simply:
- publishes in flight when a queue crosses its reject-publish limit are all acked: how many are in flight depends
  on the client's timing (tests/stack/test_rabbitmq.py measures it); the sequences confirm one publish at a time;
- a frozen link (consumer_timeout frees nothing, only the missed heartbeat does, docs/native-stack.md fact 16): the
  model has no heartbeat, and the real case takes a Toxiproxy link and several heartbeat intervals (nightly there).

One node for the module; skipped only when RabbitMQ is not installed."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stack.amqp_sequence import (
    Close,
    Consume,
    Delivered,
    Publish,
    QueueSpec,
    Sequence,
    SequenceError,
    Settle,
    run_on_rabbitmq,
)
from stack.rabbitmq import INSTALL_COMMAND, LocalRabbitMQ, rabbitmq_available
from systems.inspection.broker_parity import run_on_model

pytestmark = pytest.mark.stack


def _ids(text: str) -> tuple[str, ...]:
    return tuple(text.split())


SEQUENCES = [
    Sequence("confirms: every routed publish is acked", QueueSpec(), (Publish(_ids("a b c")),)),
    Sequence("returns before confirms: an unroutable mandatory publish is returned, then acked", QueueSpec(),
             (Publish(_ids("lost"), unroutable=True), Publish(_ids("kept")))),
    Sequence("nack requeues at the tail, behind the waiting messages, and is redelivered", QueueSpec(),
             (Publish(_ids("a b c d")), Consume("c1", 2), Settle("c1", _ids("a b"), "nack"),
              Consume("c2", 1))),
    Sequence("reject with requeue is a nack", QueueSpec(),
             (Publish(_ids("a b c")), Consume("c1", 1), Settle("c1", _ids("a"), "reject"))),
    Sequence("a closing channel returns its deliveries to the head, in order", QueueSpec(),
             (Publish(_ids("a b c")), Consume("c1", 2), Close("c1"), Consume("c2", 3))),
    Sequence("an unacked delivery comes back only when its channel closes", QueueSpec(),
             (Publish(_ids("a")), Consume("c1", 1), Consume("c2", 1), Close("c1"), Consume("c2", 1),
              Settle("c2", _ids("a")))),
    Sequence("reject-publish is a soft limit: the publish that crosses it is acked", QueueSpec(max_length=2),
             (Publish(_ids("m1 m2 m3 m4 m5")),)),
    Sequence("reject-publish counts ready messages only and reopens at 80% of the limit", QueueSpec(max_length=5),
             (Publish(_ids("m1 m2 m3 m4 m5 m6 m7")), Consume("c1", 1), Publish(_ids("m8")), Consume("c2", 1),
              Publish(_ids("m9 m10 m11")))),
    Sequence("reject-publish counts requeued messages again", QueueSpec(max_length=3),
             (Publish(_ids("a b c d")), Consume("c1", 2), Publish(_ids("e")), Settle("c1", _ids("a b"), "nack"),
              Publish(_ids("f")))),
    Sequence("returns to the head queue up behind each other", QueueSpec(),
             (Publish(_ids("a b c d")), Consume("c1", 2), Settle("c1", _ids("a")), Consume("c2", 2), Close("c1"),
              Close("c2"))),
    Sequence("reject-publish-dlx on a quorum queue drops the head into the dead-letter exchange",
             QueueSpec(max_length=2, overflow="reject-publish-dlx", dead_letter_exchange=True),
             (Publish(_ids("m1 m2 m3 m4")),)),
    Sequence("x-delivery-limit N: N+1 deliveries, then a dead letter", QueueSpec(delivery_limit=1,
                                                                                dead_letter_exchange=True),
             (Publish(_ids("a b")), Consume("c1", 1), Settle("c1", _ids("a"), "nack"), Consume("c1", 2),
              Settle("c1", _ids("a"), "nack"), Close("c1"), Consume("c2", 2))),
    Sequence("with a delivery limit a nack requeues at the head", QueueSpec(delivery_limit=5),
             (Publish(_ids("a b c d")), Consume("c1", 2), Settle("c1", _ids("a b"), "nack"))),
]


@pytest.fixture(scope="module")
def connection() -> Iterator[Any]:
    if not rabbitmq_available():
        pytest.skip(f"RabbitMQ is not installed: {INSTALL_COMMAND} (or bash scripts/system-deps.sh as root)")
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-rabbitmq-parity-"))
    node = LocalRabbitMQ(run_dir)
    try:
        node.start()
        conn = node.connect()
        yield conn
        conn.close()
    finally:
        node.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.mark.parametrize("sequence", [pytest.param(s, id=s.name.split(":")[0]) for s in SEQUENCES])
def test_the_model_does_what_the_broker_does(connection: Any, sequence: Sequence) -> None:
    real = run_on_rabbitmq(connection, sequence)
    assert run_on_model(sequence) == real, f"{sequence.name}: real broker {real}"


def test_the_outcome_records_each_observable() -> None:
    """The model half alone (no broker): what a delivery and a publish look like in an outcome."""
    outcome = run_on_model(SEQUENCES[4])
    assert outcome.publishes == ["ack"] * 3
    assert outcome.deliveries[-3:] == [Delivered("a", True, 1), Delivered("b", True, 1), Delivered("c", False, 0)]
    assert outcome.held == {"c2": ["a", "b", "c"]} and outcome.ready == []


def test_a_sequence_that_settles_what_it_does_not_hold_is_refused() -> None:
    with pytest.raises(SequenceError, match="holds no 'x'"):
        run_on_model(Sequence("bad", QueueSpec(), (Publish(_ids("a")), Settle("c1", _ids("x")))))
    with pytest.raises(SequenceError, match="dead-letter exchange"):
        run_on_model(Sequence("bad", QueueSpec(max_length=1, overflow="reject-publish-dlx"), ()))
