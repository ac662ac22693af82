"""The smallest system under test: a shared counter that clients increment, with one invariant, one fault, one
known defect and two scenarios. It lives outside systems/ and is loaded by its module path
(`sortie simulate --system tests.example_system`), so running it through `simulate`, `explore` and `selfcheck`
proves that adding a system edits no generic module (docs/adding-a-system.md follows these steps).

Its reference (normally reference/<name>/, importing only kernel) is the two functions under "reference"; the
rest is its harness side (normally systems/<name>/)."""

from __future__ import annotations

import random
from collections.abc import Generator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Integer, MetaData, Table, select, update
from sqlalchemy.exc import OperationalError

from chaos.faults import Fault, db_down, registry
from harness.history import FAIL, INVOKE, OK, History
from kernel.bugs import Bug, BugRegistry
from kernel.coverage import Coverage
from kernel.effects import Sleep, Transact, Tx
from scenarios.explore.shrink import fewer
from scenarios.scenario import FaultStep, Scenario
from scenarios.sim.world import EPOCH_TS, SimWorld
from scenarios.systems import ExploreSpec, System
from scenarios.verdicts import Invariants, Verdict, Violation, judged
from tests.example_system.api import fuzz_spec

NAME = __name__  # a system outside systems/ is named by its module path

# ---------------------------------------------------------------------------------------------- reference
METADATA = MetaData()
COUNTER = Table("counter", METADATA, Column("id", Integer, primary_key=True), Column("value", Integer, nullable=False))
BUGS = BugRegistry([Bug("read-modify-write", "the increment reads, then writes what it read plus one",
                        "an increment is one atomic change of the row", "tests/example_system increment",
                        "two interleaved increments write the same value: one is lost", ("N1",), ("K1",))])
COVERAGE = Coverage()
RETRIED = COVERAGE.target("retried", "an increment failed (the database away) and was tried again")


def increment(tx: Tx) -> None:
    if BUGS.active("read-modify-write"):
        value = tx.session.execute(select(COUNTER.c.value).where(COUNTER.c.id == 1)).scalar_one()
        tx.session.execute(update(COUNTER).where(COUNTER.c.id == 1).values(value=value + 1))
    else:
        tx.session.execute(update(COUNTER).where(COUNTER.c.id == 1).values(value=COUNTER.c.value + 1))


def client(increments: int, pause_s: float, record: Any) -> Generator[Any, Any, None]:
    """Each increment until it commits; a failed one (the database away) is retried, having changed nothing."""
    for _ in range(increments):
        while True:
            record(INVOKE, None)
            try:
                yield Transact(increment, "counter.increment")
            except OperationalError:
                record(FAIL, None)
                COVERAGE.reached(RETRIED)
                yield Sleep(1.0)
                continue
            record(OK, None)
            break
        yield Sleep(pause_s)


# ---------------------------------------------------------------------------------------------- harness side
@dataclass(frozen=True)
class Workload:
    clients: int = 3
    increments: int = 5
    pause_s: float = 0.5


@dataclass
class CounterState:  # a scenarios.systems.RunState
    history: History
    value: int
    heal_time: float
    end_time: float
    t0: float = EPOCH_TS
    tasks: tuple[()] = ()  # no work items with statuses, so no task timeline
    audit: tuple[()] = ()

    def counts(self) -> dict[str, int]:
        return {"value": self.value}


def no_increment_lost(s: CounterState) -> Verdict:
    """The counter's value is the number of increments that committed (every one is acknowledged: a failed try
    changed nothing)."""
    acked = sum(1 for op in s.history.ops if op.f == "increment" and op.type == OK)
    lost = [] if s.value == acked else [Violation(None, f"{acked} increments acknowledged, the counter is {s.value}")]
    return judged(acked, lost)


INVARIANTS = Invariants({"N1": (no_increment_lost, "no acknowledged increment is lost")})


