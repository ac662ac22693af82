"""The inspection pipeline in the simulation shell: its schema on the interleaving database, two web nodes contending
for the leader lease, workers (a heartbeat and a consumer process each, one incarnation per start) and IS probe nodes
as supervised processes, the RabbitMQ model (systems.inspection.broker), each IS node's outbox on its own disk, an
operator who may drain a worker, and the checks."""

from __future__ import annotations

import functools
import random
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import simpy
from sqlalchemy import func, insert, select

from harness.history import INFO, NEMESIS, OK
from kernel.effects import BrokerUnavailable, Transact, crash_name
from kernel.failpoints import register_roles
from reference.inspection import coverage
from reference.inspection.config import Settings
from reference.inspection.effects import (
    AckDeliveries,
    AwaitLeaseNotice,
    Cancel,
    Consume,
    Fetch,
    NackDeliveries,
    NotifyLeases,
    Now,
    OutboxAppend,
    OutboxConfirm,
    OutboxLastSeqs,
    OutboxPending,
    PublishConfirmed,
    SlotMaps,
)
from reference.inspection.leader import LEADER, web_loop
from reference.inspection.models import (
    ACTIVE,
    DRAINING,
    FREE,
    METADATA,
    device_resource,
    leader_lease,
    slot_lease,
    slot_map_version,
    worker_heartbeat,
    worker_log,
)
from reference.inspection.probe import Device, probe_loop
from reference.inspection.reshard import read_maps, reshard, slot_of
from reference.inspection.worker import worker_threads
from scenarios.sim.world import EPOCH, Killed, SimWorld
from scenarios.verdicts import Verdict
from systems.inspection.broker import BrokerModel
from systems.inspection.checkers import INVARIANTS, InspectionState, read_tables

WEB_NODES = ("web-1", "web-2")
# A scenario's param: its time factor on the real stack when the run names none (the stack's default otherwise),
# for the scenarios whose purpose needs a window longer than a process's start (systems.inspection.stack)
NATIVE_TIME_FACTOR = "native_time_factor"
# RabbitMQ drops a silent connection after about three heartbeat intervals (docs/native-stack.md; §5.3: 30 s)
AMQP_HEARTBEAT_TIMEOUT_S = 90.0
register_roles("web", "worker", "heartbeat", "probe", "operator")


@dataclass(frozen=True)
class InspectionSpec:
    devices: int = 24
    total_slots: int = 8
    workers: int = 3
    worker_starts: tuple[float, ...] = ()  # when each worker starts (default: all at 0)
    probes: int = 2
    window_s: float = 180.0  # the IS nodes inspect until then
    critical_ratio: float = 0.25  # devices of priority 1 (the high queue)
    drain_worker: str = ""  # the operator drains this worker (§4.4 C) ...
    drain_at_s: float = 0.0  # ... at this time
    consumer_timeout_s: float = 1800.0  # rabbitmq.conf consumer_timeout (RabbitMQ's default: 30 minutes)
    reshard_to: int = 0  # the operator reshards to this TOTAL_SLOTS (§3.4, §4.5; 0: never) ...
    reshard_at_s: float = 0.0  # ... at this time

    def __post_init__(self) -> None:
        if self.devices < 1 or self.total_slots < 1 or self.workers < 1 or self.probes < 1:
            raise ValueError("devices, total_slots, workers and probes are at least 1")
        if self.worker_starts and len(self.worker_starts) != self.workers:
            raise ValueError(f"worker_starts gives {len(self.worker_starts)} times for {self.workers} workers")
        if self.reshard_to and self.reshard_to <= self.total_slots:
            raise ValueError(f"reshard_to {self.reshard_to} does not grow total_slots {self.total_slots}")
        if self.drain_worker and self.drain_worker not in worker_names(self):
            raise ValueError(f"drain_worker {self.drain_worker!r} is not one of {', '.join(worker_names(self))}")


