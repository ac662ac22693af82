"""The Copilot in the simulation shell: its world (CopilotWorld: the generic scenarios.sim.world with its schema and
outbox trigger, its consumer groups, its platform model and platform calls, the platform's webhooks, its alerts), the
reference's workers as many as the stack runs (reference.copilot.topology), the fleet, the simulated users, and its
invariants I1-I37 (systems.copilot.checkers)."""

from __future__ import annotations

import logging
import random
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from harness.history import FAIL, INFO, INVOKE, OK
from reference.copilot import api, coverage
from reference.copilot import platform as p
from reference.copilot.adapters.broker_rocketmq import LONG_POLL_S
from reference.copilot.alerts import ITEM_FIELDS
from reference.copilot.effects import CallPlatform
from reference.copilot.models import Base
from reference.copilot.policy import Policy
from reference.copilot.runtime import (
    EVENTS_WITH_DUPLICATES,
    PLATFORM_CALL_IN_TRANSACTION,
    RECORDED_PLATFORM_CALLS,
    RECORDED_TRANSACTIONS,
    call_value,
    events_value,
    platform_answer,
)
from reference.copilot.services.consumer import DISPATCHER, HANDLERS, REPORT_WORKER, consumer_loop
from reference.copilot.services.outbox import OUTBOX_CHANNEL, publisher_loop
from reference.copilot.services.reconcile import reconciler_loop
from reference.copilot.settings import policy_with
from reference.copilot.topology import Topology
from scenarios.scenario import Scenario
from scenarios.sim.db import open_transaction
from scenarios.sim.world import EPOCH_TS, Latency, SimWorld
from scenarios.verdicts import Verdict
from simulator.model import DELIVERY_NORMAL, PlatformConfig, PlatformModel, Reply
from systems.copilot.checkers import INVARIANTS, CheckContext
from systems.copilot.sim_streams import SimStreamClient, StreamTier
from systems.copilot.state import FinalState, audit_rows, object_digests, read_database, unsettled_rows
from systems.copilot.workload import SimUsers, WorkloadSpec, seed_fleet, stream_users

SECOND_CONSUMER = coverage.target(
    "redelivery-second-consumer", "an event already delivered to one consumer process was delivered to another (a "
    "redelivery after the invisible time, a broker duplicate or a resend): two workers hold one event")

# Migration 0007's trigger, in SQLite's dialect (pg_notify: the simulation's database calls back into Python): a
# transaction that wrote a PENDING outbox row notifies the publishers when it commits.
NOTIFY_TRIGGERS = tuple(
    f"CREATE TRIGGER task_event_outbox_notify_{verb.split()[0].lower()} AFTER {verb} ON task_event_outbox "
    f"WHEN NEW.status = 'PENDING' BEGIN SELECT pg_notify('{OUTBOX_CHANNEL}', ''); END"
    for verb in ("INSERT", "UPDATE OF status"))


@dataclass(frozen=True)
class CopilotLatency(Latency):
    broker_long_poll_s: float = LONG_POLL_S  # a receive waits this long for a message, as RocketMQ's does
    platform_min_s: float = 0.03
    platform_max_s: float = 0.15
    client_timeout_s: float = 2.0  # the dispatcher's read timeout for platform calls


AUDIT_WATCH_S = 10.0  # how often the harness reads the audit rows committed since its last look (I47)