class Deployment:
    def __init__(self, scenario: Scenario, seed: int, **_: Any) -> None:
        self.workload: Workload = scenario.workload
        self.world = SimWorld(seed, metadata=METADATA)
        self.world.transact(lambda tx: tx.session.execute(COUNTER.insert().values(id=1, value=0)))
        self.running = 0

    def start(self) -> None:
        for i in range(self.workload.clients):
            name = f"client-{i}"

            def record(kind: str, value: Any, name: str = name) -> None:
                self.world.history.add(self.world.env.now, name, kind, "increment", value)

            self.running += 1
            self.world.drive(name, client(self.workload.increments, self.workload.pause_s, record),
                             on_done=lambda *_: setattr(self, "running", self.running - 1))

    def workload_done(self) -> bool:
        return self.running == 0

    def unsettled(self) -> int:
        return 0

    def busy_until(self) -> float | None:
        return None

    def final_state(self, heal_time: float) -> CounterState:
        with self.world.sessions() as s:
            value = s.execute(select(COUNTER.c.value)).scalar_one()
        return CounterState(self.world.history, value, heal_time, self.world.env.now)

    def verdicts(self, state: CounterState, scenario: Scenario) -> list[Verdict]:
        return INVARIANTS.check(state, scenario.invariants)

    def stats(self) -> dict[str, Any]:
        return dict(self.world.stats)


registry(NAME).register(Fault("db-outage", "the database is away for the window", db_down, None))


def _retried(h: History, s: CounterState) -> str | None:
    return None if any(op.type == FAIL for op in h.ops) else "no increment failed"


def _overlapped(h: History, s: CounterState) -> str | None:
    """Two clients' increments were in flight at once (what the atomic update is for)."""
    open_now = 0
    for op in h.ops:
        open_now += {INVOKE: 1, OK: -1, FAIL: -1}.get(op.type, 0)
        if open_now > 1:
            return None
    return "no two increments overlapped"


def _no_overrides(which: str, value: dict[str, Any]) -> None:
    if value:
        raise ValueError(f"the example system takes no {which}")


def _draw(run_seed: int) -> Scenario:
    rng = random.Random(f"example:{run_seed}")
    workload = Workload(clients=rng.randint(1, 6), increments=rng.randint(1, 8), pause_s=rng.choice((0.0, 0.5)))
    faults = (FaultStep(round(rng.uniform(0.0, 5.0), 1), "db-outage", round(rng.uniform(1.0, 10.0), 1)),) \
        if rng.random() < 0.5 else ()
    return _case(f"X{run_seed}", workload, faults)


def _case(case_id: str, workload: Workload, faults: tuple[FaultStep, ...]) -> Scenario:
    return Scenario(id=case_id, slug="explored", title="explored", workload=workload, faults=faults,
                    recovery_bound_s=60.0, exercised=lambda h, s: None, invariants=INVARIANTS.ids, shells=("sim",),
                    system=NAME)


def _steps(w: Workload) -> Iterator[tuple[str, Any]]:
    yield from fewer(w, "clients")
    yield from fewer(w, "increments")


SYSTEM = System(
    name=NAME, title="a shared counter (the harness's smallest example system)",
    catalogue_dir=Path(__file__).resolve().parent / "catalogue", catalogue_order="K", workload_type=Workload,
    invariants=INVARIANTS, expectations={"retried": _retried, "overlapped": _overlapped}, deploy=Deployment,
    injected=BUGS.injected,
    bug_names=lambda: BUGS.names, bugs=BUGS.bugs,
    check_overrides=_no_overrides,
    explore=ExploreSpec(draw=_draw, workload_steps=_steps,
                        rebuild=lambda s, **c: replace(s, workload=c.get("workload", s.workload),
                                                       faults=c.get("faults", s.faults)),
                        users=lambda w: w.clients * w.increments, unit="increments",
                        targets=COVERAGE.targets, counting=COVERAGE.counting),
    fuzz=fuzz_spec(),
)
