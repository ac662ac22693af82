"""What RabbitMQ really does, on a real node (``stack/rabbitmq.py``, Debian's 3.10), for quorum queues named and
bound as the inspection pipeline's: ``inspection.status.s{slot}.{high|normal}`` on the direct exchange
``inspection.status`` with routing key ``slot.{slot}.{priority}``.

Each test asserts one behaviour the broker model of the simulation must reproduce; docs/native-stack.md lists them
with the version measured. One node for the module. Skipped only when RabbitMQ is not installed.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import psutil
import pytest
from pika.exceptions import ChannelClosedByBroker, UnroutableError

from stack import toxiproxy as toxiproxy_module
from stack.gobin import go_available, go_binary_path
from stack.rabbitmq import INSTALL_COMMAND, BrokerConfig, LocalRabbitMQ, rabbitmq_available
from stack.toxiproxy import LocalToxiproxy

pytestmark = pytest.mark.stack


CONSUMER_TIMEOUT_MS = 2_000  # short, so the consumer-timeout test is quick; every other test acks at once
TICK_MS = 200  # how often a channel checks the consumer timeout (RabbitMQ's default is 60 s)
HEARTBEAT_S = 2  # the heartbeat a client behind a frozen link asks for (the broker's default is 60 s)
DEADLINE_S = 30.0  # the longest any condition below may take on a loaded machine
EXCHANGE = "inspection.status"
DLX = "inspection.dlx"
PERSISTENT = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)

_slots = itertools.count(1)


def nightly(test: Callable[..., None]) -> Callable[..., None]:
    """The markers scripts/nightly.sh selects on (the test command deselects ``whole_stack``): a slow test here."""
    return pytest.mark.whole_stack(pytest.mark.nightly(test))


@pytest.fixture(scope="module")
def broker() -> Iterator[LocalRabbitMQ]:
    if not rabbitmq_available():
        pytest.skip(f"RabbitMQ is not installed: {INSTALL_COMMAND} (or bash scripts/system-deps.sh as root)")
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-rabbitmq-"))
    node = LocalRabbitMQ(run_dir, vhost="inspection", user="inspection",
                         config=BrokerConfig(consumer_timeout_ms=CONSUMER_TIMEOUT_MS, channel_tick_interval_ms=TICK_MS))
    try:
        node.start()
        with node.connect() as connection:
            channel = connection.channel()
            channel.exchange_declare(EXCHANGE, "direct", durable=True)
            channel.exchange_declare(DLX, "fanout", durable=True)
        yield node
    finally:
        node.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def connection(broker: LocalRabbitMQ) -> Iterator[Any]:
    conn = broker.connect()
    try:
        yield conn
    finally:
        if conn.is_open:
            conn.close()


def slot_queue(channel: Any, priority: str = "high", **arguments: Any) -> tuple[str, str]:
    """A fresh quorum queue for a new slot, bound as the pipeline binds it: (queue, routing key)."""
    slot = next(_slots)
    queue, routing_key = f"inspection.status.s{slot:03d}.{priority}", f"slot.{slot:03d}.{priority}"
    channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum", **arguments})
    channel.queue_bind(queue, EXCHANGE, routing_key=routing_key)
    return queue, routing_key


def dead_letter_queue(channel: Any) -> str:
    """A fresh queue bound to the dead-letter exchange (a fanout: it receives every dead letter from now on)."""
    queue = f"inspection.dead.{next(_slots)}"
    channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
    channel.queue_bind(queue, DLX)
    return queue


def ready_count(channel: Any, queue: str) -> int:
    """Messages ready for delivery (unacked ones are not counted)."""
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def pump_until(connection: Any, condition: Callable[[], bool], what: str) -> None:
    """Process the connection's frames until ``condition`` holds; fail after DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE_S:.0f}s: {what}")
        connection.process_data_events(time_limit=0.05)


