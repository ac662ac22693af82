"""The outbox publisher (seed 000 §5.2): claim a batch, publish after commit, mark sent after the
broker's ack. A crash between ack and mark resends: consumers dedupe on the event id.

An idle publisher waits for a notification rather than polling: the database notifies ``OUTBOX_CHANNEL`` when a
transaction that wrote a PENDING row commits (a PostgreSQL trigger, migration 0007; the simulation's database
emulates it), and the publisher claims again at once. It still claims every ``Policy.outbox_wait_s`` without one."""

from __future__ import annotations

import functools
import logging
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import bindparam, select, update

from kernel.logs import FailedRounds
from reference.copilot import bugs, coverage
from reference.copilot.alerts import alert
from reference.copilot.db import as_utc
from reference.copilot.effects import (
    AwaitOutbox,
    BrokerUnavailable,
    Jitter,
    Message,
    Publish,
    Sleep,
    Transact,
    Tx,
    Work,
)
from reference.copilot.models import TaskEventOutbox
from reference.copilot.policy import Policy, RetryPolicy

log = logging.getLogger(__name__)
_OUTBOX = TaskEventOutbox.__table__
ACTOR = "outbox-publisher"
# The notification channel of committed PENDING outbox rows (PostgreSQL LISTEN/NOTIFY).
OUTBOX_CHANNEL = "task_event_outbox"
# A publisher's transactions, by their Transact names. Both shells record them in the history (reference.copilot.runtime
# RECORDED_TRANSACTIONS), so the checkers see every round of a publisher: what a claim took, and when (I36, I37).
CLAIM, MARK_SENT, RELEASE = "outbox.claim", "outbox.mark_sent", "outbox.release"

COMMITTED_UNPUBLISHED = coverage.window(
    "commit→publish", "a fault hit committed outbox rows before they were published: the publisher died or "
    "stopped after claiming them, or the broker refused the publish", (CLAIM,), ("publish",),
    roles=("publisher",))
ACKED_UNMARKED = coverage.window(
    "ack→mark-sent", "a fault hit the publisher after the broker acked and before the row was marked sent: the "
    "message goes out again, the consumers must dedupe it", ("publish",), (MARK_SENT,), roles=("publisher",))


# Built once: the publishers poll this every half second, mostly finding nothing.
_DUE = (select(_OUTBOX.c.id, _OUTBOX.c.event_type, _OUTBOX.c.task_id, _OUTBOX.c.task_version, _OUTBOX.c.payload,
               _OUTBOX.c.created_at)
        .where(_OUTBOX.c.status == "PENDING",
               _OUTBOX.c.available_at <= bindparam("now", type_=_OUTBOX.c.available_at.type))
        .order_by(_OUTBOX.c.created_at, _OUTBOX.c.id)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True))
# Built once, with expanding parameters, like _DUE: a claim and a mark-sent follow every batch of changes.
_LEASE = (update(_OUTBOX).where(_OUTBOX.c.id.in_(bindparam("ids", expanding=True)))
          .values(available_at=bindparam("until", type_=_OUTBOX.c.available_at.type), attempts=_OUTBOX.c.attempts + 1))
_MARK_SENT = (update(_OUTBOX).where(_OUTBOX.c.id.in_(bindparam("ids", expanding=True)), _OUTBOX.c.status == "PENDING")
              .values(status="SENT", sent_at=bindparam("at", type_=_OUTBOX.c.sent_at.type)))


def iso_utc(t: datetime) -> str:
    """ISO 8601 in UTC, as messages carry it."""
    return as_utc(t).astimezone(UTC).isoformat()


def claim(tx: Tx, limit: int, lease_s: float) -> list[Message]:
    """Claim due rows by pushing their availability past a lease: another publisher skips them, and a
    publisher that dies releases them when the lease runs out. SKIP LOCKED on PostgreSQL."""
    conn = tx.conn
    rows = conn.execute(_DUE, {"now": tx.now, "limit": limit}).all()
    if not rows:
        return []
    conn.execute(_LEASE, {"ids": [r.id for r in rows], "until": tx.now + timedelta(seconds=lease_s)})
    return [Message(str(r.id), r.event_type, str(r.task_id), r.task_version, dict(r.payload), iso_utc(r.created_at))
            for r in rows]


