"""The simulation's wake-ups, in virtual time: the outbox's notification trigger (migration 0007, emulated in
SQLite) fires when a transaction that wrote a PENDING row commits and never on a rollback; an idle publisher claims
at once on it, and still finds a row no notification announced within ``Policy.outbox_wait_s``; a broker receive
long-polls as RocketMQ's does (answers as soon as a message is published, or after the long-poll time)."""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import insert, update

from reference.copilot.effects import Message, Receive, Transact, Tx
from reference.copilot.models import TaskEventOutbox
from reference.copilot.policy import Policy
from reference.copilot.services.consumer import DISPATCHER
from reference.copilot.services.outbox import OUTBOX_CHANNEL, publisher_loop
from systems.copilot.sim import CopilotWorld

_OUTBOX = TaskEventOutbox.__table__


@pytest.fixture()
def world() -> Iterator[CopilotWorld]:
    w = CopilotWorld(1)
    yield w
    w.close()


def _row(tx: Tx, status: str = "PENDING") -> uuid.UUID:
    rid = tx.new_id()
    tx.session.execute(insert(_OUTBOX), [{
        "id": rid, "task_id": tx.new_id(), "event_type": "TaskCreated", "task_version": 0, "payload": {},
        "status": status, "attempts": 0, "available_at": tx.now, "created_at": tx.now}])
    return rid


def _run(world: CopilotWorld, process: str, *effects: Any) -> None:
    def work() -> Generator[Any, Any, list[Any]]:
        results = []
        for effect in effects:
            results.append((yield effect))
        return results
    world.drive(process, work())
    world.env.run(until=world.env.now + 1.0)


def test_the_trigger_notifies_after_a_commit_of_a_pending_row_only(world: CopilotWorld) -> None:
    heard: list[tuple[float, str]] = []
    world.db.on_notify = lambda channel: heard.append((world.env.now, channel))
    rid = world.transact(_row)
    assert heard == [(0.0, OUTBOX_CHANNEL)]

    def fails(tx: Tx) -> None:
        _row(tx)
        raise RuntimeError("rolled back")

    def not_pending(tx: Tx) -> None:
        _row(tx, status="SENT")
        tx.session.execute(update(_OUTBOX).where(_OUTBOX.c.id == rid).values(attempts=_OUTBOX.c.attempts + 1))
        tx.session.execute(update(_OUTBOX).where(_OUTBOX.c.id == rid).values(status="SENT"))

    heard.clear()
    _run(world, "api", Transact(fails, "fails"), Transact(not_pending, "not_pending"))
    assert heard == []
    _run(world, "api", Transact(lambda tx: tx.session.execute(  # a re-drive: PENDING again
        update(_OUTBOX).where(_OUTBOX.c.id == rid).values(status="PENDING")), "redrive"))
    assert [channel for _, channel in heard] == [OUTBOX_CHANNEL]


def _claims(world: CopilotWorld) -> list[float]:
    """Virtual times at which the publishers' claims ran."""
    times: list[float] = []
    perform = world._perform

    def spy(process: str, effect: Any) -> Generator[Any, Any, Any]:
        if isinstance(effect, Transact) and effect.name == "outbox.claim":
            times.append(world.env.now)
        return (yield from perform(process, effect))

    world._perform = spy  # type: ignore[method-assign]
    return times


def test_an_idle_publisher_claims_at_once_on_a_notification(world: CopilotWorld) -> None:
    policy = Policy()
    claims = _claims(world)
    world.supervise("publisher-1", lambda: publisher_loop(policy))
    world.env.run(until=100.0)
    idle = len(claims)
    assert idle <= 100.0 / policy.outbox_wait_s + 2  # waiting, not polling every poll_idle_s (which is 200 claims)
    _run(world, "api", Transact(_row, "confirm.create"))
    woke = [t for t in claims[idle:] if t >= 100.0]
    assert woke and woke[0] - 100.0 < 0.1  # the commit woke it: no wait for the next poll
    assert world.broker.published == 1


def test_a_row_no_notification_announced_is_claimed_within_the_wait(world: CopilotWorld) -> None:
    """A claimed row whose publisher died is due again when its lease runs out: no commit announces that."""
    policy = Policy()
    claims = _claims(world)
    world.supervise("publisher-1", lambda: publisher_loop(policy))
    world.env.run(until=10.0)
    lease_end = 10.0 + policy.outbox_lease_s

    def claimed_elsewhere(tx: Tx) -> None:  # as a publisher that claimed it and died would leave it
        rid = _row(tx)
        tx.session.execute(update(_OUTBOX).where(_OUTBOX.c.id == rid).values(
            available_at=tx.now + timedelta(seconds=policy.outbox_lease_s), attempts=1))

    world.transact(claimed_elsewhere)  # its notification wakes the publisher too early: the row is not due yet
    world.env.run(until=lease_end + policy.outbox_wait_s + 1.0)
    assert world.broker.published == 1
    assert any(lease_end <= t <= lease_end + policy.outbox_wait_s + 0.1 for t in claims)


def test_a_receive_long_polls_until_a_message_is_published(world: CopilotWorld) -> None:
    answers: list[tuple[float, int]] = []

    def consumer() -> Generator[Any, Any, None]:
        for _ in range(2):
            got = yield Receive(DISPATCHER, 16, 30.0)
            answers.append((world.env.now, len(got)))

    world.drive("dispatcher-1", consumer())
    world.env.run(until=0.5)
    world.broker.publish(Message(str(uuid.uuid4()), "TaskCreated", str(uuid.uuid4()), 0), world.env.now)
    world.env.run(until=5.0)
    broker_s, poll_s = world.latency.broker_s, world.latency.broker_long_poll_s
    assert answers[0] == (pytest.approx(0.5 + broker_s), 1)  # answered when the message came, not before
    assert answers[1] == (pytest.approx(0.5 + 2 * broker_s + poll_s), 0)  # nothing more: after the long poll
