"""The web tier's leader (seed 001 §4.1-§4.4): two web nodes contend for the leader lease (the advisory lock's
stand-in, reference.inspection.models.leader_lease); the holder, every tick, in one transaction fenced by its term:
supervises heartbeats (ACTIVE -> SUSPECTED at 15 s, -> DEAD at 30 s; WARMING -> ACTIVE after 60 s), takes over the
slots of workers no longer ACTIVE and expired leases (epoch + 1), moves migrations on (MOVING -> DRAINING_OLD ->
LOADING_NEW), assigns free slots, drains DRAINING workers, and rebalances within §4.3's limits. Every lease change
is written with its audit row (slot_audit) in the same transaction; Redis is not needed for any of it (INV-14):
after the commit the leader publishes the slots it changed (``slot_lease_updated``, §4.1 step 2) so that their
workers read their leases at once rather than at their next heartbeat, and a lost notice only costs that wait."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import DBAPIError

from kernel.effects import Sleep, Transact, Tx
from reference.inspection import coverage
from reference.inspection.bugs import BUGS
from reference.inspection.config import Settings
from reference.inspection.effects import NotifyLeases
from reference.inspection.models import (
    ACTIVE,
    DEAD,
    DRAINING,
    DRAINING_OLD,
    FREE,
    LOADING_NEW,
    MOVING,
    OFFLINE,
    ORPHANED,
    SUSPECTED,
    WARMING,
    aware,
    leader_lease,
    slot_audit,
    slot_lease,
    worker_heartbeat,
    worker_log,
)
from reference.inspection.reshard import switch_by_clock

LEADER = "web_scheduler_leader"
HOLDING = (ACTIVE, DRAINING, SUSPECTED)  # a worker in these keeps its slots (SUSPECTED: not yet judged)
SERVING = (ACTIVE,)  # a worker in these may be given slots


class LostLeadership(Exception):
    """The leader lease has another holder or term: this node's decisions are not written."""


@dataclass
class Node:
    name: str
    term: int = 0  # the term this node holds (0: none)


def _secs(a: datetime, b: datetime) -> float:
    return (aware(a) - aware(b)).total_seconds()


def _lead(tx: Tx, node: Node, cfg: Settings) -> bool:
    """Renew the lease under this node's term, or take it when it has run out (a new term). The renewal is the
    transaction's first write: a node that lost the lease writes nothing else."""
    row = tx.conn.execute(select(leader_lease).where(leader_lease.c.name == LEADER)).one()
    until = tx.now + timedelta(seconds=cfg.leader_ttl_s)
    if row.holder == node.name and row.term == node.term and _secs(row.until, tx.now) >= 0:
        return tx.conn.execute(update(leader_lease).where(
            leader_lease.c.name == LEADER, leader_lease.c.holder == node.name, leader_lease.c.term == node.term)
            .values(until=until)).rowcount == 1
    node.term = 0
    if row.holder is not None and _secs(row.until, tx.now) >= 0:
        return False
    if tx.conn.execute(update(leader_lease).where(leader_lease.c.name == LEADER, leader_lease.c.term == row.term)
                       .values(holder=node.name, term=row.term + 1, until=until)).rowcount != 1:
        return False
    if row.holder is not None and row.holder != node.name:
        coverage.COVERAGE.reached(coverage.LEADER_CHANGED)
    node.term = row.term + 1
    return True


def _log_worker(tx: Tx, worker: str, old: str, new: str, silent: float | None, actor: str) -> str:
    """``old`` -> ``new`` when the row still says ``old`` (the worker may have registered again since the tick read
    it); the worker's state after it."""
    if tx.conn.execute(update(worker_heartbeat).where(worker_heartbeat.c.worker_id == worker,
                                                      worker_heartbeat.c.state == old)
                       .values(state=new)).rowcount != 1:
        return str(tx.conn.execute(select(worker_heartbeat.c.state)
                                   .where(worker_heartbeat.c.worker_id == worker)).scalar_one())
    tx.conn.execute(insert(worker_log).values(worker_id=worker, from_state=old, to_state=new, at=tx.now,
                                              silent_s=None if silent is None else round(silent, 3), actor=actor))
    return new


def _supervise(tx: Tx, node: Node, cfg: Settings) -> dict[str, str]:
    """§4.2's heartbeat supervision; the workers' states after it."""
    states: dict[str, str] = {}
    for w in tx.conn.execute(select(worker_heartbeat).order_by(worker_heartbeat.c.worker_id)):
        silent, new = _secs(tx.now, w.last_heartbeat), w.state
        if w.state in (ACTIVE, DRAINING) and silent > cfg.suspected_after_s:
            new = SUSPECTED
        elif w.state == SUSPECTED and silent > cfg.dead_after_s and not BUGS.active("suspected-never-dead"):
            new = DEAD
        elif w.state == SUSPECTED and silent <= cfg.suspected_after_s:
            new = DRAINING if (w.metadata or {}).get("draining") else ACTIVE
        elif w.state == WARMING and _secs(tx.now, w.registered_at) >= cfg.warming_s and silent <= cfg.heartbeat_s * 2:
            new = ACTIVE
        if new != w.state:
            new = _log_worker(tx, w.worker_id, w.state, new, silent, node.name)
        states[w.worker_id] = new
    return states