def mark_sent(tx: Tx, event_ids: list[str]) -> None:
    tx.conn.execute(_MARK_SENT, {"ids": [uuid.UUID(e) for e in event_ids], "at": tx.now})


def release(tx: Tx, event_ids: list[str], fraction: float, error: str, retry: RetryPolicy) -> list[str]:
    """Put claimed rows back after a failed publish. Each row backs off by its own claims: after its n-th it is due
    again in ``retry.delay(n - 1, fraction)``, so a row's budget lasts as long as its policy says, whatever the
    publisher did in between. A row that has had ``retry.attempts`` claims goes DEAD instead (audited; an operator
    re-drives it). Returns the dead rows' ids."""
    from reference.copilot.tasks import add_audit

    ids = [uuid.UUID(e) for e in event_ids]
    rows = tx.session.execute(
        select(TaskEventOutbox.id, TaskEventOutbox.task_id, TaskEventOutbox.event_type, TaskEventOutbox.attempts)
        .where(TaskEventOutbox.id.in_(ids), TaskEventOutbox.status == "PENDING").order_by(TaskEventOutbox.id)).all()
    spent = [r for r in rows if r.attempts >= retry.attempts]
    if spent:
        tx.session.execute(
            update(TaskEventOutbox).where(TaskEventOutbox.id.in_([r.id for r in spent]))
            .values(status="DEAD", dead_at=tx.now, last_error=error[:2000])
            .execution_options(synchronize_session=False))
        for r in spent:
            add_audit(tx, actor=ACTOR, action="OUTBOX_DEAD", task_id=r.task_id, result="DEAD",
                      detail={"event_id": str(r.id), "event_type": r.event_type, "attempts": r.attempts,
                              "error": error[:200]})
    by_claims: dict[int, list[uuid.UUID]] = {}
    for r in rows:
        if r.attempts < retry.attempts:
            by_claims.setdefault(r.attempts, []).append(r.id)
    for claims, same in sorted(by_claims.items()):  # one statement per claim count: usually one
        due = tx.now + timedelta(seconds=retry.delay(max(0, claims - 1), fraction))
        tx.session.execute(
            update(TaskEventOutbox).where(TaskEventOutbox.id.in_(same), TaskEventOutbox.status == "PENDING")
            .values(available_at=due, last_error=error[:2000])
            .execution_options(synchronize_session=False))
    return [str(r.id) for r in spent]


def publish_batch(policy: Policy) -> Work[tuple[int, bool]]:
    """Returns (sent, broker_ok)."""
    batch = yield Transact(lambda tx: claim(tx, policy.outbox_batch, policy.outbox_lease_s), CLAIM,
                           takes_work=True)
    sent: list[str] = []
    for i, msg in enumerate(batch):
        try:
            yield Publish(msg)
        except BrokerUnavailable as exc:
            coverage.reached(COMMITTED_UNPUBLISHED)
            error = str(exc)
            fraction = yield Jitter(1.0)
            rest = [m.event_id for m in batch[i:]]
            if sent and not bugs.active(bugs.REFUSED_ROUND_UNMARKED):  # INJECTED BUG refused-round-unmarked
                yield Transact(lambda tx: mark_sent(tx, sent), MARK_SENT)
            dead = yield Transact(functools.partial(release, event_ids=rest, fraction=fraction, error=error,
                                                    retry=policy.outbox_retry), RELEASE)
            for event_id in dead:
                alert("OUTBOX_DEAD", event_id=event_id, attempts=policy.outbox_retry.attempts, error=error)
            return len(sent), False
        sent.append(msg.event_id)
    if sent:
        yield Transact(lambda tx: mark_sent(tx, sent), MARK_SENT)
    return len(sent), True


def publisher_loop(policy: Policy) -> Work[None]:
    failed_rounds = 0
    rounds = FailedRounds(log, "publish round")
    while True:
        try:
            sent, ok = yield from publish_batch(policy)
            rounds.succeeded()
        except Exception as exc:  # the database is away: a failed round
            rounds.failed(exc)
            ok = False
        if not ok:
            failed_rounds += 1
            yield Sleep(policy.publisher_pause(failed_rounds))
            continue
        if sent:  # an empty claim says nothing about the broker: the count stays
            failed_rounds = 0
        if sent < policy.outbox_batch:
            yield AwaitOutbox(policy.outbox_wait_s, policy.poll_idle_s)