def get_until(channel: Any, queue: str, what: str) -> tuple[Any, Any, bytes]:
    """``basic.get`` (no auto-ack) until a message comes (dead-lettering is asynchronous)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        method, properties, body = channel.basic_get(queue, auto_ack=False)
        if method is not None:
            return method, properties, body
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE_S:.0f}s: {what}")
        channel.connection.process_data_events(time_limit=0.05)


def drain(channel: Any, queue: str) -> list[bytes]:
    bodies = []
    while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
        bodies.append(got[2])
    return bodies


def publish_and_record(broker: LocalRabbitMQ, publishes: list[tuple[str, bytes]]) -> list[tuple[str, Any]]:
    """Publish ``(routing_key, body)`` pairs with ``mandatory`` on a confirm-mode channel, all at once (pipelined,
    as an asynchronous publisher does), and return what came back in arrival order: ``("return", body)`` for a
    basic.return, ``("ack", tag)`` / ``("nack", tag)`` per publish (a ``multiple`` confirm expanded)."""
    events: list[tuple[str, Any]] = []
    confirmed: set[int] = set()

    def on_channel(channel: Any) -> None:
        channel.add_on_return_callback(lambda _ch, _method, _props, body: events.append(("return", body)))
        channel.confirm_delivery(ack_nack_callback=lambda frame: on_confirm(channel, frame.method),
                                 callback=lambda _frame: publish_all(channel))

    def publish_all(channel: Any) -> None:
        for routing_key, body in publishes:
            channel.basic_publish(EXCHANGE, routing_key, body, PERSISTENT, mandatory=True)

    def on_confirm(channel: Any, method: Any) -> None:
        kind = "ack" if isinstance(method, pika.spec.Basic.Ack) else "nack"
        tags = range(1, method.delivery_tag + 1) if method.multiple else [method.delivery_tag]
        for tag in sorted(set(tags) - confirmed):
            confirmed.add(tag)
            events.append((kind, tag))
        if len(confirmed) == len(publishes):
            channel.connection.close()

    conn = pika.SelectConnection(broker.connection_parameters(),
                                 on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                                 on_close_callback=lambda c, _reason: c.ioloop.stop())
    conn.ioloop.call_later(DEADLINE_S, lambda: conn.close() if conn.is_open else None)
    conn.ioloop.start()
    assert len(confirmed) == len(publishes), f"confirms missing after {DEADLINE_S:.0f}s: {events}"
    return events


def confirm_one_by_one(channel: Any, routing_key: str, bodies: list[bytes]) -> list[str]:
    """Publish each body and wait for its confirm before the next: "ack" or "nack" per body."""
    outcomes = []
    for body in bodies:
        try:
            channel.basic_publish(EXCHANGE, routing_key, body, PERSISTENT, mandatory=True)
            outcomes.append("ack")
        except pika.exceptions.NackError:
            outcomes.append("nack")
    return outcomes


# --- the node itself ------------------------------------------------------------------------------


def test_the_node_is_our_own_on_loopback(broker: LocalRabbitMQ) -> None:
    """Its own name, ports, epmd and cookie: the CLI reaches it only with the node's environment."""
    assert broker.version.startswith("3.")
    assert not {broker.amqp_port, broker.dist_port, broker.epmd_port} & {5672, 25672, 4369}
    assert broker.pid is not None and psutil.Process(broker.pid).name() == "beam.smp"  # the script exec'd the VM
    listening = [c.laddr for c in psutil.Process(broker.pid).net_connections("tcp") if c.status == psutil.CONN_LISTEN]
    assert {addr.port for addr in listening} == {broker.amqp_port, broker.dist_port}
    assert {addr.ip for addr in listening} == {"127.0.0.1"}
    assert broker.node_log_path.is_file()
    assert (broker.run_dir / "mnesia" / broker.node_name).is_dir()
    assert broker.vhost in broker.ctl("rabbitmqctl", "-q", "list_vhosts").split()


