"""Crash points (kernel/failpoints.py): one mechanism for both shells. The same scenario arms the same
points in simulation and on the real stack, and the real stack's file-backed points count their firings
across processes the way the simulation counts them."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy.orm import sessionmaker

from chaos.native import NativeNemesis
from chaos.simulated import apply_fault
from kernel.effects import Message, Publish, Transact
from kernel.failpoints import (
    CrashPoint,
    FilePoints,
    effect_names,
    fired_pids,
    marker_path,
    role_of,
    write_points,
)
from reference.copilot.runtime import Runtime
from scenarios.catalogue import load_catalogue
from stack.common import all_threads_stopped
from systems.copilot.faults import FAULTS
from systems.copilot.sim import CopilotWorld

CATALOGUE = load_catalogue("copilot")


class _FakeStack:
    def __init__(self) -> None:
        self.armed: list[CrashPoint] = []
        self.components: dict[str, Any] = {}
        self.failpoint_file = "/nonexistent/failpoints.json"  # no firings

    def arm_crash_points(self, points: list[CrashPoint]) -> None:
        self.armed.extend(points)


def _native_points(steps: list[Any], factor: float, monkeypatch: pytest.MonkeyPatch) -> list[CrashPoint]:
    nemesis = NativeNemesis.__new__(NativeNemesis)  # no database: only the crash-point faults are applied
    nemesis.stack, nemesis.factor, nemesis.faults = _FakeStack(), factor, FAULTS
    monkeypatch.setattr(NativeNemesis, "resume_stopped", lambda *a: None)
    for step in steps:
        nemesis.apply(step.fault, step.params, on=True)
    return nemesis.stack.armed


@pytest.mark.parametrize("scenario_id", sorted(CATALOGUE))
def test_a_scenario_arms_the_same_points_in_both_shells(scenario_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = [s for s in CATALOGUE[scenario_id].faults if FAULTS[s.fault].crash]
    world = CopilotWorld(1)
    try:
        for step in steps:
            apply_fault(FAULTS, world, step.fault, step.params, on=True)
        sim = [point for point, _ in world.crash_points]
    finally:
        world.close()
    factor = 0.25
    native = _native_points(steps, factor, monkeypatch)
    # The real stack runs scenario time scaled by its factor: pauses and holds last factor x as long.
    assert [replace(p, seconds=p.seconds * factor) for p in sim] == native
    assert len(sim) == len(steps)


def test_the_catalogue_arms_kills_pauses_and_holds() -> None:
    actions = {p.action for s in CATALOGUE.values() for step in s.faults if FAULTS[step.fault].crash
               for p in FAULTS[step.fault].points(step.params)}
    assert actions == {"kill", "stop", "hold"}


def test_arming_again_adds_firings_across_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "failpoints.json")
    hold = CrashPoint("api", "cancel", "before-write", "hold", 1, 4.0)
    write_points(path, [hold])
    a, b = FilePoints(path, "api"), FilePoints(path, "api")  # two API worker processes
    assert a.take("cancel", "before-write") == hold
    assert b.take("cancel", "before-write") is None  # one firing armed, one taken
    write_points(path, [hold])  # armed again: one more firing
    assert b.take("cancel", "before-write") is not None
    assert a.take("cancel", "before-write") is None
    assert FilePoints(path, "dispatcher").take("cancel", "before-write") is None  # another role


def test_a_firing_names_the_process_that_took_it(tmp_path: Path) -> None:
    path = str(tmp_path / "failpoints.json")
    stop = CrashPoint("publisher", "publish", "after", "stop", 2, 1.0)
    write_points(path, [stop])
    assert FilePoints(path, "publisher").take("publish", "after") == stop
    assert fired_pids(marker_path(path, stop)) == [os.getpid()]


def test_a_stop_point_resumes_the_process_it_stopped_and_no_other(tmp_path: Path) -> None:
    """B15 arms a second stop point while the first one's processes are still stopped: each point's watcher resumes
    the pids that took its own point (they are in its marker), never a process another point stopped."""
    import subprocess

    from chaos.native import _stopped

    took, other = (subprocess.Popen(["sleep", "60"]) for _ in range(2))
    try:
        for proc in (took, other):
            os.kill(proc.pid, signal.SIGSTOP)
        point = CrashPoint("publisher", "publish", "after", "stop", 1, 0.1)
        marker = marker_path(str(tmp_path / "failpoints.json"), point)
        Path(marker).write_text(f"{took.pid}\n")
        nemesis = NativeNemesis.__new__(NativeNemesis)
        nemesis.stack, resumed = _FakeStack(), []
        nemesis.record = lambda *op: resumed.append(op[-1])  # type: ignore[method-assign]
        nemesis.resume_stopped(point, marker, 0)  # returns once its one firing is handled
        for _ in range(500):  # the resume comes 0.1 s later, from a timer thread, and is recorded after the SIGCONT
            if resumed:
                break
            threading.Event().wait(0.02)
        assert not _stopped(took.pid) and _stopped(other.pid)
        assert resumed == [{"process": f"publisher-{took.pid}", "component": None}]
    finally:
        for proc in (took, other):
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("kwargs, message", [
    ({"role": "janitor", "effect": "x"}, "role"),
    ({"role": "api", "effect": "x", "when": "during"}, "when"),
    ({"role": "api", "effect": "x", "action": "hold"}, "hold"),
    ({"role": "api", "effect": "x", "when": "before-write", "action": "kill"}, "hold"),
    ({"role": "api", "effect": "x", "action": "stop"}, "seconds"),
    ({"role": "api", "effect": "x", "count": 0}, "count"),
])
def test_a_malformed_point_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CrashPoint(**kwargs)


@pytest.mark.parametrize("process, role", [
    ("dispatcher-2", "dispatcher"), ("publisher", "publisher"), ("publisher-1", "publisher"),
    ("report-worker", "report-worker"), ("user-17.1", "api"), ("user-3.cancel0", "api"), ("reconciler", "reconciler"),
])
def test_role_of_a_process(process: str, role: str) -> None:
    assert role_of(process) == role


def _publish(event_type: str) -> Publish:
    return Publish(Message("event-1", event_type, "task-1", 0))


def test_crash_names_of_a_publish_name_its_event_type_first() -> None:
    assert effect_names(_publish("TaskCreated")) == ("publish:TaskCreated", "publish")
    assert effect_names(Transact(lambda tx: None, "confirm.create")) == ("confirm.create",)


def test_a_point_on_the_publish_of_one_event_fires_there_only_in_both_shells(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """C3's point: the publisher dies after the broker acked a TaskCreated, not after a status event no consumer
    group subscribes to (which left C3 without a duplicate delivery at seeds 15 and 20)."""
    point = CrashPoint("publisher", "publish:TaskCreated", "after", "kill", 1)
    world = CopilotWorld(1)
    try:
        world.arm(point)
        assert world._take_point("publisher-1", effect_names(_publish("TaskStatusChanged")), "after") is None
        assert world._take_point("publisher-1", effect_names(_publish("TaskCreated")), "after") == point
        assert world._take_point("publisher-1", effect_names(_publish("TaskCreated")), "after") is None  # count 1
    finally:
        world.close()

    path = str(tmp_path / "failpoints.json")
    write_points(path, [point, CrashPoint("publisher", "publish", "after", "kill", 1)])
    signals: list[int] = []
    monkeypatch.setattr(os, "kill", lambda _pid, sig: signals.append(sig))
    published: list[str] = []
    broker = SimpleNamespace(publish=lambda message: published.append(message.event_type))
    runtime = Runtime(sessionmaker(), broker=broker, failpoints=FilePoints(path, "publisher"))  # type: ignore[arg-type]
    runtime.perform(_publish("TaskCreated"))  # the specific point first
    assert (published, signals) == (["TaskCreated"], [signal.SIGKILL])
    assert FilePoints(path, "publisher").take("publish:TaskCreated", "after") is None  # taken
    runtime.perform(_publish("TaskStatusChanged"))  # only the plain point matches it
    runtime.perform(_publish("TaskStatusChanged"))  # and it had one firing
    assert signals == [signal.SIGKILL, signal.SIGKILL]


# A worker thread reaches a stop point while two other threads keep the process busy; it writes a line once it goes on.
_STOPPED_CHILD = """
import sys, threading
from kernel.failpoints import crash_this_process

