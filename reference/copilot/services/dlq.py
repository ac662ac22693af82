"""The broker's dead letters (RocketMQ ``%DLQ%<group>``) in the dead_letter table, and their re-drive.

The consumer dead-letters a message itself (reference.copilot.services.consumer) when its handler keeps
failing: it records each failure, writes the dead letter, and acks. Some messages never get that far:
a body that is not one of ours (left unacked on purpose), a handler that kills its process on every
delivery, or a failure-recording transaction that cannot commit. RocketMQ redelivers those
``retryMaxTimes + 1`` times and then moves them to ``%DLQ%<group>``. :func:`drain_broker_dead_letters`
reads that queue and records each message in the same dead_letter table, with the failure history the
consumer did manage to write plus the broker's verdict, unless the row is already there; only then is
the DLQ message acked (ack after commit). :func:`redrive_to_broker` republishes a dead letter to the
original topic with its original event id (consumers dedupe on it, so a re-drive of something that did
take effect is harmless).

The reference has one topic for every task event, so "the original topic" is the adapter's topic.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from reference.copilot.effects import Delivery, Message, Tx
from reference.copilot.models import DeadLetter, EventFailure

BROKER_DLQ = "BROKER_DLQ"
UNDECODABLE = "UNDECODABLE"  # reference.copilot.adapters.broker_rocketmq.foreign_message
Transact = Callable[[Callable[[Tx], Any]], Any]  # Runtime.transact


def _history(tx: Tx, group: str, event_id: uuid.UUID) -> list[dict[str, Any]]:
    return [
        {"attempt": f.delivery_attempt, "code": f.error_code, "message": f.error_message, "at": f.at.isoformat()}
        for f in tx.session.scalars(select(EventFailure).where(EventFailure.consumer == group,
                                                               EventFailure.event_id == event_id)
                                    .order_by(EventFailure.id))
    ]


def record_broker_dead_letter(tx: Tx, group: str, d: Delivery) -> bool:
    """Record one message of ``%DLQ%<group>``. True if a row was written: new, or one that had been
    re-driven and died again (its history grows). False if the consumer (or an earlier drain) already
    holds it as a live dead letter."""
    eid = uuid.UUID(d.message.event_id)
    raw = d.receipt
    verdict: dict[str, Any] = {"attempt": d.delivery_attempt, "code": BROKER_DLQ, "at": tx.now.isoformat(),
               "message": f"moved to %DLQ%{group} by the broker (message id {getattr(raw, 'message_id', '?')})"}
    existing = tx.session.scalars(select(DeadLetter).where(DeadLetter.consumer == group,
                                                           DeadLetter.event_id == eid)).first()
    if existing is not None:
        if existing.redriven_at is None:
            return False
        existing.history = [*_history(tx, group, eid), verdict]
        existing.error_code, existing.error_message = BROKER_DLQ, verdict["message"]
        existing.attempts += 1
        existing.redriven_at = None
        return True
    history = [*_history(tx, group, eid), verdict]
    last = history[-2] if len(history) > 1 else verdict
    tx.session.add(DeadLetter(
        consumer=group, event_id=eid, task_id=uuid.UUID(d.message.task_id) if d.message.task_id else None,
        event_type=d.message.event_type, payload=d.message.as_json(), error_code=str(last["code"]),
        error_message=str(last["message"])[:2000], attempts=max(d.delivery_attempt, len(history) - 1),
        history=history, created_at=tx.now, redrive_count=0))
    return True


def drain_broker_dead_letters(broker: Any, transact: Transact, group: str, max_messages: int = 256) -> int:
    """Read ``%DLQ%<group>`` and record every message (one transaction per batch, acked after commit).
    Returns how many rows were written."""
    written = 0

    def record(batch: list[Delivery]) -> None:
        nonlocal written
        written += sum(transact(lambda tx: [record_broker_dead_letter(tx, group, d) for d in batch]))

    broker.dead_letters(group, max_messages, on_batch=record)
    return written


def redrive_to_broker(broker: Any, transact: Transact, dead_letter_id: int, operator: str) -> str:
    """Publish a dead letter again to the original topic with its event id, then mark it re-driven (and
    audit that). A publish that fails changes nothing; a mark that fails after the publish leaves a
    second re-drive possible, which consumers absorb (they dedupe on the event id)."""
    from reference.copilot.errors import Conflict, NotFound
    from reference.copilot.services.consumer import not_dead
    from reference.copilot.tasks import add_audit

    def load(tx: Tx) -> DeadLetter:
        # locked and read afresh: of concurrent marks one goes on, the others find it re-driven
        dl = tx.session.get(DeadLetter, dead_letter_id, with_for_update=True, populate_existing=True)
        if dl is None:
            raise NotFound("DEAD_LETTER_NOT_FOUND", f"dead letter {dead_letter_id} does not exist")
        if dl.redriven_at is not None:
            raise not_dead(dead_letter_id)
        if dl.event_type == UNDECODABLE:
            raise Conflict("NOT_REDRIVABLE", f"dead letter {dead_letter_id} is not one of our messages")
        return dl

    message = transact(lambda tx: Message.from_json(load(tx).payload))
    broker.publish(message)

    def mark(tx: Tx) -> None:
        dl = load(tx)
        dl.redriven_at, dl.redrive_count = tx.now, dl.redrive_count + 1
        if dl.task_id is not None:
            add_audit(tx, actor=operator, action="DEAD_LETTER_REDRIVEN", task_id=dl.task_id,
                      detail={"event_id": str(dl.event_id), "consumer": dl.consumer, "via": "broker"})

    transact(mark)
    return message.event_id
