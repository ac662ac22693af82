"""A worker (seed 001 §4.2, §5.3-§5.5, §7.4): a heartbeat thread and a consumer thread sharing one WorkerState.

The heartbeat registers the worker (REGISTERED -> WARMING), then every 3 s writes its heartbeat, renews the leases it
holds at their epochs and reads its leases back (the lease cache, and its age: INV-15), sooner when the leader's
``slot_lease_updated`` notice comes (§4.1: Redis only wakes it; the read is the database's, INV-14); DEAD, it
quarantines itself and warms up again; OFFLINE (drained), it stops the worker.

The consumer follows the cache: it loads a slot given to it (LOADING_NEW: the snapshots, INV-10, then ACTIVE) and
consumes its two queues; it gives up a slot it no longer holds (cancel, nack what it holds: INV-16); it drains a
MOVING slot (cancel, commit what it holds, DRAINING_OLD). Each round it fills the mailboxes up to the prefetch and
commits, per slot, a batch picked 3:1 high to normal with the 60 s starvation guard; it acks only after the commit
(INV-19); a fenced batch rolls back, is nacked and its slot's consumer cancelled; a database error nacks."""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.exc import DBAPIError

from kernel.effects import BrokerUnavailable, Sleep, Transact, Tx
from reference.inspection import coverage
from reference.inspection.bugs import BUGS
from reference.inspection.config import Settings
from reference.inspection.effects import (
    HIGH,
    NORMAL,
    AckDeliveries,
    AwaitLeaseNotice,
    Cancel,
    ChannelClosed,
    Consume,
    Delivery,
    Fetch,
    NackDeliveries,
    Now,
)
from reference.inspection.ingest import BatchResult, Fenced, commit_batch, load_slot
from reference.inspection.models import (
    ACTIVE,
    DEAD,
    DRAINING,
    DRAINING_OLD,
    LOADING_NEW,
    MOVING,
    OFFLINE,
    QUARANTINE,
    REGISTERED,
    WARMING,
    slot_audit,
    slot_lease,
    worker_heartbeat,
    worker_log,
)

Leases = dict[int, tuple[int, str]]  # slot -> (epoch, state), as last read


@dataclass
class Mailbox:
    high: deque[Delivery] = field(default_factory=deque)
    normal: deque[Delivery] = field(default_factory=deque)

    def of(self, priority: str) -> deque[Delivery]:
        return self.high if priority == HIGH else self.normal

    def take_all(self) -> list[Delivery]:
        out = [*self.high, *self.normal]
        self.high.clear()
        self.normal.clear()
        return out


@dataclass
class WorkerState:
    """What the worker's two threads share (the process's memory: lost with it)."""

    name: str
    leases: Leases = field(default_factory=dict)
    cache_at: datetime | None = None
    state: str = REGISTERED
    stop: bool = False
    consuming: dict[int, int] = field(default_factory=dict)  # slot -> the epoch it consumes under
    mailboxes: dict[int, Mailbox] = field(default_factory=dict)
    snapshots: dict[int, dict[str, dict[str, Any]]] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- heartbeat


def _log(tx: Tx, worker: str, old: str, new: str) -> None:
    """``old`` -> ``new``, logged from the state the row has when this write takes it: the leader may have moved it
    after the worker read it (a restarted worker registering while the leader marks it DEAD: seen on the real stack)."""
    while tx.conn.execute(update(worker_heartbeat).where(worker_heartbeat.c.worker_id == worker,
                                                         worker_heartbeat.c.state == old)
                          .values(state=new)).rowcount != 1:
        old = str(tx.conn.execute(select(worker_heartbeat.c.state)
                                  .where(worker_heartbeat.c.worker_id == worker)).scalar_one())
    tx.conn.execute(insert(worker_log).values(worker_id=worker, from_state=old, to_state=new, at=tx.now,
                                              silent_s=None, actor=worker))


