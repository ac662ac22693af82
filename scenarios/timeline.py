"""The fault timeline of a scenario as a simpy process: in virtual time in the simulation, and on a
``simpy.rt.RealtimeEnvironment`` against the real stack (scenario seconds scaled to wall seconds by the
environment's factor). Every fault window is recorded in the history by the same code in both shells."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import Any

import simpy

from harness.history import History
from scenarios.scenario import FaultStep

Apply = Callable[[str, dict[str, Any], bool], None]  # (fault, params, on)


def fault_timeline(env: simpy.Environment, steps: Iterable[FaultStep], apply: Apply, history: History,
                   now: Callable[[], float] | None = None, *, wait_for_stops: bool = False
                   ) -> Generator[Any, Any, None]:
    """Start each step at its time; stop it after its duration (or at once for one-shot steps). ``now`` is
    the history's clock (the virtual clock by default). With ``wait_for_stops`` the process ends only after
    the last window closed (the real-time shell runs the environment until then)."""
    clock = now or (lambda: env.now)
    stops = []
    for step in sorted(steps, key=lambda s: s.at):
        if step.at > env.now:
            yield env.timeout(step.at - env.now)
        history.fault_start(clock(), step.fault, **step.params,
                            **({"duration": step.duration} if step.duration else {}))
        apply(step.fault, step.params, True)
        if step.duration is None:
            history.fault_stop(clock(), step.fault)
        else:
            stops.append(env.process(_stop_later(env, step, apply, history, clock)))
    if wait_for_stops and stops:
        yield env.all_of(stops)


def _stop_later(env: simpy.Environment, step: FaultStep, apply: Apply, history: History,
                clock: Callable[[], float]) -> Generator[Any, Any, None]:
    yield env.timeout(step.duration or 0.0)
    apply(step.fault, step.params, False)
    history.fault_stop(clock(), step.fault)


def run_realtime(steps: Iterable[FaultStep], apply: Apply, history: History, now: Callable[[], float],
                 time_factor: float) -> None:
    """The timeline against the real stack: one scenario second lasts ``time_factor`` wall seconds. Not
    strict: a fault that takes a while to apply (stopping a server) delays the rest rather than failing."""
    import simpy.rt

    env = simpy.rt.RealtimeEnvironment(factor=time_factor, strict=False)
    env.run(until=env.process(fault_timeline(env, steps, apply, history, now, wait_for_stops=True)))
