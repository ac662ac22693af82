"""A fault's window in each shell: what it starts runs until the window closes, and closing it stops every run it
started, also when two windows of the same fault overlap (explore draws windows independently)."""

from __future__ import annotations

import threading
from typing import Any

from chaos.native import NativeNemesis
from scenarios.sim.world import SimWorld


def test_sim_window_stops_every_run_it_started() -> None:
    world = SimWorld(1)
    try:
        seen: list[Any] = []
        world.window("stale-consumer", True, seen.append)
        world.window("stale-consumer", True, seen.append)
        world.window("other", True, seen.append)
        assert [stopped() for stopped in seen] == [False, False, False]
        world.window("stale-consumer", False, seen.append)
        assert [stopped() for stopped in seen] == [True, True, False]
        world.window("stale-consumer", False, seen.append)  # closing a closed window changes nothing
        assert len(seen) == 3
    finally:
        world.close()


def test_native_window_stops_every_thread_it_started() -> None:
    nemesis = NativeNemesis.__new__(NativeNemesis)  # no stack: window() touches only its own threads
    nemesis._windows = {}
    ended = [threading.Event(), threading.Event()]
    stops: list[threading.Event] = []

    def loop(i: int) -> Any:
        def run(stop: threading.Event) -> None:
            stops.append(stop)
            stop.wait(30)
            ended[i].set()
        return run

    nemesis.window("stale-consumer", True, loop(0))
    nemesis.window("stale-consumer", True, loop(1))
    nemesis.window("stale-consumer", False, loop(0))
    assert all(e.wait(10) for e in ended)
    assert len(stops) == 2 and all(s.is_set() for s in stops)