def _change(tx: Tx, node: Node, slot: Any, why: str, **values: Any) -> None:
    """One lease change, compare-and-set on the epoch the tick read, with its audit row."""
    values.setdefault("state_since", tx.now)
    tx.conn.execute(update(slot_lease).where(slot_lease.c.slot_id == slot.slot_id,
                                             slot_lease.c.lease_epoch == slot.lease_epoch).values(**values))
    tx.conn.execute(insert(slot_audit).values(
        kind="lease", slot_id=slot.slot_id, lease_epoch=values.get("lease_epoch", slot.lease_epoch),
        owner_worker_id=values.get("owner_worker_id", slot.owner_worker_id), state=values.get("state", slot.state),
        actor=node.name, why=why, term=node.term, at=tx.now))


def _takeovers(tx: Tx, node: Node, cfg: Settings, states: dict[str, str], slots: list[Any]) -> None:
    """§4.2: a slot whose owner is no longer ACTIVE (DEAD, restarted, gone), a lease run out, or a migration past its
    deadline becomes ORPHANED under a new epoch."""
    for s in slots:
        if s.owner_worker_id is None:
            continue
        why = ""
        if states.get(s.owner_worker_id) not in HOLDING:
            why = "owner-gone"
            coverage.COVERAGE.reached(coverage.TAKEOVER_DEAD)
        elif s.lease_until is not None and _secs(tx.now, s.lease_until) > cfg.lease_grace_s:
            why = "lease-expired"
            coverage.COVERAGE.reached(coverage.TAKEOVER_EXPIRED)
        elif s.state == MOVING and _secs(tx.now, s.state_since) > cfg.migration_deadline_s:
            # not a coverage target: the old owner is DEAD by the time the deadline comes (both 30 s) unless it is
            # alive and never releases, which no fault here makes
            why = "migration-deadline"
        if why:
            _change(tx, node, s, why, owner_worker_id=None, lease_epoch=s.lease_epoch + 1, state=ORPHANED,
                    lease_until=None, move_to=None)


def _least_loaded(states: dict[str, str], slots: list[Any], exclude: str | None = None) -> str | None:
    loads = _loads(states, slots)
    candidates = sorted((n, w) for w, n in loads.items() if states[w] in SERVING and w != exclude)
    return candidates[0][1] if candidates else None


def _loads(states: dict[str, str], slots: list[Any]) -> dict[str, int]:
    loads = {w: 0 for w, st in states.items() if st in (*SERVING, DRAINING)}
    for s in slots:
        if s.owner_worker_id in loads:
            loads[s.owner_worker_id] += 1
    return loads


def _assign(tx: Tx, node: Node, cfg: Settings, states: dict[str, str], slots: list[Any]) -> None:
    """Free and orphaned slots to the least loaded ACTIVE worker; a released migration (DRAINING_OLD) to its
    destination. The new owner loads the slot's snapshots (LOADING_NEW), then consumes."""
    for s in list(slots):
        if s.state in (FREE, ORPHANED, DRAINING_OLD):
            to = s.move_to if s.state == DRAINING_OLD and states.get(s.move_to) in SERVING else \
                _least_loaded(states, slots)
            if to is None:
                continue
            if s.state == DRAINING_OLD:
                coverage.COVERAGE.reached(coverage.MIGRATED)
            _change(tx, node, s, "assigned" if s.state != DRAINING_OLD else "migrated", owner_worker_id=to,
                    lease_epoch=s.lease_epoch + 1, state=LOADING_NEW,
                    lease_until=tx.now + timedelta(seconds=cfg.lease_s), move_to=None,
                    moved_at=tx.now if s.state == DRAINING_OLD else s.moved_at)
            _refresh(tx, slots)  # the next choice counts this one


def _refresh(tx: Tx, slots: list[Any]) -> None:
    slots[:] = list(tx.conn.execute(select(slot_lease).order_by(slot_lease.c.slot_id)))


def _move(tx: Tx, node: Node, s: Any, to: str, why: str) -> None:
    _change(tx, node, s, why, state=MOVING, move_to=to)
    tx.conn.execute(update(worker_heartbeat).where(worker_heartbeat.c.worker_id == s.owner_worker_id)
                    .values(moved_out_at=tx.now))


def _cooled(tx: Tx, at: datetime | None, seconds: float) -> bool:
    return at is None or _secs(tx.now, at) >= seconds


