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
