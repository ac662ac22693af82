"""The RabbitMQ model of the simulation (systems/inspection/broker.py), rule by rule: what the pipeline's rules
depend on (the parity test against the real broker, issue 57, will run the same sequences on RabbitMQ)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kernel.effects import BrokerUnavailable
from reference.inspection.bugs import BUGS
from reference.inspection.effects import HIGH, NORMAL, PUBLISH_ACK, PUBLISH_NACK, PUBLISH_RETURNED, ChannelClosed
from systems.inspection.broker import BrokerModel

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _msg(i: int) -> dict[str, str]:
    return {"message_id": f"m{i}"}


def _fill(mq: BrokerModel, n: int, slot: int = 0, priority: str = NORMAL) -> None:
    for i in range(n):
        assert mq.publish(f"slot.{slot}.{priority}", _msg(i)) == PUBLISH_ACK


def test_an_unroutable_mandatory_publish_is_returned_not_queued() -> None:
    mq = BrokerModel(2)
    assert mq.publish("slot.7.high", _msg(1)) == PUBLISH_RETURNED
    mq.unbind(1, True)
    assert mq.publish("slot.1.normal", _msg(2)) == PUBLISH_RETURNED
    mq.unbind(1, False)
    assert mq.publish("slot.1.normal", _msg(3)) == PUBLISH_ACK
    assert mq.depth() == 1


def test_unacked_deliveries_stay_held_until_ack_nack_or_close() -> None:
    mq = BrokerModel(1)
    _fill(mq, 3)
    mq.consume("w1", 0)
    got = mq.fetch("w1", ((0, NORMAL, 10),), T0)
    assert [d.message_id for d in got] == ["m0", "m1", "m2"] and {d.delivery_count for d in got} == {1}
    assert mq.fetch("w1", ((0, NORMAL, 10),), T0) == []  # held, not redelivered while the channel is open
    mq.ack(got[:1])
    _fill(mq, 1)  # m0 again (another message with that id: waiting in the queue)
    mq.nack(got[1:2])  # m1 requeued behind the waiting m0, its count up
    again = mq.fetch("w1", ((0, NORMAL, 10),), T0)
    assert [(d.message_id, d.delivery_count) for d in again] == [("m0", 1), ("m1", 2)]
    mq.close_connection("w1", "killed")  # m2, m0, m1 back to the front, in delivery order
    mq.consume("w2", 0)
    assert [(d.message_id, d.delivery_count) for d in mq.fetch("w2", ((0, NORMAL, 10),), T0)] == [
        ("m2", 2), ("m0", 2), ("m1", 3)]


def test_prefetch_limits_what_a_consumer_is_pushed() -> None:
    mq = BrokerModel(1)
    _fill(mq, 5, priority=HIGH)
    mq.consume("w1", 0)
    assert len(mq.fetch("w1", ((0, HIGH, 2),), T0)) == 2
    assert mq.depth() == 5  # 3 ready, 2 unacked


def test_single_active_consumer_a_standby_gets_nothing_until_the_active_one_goes() -> None:
    mq = BrokerModel(1)
    _fill(mq, 2)
    mq.consume("old", 0)
    mq.consume("new", 0)
    assert mq.fetch("new", ((0, NORMAL, 10),), T0) == []
    held = mq.fetch("old", ((0, NORMAL, 10),), T0)
    mq.cancel("old", 0)  # a cancel keeps the unacked deliveries held ...
    assert mq.fetch("new", ((0, NORMAL, 10),), T0) == []
    mq.nack(held)  # ... until they are nacked: then the standby, now active, gets them
    assert [d.message_id for d in mq.fetch("new", ((0, NORMAL, 10),), T0)] == ["m0", "m1"]


def test_consumer_timeout_closes_the_channel_and_requeues() -> None:
    mq = BrokerModel(1, consumer_timeout_s=60.0)
    _fill(mq, 1)
    mq.consume("w1", 0)
    (d,) = mq.fetch("w1", ((0, NORMAL, 1),), T0)
    mq.expire(T0 + timedelta(seconds=59))
    mq.ack((d,))  # still open at 59 s
    _fill(mq, 1)
    (d,) = mq.fetch("w1", ((0, NORMAL, 1),), T0)
    mq.expire(T0 + timedelta(seconds=61))
    assert mq.closed_by_timeout == 1
    with pytest.raises(ChannelClosed):
        mq.ack((d,))  # the tag died with its channel
    mq.consume("w1", 0)
    assert [x.delivery_count for x in mq.fetch("w1", ((0, NORMAL, 1),), T0)] == [2]


def test_an_unknown_delivery_tag_closes_its_channel() -> None:
    mq = BrokerModel(1)
    _fill(mq, 2)
    mq.consume("w1", 0)
    a, b = mq.fetch("w1", ((0, NORMAL, 2),), T0)
    mq.ack((a,))
    with pytest.raises(ChannelClosed):
        mq.ack((a,))  # acked twice: PRECONDITION_FAILED, the channel (and b's delivery) is gone
    assert mq.depth() == 1 and not mq.channels[b.channel].open


def test_reject_publish_is_a_soft_limit_and_drop_head_drops_a_confirmed_message() -> None:
    mq = BrokerModel(1)
    mq.max_length = 10
    _fill(mq, 11)  # the eleventh still gets in: the queue goes over the limit
    assert mq.publish("slot.0.normal", _msg(99)) == PUBLISH_NACK
    mq.consume("w1", 0)
    mq.ack(tuple(mq.fetch("w1", ((0, NORMAL, 2),), T0)))  # 9 ready: still over 80%
    assert mq.publish("slot.0.normal", _msg(99)) == PUBLISH_NACK
    mq.ack(tuple(mq.fetch("w1", ((0, NORMAL, 1),), T0)))  # 8 ready: 80%, accepted again
    assert mq.publish("slot.0.normal", _msg(99)) == PUBLISH_ACK
    mq = BrokerModel(1)
    mq.max_length = 2
    _fill(mq, 2)
    with BUGS.injected("drop-head-overflow"):
        assert mq.publish("slot.0.normal", _msg(9)) == PUBLISH_ACK
    assert mq.dropped == ["m0"] and mq.depth() == 2


def test_an_outage_closes_every_channel_and_refuses_publishes_but_keeps_the_queues() -> None:
    mq = BrokerModel(1)
    _fill(mq, 2)
    mq.consume("w1", 0)
    mq.fetch("w1", ((0, NORMAL, 1),), T0)
    mq.set_down(True)
    with pytest.raises(BrokerUnavailable):
        mq.publish("slot.0.normal", _msg(5))
    mq.set_down(False)
    assert mq.leftovers() == ["m0", "m1"]