def test_delivery_tags_restart_at_one_on_a_new_channel(broker: LocalRabbitMQ, connection: Any) -> None:
    channel = connection.channel()
    queue, routing_key = slot_queue(channel)
    channel.confirm_delivery()
    confirm_one_by_one(channel, routing_key, [b"a", b"b", b"c"])
    first = connection.channel()
    tags = [first.basic_get(queue)[0].delivery_tag for _ in range(2)]
    first.close()  # both return to the queue
    second = connection.channel()
    method, _props, _body = second.basic_get(queue)
    assert tags == [1, 2] and method.delivery_tag == 1
    second.basic_ack(method.delivery_tag)


def test_acking_a_tag_the_channel_never_delivered_closes_it(broker: LocalRabbitMQ, connection: Any) -> None:
    """A tag from a previous channel (tags restart at 1) that the new one has not used: 406 closes the channel,
    and what that channel held goes back to the queue."""
    channel = connection.channel()
    queue, routing_key = slot_queue(channel)
    channel.confirm_delivery()
    confirm_one_by_one(channel, routing_key, [b"1", b"2"])
    old = connection.channel()
    old.basic_get(queue)
    stale_tag = old.basic_get(queue)[0].delivery_tag
    old.close()
    new = connection.channel()
    assert new.basic_get(queue)[0].delivery_tag == 1
    new.basic_ack(stale_tag)  # no reply on success: the error comes with the next call
    with pytest.raises(ChannelClosedByBroker) as closed:
        new.basic_qos(prefetch_count=1)
    assert closed.value.reply_code == 406 and f"unknown delivery tag {stale_tag}" in closed.value.reply_text
    assert sorted(drain(channel, queue)) == [b"1", b"2"]


# --- publishing -----------------------------------------------------------------------------------


def test_a_routed_message_is_confirmed_with_an_ack(broker: LocalRabbitMQ, connection: Any) -> None:
    channel = connection.channel()
    queue, routing_key = slot_queue(channel)
    assert publish_and_record(broker, [(routing_key, b"m")]) == [("ack", 1)]
    assert drain(channel, queue) == [b"m"]


def test_an_unroutable_mandatory_message_is_returned_before_its_ack(broker: LocalRabbitMQ, connection: Any) -> None:
    """basic.return, then basic.ack (not a nack): a publisher that ignores returns counts it as confirmed."""
    _queue, routing_key = slot_queue(connection.channel())
    events = publish_and_record(broker, [("slot.nowhere.high", b"lost"), (routing_key, b"kept")])
    assert events == [("return", b"lost"), ("ack", 1), ("ack", 2)]
    # pika's blocking channel relies on that order: it raises only if the return came before the ack.
    channel = connection.channel()
    channel.confirm_delivery()
    with pytest.raises(UnroutableError):
        channel.basic_publish(EXCHANGE, "slot.nowhere.high", b"lost", PERSISTENT, mandatory=True)


def test_reject_publish_nacks_only_after_the_queue_went_over_its_limit(broker: LocalRabbitMQ,
                                                                       connection: Any) -> None:
    """A quorum queue's ``x-max-length`` with ``reject-publish`` is a soft limit: the publish that takes the queue
    over it is accepted (and so is every publish in flight then); from then on every publish is nacked, until
    consumers bring the queue back under the limit."""
    channel = connection.channel()
    queue, routing_key = slot_queue(channel, **{"x-max-length": 2, "x-overflow": "reject-publish"})
    channel.confirm_delivery()
    assert confirm_one_by_one(channel, routing_key, [b"1", b"2", b"3", b"4", b"5"]) == ["ack"] * 3 + ["nack"] * 2
    assert ready_count(channel, queue) == 3

    pipelined = slot_queue(channel, **{"x-max-length": 2, "x-overflow": "reject-publish"})
    events = publish_and_record(broker, [(pipelined[1], f"p{i}".encode()) for i in range(8)])
    acked = sum(1 for kind, _ in events if kind == "ack")
    # How many in-flight publishes get in depends on timing (here: all 8); none that was acked is dropped.
    assert acked >= 3 and ready_count(channel, pipelined[0]) == acked, events

    drain(channel, queue)
    assert confirm_one_by_one(channel, routing_key, [b"6"]) == ["ack"]


