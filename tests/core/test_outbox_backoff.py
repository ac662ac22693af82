"""The outbox's backoff (seed 000 §5.5; invariant I30). A row backs off by its own claims, so its budget lasts as the
policy says whatever its publisher did in between; a publisher pauses longer after each failed round in a row, and a
round with nothing to claim leaves that count alone. Until 2026-12-06 both followed the publisher's failed rounds,
which any empty claim reset: a 20-minute broker outage sent rows DEAD that the policy promised an hour."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from core_db_support import make_db

from reference.copilot.effects import (
    AwaitOutbox,
    BrokerUnavailable,
    Jitter,
    Message,
    Publish,
    Sleep,
    Transact,
    run_sync,
)
from reference.copilot.models import TaskEventOutbox
from reference.copilot.policy import Policy, RetryPolicy
from reference.copilot.services.outbox import publish_batch, publisher_loop, release
from reference.copilot.tasks import TASK_CREATED

RETRY = RetryPolicy(attempts=10, base_s=1.0, cap_s=30.0)


@pytest.mark.parametrize("n", [0, 1, 4, 9])
def test_a_retry_waits_between_half_and_all_of_its_step(n: int) -> None:
    assert RETRY.delay(n, 0.0) == RETRY.min_delay(n)
    assert RETRY.min_delay(n) < RETRY.delay(n, 0.5) < RETRY.delay(n, 0.999) < RETRY.max_delay(n)


def test_a_refused_publish_spreads_its_retry_over_the_whole_jitter_range() -> None:
    """Seed 000 §5.5: backoff with jitter. The publisher draws its fraction over [0, 1) (the shell's uniform draw of
    Jitter(upper)): a draw at the top of the range puts the row near the end of its step, not at its start."""
    db = make_db()
    task_id = db.insert_task("CREATED", 0)
    event_id = uuid.uuid4()
    db.runtime.transact(lambda tx: tx.session.add(TaskEventOutbox(
        id=event_id, task_id=task_id, event_type=TASK_CREATED, task_version=0, payload={}, status="PENDING",
        attempts=0, available_at=tx.now, created_at=tx.now)))
    top = 0.999
    nows = []

    def perform(effect):
        if isinstance(effect, Transact):
            return db.runtime.transact(lambda tx: (nows.append(tx.now), effect.fn(tx))[1])
        if isinstance(effect, Publish):
            raise BrokerUnavailable("down")
        assert isinstance(effect, Jitter), effect
        return effect.upper * top  # the shell's uniform draw in [0, upper), at its top

    assert run_sync(publish_batch(Policy(outbox_retry=RETRY)), perform) == (0, False)
    row = db.runtime.transact(lambda tx: tx.session.get(TaskEventOutbox, event_id))
    waited = (row.available_at.replace(tzinfo=None) - nows[-1].replace(tzinfo=None)).total_seconds()
    assert waited == pytest.approx(RETRY.delay(0, top), abs=1e-3)  # after its first claim


def test_a_released_row_is_due_again_after_the_step_of_its_own_claims() -> None:
    db = make_db()
    task_id = db.insert_task("CREATED", 0)
    ids = {claims: uuid.uuid4() for claims in (1, 3, 10)}

    def add(tx) -> None:
        for claims, event_id in ids.items():
            tx.session.add(TaskEventOutbox(id=event_id, task_id=task_id, event_type=TASK_CREATED, task_version=0,
                                           payload={}, status="PENDING", attempts=claims, available_at=tx.now,
                                           created_at=tx.now))
    db.runtime.transact(add)

    def put_back(tx):
        dead = release(tx, [str(i) for i in ids.values()], 0.0, "down", RETRY)
        return tx.now, dead

    now, dead = db.runtime.transact(put_back)
    assert dead == [str(ids[10])]  # its tenth claim spent the budget
    rows = {r.id: r for r in db.runtime.transact(lambda tx: tx.session.query(TaskEventOutbox).all())}
    due = {claims: rows[ids[claims]].available_at.replace(tzinfo=None) - now.replace(tzinfo=None)
           for claims in (1, 3)}
    assert due == {1: timedelta(seconds=RETRY.min_delay(0)), 3: timedelta(seconds=RETRY.min_delay(2))}
    assert rows[ids[10]].status == "DEAD"


class _Stop(BaseException):  # not Exception: the loop carries on after those (a database outage)
    pass


def test_the_publisher_pauses_longer_after_each_failed_round_and_an_empty_claim_keeps_the_count() -> None:
    """Rounds: refused, nothing to claim, refused, refused, published, refused. Pauses: 1 s, then (after the empty
    round, which waits for work) 2 s and 4 s, then after the published round the count starts again: 1 s."""
    policy = Policy(outbox_retry=RETRY)
    message = Message(str(uuid.uuid4()), TASK_CREATED, str(uuid.uuid4()), 0)
    rounds = iter(["refused", "empty", "refused", "refused", "published", "refused"])
    waits: list[tuple[str, float]] = []
    current = {"round": ""}

    def perform(effect):
        if isinstance(effect, Transact):
            if effect.name == "outbox.claim":
                current["round"] = next(rounds, "stop")
                if current["round"] == "stop":
                    raise _Stop
                return [] if current["round"] == "empty" else [message]
            return []  # mark_sent, release: nothing went DEAD
        if isinstance(effect, Publish) and current["round"] == "refused":
            raise BrokerUnavailable("down")
        if isinstance(effect, Jitter):
            return 0.0
        if isinstance(effect, Sleep):
            waits.append(("pause", effect.seconds))
        if isinstance(effect, AwaitOutbox):
            waits.append(("await", effect.timeout_s))
        return None

    with pytest.raises(_Stop):
        run_sync(publisher_loop(policy), perform)
    assert waits == [("pause", 1.0), ("await", policy.outbox_wait_s), ("pause", 2.0), ("pause", 4.0),
                     ("await", policy.outbox_wait_s), ("pause", 1.0)]
    assert [policy.publisher_pause(k) for k in (1, 2, 6, 7, 100)] == [1.0, 2.0, 30.0, 30.0, 30.0]
