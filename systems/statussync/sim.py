"""The status sync in the simulation shell: its schema on the interleaving database, two outbox relays and the health
reconciler as supervised processes, a coordinator per task that dispatches step producers (supervised, so a killed
one restarts from its ledger), the workload's adversaries (retries of answered events, eventIds reused with other
content, forged reports, a late worker after a task failed), the Centrifugo model (systems.statussync.centrifugo) and
one client model per user (systems.statussync.client_model).

Isolation: the interleaving database gives every statement the latest commit (READ COMMITTED) and a locking read the
write lock; InnoDB's REPEATABLE READ snapshot of plain reads is not modelled. No rule of the reference depends on it:
every read that decides a write is a locking read under the task's row lock (docs/systems/statussync.md)."""

from __future__ import annotations

import functools
import random
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, select

from harness.history import INFO, INVOKE, OK
from kernel.failpoints import register_roles
from reference.statussync import coverage
from reference.statussync.models import (
    OUTBOX_DEAD,
    OUTBOX_PUBLISHED,
    ProducerLedger,
    StatusBase,
    Task,
    TaskOutbox,
)
from reference.statussync.producer import (
    CoordinatorConfig,
    CoordinatorState,
    StartProducer,
    StepPlan,
    coordinator_run,
    step_phases,
    step_run,
)
from reference.statussync.reconciler import HealthConfig, reconciler_loop
from reference.statussync.registry import STEPS, TENANT, next_version_rows, seed_rows
from reference.statussync.relay import PublishFailed, RelayConfig, ServerPublish, relay_loop
from reference.statussync.service import NewTask, Reported, report
from scenarios.sim.world import SimWorld
from scenarios.verdicts import Verdict
from systems.statussync.centrifugo import CentrifugoModel
from systems.statussync.checkers import INVARIANTS, SyncState, read_state
from systems.statussync.client_model import ClientModel

PRODUCER_ROLES = {"file-worker": "preparer", "document-parser": "parser", "result-service": "storer"}
register_roles("relay", "health", "coordinator", "adversary", *PRODUCER_ROLES.values())
register_roles(*PRODUCER_ROLES.values(), group="producer")
RELAYS = 2


@dataclass(frozen=True)
class SyncSpec:
    tasks: int = 6
    users: int = 2  # one online client each; tasks go to users in turn (after the lead's)
    lead_tasks: int = 0  # the first tasks all go to u0 (a user with more tasks than detail subscriptions)
    window_s: float = 20.0  # tasks are created over this window
    parallel: bool = False  # steps 01 and 02 run at once (two producers of one task racing)
    progress: int = 2  # STEP_PROGRESS reports per step
    work_s: float = 6.0  # each step's work
    failing: int = 0  # tasks whose parse fails every attempt (TASK_FAILED)
    flaky: int = 0  # tasks whose parse fails its first attempt only
    reordered: int = 0  # tasks whose parse's last two reports reach the service in reverse
    late_workers: int = 0  # failed tasks whose result-service still reports after the task ended
    retries: int = 0  # answered events sent again (a retry after a timeout)
    reuses: int = 0  # answered eventIds sent again with other content
    forged: int = 0  # reports with another step's token
    details: int = 2  # detail channels each client opens
    open_each: bool = False  # each client opens each of its first `details` tasks once, one a tick, in id order (as
    # the native client does; past 20 the LRU closes the oldest), instead of browsing at random
    foreign_details: int = 0  # clients asking for a detail token of another user's task
    join_at_s: float = 0.0  # when the clients connect
    join_spread_s: float = 0.0  # ... each at random within this after join_at_s
    batch_get_s: float = 0.0  # each client's status:batchGet period (0: none)
    history_size: int = 50
    history_ttl_s: float = 300.0
    step_timeout_s: float = 120.0
    stale_after_s: float = 20.0
    registry_change_at: float = -1.0  # when status definitions v4 are published (< 0: never)

    def __post_init__(self) -> None:
        if self.tasks < 0 or self.users < 1 or not 0 <= self.lead_tasks <= self.tasks:
            raise ValueError("tasks >= 0, users >= 1 and 0 <= lead_tasks <= tasks")

    def task_ids(self) -> list[str]:
        return [f"task-{i:03d}" for i in range(self.tasks)]

    def owner_of(self, i: int) -> str:
        """The i-th task's owner: u0 for the first ``lead_tasks``, then the users in turn."""
        return "u0" if i < self.lead_tasks else f"u{(i - self.lead_tasks) % self.users}"