def test_reject_publish_counts_ready_messages_and_reopens_at_80_percent(broker: LocalRabbitMQ,
                                                                        connection: Any) -> None:
    """The limit counts ready messages only (a consumer's unacked deliveries free room) and, once over, the queue
    takes publishes again only when the ready count is down to 80% of ``x-max-length``."""
    channel = connection.channel()
    queue, routing_key = slot_queue(channel, **{"x-max-length": 10, "x-overflow": "reject-publish"})
    channel.confirm_delivery()
    assert confirm_one_by_one(channel, routing_key, [b"m"] * 12) == ["ack"] * 11 + ["nack"]
    taker = connection.channel()
    outcomes = {}
    for ready in (10, 9, 8):
        while ready_count(channel, queue) > ready:
            assert taker.basic_get(queue)[0] is not None  # held unacked: out of the ready count
        outcomes[ready] = confirm_one_by_one(channel, routing_key, [b"m"])[0]
    assert outcomes == {10: "nack", 9: "nack", 8: "ack"}
    taker.close()


def test_reject_publish_dlx_on_a_quorum_queue_drops_the_head(broker: LocalRabbitMQ, connection: Any) -> None:
    """3.10 accepts ``x-overflow: reject-publish-dlx`` on a quorum queue and then behaves as ``drop-head``: every
    publish is acked, and the oldest messages leave the queue, dead-lettered (reason ``maxlen``) when it has a
    dead-letter exchange, gone when it has none. Confirmed messages are lost to the consumer either way."""
    channel = connection.channel()
    dead = dead_letter_queue(channel)
    queue, routing_key = slot_queue(channel, **{"x-max-length": 2, "x-overflow": "reject-publish-dlx",
                                                "x-dead-letter-exchange": DLX})
    undead, undead_key = slot_queue(channel, **{"x-max-length": 2, "x-overflow": "reject-publish-dlx"})
    channel.confirm_delivery()
    assert confirm_one_by_one(channel, routing_key, [b"1", b"2", b"3", b"4"]) == ["ack"] * 4
    assert confirm_one_by_one(channel, undead_key, [b"1", b"2", b"3", b"4"]) == ["ack"] * 4
    assert drain(channel, queue) == [b"3", b"4"]
    assert drain(channel, undead) == [b"3", b"4"]
    letters = [get_until(channel, dead, "the dropped head is dead-lettered") for _ in range(2)]
    assert [body for _m, _p, body in letters] == [b"1", b"2"]
    assert {props.headers["x-death"][0]["reason"] for _m, props, _b in letters} == {"maxlen"}
    for method, _props, _body in letters:
        channel.basic_ack(method.delivery_tag)


# --- consuming ------------------------------------------------------------------------------------


def test_an_unacked_message_comes_back_only_when_its_channel_closes(broker: LocalRabbitMQ, connection: Any) -> None:
    channel = connection.channel()
    queue, routing_key = slot_queue(channel)
    channel.confirm_delivery()
    confirm_one_by_one(channel, routing_key, [b"m"])
    holder = connection.channel()
    first, first_props, _ = holder.basic_get(queue)
    assert not first.redelivered and first_props.headers["x-delivery-count"] == 0
    # Held, not acked, channel open: the broker keeps it out of the queue (nothing to get, nothing ready).
    assert channel.basic_get(queue)[0] is None and ready_count(channel, queue) == 0
    holder.close()
    again, again_props, body = get_until(channel, queue, "the message returns after its channel closed")
    assert body == b"m" and again.redelivered and again_props.headers["x-delivery-count"] == 1
    channel.basic_ack(again.delivery_tag)