def register(tx: Tx, worker: str) -> None:
    """REGISTERED, then WARMING (§4.4 A), whatever the row said before (a restart)."""
    row = tx.conn.execute(select(worker_heartbeat.c.state).where(worker_heartbeat.c.worker_id == worker)).first()
    if row is None:
        tx.conn.execute(insert(worker_heartbeat).values(worker_id=worker, state=REGISTERED, last_heartbeat=tx.now,
                                                        registered_at=tx.now, metadata={}))
        tx.conn.execute(insert(worker_log).values(worker_id=worker, from_state=None, to_state=REGISTERED, at=tx.now,
                                                  silent_s=None, actor=worker))
    elif row.state != REGISTERED:
        _log(tx, worker, row.state, REGISTERED)
    tx.conn.execute(update(worker_heartbeat).where(worker_heartbeat.c.worker_id == worker).values(
        last_heartbeat=tx.now, registered_at=tx.now, metadata={}))
    _log(tx, worker, REGISTERED, WARMING)


def heartbeat(tx: Tx, worker: str, cached: Leases, lease_s: float) -> tuple[str, Leases, datetime]:
    """§4.2: the heartbeat, the renewal of the leases held at their cached epochs, the leases read back. A DEAD worker
    quarantines itself and warms up again (its slots were taken)."""
    tx.conn.execute(update(worker_heartbeat).where(worker_heartbeat.c.worker_id == worker)
                    .values(last_heartbeat=tx.now))
    state = tx.conn.execute(select(worker_heartbeat.c.state).where(worker_heartbeat.c.worker_id == worker)).scalar()
    if state == DEAD:
        _log(tx, worker, DEAD, QUARANTINE)
        _log(tx, worker, QUARANTINE, WARMING)
        tx.conn.execute(update(worker_heartbeat).where(worker_heartbeat.c.worker_id == worker)
                        .values(registered_at=tx.now))
        state = WARMING
    if cached:  # one statement: each lease held at its cached epoch
        tx.conn.execute(update(slot_lease).where(slot_lease.c.owner_worker_id == worker, or_(*(
            and_(slot_lease.c.slot_id == slot, slot_lease.c.lease_epoch == epoch)
            for slot, (epoch, _) in sorted(cached.items()))))
            .values(lease_until=tx.now + timedelta(seconds=lease_s), last_renewed_at=tx.now))
    leases = {r.slot_id: (r.lease_epoch, r.state) for r in tx.conn.execute(
        select(slot_lease.c.slot_id, slot_lease.c.lease_epoch, slot_lease.c.state)
        .where(slot_lease.c.owner_worker_id == worker))}
    return str(state), leases, tx.now


def heartbeat_loop(ws: WorkerState, cfg: Settings) -> Generator[Any, Any, None]:
    while True:
        try:
            yield Transact(lambda tx: register(tx, ws.name), "worker.register")
            break
        except DBAPIError:
            yield Sleep(cfg.heartbeat_s)
    while not ws.stop:
        try:
            state, leases, at = yield Transact(lambda tx: heartbeat(tx, ws.name, dict(ws.leases), cfg.lease_s),
                                               "worker.heartbeat")
        except DBAPIError:
            yield Sleep(cfg.heartbeat_s)
            continue
        ws.state, ws.leases, ws.cache_at = state, leases, at
        if state == OFFLINE:
            ws.stop = True
            return
        if cfg.lease_notices:  # a notice (§4.1) brings the next read forward; without one it is the poll
            yield AwaitLeaseNotice(cfg.heartbeat_s)
        else:
            yield Sleep(cfg.heartbeat_s)


# ---------------------------------------------------------------------------------------------- consumer


def release(tx: Tx, worker: str, slot: int, epoch: int) -> None:
    """§4.3 step 3: the old owner, drained, releases a MOVING slot (DRAINING_OLD)."""
    done = tx.conn.execute(update(slot_lease).where(
        slot_lease.c.slot_id == slot, slot_lease.c.owner_worker_id == worker, slot_lease.c.lease_epoch == epoch,
        slot_lease.c.state == MOVING).values(state=DRAINING_OLD, state_since=tx.now))
    if done.rowcount != 1:
        raise Fenced(f"slot {slot}: not {worker}'s MOVING slot at epoch {epoch}")
    tx.conn.execute(insert(slot_audit).values(kind="lease", slot_id=slot, lease_epoch=epoch, owner_worker_id=worker,
                                              state=DRAINING_OLD, actor=worker, why="released", at=tx.now))