def worker():
    crash_this_process("stop")
    sys.stdout.write("went on\\n")
    sys.stdout.flush()

busy = [threading.Thread(target=lambda: sum(range(10**7)), daemon=True) for _ in range(2)]
for b in busy:
    b.start()
t = threading.Thread(target=worker)
t.start()
t.join()
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc to see a stopped process")
def test_a_stop_point_stops_the_thread_that_reached_it_before_it_goes_on() -> None:
    """Before the stop was sent to the calling thread, the process-directed SIGSTOP let that thread run on past its
    point (it wrote its line before the process stopped) in 21 of 30 runs like these."""
    import select
    import subprocess
    import sys
    import time

    for _ in range(8):
        child = subprocess.Popen([sys.executable, "-c", _STOPPED_CHILD], stdout=subprocess.PIPE,
                                 cwd=Path(__file__).resolve().parents[2])
        try:
            deadline = time.monotonic() + 60
            while not all_threads_stopped(child.pid):  # a condition, polled
                assert child.poll() is None and time.monotonic() < deadline, "the child never stopped"
                time.sleep(0.005)
            assert select.select([child.stdout], [], [], 0)[0] == [], "the thread went on past its stop point"
            os.kill(child.pid, signal.SIGCONT)
            assert child.stdout.readline() == b"went on\n"  # and goes on once resumed
            assert child.wait(60) == 0
        finally:
            if child.poll() is None:
                child.kill()
            child.stdout.close()


def test_a_point_for_a_group_of_roles_fires_once_at_whichever_member_reaches_it(tmp_path: Path) -> None:
    """The job system's ``instance``: a stop for either pool instance, only the first to get there (two stopped at once
    leave nobody to claim the zombie's job)."""
    from systems.jobs.sim import INSTANCES

    path = str(tmp_path / "failpoints.json")
    stop = CrashPoint("instance", "job.fail.read", "after", "stop", 1, 15.0)
    write_points(path, [stop])
    a, b = (FilePoints(path, name) for name in INSTANCES)
    assert b.take("job.fail.read", "after") == stop
    assert a.take("job.fail.read", "after") is None  # its one firing is spent, by the other member
    assert FilePoints(path, "reclaimer").take("job.fail.read", "after") is None  # not a member
    own = CrashPoint(INSTANCES[0], "job.fail.read", "after", "kill", 1)
    write_points(path, [own])  # a member's own point still fires for it
    assert a.take("job.fail.read", "after") == own


def test_the_simulation_fires_a_group_point_once_at_the_first_member() -> None:
    from systems.copilot.sim import CopilotWorld
    from systems.jobs.sim import INSTANCES

    world = CopilotWorld(1)
    world.arm(CrashPoint("instance", "job.fail.read", "after", "stop", 1, 15.0))
    names = ("job.fail.read",)
    assert world._take_point(f"{INSTANCES[1]}.3", names, "after") is not None
    assert world._take_point(f"{INSTANCES[0]}.1", names, "after") is None