def worker_names(spec: InspectionSpec) -> list[str]:
    return [f"worker-{i}" for i in range(1, spec.workers + 1)]


@dataclass
class NoticeChannel:
    """Redis pub/sub as the notices meet it (§4.1): a publish reaches the subscribers of that moment, at most once,
    nothing is kept for a later one; each subscriber's connection buffers what came while it was not waiting. Lossy
    while ``lost`` (the notice-loss fault: Redis away, or its messages dropped)."""

    env: simpy.Environment
    inboxes: dict[str, list[int]] = field(default_factory=dict)  # subscriber -> slots notified, not yet read
    waiting: dict[str, simpy.Event] = field(default_factory=dict)
    lost: bool = False

    def publish(self, slots: tuple[int, ...]) -> tuple[list[str], list[str]]:
        """(reached, lost): the subscribers the notice reached and those it did not."""
        names = sorted(self.inboxes)
        if self.lost:
            return [], names
        for name in names:
            self.inboxes[name].extend(slots)
            if (ev := self.waiting.pop(name, None)) is not None:
                ev.succeed()
        return names, []

    def wait(self, name: str, seconds: float) -> Generator[Any, Any, tuple[int, ...]]:
        inbox = self.inboxes.setdefault(name, [])  # subscribed from its first wait on
        if not inbox:
            ev = self.waiting[name] = self.env.event()
            yield ev | self.env.timeout(seconds)
            self.waiting.pop(name, None)
        got = tuple(sorted(set(inbox)))
        inbox.clear()
        return got

    def unsubscribe(self, name: str) -> None:
        """Its connection gone with its process."""
        self.inboxes.pop(name, None)
        self.waiting.pop(name, None)


