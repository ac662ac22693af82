"""The inspection pipeline on its real stack (`sortie run --system inspection`): PostgreSQL, one RabbitMQ 3.10 node
(stack.rabbitmq: quorum queues ``inspection.status.s{slot}.{high|normal}`` with a single active consumer,
``reject-publish`` and a dead-letter exchange, ``consumer_timeout`` in rabbitmq.conf) and Toxiproxy with a link to
each (the processes reach both only through them); the two web nodes, the workers and the IS nodes as OS processes
(systems.inspection.node) performing the reference's effects for real. A run seeds the tables as the simulation does,
starts the processes at the scenario's times, applies its faults (SIGKILL, SIGSTOP/SIGCONT, a cut link, a queue
unbound), waits until the pipeline settled (a condition, polled, with a deadline), stops everything, and judges
V1-V28 on the tables, the outboxes, the queues and the merged history: the simulation's checkers and state shape.

Time: every setting is the seed's, scaled by the time factor (0.2 by default: a 3 s heartbeat lasts 0.6 s, DEAD
after 6 s); the history's and the tables' times are scaled back, so the checkers judge in scenario seconds."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, func, select
from sqlalchemy.orm import Session

from harness.history import INFO, History
from kernel.effects import Tx
from reference.inspection.bugs import SEED, SEED_DEFECTS
from reference.inspection.config import Settings
from reference.inspection.effects import PRIORITIES, queue_name, routing_key
from reference.inspection.grants import IS, WEB, WORKER, create_roles
from reference.inspection.leader import LEADER
from reference.inspection.models import (
    ACTIVE,
    DRAINING,
    METADATA,
    leader_lease,
    message_dedup,
    slot_lease,
    slot_map_version,
    worker_heartbeat,
)
from reference.inspection.reshard import reshard
from scenarios.systems import StackRequest, StackUnavailable
from stack.common import LOOPBACK, free_port
from stack.components import Component, python_module
from stack.postgres import LocalPostgres
from stack.rabbitmq import BrokerConfig, LocalRabbitMQ, LocalRabbitMQCluster, rabbitmq_available
from stack.redis import LocalRedis
from stack.toxiproxy import LocalToxiproxy
from systems.inspection.checkers import INVARIANTS, InspectionState, read_tables
from systems.inspection.faults import AMQP_PROXY, DB_PROXY, REDIS_PROXY, InspectionNemesis
from systems.inspection.node import DEAD_LETTER_EXCHANGE, EXCHANGE, SqliteOutbox
from systems.inspection.sim import (
    NATIVE_TIME_FACTOR,
    WEB_NODES,
    InspectionSpec,
    drain_worker,
    fleet,
    seed_rows,
    worker_names,
)

DATABASE = "inspection"
DEAD_LETTERS = "inspection.dead"
DEFAULT_TIME_FACTOR = 0.2
AMQP_HEARTBEAT_S = 30.0  # §5.3, scenario seconds (RabbitMQ drops a silent connection after about three)
MIN_POLL_S = 0.1  # a worker with nothing to do looks again no faster than this (two cores, seven processes)
SETTLE_EVERY_S = 1.0
# RabbitMQ's node count on `sortie run --system inspection` (1 by default; 3 in the nightly's step,
# systems/inspection/nightly.sh): quorum queues with a member on each node, a Toxiproxy link to each
RABBITMQ_NODES_ENV = "SORTIE_INSPECTION_RABBITMQ_NODES"


def scaled(cfg: Settings, factor: float) -> Settings:
    """The settings in wall seconds."""
    out = {f.name: getattr(cfg, f.name) * factor for f in fields(cfg) if f.name.endswith("_s")}
    out["poll_s"] = max(MIN_POLL_S, out["poll_s"])
    return replace(cfg, **out)


class InspectionStack:
    """PostgreSQL, RabbitMQ (one node, or a cluster of ``rabbitmq_nodes``) and Toxiproxy for as long as the context
    lasts; the pipeline's processes per run. The processes reach the broker through a link per node, trying them in
    order; the harness administers it through the first node (queues and policies are the cluster's)."""

    def __init__(self, run_dir: Path | None = None, consumer_timeout_s: float = 1800.0 * DEFAULT_TIME_FACTOR,
                 rabbitmq_nodes: int = 1) -> None:
        self._keep_run_dir = run_dir is not None
        self.run_dir = Path(run_dir or tempfile.mkdtemp(prefix="sortie-inspection-stack-"))
        # its own mkdtemp: the 'postgres' OS user must traverse every parent
        self.pg = LocalPostgres(Path(tempfile.mkdtemp(prefix="sortie-inspection-pg-")))
        config = BrokerConfig(consumer_timeout_ms=int(consumer_timeout_s * 1000), channel_tick_interval_ms=5000)
        self.cluster = LocalRabbitMQCluster(self.run_dir / "rabbitmq", rabbitmq_nodes, config=config) \
            if rabbitmq_nodes > 1 else None
        self.mq = self.cluster.nodes[0] if self.cluster else LocalRabbitMQ(self.run_dir / "rabbitmq", config=config)
        self.amqp_links: dict[str, int] = {}  # each node's Toxiproxy link: its name -> its port
        self.toxiproxy = LocalToxiproxy(self.run_dir / "toxiproxy")
        self.redis = LocalRedis(self.run_dir / "redis")  # the leader's lease notices (§4.1), through its link
        self.redis_port = 0
        self.owner: Engine | None = None
        self.db_port = 0  # the database's Toxiproxy link
        self.passwords = {role: secrets.token_hex(12) for role in (WORKER, WEB, IS)}
        self.processes: dict[str, Component] = {}
        self.failpoints = self.run_dir / "failpoints.json"
        self.overflow = "reject-publish"  # what a full queue does (this run's queues)

    def __enter__(self) -> InspectionStack:
        if not rabbitmq_available():
            raise StackUnavailable("RabbitMQ is not installed: apt-get install -y --no-install-recommends "
                                   "rabbitmq-server (or bash scripts/system-deps.sh as root)")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.pg.start()
            self.pg.create_database(DATABASE, exist_ok=True)
            self.owner = create_engine(self.pg.url(database=DATABASE))
            (self.cluster or self.mq).start()
            self.toxiproxy.start()
            _, db_port = self.toxiproxy.client.create_proxy(DB_PROXY, f"{LOOPBACK}:{self.pg.port}")
            for i, node in enumerate(self.brokers):
                link = AMQP_PROXY if i == 0 else f"{AMQP_PROXY}-{i}"
                self.amqp_links[link] = self.toxiproxy.client.create_proxy(link, node.address)[1]
            self.redis.start()
            self.redis_port = self.toxiproxy.client.create_proxy(REDIS_PROXY, self.redis.address)[1]
        except BaseException:
            self.__exit__()
            raise
        self.db_port = db_port
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_processes()
        self.toxiproxy.stop()
        self.redis.stop()
        (self.cluster or self.mq).stop()
        if self.owner is not None:
            self.owner.dispose()
        self.pg.stop()
        shutil.rmtree(self.pg.run_dir, ignore_errors=True)
        if not self._keep_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    @property
    def brokers(self) -> list[LocalRabbitMQ]:
        return self.cluster.nodes if self.cluster else [self.mq]

    # ------------------------------------------------------------------ per run

    def reset(self, spec: InspectionSpec, devices: list[Any], overflow: str = "reject-publish") -> None:
        """Fresh tables with the run's first rows, fresh queues (full: ``overflow``), no outbox, no history; every
        link up."""
        assert self.owner is not None
        METADATA.drop_all(self.owner)
        METADATA.create_all(self.owner)
        with self.owner.begin() as conn:
            create_roles(conn, self.passwords)
        with Session(self.owner) as session, session.begin():
            seed_rows(Tx(session, datetime.now(UTC), uuid.uuid4), spec, devices)
        self.toxiproxy.client.reset()
        conn = self.mq.connect()
        try:
            ch = conn.channel()
            ch.exchange_declare(EXCHANGE, "direct", durable=True)
            ch.exchange_declare(DEAD_LETTER_EXCHANGE, "fanout", durable=True)
            ch.queue_delete(DEAD_LETTERS)
            ch.queue_declare(DEAD_LETTERS, durable=True)
            ch.queue_bind(DEAD_LETTERS, DEAD_LETTER_EXCHANGE)
            # a reshard's slots too: what an earlier run left in them must not be this run's
            for slot in range(max(spec.total_slots, spec.reshard_to)):
                for priority in PRIORITIES:
                    ch.queue_delete(queue_name(slot, priority))
        finally:
            conn.close()
        self.overflow = overflow
        self.declare_queues(range(spec.total_slots))
        for d in ("history", "outbox", "pause-at", "stall", "replay-hold"):
            shutil.rmtree(self.run_dir / d, ignore_errors=True)
            (self.run_dir / d).mkdir(parents=True)
        for armed in self.run_dir.glob("failpoints.json*"):
            armed.unlink()

    def declare_queues(self, slots: range) -> None:
        """The quorum queues of ``slots``, bound to the exchange (full: this run's overflow)."""
        conn = self.mq.connect()
        try:
            ch = conn.channel()
            for slot in slots:
                for priority in PRIORITIES:
                    ch.queue_declare(queue_name(slot, priority), durable=True, arguments={
                        "x-queue-type": "quorum", "x-single-active-consumer": True, "x-overflow": self.overflow,
                        "x-dead-letter-exchange": DEAD_LETTER_EXCHANGE})
                    ch.queue_bind(queue_name(slot, priority), EXCHANGE, routing_key(slot, priority))
        finally:
            conn.close()

    def total_slots(self) -> int:
        """TOTAL_SLOTS of the newest slot map (a reshard's once it wrote it)."""
        assert self.owner is not None
        with self.owner.connect() as conn:
            return int(conn.execute(select(func.max(slot_map_version.c.total_slots))).scalar_one())

    def pause_at(self, worker: str, effect: str, seconds: float) -> None:
        """The worker stops itself (SIGSTOP, SIGCONT after ``seconds``) when it next performs ``effect``."""
        path = self.pause_at_file(worker)
        path.with_suffix(".tmp").write_text(json.dumps({"effect": effect, "seconds": seconds}))
        path.with_suffix(".tmp").rename(path)

    def pause_at_file(self, worker: str) -> Path:
        return self.run_dir / "pause-at" / f"{worker}.json"

    def stall_file(self, worker: str) -> Path:
        """While it exists, the worker's heartbeat thread is stuck (systems.inspection.node)."""
        return self.run_dir / "stall" / worker

    def replay_hold_file(self, node: str) -> Path:
        """While it exists, the IS node's replayer finds nothing to replay (systems.inspection.node)."""
        return self.run_dir / "replay-hold" / node

    def add_process(self, role: str, name: str, env: dict[str, str]) -> Component:
        port = free_port()
        comp = Component(name, python_module("systems.inspection.node", role, name, "--health-port", str(port)),
                         f"http://{LOOPBACK}:{port}/health", env=env, log_path=self.run_dir / f"{name}.log")
        self.processes[name] = comp
        return comp

    def stop_processes(self) -> None:
        for comp in self.processes.values():
            comp.stop()
        self.processes.clear()

    def db_url(self, role: str) -> str:
        """A process's way to the database: its own role (reference.inspection.grants), through the link."""
        return self.pg.url(role, self.passwords[role], DATABASE).replace(f":{self.pg.port}/", f":{self.db_port}/")

    def leading(self) -> str | None:
        """The web node holding the leader lease now."""
        assert self.owner is not None
        with self.owner.connect() as conn:
            return conn.execute(select(leader_lease.c.holder).where(leader_lease.c.name == LEADER)).scalar()

    def redis_env(self) -> str:
        """SORTIE_INSPECTION_REDIS: Redis through its link (host:port)."""
        return f"{LOOPBACK}:{self.redis_port}"

    def amqp_env(self, heartbeat_s: float) -> str:
        return json.dumps({"host": LOOPBACK, "ports": list(self.amqp_links.values()), "vhost": self.mq.vhost,
                           "user": self.mq.user, "password": self.mq.password, "heartbeat_s": heartbeat_s})

    def queue_depths(self, total_slots: int) -> dict[str, int]:
        """Ready messages per queue (held ones are not counted: a closed channel gives them back)."""
        conn = self.mq.connect()
        try:
            ch = conn.channel()
            return {q: ch.queue_declare(q, passive=True).method.message_count
                    for q in (queue_name(s, p) for s in range(total_slots) for p in PRIORITIES)}
        finally:
            conn.close()

    def dead_letters(self) -> list[str]:
        """The ids of the messages dead-lettered (dropped from a full queue: drop-head), read off their queue."""
        conn = self.mq.connect()
        out = []
        try:
            ch = conn.channel()
            while (got := ch.basic_get(DEAD_LETTERS, auto_ack=True))[0] is not None:
                out.append(str(json.loads(got[2])["message_id"]))
        finally:
            conn.close()
        return out


# ---------------------------------------------------------------------- a catalogue scenario


class InspectionScenarioRunner:
    """A catalogue scenario (the simulation's YAML) on the real stack: the same fleet, the processes started at the
    scenario's times scaled by ``time_factor``, the faults through an InspectionNemesis, the same checkers."""

    def __init__(self, stack: InspectionStack, time_factor: float = DEFAULT_TIME_FACTOR,
                 bugs: tuple[str, ...] = (), *, asked: bool = True) -> None:
        self.stack, self.factor, self.bugs = stack, time_factor, bugs
        self.time_factor = time_factor
        self.asked = asked  # the run named its time factor: it wins over a scenario's native_time_factor

    def outside_pids(self) -> list[int]:
        pid = self.stack.pg._postmaster_pid() if hasattr(self.stack.pg, "_postmaster_pid") else None
        return [pid] if pid else []

    def switch_bug(self, bug: str) -> None:
        """Another bug on this stack (scenarios.systems.BugSwitch): run() starts every process of a scenario (web
        nodes, probes, workers) with ``self.bugs`` and stops them all at its end, so the next run has the new bug in
        each and none keeps the last; RabbitMQ and the database stay, reset by the run."""
        self.bugs = injected_bugs(bug)

    def run(self, scenario: Any, seed: int) -> Any:
        from scenarios.runner import ScenarioResult
        from scenarios.timeline import run_realtime

        wall0 = time.perf_counter()
        stack, spec = self.stack, scenario.workload
        f = self.factor if self.asked else float(scenario.params.get(NATIVE_TIME_FACTOR, self.factor))
        cfg = Settings.with_overrides(scenario.policy)
        wall_cfg = scaled(cfg, f)
        devices = fleet(spec, seed)
        # the seed's reject-publish-dlx, which a quorum queue on 3.10 treats as drop-head (docs/native-stack.md)
        stack.reset(spec, devices, "reject-publish-dlx" if "drop-head-overflow" in self.bugs else "reject-publish")
        t0 = time.time()
        history = History()

        def now() -> float:
            return (time.time() - t0) / f

        env = {"SORTIE_INSPECTION_AMQP": stack.amqp_env(AMQP_HEARTBEAT_S * f),
               "SORTIE_INSPECTION_REDIS": stack.redis_env(),
               "SORTIE_INSPECTION_SETTINGS": json.dumps(asdict(wall_cfg)),
               "SORTIE_INSPECTION_HISTORY": str(stack.run_dir / "history"),
               "SORTIE_INSPECTION_BUG": ",".join(self.bugs), "SORTIE_FAILPOINTS": str(stack.failpoints)}
        nemesis = InspectionNemesis(stack, f)
        nemesis.attach(history, now)
        for node in WEB_NODES:
            stack.add_process("web", node, {**env, "SORTIE_INSPECTION_DATABASE_URL": stack.db_url(WEB)}).start()
        until = datetime.fromtimestamp(t0, UTC) + timedelta(seconds=spec.window_s * f)
        outboxes = {}
        for p in range(1, spec.probes + 1):
            name = f"probe-{p}"
            share = [asdict(d) for i, d in enumerate(devices) if i % spec.probes == p - 1]
            outboxes[name] = stack.run_dir / "outbox" / f"{name}.db"
            stack.add_process("probe", name, {**env, "SORTIE_INSPECTION_DEVICES": json.dumps(share),
                                              "SORTIE_INSPECTION_UNTIL": until.isoformat(),
                                              "SORTIE_INSPECTION_DATABASE_URL": stack.db_url(IS),
                                              "SORTIE_INSPECTION_OUTBOX": str(outboxes[name]),
                                              "SORTIE_INSPECTION_REPLAY_HOLD": str(stack.replay_hold_file(name))}
                              ).start()
        starts = spec.worker_starts or (0.0,) * spec.workers
        timers = [threading.Timer(max(0.0, at * f - (time.time() - t0)), stack.add_process("worker", name, {
            **env, "SORTIE_INSPECTION_DATABASE_URL": stack.db_url(WORKER),
            "SORTIE_INSPECTION_PAUSE_AT": str(stack.pause_at_file(name)),
            "SORTIE_INSPECTION_STALL": str(stack.stall_file(name))}).start)
                  for name, at in zip(worker_names(spec), starts, strict=True)]
        if spec.drain_worker:
            timers.append(threading.Timer(spec.drain_at_s * f, self._drain, args=(spec.drain_worker, history, now)))
        if spec.reshard_to:
            timers.append(threading.Timer(spec.reshard_at_s * f, self._reshard, args=(spec, wall_cfg, history, now,
                                                                                     t0, f)))
        for timer in timers:
            timer.start()
        notes: list[str] = []
        faults = threading.Thread(target=run_realtime, args=(scenario.faults, lambda fault, params, on: nemesis.apply(
            fault, params, on=on), history, now, f), name="nemesis")
        running = threading.Event()
        running.set()

        def supervisor() -> None:
            while running.is_set():
                nemesis.supervise()
                time.sleep(0.2)

        watcher = threading.Thread(target=supervisor, name="supervisor", daemon=True)
        try:
            faults.start()
            watcher.start()
            faults.join()
            for timer in timers:
                timer.join()
            self._settle(spec, wall_cfg, outboxes, max(spec.window_s, scenario.heal_time()),
                         scenario.recovery_bound_s, nemesis, now, notes)
        finally:
            running.clear()
            watcher.join(5.0)
            nemesis.cancel_restarts()
            for timer in timers:
                timer.cancel()
            end = now()
            stack.stop_processes()
        state = self._state(spec, cfg, history, outboxes, t0, scenario.heal_time(), end, f)
        verdicts = INVARIANTS.check(state, scenario.invariants)
        exercised = scenario.exercised(state.history, state)
        passed = exercised is None and all(v.status != "violated" for v in verdicts)
        return ScenarioResult(
            id=scenario.id, slug=scenario.slug, title=scenario.title, seed=seed, passed=passed, verdicts=verdicts,
            exercised=exercised, history_digest=state.history.digest(), counts=state.counts(), virtual_s=end,
            wall_s=time.perf_counter() - wall0, history=state.history, state=state,
            stats={"shell": "native", "time_factor": f, "bugs": list(self.bugs), "notes": notes,
                   "rabbitmq_nodes": len(stack.brokers)})

    def _drain(self, worker: str, history: History, now: Any) -> None:
        """§4.4 C: the operator's POST /worker/{id}/drain, as the simulation's operator asks it."""
        assert self.stack.owner is not None
        history.add(now(), "operator", INFO, "drain", {"worker": worker})
        try:
            with Session(self.stack.owner) as session, session.begin():
                drain_worker(Tx(session, datetime.now(UTC), uuid.uuid4), worker)
        except ValueError as refused:
            history.add(now(), "operator", INFO, "drain-refused", {"why": str(refused)})

    def _reshard(self, spec: InspectionSpec, wall_cfg: Settings, history: History, now: Any, t0: float,
                 f: float) -> None:
        """§3.4, §4.5: the operator's reshard, as the simulation's operator asks it: the new slots' queues declared
        and bound first, then the new map version (the notice and grace window on the run's clock)."""
        assert self.stack.owner is not None
        self.stack.declare_queues(range(spec.total_slots, spec.reshard_to))
        try:
            with Session(self.stack.owner) as session, session.begin():
                new = reshard(Tx(session, datetime.now(UTC), uuid.uuid4), spec.reshard_to,
                              wall_cfg.reshard_notice_s, wall_cfg.reshard_grace_s)
        except ValueError as refused:
            history.add(now(), "operator", INFO, "reshard-refused", {"why": str(refused)})
            return
        history.add(now(), "operator", INFO, "reshard", {"version": new.version, "total_slots": spec.reshard_to,
                                                         "effective_at": (new.effective_at.timestamp() - t0) / f})

    def _settle(self, spec: InspectionSpec, wall_cfg: Settings, outboxes: dict[str, Path], from_s: float,
                bound_s: float, nemesis: InspectionNemesis, now: Any, notes: list[str]) -> None:
        """Wait until the IS nodes stopped inspecting and the pipeline settled twice in a row (every outbox row
        confirmed and processed, the queues empty, every slot ACTIVE under a worker heard from lately, no killed
        process waiting for its restart), or the recovery bound passed."""
        while now() < from_s:
            time.sleep(SETTLE_EVERY_S)
        quiet = 0
        while now() < from_s + bound_s:
            why = self._unsettled(spec, wall_cfg, outboxes, nemesis)
            quiet = quiet + 1 if why is None else 0
            if quiet >= 2:
                return
            time.sleep(SETTLE_EVERY_S)
        notes.append(f"not settled {bound_s:g} s after {from_s:g} s: {why}")

    def _unsettled(self, spec: InspectionSpec, wall_cfg: Settings, outboxes: dict[str, Path],
                   nemesis: InspectionNemesis) -> str | None:
        assert self.stack.owner is not None
        if nemesis.pending_restarts():
            return f"waiting to restart {nemesis.pending_restarts()}"
        rows = [r for path in outboxes.values() if path.exists() for r in SqliteOutbox(str(path)).rows()]
        if unconfirmed := sum(1 for r in rows if not r["confirmed"]):
            return f"{unconfirmed} outbox rows unconfirmed"
        if depth := sum(self.stack.queue_depths(self.stack.total_slots()).values()):
            return f"{depth} messages ready in the queues"
        lately = datetime.now(UTC) - timedelta(seconds=wall_cfg.heartbeat_s + 1.0 * nemesis.factor)
        with self.stack.owner.connect() as conn:
            processed = conn.execute(select(func.count()).select_from(message_dedup)).scalar_one()
            live = select(worker_heartbeat.c.worker_id).where(worker_heartbeat.c.state.in_((ACTIVE, DRAINING)),
                                                              worker_heartbeat.c.last_heartbeat >= lately)
            unowned = conn.execute(select(func.count()).select_from(slot_lease).where(
                (slot_lease.c.state != ACTIVE) | slot_lease.c.owner_worker_id.not_in(live))).scalar_one()
        if processed < len(rows):
            return f"{len(rows) - processed} outboxed messages not processed"
        return f"{unowned} slots not ACTIVE under a live worker" if unowned else None

    def _state(self, spec: InspectionSpec, cfg: Settings, history: History, outboxes: dict[str, Path], t0: float,
               heal_time: float, end: float, factor: float | None = None) -> InspectionState:
        """The run as the checkers read it: the processes' histories merged with the nemesis's, tables, outboxes,
        what the queues still hold, what was dead-lettered; wall times scaled back to scenario seconds (``factor``:
        the run's, the runner's by default)."""
        stack, f = self.stack, factor or self.factor
        assert stack.owner is not None
        ops = [(o.time, o.process, o.type, o.f, o.value) for o in history.ops]
        for path in sorted((stack.run_dir / "history").glob("*.jsonl")):
            for line in path.read_text().splitlines():
                o = json.loads(line)
                value = o["value"]
                if o["f"] == "batch.commit" and "cache_age_s" in value:
                    value = {**value, "cache_age_s": round(value["cache_age_s"] / f, 3)}
                ops.append(((o["time"] - t0) / f, o["process"], o["type"], o["f"], value))
        merged = History()
        for t, process, type_, name, value in sorted(ops, key=lambda o: o[0]):
            merged.add(t, process, type_, name, value)
        origin = datetime.fromtimestamp(t0, UTC)
        with Session(stack.owner) as session:
            tables = read_tables(session, origin, 1.0 / f)
        for r in tables["worker_log"]:
            if r["silent_s"] is not None:
                r["silent_s"] = r["silent_s"] / f
        rows = {name: [{**r, "created_at": (r["created_at"] - t0) / f} for r in SqliteOutbox(str(path)).rows()]
                for name, path in outboxes.items() if path.exists()}
        leftovers = [f"{q}#{i}" for q, n in stack.queue_depths(stack.total_slots()).items() for i in range(n)]
        return InspectionState(history=merged, tables=tables, settings=cfg, spec=spec, outboxes=rows,
                               broker_leftovers=leftovers, dropped=stack.dead_letters(), heal_time=heal_time,
                               end_time=end, t0=t0, scale=1.0 / f)


def injected_bugs(bug: str | None) -> tuple[str, ...]:
    """The defects a stack request's bug switches on: ``seed``, the seed-faithful variant's; none for no bug."""
    return tuple(SEED_DEFECTS) if bug == SEED else ((bug,) if bug else ())


@contextlib.contextmanager
def stack_runner(req: StackRequest) -> Iterator[InspectionScenarioRunner]:
    """The inspection pipeline's real stack for `sortie run --system inspection` (System.stack_runner): an injected
    defect of reference.inspection.bugs is on in every process; ``seed`` runs the seed-faithful variant."""
    if req.kind != "native":
        raise StackUnavailable(f"--stack {req.kind}: the inspection pipeline runs on its own native stack only")
    factor = req.time_factor or DEFAULT_TIME_FACTOR
    nodes = os.environ.get(RABBITMQ_NODES_ENV, "1")
    if not nodes.isdigit() or int(nodes) < 1:
        raise StackUnavailable(f"{RABBITMQ_NODES_ENV}={nodes!r}: RabbitMQ's node count is a whole number, 1 or more")
    with InspectionStack(req.run_dir, consumer_timeout_s=1800.0 * factor, rabbitmq_nodes=int(nodes)) as stack:
        yield InspectionScenarioRunner(stack, factor, injected_bugs(req.inject_bug),
                                       asked=req.time_factor is not None)


__all__ = ["InspectionScenarioRunner", "InspectionStack", "stack_runner"]
