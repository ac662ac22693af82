"""Faults in the simulation shell: the same names as the catalogue's fault steps, applied to the
simulated world (its database, broker model, platform model, object store and process triggers)."""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Any, Protocol

import simpy
from sqlalchemy import select

from chaos.crashpoints import CRASH_FAULTS, GENERIC, crash_points, is_crash_fault
from harness.history import AIRSPACE, FAIL, INFO, INVOKE, NEMESIS, OK, History
from reference.errors import DomainError
from reference.failpoints import CrashPoint
from reference.models import DeadLetter, SiteArea
from reference.services.consumer import redrive
from simulator.model import PlatformFaults, PlatformModel, platform_defaults

SIM_FAULTS = frozenset({
    "db-error", "db-outage", "broker-outage", "duplicate-delivery", "platform-partition", "object-store-outage",
    "platform", *CRASH_FAULTS, *GENERIC, "kill-worker", "db-latency", "close-airspace",
    "redrive-dead-letters", "stop-service", "restart-process",
})
SIM_SERVICES = ("postgres", "rocketmq", "s3")  # stop-service: the dependencies the simulation models


class SimulatedWorld(Protocol):
    """What a simulated fault acts on: the part of scenarios.sim.world.SimWorld these faults touch, declared
    here so that chaos imports nothing of the scenarios above it (pyproject.toml [tool.importlinter])."""

    env: simpy.Environment
    history: History
    platform: PlatformModel
    db: Any  # scenarios.sim.db.SimDatabase: idle() waits, in a simpy process, for the write lock to be free
    broker: Any  # scenarios.sim.broker.SimBroker: down, duplicate_prob, duplicate_spread_s
    store: Any  # scenarios.sim.world.SimStore: down
    supervised: Mapping[str, Any]  # the simulated worker processes by name
    db_down: bool
    db_error_tables: set[str]
    db_extra_s: float
    platform_partitioned: bool
    kill_worker_window: bool

    def transact(self, fn: Callable[[Any], Any]) -> Any: ...

    def arm(self, point: CrashPoint) -> None: ...

    def kill(self, name: str, why: str) -> None: ...


def apply_fault(world: SimulatedWorld, fault: str, params: dict[str, Any], *, on: bool) -> None:
    """Start (on) or stop one fault of the catalogue in a simulated world."""
    if fault == "db-error":
        tables = set(params.get("tables", []))
        world.db_error_tables = world.db_error_tables | tables if on else world.db_error_tables - tables
    elif fault == "db-outage":
        world.db_down = on
    elif fault == "broker-outage":
        world.broker.down = on
    elif fault == "duplicate-delivery":
        world.broker.duplicate_prob = float(params.get("prob", 0.5)) if on else 0.0
        world.broker.duplicate_spread_s = float(params.get("spread_s", 0.0)) if on else 0.0
    elif fault == "platform-partition":
        world.platform_partitioned = on
    elif fault == "object-store-outage":
        world.store.down = on
    elif fault == "platform":  # a window (with a duration) sets the knobs back to their defaults when it ends
        world.platform.faults = PlatformFaults.from_json(params if on else platform_defaults(params),
                                                         base=world.platform.faults)
    elif is_crash_fault(fault):
        if on:
            for point in crash_points(fault, params):
                world.arm(point)
    elif fault == "kill-worker":
        world.kill_worker_window = on
        if on:
            world.env.process(_kill_workers(world, tuple(params.get("roles", ("dispatcher",))),
                                            float(params.get("every_s", 20.0))))
    elif fault == "db-latency":
        world.db_extra_s = float(params.get("ms", 200)) / 1000.0 if on else 0.0
    elif fault == "close-airspace":
        sites = int(params.get("sites", 1))

        def flip(tx: Any) -> list[str]:
            areas = list(tx.session.scalars(select(SiteArea).order_by(SiteArea.id).limit(sites)))
            for a in areas:
                a.airspace_open = not on
            return [a.id for a in areas]

        def change() -> None:
            # Committed at this instant of virtual time, then recorded: the checkers learn from the history which
            # areas were closed when (I12), as on the real stack.
            areas = world.transact(flip)
            world.history.add(world.env.now, NEMESIS, INFO, AIRSPACE, {"areas": areas, "open": not on})

        _when_idle(world, change)
    elif fault == "redrive-dead-letters":
        if on:
            _when_idle(world, lambda: redrive_all(world.transact, world.history, world.env.now))
    elif fault == "stop-service":
        service = params.get("service")
        if service not in SIM_SERVICES:
            raise ValueError(f"stop-service: the simulation models {', '.join(SIM_SERVICES)}, not {service!r}")
        apply_fault(world, {"postgres": "db-outage", "rocketmq": "broker-outage", "s3": "object-store-outage"}[service],
                    {}, on=on)
    elif fault == "restart-process":
        if on:
            for name in sorted(world.supervised):
                if name.startswith(params["process"]):
                    world.kill(name, "restart-process")
    else:
        raise ValueError(f"unknown fault {fault!r}")


def _when_idle(world: SimulatedWorld, change: Any) -> None:
    """The harness's own database change, as soon as no simulated transaction holds the write lock (an
    operator's statement waits for locks like any other)."""

    def proc() -> Generator[Any, Any, None]:
        yield from world.db.idle()
        change()

    world.env.process(proc())


def _kill_workers(world: SimulatedWorld, roles: tuple[str, ...], every_s: float) -> Generator[Any, Any, None]:
    """SIGKILL, in turn, each worker whose name starts with one of ``roles``, every ``every_s`` seconds,
    while the window lasts (B4); the supervisor restarts them."""
    n = 0
    while world.kill_worker_window:
        victims = sorted(name for name in world.supervised if name.startswith(roles))
        if victims:
            world.kill(victims[n % len(victims)], "kill-worker")
            n += 1
        yield world.env.timeout(every_s)


def redrive_all(transact: Any, history: Any, now: float) -> None:
    """The on-call operator re-drives every dead letter not yet re-driven (T2); each outcome is recorded."""
    ids = transact(lambda tx: list(tx.session.scalars(select(DeadLetter.id).where(DeadLetter.redriven_at.is_(None))
                                                      .order_by(DeadLetter.id))))
    for dl_id in ids:
        history.add(now, "operator", INVOKE, "redrive", {"dead_letter": dl_id})
        try:
            event_id = transact(lambda tx, i=dl_id: redrive(tx, i, "operator-oncall"))
        except DomainError as err:
            history.add(now, "operator", FAIL, "redrive", {"dead_letter": dl_id, "code": err.code})
        else:
            history.add(now, "operator", OK, "redrive", {"dead_letter": dl_id, "event_id": event_id})