def pick_batch(box: Mailbox, now: datetime, cfg: Settings) -> list[Delivery]:
    """§7.4: a normal message waiting past the starvation guard first; else up to 150 high and 50 normal; else up to
    200 normal."""
    def take(q: deque[Delivery], n: int) -> list[Delivery]:
        return [q.popleft() for _ in range(min(n, len(q)))]

    if box.normal and (now - box.normal[0].delivered_at).total_seconds() > cfg.starvation_s:
        return take(box.normal, cfg.batch_max)
    if box.high:
        return take(box.high, cfg.batch_high) + take(box.normal, cfg.batch_normal)
    return take(box.normal, cfg.batch_max)


def _give_up(ws: WorkerState, slot: int, why: str) -> Generator[Any, Any, None]:
    """Stop consuming a slot: cancel its consumers, nack what the worker holds of it."""
    ws.consuming.pop(slot, None)
    held = ws.mailboxes.pop(slot, Mailbox()).take_all()
    yield Cancel(slot)
    if held:
        coverage.COVERAGE.reached(coverage.NOT_OWNED)
        yield NackDeliveries(tuple(held), why)


def _commit(ws: WorkerState, slot: int, batch: list[Delivery], now: datetime, cfg: Settings
            ) -> Generator[Any, Any, bool]:
    """One batch: committed then acked (True), or fenced / failed and nacked (False)."""
    epoch = ws.consuming[slot]
    messages = [d.message for d in batch]
    age = (now - ws.cache_at).total_seconds() if ws.cache_at else float("inf")
    if BUGS.active("ack-before-commit"):
        yield AckDeliveries(tuple(batch))
    try:
        result: BatchResult = yield Transact(lambda tx: commit_batch(
            tx, ws.name, slot, epoch, messages, ws.snapshots.setdefault(slot, {}), age), "batch.commit")
    except Fenced:
        result = BatchResult(fenced=True)
    except DBAPIError:
        coverage.COVERAGE.reached(coverage.DB_ERROR_NACKED)
        if not BUGS.active("wait-for-redelivery") and not BUGS.active("ack-before-commit"):
            yield NackDeliveries(tuple(batch), "db-error")
        yield Sleep(cfg.db_retry_s)  # the database away: look again in a while, not in a tight loop
        return False
    if result.fenced:  # not ours any more: give the messages back, stop consuming the slot until the cache says
        ws.leases.pop(slot, None)
        ws.mailboxes.setdefault(slot, Mailbox()).normal.extendleft(reversed(batch))
        yield from _give_up(ws, slot, "fenced")
        return False
    if not BUGS.active("ack-before-commit"):
        yield AckDeliveries(tuple(batch))
    return True


def _reconcile(ws: WorkerState, cfg: Settings) -> Generator[Any, Any, None]:
    """Make what the worker consumes follow its lease cache."""
    for slot, epoch in sorted(ws.consuming.items()):
        if ws.leases.get(slot) not in ((epoch, ACTIVE), (epoch, MOVING)):
            yield from _give_up(ws, slot, "not-owned")
    for slot, (epoch, state) in sorted(ws.leases.items()):
        if state == LOADING_NEW:
            try:
                ws.snapshots[slot] = yield Transact(functools.partial(_load, worker=ws.name, slot=slot, epoch=epoch),
                                                    "slot.load")
            except (Fenced, DBAPIError):
                continue
            ws.leases[slot] = (epoch, ACTIVE)
            state = ACTIVE
        if state == ACTIVE and slot not in ws.consuming and ws.state in (ACTIVE, DRAINING):
            # a worker consumes only once ACTIVE itself: restarted, it holds its old leases until the leader takes
            # them (its WARMING row is not a holder)
            yield Consume(slot)
            ws.consuming[slot] = epoch
            ws.mailboxes.setdefault(slot, Mailbox())
        elif state == MOVING:
            yield from _drain_slot(ws, slot, epoch, cfg)


