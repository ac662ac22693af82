"""The outbox relay (§5.2, §10, §11.4): claims due rows with a lease (FOR UPDATE SKIP LOCKED on InnoDB), publishes
each through Centrifugo's server API outside the transaction, then marks it PUBLISHED. A retryable failure (a
timeout, 429, 5xx) puts the row back with a jittered exponential backoff; a permanent one (4xx) or the last attempt
makes it DEAD (an operator's alert, never a hot loop). A row whose lease ran out (its relay killed or stopped) is
claimed again: the publication may then happen twice, which clients absorb by version."""

from __future__ import annotations

import functools
from collections.abc import Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.exc import DBAPIError

from kernel.effects import Jitter, Sleep, Transact, Tx
from reference.statussync import coverage as cov
from reference.statussync.bugs import BUGS
from reference.statussync.models import OUTBOX_DEAD, OUTBOX_PENDING, OUTBOX_PROCESSING, OUTBOX_PUBLISHED, TaskOutbox


@dataclass(frozen=True)
class ServerPublish:
    """Centrifugo's server API publish of ``data`` to ``channel`` (the shell performs it; raises PublishFailed)."""

    channel: str
    data: dict[str, Any]
    outbox_id: int
    attempt: int
    crash_name: str = "publish"


class PublishFailed(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status} {message}")
        self.status = status

    @property
    def retryable(self) -> bool:
        """§10: network errors (status 0), 429 and 5xx are retried; other 4xx are permanent."""
        return self.status == 0 or self.status == 429 or self.status >= 500


@dataclass(frozen=True)
class RelayConfig:
    batch: int = 20
    lease_s: float = 30.0
    poll_s: float = 2.0  # idle: nothing was due (a notification would shorten it; the simulation polls)
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    max_attempts: int = 10


def backoff_s(cfg: RelayConfig, attempts: int) -> float:
    """The delay after the ``attempts``-th failed try, before jitter: base * 2^(attempts-1), capped."""
    return min(cfg.backoff_cap_s, cfg.backoff_base_s * 2 ** max(0, attempts - 1))


def _claimable(cfg: RelayConfig, tx: Tx) -> Any:
    due = and_(TaskOutbox.status == OUTBOX_PENDING, TaskOutbox.available_at <= tx.now)
    if BUGS.active("lease-never-expires"):
        return due
    expired = and_(TaskOutbox.status == OUTBOX_PROCESSING,
                   TaskOutbox.locked_at <= tx.now - timedelta(seconds=cfg.lease_s))
    return or_(due, expired)


def claim(cfg: RelayConfig, relay_id: str, tx: Tx) -> list[dict[str, Any]]:
    rows = tx.conn.execute(select(TaskOutbox.id, TaskOutbox.channel, TaskOutbox.payload, TaskOutbox.attempts,
                                  TaskOutbox.status).where(_claimable(cfg, tx)).order_by(TaskOutbox.id)
                           .limit(cfg.batch).with_for_update(skip_locked=True)).all()
    if not rows:
        return []
    if any(r.status == OUTBOX_PROCESSING for r in rows):
        cov.COVERAGE.reached(cov.LEASE_TAKEN_OVER)
    ids = [r.id for r in rows]
    tx.conn.execute(update(TaskOutbox.__table__).where(TaskOutbox.id.in_(ids)).values(
        status=OUTBOX_PROCESSING, locked_by=relay_id, locked_at=tx.now, attempts=TaskOutbox.attempts + 1))
    return [{"id": r.id, "channel": r.channel, "payload": r.payload, "attempts": r.attempts + 1} for r in rows]


def _published(row_ids: list[int], tx: Tx) -> None:
    tx.conn.execute(update(TaskOutbox.__table__).where(TaskOutbox.id.in_(row_ids), TaskOutbox.status ==
                                                       OUTBOX_PROCESSING)
                    .values(status=OUTBOX_PUBLISHED, published_at=tx.now, locked_by=None, locked_at=None))


def _failed(cfg: RelayConfig, row: dict[str, Any], error: PublishFailed, jitter: float, tx: Tx) -> None:
    retry = error.retryable or BUGS.active("permanent-retried")
    last = row["attempts"] >= cfg.max_attempts and not BUGS.active("permanent-retried")
    if retry and not last:
        delay = backoff_s(cfg, row["attempts"]) * (0.5 + jitter)  # jittered in [0.5, 1.5) of the step
        values: dict[str, Any] = {"status": OUTBOX_PENDING, "available_at": tx.now + timedelta(seconds=delay)}
    else:
        values = {"status": OUTBOX_DEAD}
    tx.conn.execute(update(TaskOutbox.__table__).where(TaskOutbox.id == row["id"], TaskOutbox.status ==
                                                       OUTBOX_PROCESSING)
                    .values(**values, locked_by=None, locked_at=None, last_error=str(error)[:1024]))


def relay_loop(cfg: RelayConfig, relay_id: str) -> Generator[Any, Any, None]:
    while True:
        try:
            rows = yield Transact(lambda tx: claim(cfg, relay_id, tx), "outbox.claim", takes_work=True)
        except DBAPIError:  # the database away: try again after the poll
            yield Sleep(cfg.poll_s * 4)
            continue
        if not rows:
            yield Sleep(cfg.poll_s)
            continue
        published: list[int] = []
        for row in rows:
            if (yield from _relay_one(cfg, row)):
                published.append(row["id"])
        if published:  # one mark for the batch: a crash before it publishes the batch again
            yield from _quietly(Transact(functools.partial(_published, published), "outbox.published"))


def _relay_one(cfg: RelayConfig, row: dict[str, Any]) -> Generator[Any, Any, bool]:
    """Publish one row: True when published; a failure is settled here (backoff or DEAD)."""
    try:
        yield ServerPublish(row["channel"], row["payload"], row["id"], row["attempts"])
    except PublishFailed as error:
        failure = error
    else:
        return True
    if failure.retryable:
        cov.COVERAGE.reached(cov.PUBLISH_RETRIED)
    jitter = yield Jitter(1.0)
    yield from _quietly(Transact(lambda tx: _failed(cfg, row, failure, jitter, tx), "outbox.retry"))
    return False


def _quietly(effect: Any) -> Generator[Any, Any, None]:
    """A mark that fails (the database away) leaves the row PROCESSING: its lease runs out and it is published
    again."""
    try:
        yield effect
    except DBAPIError:
        return
