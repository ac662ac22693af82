"""A fault's window in each shell: what it starts runs until the window closes, and closing it stops every run it
started, also when two windows of the same fault overlap (explore draws windows independently)."""

from __future__ import annotations

import threading
from typing import Any

from chaos.native import NativeNemesis
from systems.copilot.faults import stale_consumer_on_broker
from systems.copilot.sim import CopilotWorld


def test_sim_window_stops_every_run_it_started() -> None:
    world = CopilotWorld(1)
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


def test_native_stale_consumer_records_its_acks_as_the_simulation_does(monkeypatch: Any) -> None:
    """The stale consumer's deliveries and acks (ok, or fail when the broker refused) reach the history on the real
    stack as in simulation (scenarios/sim/world.py): a refused ack loses nothing, so only the accepted one is lost."""
    import types

    from harness.history import LOST_MESSAGE, History
    from kernel.effects import BrokerUnavailable, Delivery, Message
    from reference.copilot.adapters import broker_rocketmq

    stop = threading.Event()
    taken = [Delivery(Message(f"e{i}", "TaskCreated", f"t{i}", 1), 1, f"r{i}") for i in (1, 2)]

    class FakeBroker:
        def __init__(self, *_: Any) -> None:
            self.rounds = 0

        def receive(self, group: str, max_messages: int, invisible_s: float) -> list[Delivery]:
            self.rounds += 1
            if self.rounds > 1:
                stop.set()
                return []
            return taken

        def ack(self, group: str, delivery: Delivery) -> None:
            if delivery.receipt == "r2":
                raise BrokerUnavailable("ack refused")

        def close(self) -> None:
            pass

    monkeypatch.setattr(broker_rocketmq, "RocketMQBroker", FakeBroker)
    nemesis = NativeNemesis.__new__(NativeNemesis)
    nemesis.ep = types.SimpleNamespace(rocketmq_endpoint="127.0.0.1:0")
    history = History()
    nemesis.attach(history, lambda: 1.0)
    stale_consumer_on_broker(nemesis, "dispatcher", stop)
    got = [(op.process, op.type, op.f, op.value.get("event_id")) for op in history.ops]
    assert got == [
        ("stale-consumer", "info", "deliver", "e1"),
        ("stale-consumer", "info", "deliver", "e2"),
        ("stale-consumer", "ok", "ack", "e1"),
        ("nemesis", "info", LOST_MESSAGE, "e1"),
        ("stale-consumer", "fail", "ack", "e2"),
    ]


def test_native_kill_worker_counts_its_interval_from_the_killed_worker_serving_again() -> None:
    """On a busy machine a restart of gunicorn took longer than kill-worker's interval, which then left the API no
    time up between kills (tests/stack/test_kill_each_process.py[api]: 6 of 20 confirms got through)."""
    from harness.history import History

    events: list[str] = []

    class SlowRestart:
        pid = 1

        def __init__(self) -> None:
            self.polls = 0

        def kill(self) -> None:
            events.append("kill")
            self.polls = 0

        def serving(self) -> bool:
            self.polls += 1
            if self.polls == 5:  # back after five polls, not before
                events.append("serving")
            return self.polls >= 5

    nemesis = NativeNemesis.__new__(NativeNemesis)  # no stack: kill_workers touches only its components
    nemesis.stack = type("Stack", (), {"components": {"api": SlowRestart()}})()
    nemesis.attach(History(), lambda: 0.0)
    stop = threading.Event()
    thread = threading.Thread(target=nemesis.kill_workers, args=(("api",), 0.01, stop))
    thread.start()
    while events.count("kill") < 3:
        stop.wait(0.01)
    stop.set()
    thread.join(10)
    assert events[:5] == ["kill", "serving", "kill", "serving", "kill"]