def test_consumer_timeout_closes_the_channel_and_requeues(broker: LocalRabbitMQ, connection: Any) -> None:
    channel = connection.channel()
    queue, routing_key = slot_queue(channel, "normal")
    channel.confirm_delivery()
    confirm_one_by_one(channel, routing_key, [b"held"])
    holder = connection.channel()
    delivered_at: list[float] = []
    holder.basic_consume(queue, lambda _ch, _method, _props, _body: delivered_at.append(time.monotonic()))
    deadline = connection.call_later(DEADLINE_S, holder.stop_consuming)  # a deadline: the broker should act first
    with pytest.raises(ChannelClosedByBroker) as closed:
        holder.start_consuming()  # returns only by the deadline, raises when the broker closes the channel
    connection.remove_timeout(deadline)
    assert len(delivered_at) == 1 and time.monotonic() - delivered_at[0] >= CONSUMER_TIMEOUT_MS / 1000
    assert closed.value.reply_code == 406 and "timed out" in closed.value.reply_text
    method, props, body = get_until(channel, queue, "the held message returns")
    assert body == b"held" and method.redelivered and props.headers["x-delivery-count"] == 1
    channel.basic_ack(method.delivery_tag)


def test_delivery_limit_dead_letters_after_limit_plus_one_deliveries(broker: LocalRabbitMQ,
                                                                     connection: Any) -> None:
    channel = connection.channel()
    dead = dead_letter_queue(channel)
    queue, routing_key = slot_queue(channel, **{"x-delivery-limit": 2, "x-dead-letter-exchange": DLX})
    channel.confirm_delivery()
    confirm_one_by_one(channel, routing_key, [b"poison"])
    counts = []
    for _ in range(3):
        method, props, _body = get_until(channel, queue, "the nacked message comes back")
        counts.append(props.headers["x-delivery-count"])
        channel.basic_nack(method.delivery_tag, requeue=True)
    method, props, body = get_until(channel, dead, "the message is dead-lettered")
    assert counts == [0, 1, 2] and body == b"poison"
    assert props.headers["x-first-death-reason"] == "delivery_limit"
    assert channel.basic_get(queue)[0] is None
    channel.basic_ack(method.delivery_tag)


def test_single_active_consumer_standby_takes_over_when_the_active_channel_closes(broker: LocalRabbitMQ,
                                                                                  connection: Any) -> None:
    channel = connection.channel()
    queue, routing_key = slot_queue(channel, **{"x-single-active-consumer": True})
    channel.confirm_delivery()
    active_conn, standby_conn = broker.connect(), broker.connect()
    try:
        active, standby = active_conn.channel(), standby_conn.channel()
        got_active: list[tuple[bytes, bool]] = []
        got_standby: list[tuple[bytes, bool]] = []
        active.basic_consume(queue, lambda _c, m, _p, body: got_active.append((body, m.redelivered)))
        standby.basic_consume(queue, lambda _c, m, _p, body: got_standby.append((body, m.redelivered)))
        confirm_one_by_one(channel, routing_key, [b"1", b"2"])
        pump_until(active_conn, lambda: len(got_active) == 2, "the first consumer gets both (it is the active one)")
        active.close()  # unacked: both return, to the standby, which is now the active consumer
        pump_until(standby_conn, lambda: len(got_standby) == 2, "the standby takes over")
        # Had the standby received either while the first was active, it would not be marked redelivered.
        assert got_active == [(b"1", False), (b"2", False)] and got_standby == [(b"1", True), (b"2", True)]
        standby.basic_ack(0, multiple=True)
    finally:
        for conn in (active_conn, standby_conn):
            if conn.is_open:
                conn.close()