def _drain(tx: Tx, node: Node, cfg: Settings, states: dict[str, str], slots: list[Any]) -> None:
    """§4.4 C: a DRAINING worker's ACTIVE slots move out 5 at a time, 30 s apart; holding none, it is OFFLINE."""
    rows = {w.worker_id: w for w in tx.conn.execute(select(worker_heartbeat))}
    for worker, state in sorted(states.items()):
        if state != DRAINING:
            continue
        held = [s for s in slots if s.owner_worker_id == worker]
        if not held:
            states[worker] = _log_worker(tx, worker, DRAINING, OFFLINE, None, node.name)
            continue
        if not _cooled(tx, rows[worker].moved_out_at, cfg.drain_every_s):
            continue
        for s in [s for s in held if s.state == ACTIVE][:cfg.max_moves]:
            if (to := _least_loaded(states, slots, exclude=worker)) is not None:
                _move(tx, node, s, to, "drain")
    _refresh(tx, slots)


def _rebalance(tx: Tx, node: Node, cfg: Settings, states: dict[str, str], slots: list[Any]) -> None:
    """§4.3: move slots from the most to the least loaded ACTIVE worker when they differ by 25% of the target and
    more than one slot; at most 5, each slot at most once in 5 minutes, each worker giving at most once a minute.
    The giver is the most loaded worker that may give now: of two equally loaded, one whose slots all moved lately
    must not keep the other from giving (a worker ACTIVE last would wait 5 minutes for its first slot)."""
    loads = {w: n for w, n in _loads(states, slots).items() if states[w] in SERVING}
    if len(loads) < 2 or any(s.state != ACTIVE for s in slots):
        return  # one change at a time: no rebalance while a slot is unowned or on its way
    target = len(slots) / len(loads)
    light = min(loads, key=lambda w: (loads[w], w))
    for heavy in sorted(loads, key=lambda w: (loads[w], w), reverse=True):
        gap = loads[heavy] - loads[light]
        if gap < 2 or gap / target < cfg.imbalance:
            return  # the rest are lighter still
        row = tx.conn.execute(select(worker_heartbeat).where(worker_heartbeat.c.worker_id == heavy)).one()
        movable = [s for s in slots if s.owner_worker_id == heavy and _cooled(tx, s.moved_at, cfg.slot_cooldown_s)]
        if not _cooled(tx, row.moved_out_at, cfg.worker_cooldown_s) or not movable:
            continue
        for s in movable[:min(cfg.max_moves, gap // 2)]:
            _move(tx, node, s, light, "rebalance")
        _refresh(tx, slots)
        return


@dataclass(frozen=True)
class Tick:
    """What one tick did: whether the node led it, and the slots whose lease it changed (its audit rows)."""

    led: bool
    changed: tuple[int, ...] = ()


def leader_tick(tx: Tx, node: Node, cfg: Settings) -> Tick:
    """One tick of a web node: whether it led it, and (with lease notices) the slots it changed."""
    if not _lead(tx, node, cfg):
        return Tick(False)
    audited = tx.conn.execute(select(func.max(slot_audit.c.id))).scalar() if cfg.lease_notices else None
    states = _supervise(tx, node, cfg)
    slots = list(tx.conn.execute(select(slot_lease).order_by(slot_lease.c.slot_id)))
    _takeovers(tx, node, cfg, states, slots)
    _refresh(tx, slots)
    _drain(tx, node, cfg, states, slots)
    _assign(tx, node, cfg, states, slots)
    _rebalance(tx, node, cfg, states, slots)
    if BUGS.active("reshard-switch-by-clock"):
        switch_by_clock(tx)  # the seed's §3.4 step 3, at the first tick once the new map is in force
    if not cfg.lease_notices:
        return Tick(True)
    changed = tx.conn.execute(select(slot_audit.c.slot_id).distinct().where(
        slot_audit.c.id > (audited or 0), slot_audit.c.kind == "lease", slot_audit.c.actor == node.name)
        .order_by(slot_audit.c.slot_id))
    return Tick(True, tuple(int(r.slot_id) for r in changed))


def web_loop(name: str, cfg: Settings, record: Any) -> Generator[Any, Any, None]:
    """A web node: a tick every leader_tick_s; a failed tick (the database away) is the next tick's to redo."""
    node = Node(name)
    led = False
    while True:
        try:
            tick = yield Transact(lambda tx: leader_tick(tx, node, cfg), "leader.tick")
        except DBAPIError:  # the database away: this tick is lost (the lease, if still ours, renews next tick)
            tick = Tick(False)
        now_leads = tick.led
        if tick.changed:
            yield NotifyLeases(tick.changed)  # after the commit: a notice never runs ahead of the truth
        if now_leads != led:
            record(name, "leader" if now_leads else "follower", {"term": node.term})
            led = now_leads
        yield Sleep(cfg.leader_tick_s)