class SyncWorld(SimWorld):
    """The simulated world with the Centrifugo model and the switches the status sync's faults flip."""

    def __init__(self, seed: int, spec: SyncSpec) -> None:
        super().__init__(seed, metadata=StatusBase.metadata, targets=coverage.COVERAGE,
                         recorded={"event.report": _report_value})
        self.centrifugo = CentrifugoModel(self.env, random.Random(f"{seed}:centrifugo"),
                                          history_size=spec.history_size, history_ttl_s=spec.history_ttl_s,
                                          record=self._centrifugo_op)
        self.relays_paused = False
        self.cut_clients: set[str] = set()
        self.performers[ServerPublish] = self._publish

    def _centrifugo_op(self, kind: str, value: dict[str, Any]) -> None:
        self.history.add(self.env.now, "centrifugo", INFO, kind, value)

    def _publish(self, process: str, effect: ServerPublish) -> Generator[Any, Any, int]:
        value = {"outbox_id": effect.outbox_id, "attempt": effect.attempt, "channel": effect.channel}
        self.history.add(self.env.now, process, INVOKE, "publish", value)
        while self.relays_paused:  # a paused relay (SIGSTOP-like) holds its publish until resumed
            yield self.env.timeout(1.0)
        try:
            offset = self.centrifugo.publish(effect.channel, effect.data)
        except PublishFailed as failed:
            self.history.add(self.env.now, process, "fail", "publish", {**value, "status": failed.status})
            yield self.env.timeout(self.latency.broker_s)
            raise
        yield self.env.timeout(self.latency.broker_s)
        self.history.add(self.env.now, process, OK, "publish", {**value, "offset": offset})
        return offset


def _insert_rows(table: Any, rows: list[dict[str, Any]], tx: Any) -> None:
    tx.conn.execute(insert(table), rows)


def _report_value(reported: Reported) -> dict[str, Any]:
    a, e = reported.answer, reported.event
    return {"eventId": e.get("eventId"), "taskId": e.get("taskId"), "stepId": e.get("stepId"),
            "stepAttempt": e.get("stepAttempt"), "producerId": e.get("producerId"), "sourceSeq": e.get("sourceSeq"),
            "eventType": e.get("eventType"), "accepted": bool(a.get("accepted")), "code": a.get("code"),
            "duplicate": bool(a.get("duplicate")), "taskVersion": a.get("taskVersion"),
            "stepVersion": a.get("stepVersion")}