def test_prefetch_caps_the_unacked_deliveries_of_a_consumer(broker: LocalRabbitMQ, connection: Any) -> None:
    """A consumer that stops acking (a full mailbox) gets no more than its prefetch; the rest stay ready in the
    queue, and each ack lets one more through."""
    channel = connection.channel()
    queue, routing_key = slot_queue(channel, "normal")
    channel.confirm_delivery()
    confirm_one_by_one(channel, routing_key, [b"1", b"2", b"3", b"4", b"5"])
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=2)
    held: list[tuple[int, bytes]] = []
    consumer.basic_consume(queue, lambda _ch, method, _props, body: held.append((method.delivery_tag, body)))
    pump_until(connection, lambda: len(held) == 2, "the consumer gets its prefetch")
    assert [body for _tag, body in held] == [b"1", b"2"] and ready_count(channel, queue) == 3
    consumer.basic_ack(held[0][0])
    pump_until(connection, lambda: len(held) == 3, "one ack lets one more through")
    assert held[2][1] == b"3" and ready_count(channel, queue) == 2
    consumer.close()


def consume_with_prefetch_one(connection: Any, queue: str) -> tuple[Any, list[tuple[int, bytes, bool]]]:
    """A consumer on its own channel, prefetch 1: (the channel, its deliveries as (tag, body, redelivered))."""
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=1)
    deliveries: list[tuple[int, bytes, bool]] = []
    consumer.basic_consume(queue, lambda _ch, m, _props, body: deliveries.append((m.delivery_tag, body, m.redelivered)))
    return consumer, deliveries


def test_a_nacked_message_goes_to_the_back_a_returned_one_to_the_front(broker: LocalRabbitMQ,
                                                                      connection: Any) -> None:
    """On a 3.10 quorum queue, ``basic.nack`` with requeue puts the message behind those waiting (the order
    changes); a channel closing returns its unacked messages to the front (the order holds)."""
    channel = connection.channel()
    queue, routing_key = slot_queue(channel)
    channel.confirm_delivery()
    confirm_one_by_one(channel, routing_key, [b"1", b"2"])
    consumer, deliveries = consume_with_prefetch_one(connection, queue)
    pump_until(connection, lambda: len(deliveries) == 1, "the first delivery")
    consumer.basic_nack(deliveries[0][0], requeue=True)
    pump_until(connection, lambda: len(deliveries) == 2, "the next delivery after the nack")
    consumer.basic_ack(deliveries[1][0])
    pump_until(connection, lambda: len(deliveries) == 3, "the nacked message again")
    consumer.basic_ack(deliveries[2][0])
    assert [(body, again) for _tag, body, again in deliveries] == [(b"1", False), (b"2", False), (b"1", True)]
    consumer.close()

    confirm_one_by_one(channel, routing_key, [b"3", b"4"])
    consumer, deliveries = consume_with_prefetch_one(connection, queue)
    pump_until(connection, lambda: len(deliveries) == 1, "the first delivery")
    consumer.close()
    consumer, deliveries = consume_with_prefetch_one(connection, queue)
    pump_until(connection, lambda: len(deliveries) == 1, "the first delivery on a new channel")
    consumer.basic_ack(deliveries[0][0])
    pump_until(connection, lambda: len(deliveries) == 2, "the second")
    consumer.basic_ack(deliveries[1][0])
    assert [(body, again) for _tag, body, again in deliveries] == [(b"3", True), (b"4", False)]
    consumer.close()


def test_a_rejected_message_is_dead_lettered(broker: LocalRabbitMQ, connection: Any) -> None:
    channel = connection.channel()
    dead = dead_letter_queue(channel)
    queue, routing_key = slot_queue(channel, **{"x-dead-letter-exchange": DLX})
    channel.confirm_delivery()
    confirm_one_by_one(channel, routing_key, [b"bad"])
    method = get_until(channel, queue, "the message")[0]
    channel.basic_nack(method.delivery_tag, requeue=False)
    letter, props, body = get_until(channel, dead, "the rejected message is dead-lettered")
    assert body == b"bad" and props.headers["x-first-death-reason"] == "rejected"
    channel.basic_ack(letter.delivery_tag)


