"""The broker model (systems/inspection/broker.py) driven by stack/amqp_sequence.py's sequences, in virtual time: the
model half of the parity test against a real RabbitMQ node (tests/inspection/test_broker_parity.py).

The sequence's queue is the model's queue of slot 0, high priority; each sequence channel is a connection of its
own (the model keys channels by connection and slot). ``reject-publish-dlx`` is the model's ``drop-head-overflow``
bug (what 3.10 does with the seed's overflow mode)."""

from __future__ import annotations

from datetime import UTC, datetime

from reference.inspection.bugs import BUGS
from reference.inspection.effects import (
    HIGH,
    PUBLISH_ACK,
    PUBLISH_NACK,
    PUBLISH_RETURNED,
    Delivery,
    queue_name,
    routing_key,
)
from stack.amqp_sequence import Close, Consume, Delivered, Outcome, Publish, Sequence, SequenceError, Settle, validate
from systems.inspection.broker import BrokerModel

SLOT = 0
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # virtual time: nothing in a sequence waits, so it never moves
_PUBLISH_OUTCOMES = {PUBLISH_ACK: "ack", PUBLISH_NACK: "nack", PUBLISH_RETURNED: "returned"}


class _ModelRun:
    def __init__(self, model: BrokerModel) -> None:
        self.model = model
        self.held: dict[str, dict[str, Delivery]] = {}  # channel -> id -> delivery
        self.outcome = Outcome()

    def publish(self, step: Publish) -> None:
        key = "parity.nowhere" if step.unroutable else routing_key(SLOT, HIGH)
        for message_id in step.ids:
            self.outcome.publishes.append(_PUBLISH_OUTCOMES[self.model.publish(key, {"message_id": message_id})])

    def consume(self, step: Consume) -> None:
        self.model.consume(step.channel, SLOT)
        for d in self.model.fetch(step.channel, ((SLOT, HIGH, step.prefetch),), EPOCH):
            self.held.setdefault(step.channel, {})[d.message_id] = d
            # the model counts deliveries; x-delivery-count counts the ones before this
            self.outcome.deliveries.append(Delivered(d.message_id, d.delivery_count > 1, d.delivery_count - 1))
        self.model.cancel(step.channel, SLOT)

    def settle(self, step: Settle) -> None:
        held = self.held.get(step.channel, {})
        for message_id in step.ids:
            if message_id not in held:
                raise SequenceError(f"channel {step.channel} holds no {message_id!r}")
            delivery = held.pop(message_id)
            (self.model.ack if step.how == "ack" else self.model.nack)((delivery,))

    def close(self, step: Close) -> None:
        self.model.close_connection(step.channel, "closed by the client")
        self.held.pop(step.channel, None)

    def finish(self) -> Outcome:
        self.outcome.ready = [str(m["message_id"]) for m, _ in self.model.queues[queue_name(SLOT, HIGH)].ready]
        self.outcome.held = {name: list(ids) for name, ids in self.held.items() if ids}
        self.outcome.dead_letters = [(str(m["message_id"]), reason) for m, reason in self.model.dead_letters]
        return self.outcome


def run_on_model(sequence: Sequence) -> Outcome:
    validate(sequence)
    spec = sequence.queue
    model = BrokerModel(total_slots=1)
    model.max_length = spec.max_length
    model.delivery_limit = spec.delivery_limit
    model.dead_letter_exchange = spec.dead_letter_exchange
    dropping = spec.max_length is not None and spec.overflow == "reject-publish-dlx"
    run = _ModelRun(model)
    with BUGS.injected("drop-head-overflow" if dropping else None):
        for step in sequence.steps:
            if isinstance(step, Publish):
                run.publish(step)
            elif isinstance(step, Consume):
                run.consume(step)
            elif isinstance(step, Settle):
                run.settle(step)
            elif isinstance(step, Close):
                run.close(step)
    return run.finish()