def _load(tx: Tx, worker: str, slot: int, epoch: int) -> dict[str, dict[str, Any]]:
    return load_slot(tx, worker, slot, epoch)


def _drain_slot(ws: WorkerState, slot: int, epoch: int, cfg: Settings) -> Generator[Any, Any, None]:
    """§4.3 step 3: cancel the consumer, commit what the mailbox holds, release the slot."""
    if slot in ws.consuming:
        yield Cancel(slot)
    box = ws.mailboxes.get(slot, Mailbox())
    now = yield Now()
    ws.consuming.setdefault(slot, epoch)
    while box.high or box.normal:
        if not (yield from _commit(ws, slot, pick_batch(box, now, cfg), now, cfg)):
            return
    try:
        yield Transact(lambda tx: release(tx, ws.name, slot, epoch), "slot.release")
    except (Fenced, DBAPIError):
        return
    ws.consuming.pop(slot, None)
    ws.mailboxes.pop(slot, None)
    ws.leases[slot] = (epoch, DRAINING_OLD)


def _fill(ws: WorkerState, cfg: Settings) -> Generator[Any, Any, None]:
    """Take what the broker pushed, up to each consumer's prefetch (§5.4); a delivery of a slot the worker does not
    consume any more is nacked at once (INV-16)."""
    wants = []
    for slot in sorted(ws.consuming):
        box = ws.mailboxes[slot]
        for priority, prefetch in ((HIGH, cfg.prefetch_high), (NORMAL, cfg.prefetch_normal)):
            if (free := prefetch - len(box.of(priority))) > 0:
                wants.append((slot, priority, free))
    if not wants:
        return
    strays = []
    for d in (yield Fetch(tuple(wants))):
        if d.slot in ws.consuming:
            ws.mailboxes[d.slot].of(d.priority).append(d)
        else:
            strays.append(d)
    if strays:
        coverage.COVERAGE.reached(coverage.NOT_OWNED)
        yield NackDeliveries(tuple(strays), "not-owned")


def consumer_loop(ws: WorkerState, cfg: Settings) -> Generator[Any, Any, None]:
    while not ws.stop:
        try:
            worked = yield from _round(ws, cfg)
        except (ChannelClosed, BrokerUnavailable):  # the broker requeued what the channels held
            ws.consuming.clear()
            ws.mailboxes.clear()
            worked = False
        if not worked:
            yield Sleep(cfg.poll_s)
    for slot in sorted(ws.consuming):
        yield from _give_up(ws, slot, "stopping")


def _round(ws: WorkerState, cfg: Settings) -> Generator[Any, Any, bool]:
    yield from _reconcile(ws, cfg)
    yield from _fill(ws, cfg)
    now = yield Now()
    age = (now - ws.cache_at).total_seconds() if ws.cache_at is not None else float("inf")
    fresh = age < cfg.cache_max_age_s
    if ws.cache_at is not None and age > cfg.dead_after_s and not BUGS.active("stale-lease-cache"):
        # silent this long, the worker may well be DEAD and its slots someone else's: give them back now rather
        # than hold the queues (a single active consumer) until the heartbeat comes back
        for slot in sorted(ws.consuming):
            yield from _give_up(ws, slot, "stale-cache")
        ws.leases.clear()
        return False
    worked = False
    for slot in sorted(ws.consuming):
        box = ws.mailboxes[slot]
        if not (box.high or box.normal):
            continue
        if not fresh and not BUGS.active("stale-lease-cache"):
            coverage.COVERAGE.reached(coverage.STALE_CACHE)
            continue
        worked = True
        yield from _commit(ws, slot, pick_batch(box, now, cfg), now, cfg)
    return worked


def worker_threads(name: str, cfg: Settings) -> tuple[WorkerState, Callable[[], Generator[Any, Any, None]],
                                                      Callable[[], Generator[Any, Any, None]]]:
    """One incarnation of a worker process: its shared state, its heartbeat thread and its consumer thread."""
    ws = WorkerState(name)
    return ws, lambda: heartbeat_loop(ws, cfg), lambda: consumer_loop(ws, cfg)