@dataclass
class NodeOutbox:
    """An IS node's SQLite outbox (§3.5): on its disk, so it outlives the node's process."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    last_seqs: dict[str, int] = field(default_factory=dict)

    def append(self, rows: tuple[dict[str, Any], ...], now: float) -> list[dict[str, Any]]:
        known = {r["message_id"] for r in self.rows}
        stored = []
        for row in rows:
            if row["message_id"] in known:
                continue  # message_id UNIQUE
            stored.append({**row, "seq": len(self.rows) + 1, "created_at": now, "confirmed": False})
            self.rows.append(stored[-1])
            device = str(row["body"]["device_id"])
            self.last_seqs[device] = max(self.last_seqs.get(device, 0), int(row["body"]["seq"]))
        return stored

    def pending(self, older_than: float) -> list[dict[str, Any]]:
        return [r for r in self.rows if not r["confirmed"] and r["created_at"] <= older_than]


class InspectionWorld(SimWorld):
    """The simulated world with the broker model, the IS outboxes, and processes paused as a group (SIGSTOP of a
    worker's whole process, or of its heartbeat thread only)."""

    def __init__(self, seed: int, spec: InspectionSpec) -> None:
        super().__init__(seed, metadata=METADATA, targets=coverage.COVERAGE,
                         recorded={"batch.commit": lambda r: r.as_op(),
                                   "worker.heartbeat": lambda r: {"state": r[0]}})
        self.mq = BrokerModel(spec.total_slots, spec.consumer_timeout_s)
        self.mq.on_close = self._channel_closed
        self.outboxes: dict[str, NodeOutbox] = {}
        self.paused: dict[str, simpy.Event] = {}  # process -> fired when it resumes
        self.heartbeats: dict[str, simpy.Process] = {}  # worker -> its heartbeat thread of this incarnation
        self.leader_paused = "web-1"  # the web node a leader-pause stopped
        self.pause_points: list[tuple[str, str, float]] = []  # (worker, effect, seconds): stop it there
        self.replays_held: set[str] = set()  # IS nodes whose replayer finds nothing (the replay-hold fault)
        self.notices = NoticeChannel(self.env)  # Redis pub/sub: the leader's lease notices (§4.1)
        for kind, performer in ((Now, self._now), (Consume, self._consume), (Fetch, self._fetch),
                                (AckDeliveries, self._ack), (NackDeliveries, self._nack), (Cancel, self._cancel),
                                (PublishConfirmed, self._publish), (OutboxAppend, self._append),
                                (OutboxPending, self._pending), (OutboxConfirm, self._confirm),
                                (OutboxLastSeqs, self._last_seqs), (SlotMaps, self._slot_maps),
                                (NotifyLeases, self._notify), (AwaitLeaseNotice, self._await_notice)):
            self.performers[kind] = performer

    def _channel_closed(self, connection: str, why: str) -> None:
        self.history.add(self.env.now, "broker", INFO, "channel-closed", {"process": connection, "why": why})

    def perform(self, process: str, effect: Any) -> Generator[Any, Any, Any]:
        if self.pause_points and (point := self._pause_point(process, effect)) is not None:
            self.stop_worker(process, point)
        while (resumed := self.paused.get(process)) is not None:
            yield resumed
        return (yield from super().perform(process, effect))

    def _pause_point(self, process: str, effect: Any) -> float | None:
        for i, (who, name, seconds) in enumerate(self.pause_points):
            if who == process and crash_name(effect) == name:
                del self.pause_points[i]
                return seconds
        return None

    def stop_worker(self, worker: str, seconds: float | None) -> None:
        """SIGSTOP the worker's process (both threads), SIGCONT after ``seconds`` (None: when told); stopped past
        the AMQP heartbeat timeout, the broker closes its connection and requeues what it held."""
        group = [worker, f"heartbeat-{worker.rsplit('-', 1)[1]}"]
        self.pause(group, True, "worker-pause")

        def later() -> Generator[Any, Any, None]:
            if seconds is not None:
                yield self.env.timeout(min(seconds, AMQP_HEARTBEAT_TIMEOUT_S))
            else:
                yield self.env.timeout(AMQP_HEARTBEAT_TIMEOUT_S)
            if worker in self.paused and (seconds is None or seconds > AMQP_HEARTBEAT_TIMEOUT_S):
                self.mq.close_connection(worker, "missed AMQP heartbeats")
            if seconds is not None:
                yield self.env.timeout(max(0.0, seconds - AMQP_HEARTBEAT_TIMEOUT_S))
                self.pause(group, False, "worker-pause")

        self.env.process(later())

    def pause(self, processes: list[str], on: bool, why: str) -> None:
        for p in processes:
            if on and p not in self.paused:
                self.paused[p] = self.env.event()
                self.history.add(self.env.now, NEMESIS, INFO, "pause", {"process": p, "why": why})
            elif not on and p in self.paused:
                self.paused.pop(p).succeed()
                self.history.add(self.env.now, NEMESIS, INFO, "resume", {"process": p})

    def hold_replays(self, nodes: list[str], on: bool, why: str) -> None:
        for node in nodes:
            (self.replays_held.add if on else self.replays_held.discard)(node)
            self.history.add(self.env.now, NEMESIS, INFO, "replay-hold" if on else "replay-released",
                             {"process": node, **({} if on else {"why": why})})

    def _died(self, name: str) -> None:
        if name.startswith("worker-"):
            self.notices.unsubscribe(f"heartbeat-{name.rsplit('-', 1)[1]}")
            hb = self.heartbeats.pop(name, None)
            if hb is not None and hb.is_alive:
                hb.interrupt("kill")
            self.mq.close_connection(name, "connection lost")
        super()._died(name)

    # ------------------------------------------------------------------ performers

    def _now(self, process: str, effect: Now) -> Generator[Any, Any, Any]:
        return self.now_dt()
        yield  # a generator

    def _amqp(self, fn: Any) -> Generator[Any, Any, Any]:
        result = fn()
        yield self.env.timeout(self.latency.broker_s)
        return result

    def _consume(self, process: str, effect: Consume) -> Generator[Any, Any, Any]:
        return (yield from self._amqp(lambda: self.mq.consume(process, effect.slot)))

    def _cancel(self, process: str, effect: Cancel) -> Generator[Any, Any, Any]:
        return (yield from self._amqp(lambda: self.mq.cancel(process, effect.slot)))

    def _fetch(self, process: str, effect: Fetch) -> Generator[Any, Any, Any]:
        deliveries = self.mq.fetch(process, effect.wants, self.now_dt())
        for d in deliveries:
            self.history.add(self.env.now, process, INFO, "deliver", {
                "slot": d.slot, "priority": d.priority, "message_id": d.message_id, "count": d.delivery_count})
        yield self.env.timeout(self.latency.broker_s)
        return deliveries

    def _ack(self, process: str, effect: AckDeliveries) -> Generator[Any, Any, Any]:
        self.mq.ack(effect.deliveries)
        self.history.add(self.env.now, process, OK, "ack", {"ids": [d.message_id for d in effect.deliveries]})
        yield self.env.timeout(self.latency.broker_s)

    def _nack(self, process: str, effect: NackDeliveries) -> Generator[Any, Any, Any]:
        self.mq.nack(effect.deliveries)
        self.history.add(self.env.now, process, OK, "nack", {"ids": [d.message_id for d in effect.deliveries],
                                                             "why": effect.why})
        yield self.env.timeout(self.latency.broker_s)

    def _publish(self, process: str, effect: PublishConfirmed) -> Generator[Any, Any, Any]:
        mid = str(effect.message["message_id"])
        self.history.add(self.env.now, process, "invoke", "publish", {"message_id": mid})
        try:
            outcome = self.mq.publish(effect.routing_key, effect.message)
        except BrokerUnavailable as exc:
            self.history.add(self.env.now, process, "fail", "publish", {"message_id": mid, "error": str(exc)})
            raise
        yield self.env.timeout(self.latency.broker_s)  # the confirm on its way back
        self.history.add(self.env.now, process, OK, "publish", {"message_id": mid, "outcome": outcome})
        return outcome

    def _append(self, process: str, effect: OutboxAppend) -> Generator[Any, Any, Any]:
        stored = self.outboxes.setdefault(process, NodeOutbox()).append(effect.rows, self.env.now)
        self.history.add(self.env.now, process, OK, "outbox", {"messages": [r["body"] for r in stored]})
        yield self.env.timeout(0.001)  # the fsync
        return stored

    def _pending(self, process: str, effect: OutboxPending) -> Generator[Any, Any, Any]:
        if process in self.replays_held:
            return []
        return self.outboxes.setdefault(process, NodeOutbox()).pending(self.env.now - effect.older_than_s)
        yield

    def _confirm(self, process: str, effect: OutboxConfirm) -> Generator[Any, Any, Any]:
        seqs = set(effect.seqs)
        for row in self.outboxes[process].rows:
            if row["seq"] in seqs:
                row["confirmed"] = True
        yield self.env.timeout(0.001)

    def _slot_maps(self, process: str, effect: SlotMaps) -> Generator[Any, Any, Any]:
        """The web tier's read-only answer, at once (no statement of the interleaving database: a pull changes no
        schedule); None while the database is away."""
        if self.db_down:
            return None
        with self.sessions() as s:
            return read_maps(s)
        yield

    def _notify(self, process: str, effect: NotifyLeases) -> Generator[Any, Any, Any]:
        reached, lost = self.notices.publish(effect.slots)
        self.history.add(self.env.now, process, INFO, "notify", {"slots": list(effect.slots), "reached": reached,
                                                                 "lost": lost})
        yield self.env.timeout(self.latency.broker_s)

    def _await_notice(self, process: str, effect: AwaitLeaseNotice) -> Generator[Any, Any, Any]:
        return (yield from self.notices.wait(process, effect.seconds))

    def _last_seqs(self, process: str, effect: OutboxLastSeqs) -> Generator[Any, Any, Any]:
        return dict(self.outboxes.setdefault(process, NodeOutbox()).last_seqs)
        yield


def fleet(spec: InspectionSpec, seed: int) -> list[Device]:
    rng = random.Random(f"{seed}:fleet")
    return [Device(f"dev_{i:08d}", slot_of(f"dev_{i:08d}", spec.total_slots),
                   1 if rng.random() < spec.critical_ratio else 2) for i in range(spec.devices)]


def drain_worker(tx: Any, worker: str) -> None:
    """§4.4 C, the operator's POST /worker/{id}/drain: an ACTIVE worker becomes DRAINING (ValueError otherwise)."""
    from sqlalchemy import update

    row = tx.conn.execute(select(worker_heartbeat.c.state).where(worker_heartbeat.c.worker_id == worker)).first()
    if row is None or row.state != ACTIVE:
        raise ValueError(f"{worker} is not ACTIVE ({row.state if row else 'unknown'}): not drained")
    tx.conn.execute(update(worker_heartbeat).where(worker_heartbeat.c.worker_id == worker)
                    .values(state=DRAINING, metadata={"draining": True}))
    tx.conn.execute(insert(worker_log).values(worker_id=worker, from_state=ACTIVE, to_state=DRAINING,
                                              at=tx.now, silent_s=None, actor="operator"))


def seed_rows(tx: Any, spec: InspectionSpec, devices: list[Device]) -> None:
    """A run's first rows: slot map version 1, every slot FREE, the leader lease unheld, the devices' priorities."""
    tx.conn.execute(insert(slot_map_version).values(version=1, effective_at=tx.now, total_slots=spec.total_slots))
    tx.conn.execute(insert(slot_lease), [{"slot_id": s, "owner_worker_id": None, "lease_epoch": 0, "state": FREE,
                                          "slot_map_version": 1, "weight": 1, "state_since": tx.now}
                                         for s in range(spec.total_slots)])
    tx.conn.execute(insert(leader_lease).values(name=LEADER, holder=None, term=0, until=None))
    tx.conn.execute(insert(device_resource), [{"device_id": d.device_id, "priority": d.priority,
                                               "resource_version": 1} for d in devices])


class InspectionDeployment:
    def __init__(self, spec: InspectionSpec, seed: int, cfg: Settings) -> None:
        self.spec, self.seed, self.cfg = spec, seed, cfg
        self.world = InspectionWorld(seed, spec)
        self.devices = fleet(spec, seed)
        self.world.transact(lambda tx: seed_rows(tx, spec, self.devices))

    def start(self) -> None:
        world, spec, cfg = self.world, self.spec, self.cfg

        def leader_note(name: str, what: str, value: dict[str, Any]) -> None:
            world.history.add(world.env.now, name, INFO, what, value)

        for node in WEB_NODES:
            world.supervise(node, functools.partial(web_loop, node, cfg, leader_note))
        starts = spec.worker_starts or (0.0,) * spec.workers
        for name, at in zip(worker_names(spec), starts, strict=True):
            world.env.process(self._later(at, lambda n=name: world.supervise(n, functools.partial(
                self._incarnation, n))))
        until = EPOCH + timedelta(seconds=spec.window_s)
        for p in range(1, spec.probes + 1):
            share = [d for i, d in enumerate(self.devices) if i % spec.probes == p - 1]
            world.supervise(f"probe-{p}", functools.partial(probe_loop, f"probe-{p}", share, cfg, until))
        if spec.drain_worker:
            world.env.process(self._later(spec.drain_at_s, self._drain))
        if spec.reshard_to:
            world.env.process(self._later(spec.reshard_at_s, self._reshard))

    def _later(self, at: float, action: Any) -> Generator[Any, Any, None]:
        yield self.world.env.timeout(at)
        action()

    def _incarnation(self, name: str) -> Generator[Any, Any, None]:
        """A worker process started (again): its heartbeat thread beside, its consumer thread returned."""
        _, beat, consume = worker_threads(name, self.cfg)
        self.world.heartbeats[name] = self.world.drive(f"heartbeat-{name.split('-')[1]}", beat())
        return consume()

    def _drain(self) -> None:
        """§4.4 C: the operator's POST /worker/{id}/drain."""
        worker = self.spec.drain_worker
        self.world.history.add(self.world.env.now, "operator", INFO, "drain", {"worker": worker})

        def ask() -> Generator[Any, Any, None]:
            try:
                yield Transact(lambda tx: drain_worker(tx, worker), "worker.drain")
            except ValueError as refused:
                self.world.history.add(self.world.env.now, "operator", INFO, "drain-refused", {"why": str(refused)})

        self.world.drive("operator", ask())

    def _reshard(self) -> None:
        """§3.4, §4.5: the operator reshards to spec.reshard_to slots: the new queues declared and bound first, then
        the new map version (effective after the notice)."""
        world, total = self.world, self.spec.reshard_to
        world.mq.declare(total)

        def ask() -> Generator[Any, Any, None]:
            try:
                new = yield Transact(lambda tx: reshard(tx, total, self.cfg.reshard_notice_s,
                                                        self.cfg.reshard_grace_s), "slotmap.reshard")
            except ValueError as refused:
                world.history.add(world.env.now, "operator", INFO, "reshard-refused", {"why": str(refused)})
                return
            world.history.add(world.env.now, "operator", INFO, "reshard", {
                "version": new.version, "total_slots": total,
                "effective_at": (new.effective_at - EPOCH).total_seconds()})

        world.drive("operator", ask())

    # ------------------------------------------------------------------ the runner's questions

    def workload_done(self) -> bool:
        return self.world.env.now >= self.spec.window_s

    def unsettled(self) -> int:
        world = self.world
        unconfirmed = sum(1 for o in world.outboxes.values() for r in o.rows if not r["confirmed"])
        # a slot is settled when ACTIVE under a live worker: ACTIVE or DRAINING, and heard from lately (a worker
        # killed a moment ago still says ACTIVE: its takeover is still to come); a killed worker not yet restarted
        # is unsettled too
        lately = world.now_dt() - timedelta(seconds=self.cfg.heartbeat_s + 1.0)
        with world.sessions() as s:
            live = select(worker_heartbeat.c.worker_id).where(worker_heartbeat.c.state.in_((ACTIVE, DRAINING)),
                                                              worker_heartbeat.c.last_heartbeat >= lately)
            unowned = int(s.execute(select(func.count()).select_from(slot_lease).where(
                (slot_lease.c.state != ACTIVE) | slot_lease.c.owner_worker_id.not_in(live))).scalar() or 0)
        down = sum(1 for name, p in world.supervised.items() if name.startswith("worker-") and not p.alive)
        return world.mq.depth() + unconfirmed + unowned + down

    def busy_until(self) -> float | None:
        return None

    def final_state(self, heal_time: float) -> InspectionState:
        world = self.world
        with world.sessions() as s:
            tables = read_tables(s)
        return InspectionState(
            history=world.history, tables=tables, settings=self.cfg, spec=self.spec,
            outboxes={n: [dict(r) for r in o.rows] for n, o in world.outboxes.items()},
            broker_leftovers=world.mq.leftovers(), dropped=list(world.mq.dropped), heal_time=heal_time,
            end_time=world.env.now, t0=EPOCH.timestamp(), defects=list(world.defects))

    def verdicts(self, state: InspectionState, scenario: Any) -> list[Verdict]:
        return INVARIANTS.check(state, scenario.invariants)

    def stats(self) -> dict[str, Any]:
        world = self.world
        return {**world.stats, "restarts": {n: s.restarts for n, s in world.supervised.items() if s.restarts},
                "broker_closed_by_timeout": world.mq.closed_by_timeout, "dropped": len(world.mq.dropped)}


__all__ = ["InspectionDeployment", "InspectionSpec", "InspectionWorld", "Killed", "worker_names"]