class CopilotWorld(SimWorld):
    """The simulated world of the Copilot: the generic world with its schema, consumer groups and recorded
    transactions, the platform model (simulator.model) behind its platform calls, the platform's webhooks
    (event_pump), and the operator alerts its reference raises (reference.copilot.alerts; I31)."""

    watched_loggers = (*SimWorld.watched_loggers, "sortie.api")  # sortie.api: the API's use cases (api.py)
    redelivery_target = SECOND_CONSUMER
    latency: CopilotLatency

    def __init__(self, seed: int, *, policy: Policy | None = None, platform: PlatformConfig | None = None,
                 latency: CopilotLatency | None = None) -> None:
        super().__init__(seed, metadata=Base.metadata, ddl=NOTIFY_TRIGGERS, latency=latency or CopilotLatency(),
                         subscriptions={g: frozenset(h) for g, h in HANDLERS.items()},
                         recorded=RECORDED_TRANSACTIONS, targets=coverage.COVERAGE)
        self.policy = policy or Policy()
        self.platform = PlatformModel(random.Random(f"{seed}:platform"), platform or PlatformConfig())
        self.platform_partitioned = False
        self.performers[CallPlatform] = self._call_platform
        self.stats.update({"platform_calls": 0, "events_ingested": 0, "events_duplicate": 0})
        # What the API's webhook answered the platform, summed over the batches it took (I9 compares the rows stored)
        self.webhook_answers = {"sent": 0, "accepted": 0, "duplicates": 0, "orphans": 0, "unanswered": 0}
        self.alerts: list[dict[str, Any]] = []  # the operator alerts raised (reference.copilot.alerts)
        self.streams = StreamTier(self)  # told every commit; the operators' streams (B7) connect to it

    def platform_now(self) -> float:
        return EPOCH_TS + self.env.now

    def heard(self, record: logging.LogRecord) -> None:
        if (code := getattr(record, "alert", None)) is not None:  # reference.copilot.alerts
            fields = getattr(record, "alert_fields", {})
            self.alerts.append({"code": code, **{k: str(fields[k]) for k in ITEM_FIELDS if k in fields}})

    def _call_platform(self, process: str, effect: CallPlatform) -> Generator[Any, Any, Any]:
        env, model = self.env, self.platform
        if effect.method == "capabilities":
            return model.capabilities()
        self.stats["platform_calls"] += 1
        recorded = effect.method in RECORDED_PLATFORM_CALLS
        args = effect.args
        value = call_value(effect)
        if (tx_name := open_transaction()) is not None:  # inside a transaction's greenlet: held across the call
            self.history.add(env.now, process, INFO, PLATFORM_CALL_IN_TRANSACTION,
                             {"method": effect.method, "task_id": effect.task_id, "transaction": tx_name,
                              "via": "runtime"})
        if recorded:
            self.history.add(env.now, process, INVOKE, effect.method, value)
        if self.platform_partitioned:
            yield env.timeout(self.latency.client_timeout_s)
            if recorded:
                self.history.add(env.now, process, FAIL, effect.method, {**value, "error": "CONNECT_TIMEOUT"})
            raise p.PlatformUnavailable("CONNECT_TIMEOUT", "platform unreachable (partition)")
        now = self.platform_now()
        reply: Reply[Any]  # each method answers its own value
        if effect.method == "create_flight":
            reply = model.create_flight(now, args[0])
        elif effect.method == "get_device":
            reply = model.get_device(now, *args)
        elif effect.method == "get_flight":
            reply = model.get_flight(now, *args)
        elif effect.method == "find_by_request_id":
            reply = model.find_by_request_id(now, *args)
        elif effect.method == "cancel_flight":
            reply = model.cancel_flight(now, *args)
        else:
            raise TypeError(f"unknown platform method {effect.method}")
        if reply.delivery != DELIVERY_NORMAL:
            yield env.timeout(self.latency.client_timeout_s)
            if recorded:
                self.history.add(env.now, process, INFO, effect.method, {**value, "error": "TIMEOUT",
                                                                          "delivery": reply.delivery})
            reply.unwrap()  # raises PlatformTimeout
        yield env.timeout(self.rng_latency.uniform(self.latency.platform_min_s, self.latency.platform_max_s))
        if reply.error is not None:
            if recorded:
                self.history.add(env.now, process, FAIL, effect.method, {**value, "error": reply.error.code})
            raise reply.error
        if recorded:
            self.history.add(env.now, process, OK, effect.method, {**value, **platform_answer(reply.value)})
        return reply.value

    def event_pump(self, interval_s: float = 1.0) -> Generator[Any, Any, None]:
        """Deliver due platform events in batches to the API's webhook use case (reference.copilot.api), like the
        platform's webhook sender; a batch the API could not take (503) is sent again with the next one."""
        pending: list[dict[str, Any]] = []
        ports = api.Ports(cache=self.cache)
        while True:
            yield self.env.timeout(interval_s)
            if self.platform_partitioned:
                continue  # webhooks cannot reach us either; the platform keeps them until the link heals
            pending.extend(e.as_json() for e in self.platform.pop_due(self.platform_now()))
            if not pending:
                continue
            batch = pending[:api.MAX_WEBHOOK_EVENTS]  # as the platform's sender: at most the API takes in one batch
            reply = yield self.drive("api", api.handle(api.IngestEvents(batch), ports))
            if reply is None or reply.status >= 500:
                self.webhook_answers["unanswered"] += 1  # it may have stored them (a kill after the commit)
                continue  # the platform redelivers; events are deduplicated on (flight, seq)
            if not reply.ok:
                raise AssertionError(f"the API refused the platform's events: {reply.body}")
            self.stats["events_ingested"] += len(batch)
            self.stats["events_duplicate"] += reply.body["duplicates"]
            self.webhook_answers["sent"] += len(batch)
            for count in ("accepted", "duplicates", "orphans"):
                self.webhook_answers[count] += reply.body[count]
            if reply.body["duplicates"]:  # as the API's webhook handler records it on the real stack
                self.history.add(self.env.now, "api", INFO, EVENTS_WITH_DUPLICATES,
                                 events_value(reply.body["accepted"], reply.body["duplicates"]))
            pending = pending[len(batch):]

    def final_state(self, heal_time: float) -> FinalState:
        state = FinalState(t0=EPOCH_TS, heal_time=heal_time, end_time=self.env.now)
        with self.sessions() as session:
            read_database(session, state)
        state.ledger = self.platform.ledger_json()
        state.objects = object_digests(self.store.objects)
        state.defects = list(self.defects)
        state.alerts = list(self.alerts)
        state.webhook_answers = dict(self.webhook_answers)
        return state