def test_cancelling_a_consumer_keeps_its_unacked_deliveries_until_the_channel_closes(broker: LocalRabbitMQ,
                                                                                    connection: Any) -> None:
    """basic.cancel stops new deliveries but does not give back the unacked ones: they can still be acked (or
    nacked) on that channel, and return to the queue only when it closes."""
    channel = connection.channel()
    queue, routing_key = slot_queue(channel)
    channel.confirm_delivery()
    confirm_one_by_one(channel, routing_key, [b"1", b"2"])
    consumer = connection.channel()
    held: list[int] = []
    tag = consumer.basic_consume(queue, lambda _ch, method, _props, _body: held.append(method.delivery_tag))
    pump_until(connection, lambda: len(held) == 2, "the consumer holds both")
    consumer.basic_cancel(tag)
    assert ready_count(channel, queue) == 0  # cancelled, still held
    consumer.basic_ack(held[0])  # an ack after the cancel still counts
    consumer.close()
    assert drain(channel, queue) == [b"2"]


def test_max_length_bytes_counts_bodies_like_max_length_counts_messages(broker: LocalRabbitMQ,
                                                                        connection: Any) -> None:
    """``x-max-length-bytes`` (the pipeline's 50 MB cap, here 1,000 bytes for 500-byte messages): the same soft
    limit with ``reject-publish`` and the same drop-head with ``reject-publish-dlx``."""
    body = b"x" * 500
    channel = connection.channel()
    rejecting, rejecting_key = slot_queue(channel, **{"x-max-length-bytes": 1000, "x-overflow": "reject-publish"})
    dropping, dropping_key = slot_queue(channel, **{"x-max-length-bytes": 1000, "x-overflow": "reject-publish-dlx"})
    channel.confirm_delivery()
    assert confirm_one_by_one(channel, rejecting_key, [body] * 4) == ["ack"] * 3 + ["nack"]
    assert confirm_one_by_one(channel, dropping_key, [body] * 4) == ["ack"] * 4
    assert (ready_count(channel, rejecting), ready_count(channel, dropping)) == (3, 2)


# --- the AMQP link through Toxiproxy ---------------------------------------------------------------


@pytest.fixture(scope="module")
def amqp_link(broker: LocalRabbitMQ) -> Iterator[tuple[LocalToxiproxy, int]]:
    """A Toxiproxy link in front of the node: (the server, the port clients connect to)."""
    version = toxiproxy_module.DEFAULT_VERSION
    if not go_available() and not go_binary_path(version, "toxiproxy-server").exists():
        pytest.skip(f"'go' is not on PATH and toxiproxy-server {version} is not in the cache: cannot build it")
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-rabbitmq-toxiproxy-"))
    proxy = LocalToxiproxy(run_dir)
    try:
        proxy.start()
        _host, port = proxy.client.create_proxy("rabbitmq", broker.address)
        yield proxy, port
    finally:
        proxy.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def hold_two(broker: LocalRabbitMQ, port: int, queue: str, **parameters: Any) -> tuple[Any, list[bytes]]:
    """A connection through the link whose consumer holds two deliveries unacked."""
    conn = pika.BlockingConnection(broker.connection_parameters(port=port, **parameters))
    held: list[bytes] = []
    conn.channel().basic_consume(queue, lambda _ch, _method, _props, body: held.append(body))
    pump_until(conn, lambda: len(held) == 2, "the consumer through the link holds both")
    return conn, held


