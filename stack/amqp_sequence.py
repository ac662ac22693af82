"""One AMQP sequence format and its runner on a real RabbitMQ node (stack/rabbitmq.py): a parity test runs the same
sequence on a broker model and compares the observable outcomes.

A sequence declares one quorum queue (single active consumer, optional ``x-max-length`` with an overflow mode, a
dead-letter exchange, ``x-delivery-limit``), then runs steps in order: publishes (mandatory, confirmed one by one),
consumes (a consumer with a prefetch, kept until it has what it may hold, then cancelled: its deliveries stay held),
acks, nacks and rejects (both requeue), channel closes. The outcome is what a client and an operator can see: per
publish "ack", "nack" or "returned" (a basic.return before its ack); per delivery the message id, the redelivered
flag and ``x-delivery-count``; at the end the ready messages in queue order, what each channel still holds, and the
dead letters in order with their reason."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

EXCHANGE = "sortie.parity"
DEAD_LETTER_EXCHANGE = "sortie.parity.dlx"
DEADLINE_S = 30.0  # the longest the broker may take to settle after a step (a loaded machine)


@dataclass(frozen=True)
class QueueSpec:
    max_length: int | None = None
    overflow: str = "reject-publish"  # or "reject-publish-dlx"
    dead_letter_exchange: bool = False
    delivery_limit: int | None = None


@dataclass(frozen=True)
class Publish:
    ids: tuple[str, ...]
    unroutable: bool = False  # published with a routing key no queue is bound to


@dataclass(frozen=True)
class Consume:
    channel: str
    prefetch: int


@dataclass(frozen=True)
class Settle:
    channel: str
    ids: tuple[str, ...]
    how: str = "ack"  # "ack", "nack" (requeue) or "reject" (requeue), one basic.* per id in order


@dataclass(frozen=True)
class Close:
    channel: str


Step = Publish | Consume | Settle | Close
SETTLE_KINDS = ("ack", "nack", "reject")


@dataclass(frozen=True)
class Sequence:
    name: str
    queue: QueueSpec
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Delivered:
    id: str
    redelivered: bool
    delivery_count: int  # x-delivery-count: 0 on the first delivery


@dataclass
class Outcome:
    publishes: list[str] = field(default_factory=list)
    deliveries: list[Delivered] = field(default_factory=list)
    ready: list[str] = field(default_factory=list)
    held: dict[str, list[str]] = field(default_factory=dict)  # channel -> ids it holds unacked at the end
    dead_letters: list[tuple[str, str]] = field(default_factory=list)  # (id, reason) in dead-lettering order


class SequenceError(ValueError):
    """A sequence that asks for something impossible (settling a message the channel does not hold)."""


def validate(sequence: Sequence) -> None:
    """Refuse what no run can observe: an unknown settle, or a dropping queue without a dead-letter exchange (the
    runner accounts for every confirmed message, so a silently dropped one would never let it settle)."""
    for step in sequence.steps:
        if isinstance(step, Settle) and step.how not in SETTLE_KINDS:
            raise SequenceError(f"{sequence.name}: settle how={step.how!r} is not one of {SETTLE_KINDS}")
    spec = sequence.queue
    if spec.overflow not in ("reject-publish", "reject-publish-dlx"):
        raise SequenceError(f"{sequence.name}: overflow {spec.overflow!r} is not reject-publish(-dlx)")
    if spec.max_length is not None and spec.overflow == "reject-publish-dlx" and not spec.dead_letter_exchange:
        raise SequenceError(f"{sequence.name}: reject-publish-dlx needs a dead-letter exchange here")


def queue_arguments(spec: QueueSpec) -> dict[str, Any]:
    args: dict[str, Any] = {"x-queue-type": "quorum", "x-single-active-consumer": True}
    if spec.max_length is not None:
        args.update({"x-max-length": spec.max_length, "x-overflow": spec.overflow})
    if spec.dead_letter_exchange:
        args["x-dead-letter-exchange"] = DEAD_LETTER_EXCHANGE
    if spec.delivery_limit is not None:
        args["x-delivery-limit"] = spec.delivery_limit
    return args


class _RealRun:
    """One sequence on a real node: one connection, a control channel, a channel per name."""

    _queues = itertools.count(1)

    def __init__(self, connection: Any, spec: QueueSpec) -> None:
        import pika

        self.pika = pika
        self.connection = connection
        self.control = connection.channel()
        n = next(self._queues)
        self.queue, self.key = f"sortie.parity.{n}.{time.monotonic_ns()}", f"parity.{n}.{time.monotonic_ns()}"
        self.dead = f"{self.queue}.dead"
        self.control.exchange_declare(EXCHANGE, "direct", durable=True)
        self.control.exchange_declare(DEAD_LETTER_EXCHANGE, "direct", durable=True)
        self.control.queue_declare(self.queue, durable=True, arguments=queue_arguments(spec))
        self.control.queue_bind(self.queue, EXCHANGE, routing_key=self.key)
        self.control.queue_declare(self.dead, durable=True, arguments={"x-queue-type": "quorum"})
        self.control.queue_bind(self.dead, DEAD_LETTER_EXCHANGE, routing_key=self.key)
        self.publisher = connection.channel()
        self.publisher.confirm_delivery()
        self.channels: dict[str, Any] = {}
        self.held: dict[str, dict[str, int]] = {}  # channel -> id -> delivery tag
        self.live = 0  # confirmed into the queue and not acked by a consumer: ready, held or dead-lettered
        self.outcome = Outcome()

    def count(self, queue: str) -> int:
        return int(self.control.queue_declare(queue, passive=True).method.message_count)

    def settled(self) -> bool:
        held = sum(len(ids) for ids in self.held.values())
        return self.count(self.queue) + held + self.count(self.dead) == self.live

    def wait(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"not within {DEADLINE_S:.0f}s: {what}")
            self.connection.process_data_events(time_limit=0.05)

    def publish(self, step: Publish) -> None:
        key = f"{self.key}.nowhere" if step.unroutable else self.key
        props = self.pika.BasicProperties(delivery_mode=2, message_id=None)
        for message_id in step.ids:
            try:
                self.publisher.basic_publish(EXCHANGE, key, message_id.encode(), props, mandatory=True)
                self.outcome.publishes.append("ack")
                self.live += 1
            except self.pika.exceptions.UnroutableError:  # raised only when the return came before the ack
                self.outcome.publishes.append("returned")
            except self.pika.exceptions.NackError:
                self.outcome.publishes.append("nack")

    def channel(self, name: str) -> Any:
        if name not in self.channels:
            self.channels[name] = self.connection.channel()
            self.held[name] = {}
        return self.channels[name]

    def consume(self, step: Consume) -> None:
        channel, held = self.channel(step.channel), self.held.setdefault(step.channel, {})
        expected = min(step.prefetch, self.count(self.queue))

        def on_message(_ch: Any, method: Any, props: Any, body: bytes) -> None:
            held[body.decode()] = method.delivery_tag
            count = int((props.headers or {}).get("x-delivery-count", 0))
            self.outcome.deliveries.append(Delivered(body.decode(), bool(method.redelivered), count))

        before = len(self.outcome.deliveries)
        channel.basic_qos(prefetch_count=step.prefetch)
        tag = channel.basic_consume(self.queue, on_message)
        self.wait(lambda: len(self.outcome.deliveries) - before >= expected, f"{expected} deliveries")
        channel.basic_cancel(tag)

    def settle(self, step: Settle) -> None:
        channel, held = self.channel(step.channel), self.held.get(step.channel, {})
        for message_id in step.ids:
            if message_id not in held:
                raise SequenceError(f"channel {step.channel} holds no {message_id!r}")
            tag = held.pop(message_id)
            if step.how == "ack":
                channel.basic_ack(tag)
                self.live -= 1
            elif step.how == "nack":
                channel.basic_nack(tag, requeue=True)
            else:
                channel.basic_reject(tag, requeue=True)

    def close(self, step: Close) -> None:
        self.channels.pop(step.channel).close()
        self.held.pop(step.channel)

    def finish(self) -> Outcome:
        reader = self.connection.channel()  # basic.get is refused on a single-active-consumer quorum queue
        ready = self.count(self.queue)
        if ready:
            reader.basic_consume(self.queue, lambda _ch, _m, _p, body: self.outcome.ready.append(body.decode()),
                                 auto_ack=True)
            self.wait(lambda: len(self.outcome.ready) >= ready, f"the {ready} ready messages")
        while (got := reader.basic_get(self.dead, auto_ack=True))[0] is not None:
            reason = str(got[1].headers["x-death"][0]["reason"])
            self.outcome.dead_letters.append((got[2].decode(), reason))
        self.outcome.held = {name: list(ids) for name, ids in self.held.items() if ids}
        for channel in self.channels.values():
            channel.close()
        self.control.queue_delete(self.queue)
        self.control.queue_delete(self.dead)
        return self.outcome


def run_on_rabbitmq(connection: Any, sequence: Sequence) -> Outcome:
    """Run ``sequence`` on a real node through ``connection`` (a ``pika.BlockingConnection``), waiting after each
    step until the broker has settled it (every confirmed message ready, held or dead-lettered)."""
    validate(sequence)
    run = _RealRun(connection, sequence.queue)
    actions: dict[type, Callable[[Any], None]] = {Publish: run.publish, Consume: run.consume, Settle: run.settle,
                                                  Close: run.close}
    for step in sequence.steps:
        actions[type(step)](step)
        run.wait(run.settled, f"{sequence.name}: the broker settles after {step}")
    return run.finish()