def start_reference(world: CopilotWorld, policy: Policy, topology: Topology | None = None) -> None:
    """The reference's workers, as many as the real stack runs (reference.copilot.topology), supervised: a killed
    worker restarts after a pause, like systemd."""
    loops = {"publisher": lambda: publisher_loop(policy), "dispatcher": lambda: consumer_loop(DISPATCHER, policy),
             "report-worker": lambda: consumer_loop(REPORT_WORKER, policy),
             "reconciler": lambda: reconciler_loop(policy)}
    for name, role in (topology or Topology()).workers():
        world.supervise(name, loops[role])
    world.env.process(world.event_pump())


def unsettled(world: CopilotWorld) -> int:
    """Rows still to settle, and messages still in the broker (a paused consumer has not taken them yet: ending
    the run then would blame the consumer for an event it was about to take; found by `sortie explore`)."""
    with world.sessions() as s:
        rows = unsettled_rows(s)
    return rows + world.broker.depth()


class CopilotDeployment:
    def __init__(self, scenario: Scenario, seed: int, *, policy: Policy | None = None,
                 platform: PlatformConfig | None = None, workload: WorkloadSpec | None = None) -> None:
        self.policy = policy_with(scenario.policy, policy or Policy())
        self.spec = workload or scenario.workload
        self.seed = seed
        self.world = CopilotWorld(seed, policy=self.policy,
                              platform=platform or PlatformConfig(flight_median_s=self.spec.flight_median_s))
        self.users: SimUsers | None = None
        self.streams: list[SimStreamClient] = []
        self.audit_seen: list[dict[str, Any]] = []  # task_audit_log rows as the harness read them during the run

    def start(self) -> None:
        world = self.world
        fleet = world.transact(lambda tx: seed_fleet(tx, self.spec))
        for devices in fleet.devices_by_area.values():
            for did in devices:
                world.platform.add_device(did)
        start_reference(world, self.policy)
        self.users = SimUsers(world, self.spec, fleet, self.seed)
        self.streams = [SimStreamClient(i, user, world.streams, self.users.ports)
                        for i, user in enumerate(stream_users(fleet, self.spec))]
        for stream in self.streams:
            world.env.process(stream.run())
        self.users.start()
        world.env.process(self._watch_audit())

    def _watch_audit(self) -> Generator[Any, Any, None]:
        """Every AUDIT_WATCH_S, the audit rows committed since the last look, as they were then (I47 compares them
        with the rows at the end). Read outside virtual time, as the end's tables are: no statement of the run
        waits, and no fault reaches the harness's reads."""
        while True:
            yield self.world.env.timeout(AUDIT_WATCH_S)
            last = self.audit_seen[-1]["id"] if self.audit_seen else 0
            with self.world.sessions() as session:
                self.audit_seen.extend(audit_rows(session, last))

    def workload_done(self) -> bool:
        return self.users is not None and self.users.done and not self.users.active

    def unsettled(self) -> int:
        return unsettled(self.world)

    def busy_until(self) -> float | None:
        """While flights are in the air, and until the last one ended (in the history's clock)."""
        model, world = self.world.platform, self.world
        if model.flights_in_air:
            return float("inf")
        return (model.last_flight_end or 0.0) - (world.platform_now() - world.env.now)

    def final_state(self, heal_time: float) -> FinalState:
        if self.streams:  # each stream states what it believes before the end is read
            env = self.world.env
            env.run(until=env.all_of([stream.close() for stream in self.streams]))
        state = self.world.final_state(heal_time=heal_time)
        state.audit_seen = list(self.audit_seen)
        return state

    def verdicts(self, state: Any, scenario: Scenario) -> list[Verdict]:
        return INVARIANTS.check(CheckContext(self.world.history, state, scenario.recovery_bound_s, self.policy,
                                             fast_path_modelled=True), scenario.invariants)

    def stats(self) -> dict[str, Any]:
        world = self.world
        return {**world.stats, "restarts": {n: s.restarts for n, s in world.supervised.items() if s.restarts},
                "broker_published": world.broker.published, "broker_delivered": world.broker.delivered,
                "objects": len(world.store.objects), "db": dict(world.db.stats), "cache": dict(world.cache.stats)}