def test_a_cut_link_closes_the_connection_and_unacked_deliveries_come_back(
        broker: LocalRabbitMQ, connection: Any, amqp_link: tuple[LocalToxiproxy, int]) -> None:
    proxy, port = amqp_link
    channel = connection.channel()
    queue, routing_key = slot_queue(channel)
    channel.confirm_delivery()
    confirm_one_by_one(channel, routing_key, [b"1", b"2"])
    linked, held = hold_two(broker, port, queue)
    try:
        proxy.client.set_enabled("rabbitmq", False)  # closes both sides of every connection through it
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pump_until(linked, lambda: False, "the client sees its connection closed")
    finally:
        proxy.client.set_enabled("rabbitmq", True)
    again, redelivered = hold_two(broker, port, queue)  # reconnect through the link
    try:
        assert held == [b"1", b"2"] and redelivered == [b"1", b"2"]
        assert ready_count(channel, queue) == 0
    finally:
        again.close()  # unacked: back to the queue, which the test leaves behind


@nightly  # 3 heartbeat intervals: 6 s
def test_a_frozen_link_holds_unacked_deliveries_until_the_heartbeat_expires(
        broker: LocalRabbitMQ, connection: Any, amqp_link: tuple[LocalToxiproxy, int]) -> None:
    """A link that stops carrying bytes without closing: the broker keeps the deliveries until it misses the
    client's heartbeats, then closes the connection and requeues them; ``consumer_timeout`` does not free them."""
    proxy, port = amqp_link
    channel = connection.channel()
    queue, routing_key = slot_queue(channel, "normal")
    channel.confirm_delivery()
    confirm_one_by_one(channel, routing_key, [b"1", b"2"])
    linked, _held = hold_two(broker, port, queue, heartbeat=HEARTBEAT_S)
    frozen_at = time.monotonic()
    for stream in toxiproxy_module.STREAMS:
        proxy.client.add_toxic("rabbitmq", f"freeze-{stream}", "timeout", stream, {"timeout": 0})
    try:
        assert ready_count(channel, queue) == 0  # frozen, not closed: still held
        back = [get_until(channel, queue, "the broker gives up on the frozen connection") for _ in range(2)]
        # Two missed heartbeats at least (3 intervals measured); longer than the consumer timeout too: the channel
        # that timeout closes cannot finish closing (no close-ok comes through the frozen link), so it keeps them.
        assert time.monotonic() - frozen_at >= 2 * HEARTBEAT_S > CONSUMER_TIMEOUT_MS / 1000
        assert [body for _m, _p, body in back] == [b"1", b"2"] and all(m.redelivered for m, _p, _b in back)
        for method, _props, _body in back:
            channel.basic_ack(method.delivery_tag)
    finally:
        proxy.client.reset()
        with contextlib.suppress(pika.exceptions.AMQPError):
            linked.close()


# --- restart and stop (last: they restart and stop the module's node) ------------------------------


def _ours(broker: LocalRabbitMQ) -> set[int]:
    """Processes left of this node: any listening on one of its ports (an epmd a node started with ``-daemon``
    takes its port from the environment, not its command line) or a VM whose command line names its epmd port."""
    ports = {broker.amqp_port, broker.dist_port, broker.epmd_port}
    pids = {c.pid for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port in ports and c.pid is not None}
    marker = f"-epmd_port {broker.epmd_port}"
    return pids | {p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])}


@nightly  # a restart costs a second boot (6-16 s here)
def test_a_restart_keeps_durable_messages(broker: LocalRabbitMQ) -> None:
    with broker.connect() as connection:
        channel = connection.channel()
        queue, routing_key = slot_queue(channel)
        channel.confirm_delivery()
        confirm_one_by_one(channel, routing_key, [b"kept"])
    broker.restart()
    with broker.connect() as connection:
        assert drain(connection.channel(), queue) == [b"kept"]


def test_stop_leaves_no_process(broker: LocalRabbitMQ) -> None:
    assert _ours(broker) == {broker.pid, broker.epmd_pid}
    broker.stop()
    assert _ours(broker) == set()