class SyncDeployment:
    """The status sync deployed in simulation for one run (scenarios.systems.Deployment)."""

    def __init__(self, spec: SyncSpec, seed: int) -> None:
        self.spec, self.seed = spec, seed
        self.world = SyncWorld(seed, spec)
        self.rng = random.Random(f"{seed}:statussync")
        self.relay_cfg = RelayConfig()
        self.health_cfg = HealthConfig(stale_after_s=spec.stale_after_s)
        self.coordinators_left = 0
        self.producers_started = 0
        self.contexts: dict[str, dict[str, Any]] = {}  # eventId -> the context it was reported with
        self.clients: list[ClientModel] = []
        kinds = ["failing"] * spec.failing + ["flaky"] * spec.flaky + ["reordered"] * spec.reordered
        kinds = kinds[:spec.tasks] + ["ok"] * (spec.tasks - len(kinds))  # more special tasks than tasks: the first
        self.rng.shuffle(kinds)
        self.kinds = dict(zip(spec.task_ids(), kinds, strict=True))
        self.late_left = spec.late_workers
        self.world.performers[StartProducer] = self._perform_start

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        world, spec = self.world, self.spec
        for table, rows in seed_rows():
            world.transact(functools.partial(_insert_rows, table, rows))
        for r in range(1, RELAYS + 1):
            world.supervise(f"relay-{r}", functools.partial(relay_loop, self.relay_cfg, f"relay-{r}"))
        world.supervise("health-1", functools.partial(reconciler_loop, self.health_cfg))
        for i, task_id in enumerate(spec.task_ids()):
            at = self.rng.uniform(0.0, spec.window_s)
            self.coordinators_left += 1
            world.env.process(self._coordinator(i, task_id, at))
        for u in range(spec.users):
            join_at = spec.join_at_s + self.rng.uniform(0.0, spec.join_spread_s)
            client = ClientModel(self, f"client-{u}", f"u{u}", join_at, foreign=u < spec.foreign_details)
            self.clients.append(client)
            world.env.process(client.run())
        if spec.registry_change_at >= 0:
            world.env.process(self._registry_change(spec.registry_change_at))
        for n in range(spec.retries):
            world.env.process(self._adversary(f"adversary-{n}", self._retry_one, n))
        for n in range(spec.reuses):
            world.env.process(self._adversary(f"adversary-{100 + n}", self._reuse_one, n))
        for n in range(spec.forged):
            world.env.process(self._adversary(f"adversary-{200 + n}", self._forge_one, n))

    def _registry_change(self, at: float) -> Generator[Any, Any, None]:
        yield self.world.env.timeout(at)
        yield from self.world.db.idle()  # an operator's write, outside the simulated processes' transactions
        for table, rows in next_version_rows():
            self.world.transact(functools.partial(_insert_rows, table, rows))
        self.world.history.add(self.world.env.now, "operator", INFO, "registry-change", {"version": 4})

    def _coordinator(self, i: int, task_id: str, at: float) -> Generator[Any, Any, None]:
        world, spec = self.world, self.spec
        yield world.env.timeout(at)
        groups = (("01_prepare", "02_parse"), ("03_store",)) if spec.parallel else tuple((s[0],) for s in STEPS)
        new = NewTask(task_id, TENANT, spec.owner_of(i), f"contract-{i}", tuple((s[0], s[1]) for s in STEPS))
        cfg = CoordinatorConfig(groups=groups, step_timeout_s=spec.step_timeout_s)
        name = f"coordinator-{i}"
        world.history.add(world.env.now, name, INVOKE, "task", {"taskId": task_id, "owner": new.owner_id})

        def done(state: CoordinatorState | None, error: BaseException | None) -> None:
            self.coordinators_left -= 1
            world.history.add(world.env.now, name, OK if error is None else "fail", "task", {"taskId": task_id})
            if state is not None and self.kinds[task_id] == "failing" and self.late_left > 0:
                self.late_left -= 1  # dispatched before the failure, it reports after the task ended
                self._start_producer(state.steps["03_store"])

        world.drive(name, coordinator_run(new, cfg), on_done=done)

    def _perform_start(self, process: str, effect: StartProducer) -> Generator[Any, Any, None]:
        self._start_producer(effect.ctx)
        yield self.world.env.timeout(0.0)

    def _start_producer(self, ctx: dict[str, Any]) -> None:
        task_id, step_id, attempt = ctx["taskId"], ctx["stepId"], int(ctx["stepAttempt"])
        kind = self.kinds[task_id]
        fails = step_id == "02_parse" and (kind == "failing" or (kind == "flaky" and attempt == 1))
        plan = StepPlan(step_phases(step_id, self.spec.progress, self.spec.work_s, fails,
                                    int(ctx["statusDefinitionVersion"])),
                        reorder_last=kind == "reordered" and step_id == "02_parse")
        self.producers_started += 1
        name = f"{PRODUCER_ROLES[ctx['producerId']]}-{self.producers_started}"
        self.world.history.add(self.world.env.now, name, INFO, "producer", {
            "taskId": task_id, "stepId": step_id, "stepAttempt": attempt, "producerId": ctx["producerId"]})
        self.contexts[f"{task_id}:{step_id}:{attempt}"] = ctx
        self.world.supervise(name, lambda: step_run(ctx, plan, {}), restart_after_s=2.0)

    # ------------------------------------------------------------------ adversaries

    def _adversary(self, name: str, act: Any, n: int) -> Generator[Any, Any, None]:
        """Acts once, at a random moment after some events were answered."""
        yield self.world.env.timeout(self.spec.window_s * 0.5 + self.rng.uniform(0.0, self.spec.window_s))
        for _ in range(60):
            rows = self._answered()
            if rows:
                yield from act(name, self.rng.choice(rows), n)
                return
            yield self.world.env.timeout(2.0)

    def _answered(self) -> list[Any]:
        with self.world.sessions() as s:
            return list(s.execute(select(ProducerLedger.__table__).where(
                ProducerLedger.answer == "ACCEPTED", ProducerLedger.step_id != "")
                .order_by(ProducerLedger.task_id, ProducerLedger.step_id, ProducerLedger.position)).all())

    def _ctx(self, row: Any) -> dict[str, Any]:
        return self.contexts[f"{row.task_id}:{row.step_id}:{row.attempt}"]

    def _retry_one(self, name: str, row: Any, n: int) -> Generator[Any, Any, None]:
        """The same event again (its answer was lost on the way back): it must get the first answer."""
        yield from self._send(name, "retry", dict(row.event), self._ctx(row)["executionToken"])

    def _reuse_one(self, name: str, row: Any, n: int) -> Generator[Any, Any, None]:
        """The same eventId with other content (a producer bug reusing ids): it must be refused."""
        event = {**row.event, "businessStatus": "WAITING_REVIEW", "occurredAt": "2026-01-01T00:00:00+00:00"}
        yield from self._send(name, "reuse", event, self._ctx(row)["executionToken"])

    def _forge_one(self, name: str, row: Any, n: int) -> Generator[Any, Any, None]:
        """A report for another step, signed with this step's token: it must be refused."""
        other = next(s for s in STEPS if s[0] != row.step_id)
        event = {**row.event, "eventId": f"forged-{n}", "stepId": other[0], "operationCode": other[1],
                 "producerId": PRODUCERS_BY_OP[other[1]], "sourceSeq": 999, "eventType": "STEP_PROGRESS",
                 "businessStatus": other[2]}
        event.pop("data", None)
        yield from self._send(name, "forged", event, self._ctx(row)["executionToken"])

    def _send(self, name: str, kind: str, event: dict[str, Any], token: str) -> Generator[Any, Any, None]:
        world = self.world
        world.history.add(world.env.now, name, INVOKE, kind, {"eventId": event["eventId"], "event": event})
        answer = yield world.drive(name, report(event, token))
        world.history.add(world.env.now, name, OK if answer is not None else "fail", kind,
                          {"eventId": event["eventId"], "answer": answer})

    # ------------------------------------------------------------------ the runner's questions

    def workload_done(self) -> bool:
        return self.coordinators_left == 0 and all(c.started for c in self.clients)

    def unsettled(self) -> int:
        with self.world.sessions() as s:
            rows = int(s.execute(select(func.count()).select_from(TaskOutbox).where(
                TaskOutbox.status.not_in((OUTBOX_PUBLISHED, OUTBOX_DEAD)))).scalar() or 0)
            running = int(s.execute(select(func.count()).select_from(Task).where(
                Task.lifecycle_status.in_(("PENDING", "RUNNING")))).scalar() or 0)
            versions = dict(s.execute(select(Task.id, Task.version)).all())
        producers = sum(1 for name, p in self.world.supervised.items()
                        if p.process is not None and p.process.is_alive and not name.startswith(("relay", "health")))
        # A client is settled once it shows the database (S8 judges the ones that never do, after the bound).
        return rows + running + producers + sum(0 if c.settled() and not c.lags(versions) else 1
                                                for c in self.clients)

    def busy_until(self) -> float | None:
        return None

    def final_state(self, heal_time: float) -> SyncState:
        return read_state(self.world, self.clients, self.relay_cfg, self.health_cfg, heal_time)

    def verdicts(self, state: SyncState, scenario: Any) -> list[Verdict]:
        return INVARIANTS.check(state, scenario.invariants)

    def stats(self) -> dict[str, Any]:
        w = self.world
        return {**w.stats, "producers": self.producers_started,
                "restarts": {n: s.restarts for n, s in w.supervised.items() if s.restarts},
                "publications": w.centrifugo.published, "db": dict(w.db.stats)}


PRODUCERS_BY_OP = {"FILE.PREPARE": "file-worker", "DOCUMENT.PARSE": "document-parser",
                   "RESULT.PERSIST": "result-service"}
