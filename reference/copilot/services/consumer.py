"""Consumers (seed 000 §6.4): processed_event in the same transaction as the state change, ack only
after commit, failure history per delivery, dead letters with that history, and re-drive."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from sqlalchemy import select

from kernel.logs import DEFECT_MARK, FailedRounds, is_defect, one_line
from reference.copilot import bugs, coverage
from reference.copilot.alerts import alert
from reference.copilot.db import insert_ignore
from reference.copilot.effects import Ack, Delivery, Message, Receive, Sleep, Transact, Tx, Work
from reference.copilot.errors import RetryableError
from reference.copilot.models import DeadLetter, EventFailure, ProcessedEvent, TaskEventOutbox
from reference.copilot.policy import Policy
from reference.copilot.services.cancel import send_cancel
from reference.copilot.services.dispatch import dispatch_task
from reference.copilot.services.reports import upload_report
from reference.copilot.states import TaskStatus as S
from reference.copilot.tasks import TASK_CANCEL_REQUESTED, TASK_COMPLETED, TASK_CREATED, load, transition

log = logging.getLogger(__name__)

DISPATCHER = "dispatcher"
REPORT_WORKER = "report-worker"


CONSUMED_UNACKED = coverage.window(
    "consume→ack", "a fault hit a consumer after its transaction committed and before it acked: the broker "
    "redelivers an event that already took effect",
    ("consume.task_created", "consume.cancel_requested", "consume.task_completed"), ("ack",),
    roles=("dispatcher", "report-worker"))


def mark_processed(tx: Tx, consumer: str, msg: Message) -> bool:
    """True when this consumer sees the event for the first time (in this transaction)."""
    if bugs.active(bugs.CONSUMER_NO_DEDUP):
        return True  # INJECTED BUG consumer-no-dedup: no processed_event, every delivery is "new"
    return insert_ignore(tx.flushed(), ProcessedEvent, {
        "consumer": consumer, "event_id": uuid.UUID(msg.event_id), "task_id": uuid.UUID(msg.task_id),
        "processed_at": tx.now}, ["consumer", "event_id"])


def _accept_created(tx: Tx, msg: Message) -> bool:
    task = load(tx, msg.task_id)
    if task is None:
        raise RetryableError("TASK_NOT_FOUND", f"event {msg.event_id} names unknown task {msg.task_id}")
    if not mark_processed(tx, DISPATCHER, msg):
        return False  # duplicate delivery: already took effect
    if task.status != S.CREATED:
        return task.status == S.QUEUED  # moved on (reconciler); QUEUED still wants a dispatch
    transition(tx, task, S.QUEUED, actor=DISPATCHER, action="QUEUED", correlation_id=msg.event_id)
    return True


def on_task_created(msg: Message, policy: Policy) -> Work[str]:
    proceed = yield Transact(lambda tx: _accept_created(tx, msg), "consume.task_created")
    if not proceed:
        return "duplicate"
    return (yield from dispatch_task(msg.task_id, policy))


def _first_time(consumer: str) -> Callable[[Tx, Message], bool]:
    def fn(tx: Tx, msg: Message) -> bool:
        if load(tx, msg.task_id) is None:
            raise RetryableError("TASK_NOT_FOUND", f"event {msg.event_id} names unknown task {msg.task_id}")
        return mark_processed(tx, consumer, msg)
    return fn


def on_cancel_requested(msg: Message, policy: Policy) -> Work[str]:
    if not (yield Transact(lambda tx: _first_time(DISPATCHER)(tx, msg), "consume.cancel_requested")):
        return "duplicate"
    return (yield from send_cancel(msg.task_id, policy))


def on_task_completed(msg: Message, policy: Policy) -> Work[str]:
    if not (yield Transact(lambda tx: _first_time(REPORT_WORKER)(tx, msg), "consume.task_completed")):
        return "duplicate"
    return (yield from upload_report(msg.task_id, policy))


Handler = Callable[[Message, Policy], Work[str]]
# Consumer group -> event type -> handler. Also the broker subscriptions (tag filters).
HANDLERS: dict[str, dict[str, Handler]] = {
    DISPATCHER: {TASK_CREATED: on_task_created, TASK_CANCEL_REQUESTED: on_cancel_requested},
    REPORT_WORKER: {TASK_COMPLETED: on_task_completed},
}


def _record_failure(tx: Tx, group: str, d: Delivery, code: str, message: str) -> None:
    tx.session.add(EventFailure(consumer=group, event_id=uuid.UUID(d.message.event_id),
                                delivery_attempt=d.delivery_attempt, error_code=code, error_message=message[:2000],
                                at=tx.now))


def _dead_letter(tx: Tx, group: str, d: Delivery, code: str, message: str) -> None:
    eid = uuid.UUID(d.message.event_id)
    history = [
        {"attempt": f.delivery_attempt, "code": f.error_code, "message": f.error_message, "at": f.at.isoformat()}
        for f in tx.session.scalars(select(EventFailure).where(EventFailure.consumer == group,
                                                               EventFailure.event_id == eid)
                                    .order_by(EventFailure.id))
    ]
    existing = tx.session.scalars(select(DeadLetter).where(DeadLetter.consumer == group,
                                                           DeadLetter.event_id == eid)).first()
    if existing is not None:  # dead again after a re-drive: keep one row with the whole history
        existing.error_code, existing.error_message = code, message[:2000]
        existing.attempts += d.delivery_attempt
        existing.history, existing.redriven_at = history, None
        return
    tx.session.add(DeadLetter(
        consumer=group, event_id=eid, task_id=uuid.UUID(d.message.task_id), event_type=d.message.event_type,
        payload=d.message.as_json(), error_code=code, error_message=message[:2000],
        attempts=d.delivery_attempt, history=history, created_at=tx.now, redrive_count=0))


def consume_one(group: str, d: Delivery, policy: Policy) -> Work[bool]:
    """Handle one delivery. True: ack it (done, duplicate, or dead-lettered). False: leave it for redelivery."""
    handler = HANDLERS[group].get(d.message.event_type)
    if handler is None:
        return True  # not this group's event type
    try:
        yield from handler(d.message, policy)
        return True
    except Exception as exc:
        code = exc.code if isinstance(exc, RetryableError) else type(exc).__name__
        text = str(exc)
        if is_defect(exc):
            log.error("%s: handling %s failed %s%s", group, d.message.event_id, DEFECT_MARK, one_line(exc),
                      exc_info=exc)
        yield Transact(lambda tx: _record_failure(tx, group, d, code, text), "consume.failure")
        # INJECTED BUG dead-letter-early: at the first failure
        if d.delivery_attempt >= policy.max_deliveries or bugs.active(bugs.DEAD_LETTER_EARLY):
            yield Transact(lambda tx: _dead_letter(tx, group, d, code, text), "consume.dead_letter")
            if not bugs.active(bugs.DEAD_LETTER_SILENT):  # INJECTED BUG dead-letter-silent: nobody is paged
                # for a person to look into, like a DEAD outbox row or report (seed 000 §5.5)
                alert("DEAD_LETTER", event_id=d.message.event_id, consumer=group, task_id=d.message.task_id,
                      attempts=d.delivery_attempt, error=code)
            return not bugs.active(bugs.DEAD_LETTER_UNACKED)  # INJECTED BUG dead-letter-unacked: left in the broker
        return False


def consumer_loop(group: str, policy: Policy) -> Work[None]:
    receiving = FailedRounds(log, f"{group}: receive")
    while True:
        try:
            batch = yield Receive(group, policy.consumer_batch, policy.invisible_s)
            receiving.succeeded()
        except Exception as exc:  # the broker is away: poll again
            receiving.failed(exc)
            batch = []
        if not batch:
            yield Sleep(policy.poll_idle_s)
            continue
        for d in batch:
            try:
                ack = yield from consume_one(group, d, policy)
            except Exception as exc:  # not even its failure was recorded: it is delivered again
                if is_defect(exc):
                    log.error("%s: message %s not handled, left for redelivery, %s%s", group, d.message.event_id,
                              DEFECT_MARK, one_line(exc), exc_info=exc)
                else:
                    log.warning("%s: message %s not handled, left for redelivery: %s", group, d.message.event_id,
                                one_line(exc))
                ack = bugs.active(bugs.ACK_UNRECORDED_FAILURE)  # INJECTED BUG ack-unrecorded-failure: acked, lost
            if ack:
                try:
                    yield Ack(group, d)
                except Exception as exc:  # handled and recorded: its redelivery is a duplicate, deduplicated
                    if bugs.active(bugs.ACK_FAILURE_ENDS_LOOP):
                        raise  # INJECTED BUG ack-failure-ends-loop
                    log.warning("%s: ack of %s failed: %s", group, d.message.event_id, one_line(exc))


def not_dead(dead_letter_id: int) -> Exception:
    """A re-drive of a dead letter that is not waiting (re-driven and not failed again): 409 NOT_DEAD, as for the
    outbox and reports (services.ops)."""
    from reference.copilot.errors import Conflict

    return Conflict("NOT_DEAD", f"dead letter {dead_letter_id} was re-driven and has not failed again",
                    item_status="REDRIVEN")


def redrive(tx: Tx, dead_letter_id: int, operator: str, reason: str = "") -> str:
    """Publish a dead letter again through the outbox with the same event id (it never took effect)."""
    from reference.copilot.errors import Conflict, NotFound
    from reference.copilot.tasks import add_audit, item_correlation

    # Locked and read afresh: of concurrent re-drives one goes on, the others then find it re-driven (as the outbox's).
    dl = tx.session.get(DeadLetter, dead_letter_id, with_for_update=True, populate_existing=True)
    if dl is None:
        raise NotFound("DEAD_LETTER_NOT_FOUND", f"dead letter {dead_letter_id} does not exist")
    if dl.redriven_at is not None:
        raise not_dead(dead_letter_id)
    row = tx.session.get(TaskEventOutbox, dl.event_id)
    if row is None:
        raise Conflict("EVENT_NOT_IN_OUTBOX", f"event {dl.event_id} is not in the outbox")
    if not bugs.active(bugs.REDRIVE_UNPUBLISHED):  # INJECTED BUG redrive-unpublished: marked, never sent again
        row.status, row.available_at, row.sent_at, row.attempts, row.dead_at = "PENDING", tx.now, None, 0, None
    dl.redriven_at, dl.redrive_count = tx.now, dl.redrive_count + 1
    add_audit(tx, actor=operator, action="DEAD_LETTER_REDRIVEN", task_id=dl.task_id,
              correlation_id=item_correlation(str(dl.event_id)),
              detail={"event_id": str(dl.event_id), "consumer": dl.consumer, **({"reason": reason} if reason else {})})
    return str(dl.event_id)
