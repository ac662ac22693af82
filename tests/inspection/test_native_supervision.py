"""The native nemesis's supervisor against its own kills and starts (systems.inspection.faults.InspectionNemesis,
stack.components.Component.died): P4 on the real stack once restarted a killed worker after the supervisor's 5 s
instead of the fault's two minutes (a supervisor pass between the SIGKILL and the restart's scheduling), and restarted
a worker still starting (a second copy; the first's dropped executor killed it, unrecorded). No process is started."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from stack.components import Component
from systems.inspection import faults
from systems.inspection.faults import InspectionNemesis


class FakeTimer:
    started: list[float] = []

    def __init__(self, interval: float, function: Any) -> None:
        self.interval, self.function = interval, function

    def start(self) -> None:
        FakeTimer.started.append(self.interval)

    def cancel(self) -> None:
        pass


class KilledWorker:
    """A worker whose SIGKILL is followed, before kill() returns, by a pass of the nemesis's supervisor."""

    def __init__(self) -> None:
        self.wanted, self.alive = True, True
        self.nemesis: InspectionNemesis | None = None

    def running(self) -> bool:
        return self.alive

    def died(self) -> bool:
        return self.wanted and not self.alive

    def kill(self) -> None:
        self.alive = False
        assert self.nemesis is not None
        self.nemesis.supervise()

    def start(self) -> None:
        self.alive = True


class Stack:
    def __init__(self, **processes: Any) -> None:
        self.processes = processes


@pytest.fixture
def timers(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    FakeTimer.started = []
    monkeypatch.setattr(faults.threading, "Timer", FakeTimer)
    return FakeTimer.started


def test_a_killed_worker_is_restarted_after_the_faults_delay_only(timers: list[float]) -> None:
    worker = KilledWorker()
    nemesis = InspectionNemesis(Stack(**{"worker-2": worker}), time_factor=0.2)
    worker.nemesis = nemesis
    nemesis.kill("worker-2", "worker-kill", restart_after_s=120.0)
    assert timers == [pytest.approx(24.0)]  # not also the supervisor's 5 s (1.0 wall)
    assert nemesis.pending_restarts() == ["worker-2"]


def test_a_component_being_started_has_not_died() -> None:
    comp = Component("worker-1", ["true"], "http://127.0.0.1:1/health", wanted=True)
    assert comp.died()  # wanted, no process
    starting, release = threading.Event(), threading.Event()

    def start() -> None:  # what Component.start holds while it waits for the health check
        with comp._lock:
            starting.set()
            release.wait()

    starter = threading.Thread(target=start)
    starter.start()
    starting.wait()
    try:
        assert not comp.died()
    finally:
        release.set()
        starter.join()


def _lease_table(rows: list[tuple[int, str | None, str]]) -> Any:
    from sqlalchemy import create_engine, insert
    from sqlalchemy.pool import StaticPool

    from reference.inspection.models import slot_lease

    engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    slot_lease.create(engine)
    with engine.begin() as conn:
        conn.execute(insert(slot_lease), [{"slot_id": slot, "owner_worker_id": owner, "state": state,
                                           "slot_map_version": 1} for slot, owner, state in rows])
    return engine


def test_a_worker_kill_waits_for_its_worker_to_hold_slots_with_no_migration_in_flight() -> None:
    """P4's kill on a busy machine once fell inside worker-2's first rebalance (its slots still MOVING towards it):
    nothing was taken over. The kill waits on the lease table, not on time."""
    from sqlalchemy import update

    from harness.history import History
    from reference.inspection.models import ACTIVE, MOVING, slot_lease

    engine = _lease_table([(0, "worker-1", ACTIVE), (1, "worker-1", MOVING)])
    nemesis = InspectionNemesis(type("Stack", (), {"owner": engine})(), 1.0)
    history = History()
    nemesis.attach(history, lambda: 0.0)

    def rebalanced() -> None:
        with engine.begin() as conn:
            conn.execute(update(slot_lease).where(slot_lease.c.slot_id == 1).values(owner_worker_id="worker-2",
                                                                                   state=ACTIVE))

    threading.Timer(0.3, rebalanced).start()
    nemesis.wait_until_holding("worker-2", 60.0)  # returns when the condition holds, long before the bound
    with engine.connect() as conn:
        assert conn.execute(slot_lease.select().where(slot_lease.c.slot_id == 1)).one().owner_worker_id == "worker-2"
    assert [o.f for o in history.ops] == ["kill-waited"]

    nemesis.wait_until_holding("worker-3", 0.0)  # owns nothing: past the bound it goes on, and says so
    assert [o.f for o in history.ops][1:] == ["kill-wait-bound"]
    assert history.ops[1].value == {"process": "worker-3", "owned": 0, "not_active": 0}


def test_a_switched_runner_starts_the_next_scenarios_processes_with_the_new_bug_only() -> None:
    """switch_bug (scenarios.systems.BugSwitch, the native selfcheck's one stack per run): the runner's bugs, which
    run() gives every process it starts (SORTIE_INSPECTION_BUG), are the new one's alone; ``seed`` the variant's."""
    from reference.inspection.bugs import BUGS, SEED, SEED_DEFECTS
    from systems.inspection.stack import InspectionScenarioRunner

    first, second = list(BUGS.bugs)[:2]
    runner = InspectionScenarioRunner(object(), bugs=(first,))  # type: ignore[arg-type]  # no stack needed
    runner.switch_bug(second)
    assert runner.bugs == (second,)
    runner.switch_bug(SEED)
    assert runner.bugs == tuple(SEED_DEFECTS)
