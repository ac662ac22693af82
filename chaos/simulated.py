"""Faults in the simulation shell: a system's faults (its registry, chaos/faults.py), each one's simulation half
applied to the simulated world (its database, broker model, object store, cache and process triggers; a system's
own faults may touch its own models too)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import simpy

from chaos.faults import FaultRegistry
from harness.history import History
from kernel.failpoints import CrashPoint


class SimulatedWorld(Protocol):
    """What a simulated fault acts on: the part of scenarios.sim.world.SimWorld these faults touch, declared
    here so that chaos imports nothing of the scenarios above it (pyproject.toml [tool.importlinter])."""

    env: simpy.Environment
    history: History
    db: Any  # scenarios.sim.db.SimDatabase: idle() waits, in a simpy process, for the write lock to be free
    broker: Any  # scenarios.sim.broker.SimBroker: down, duplicate_prob, duplicate_spread_s
    store: Any  # scenarios.sim.world.SimStore: down
    cache: Any  # scenarios.sim.cache.SimCache: flush(), down
    db_down: bool
    db_error_tables: set[str]
    db_extra_s: float
    kill_worker_window: bool

    @property
    def supervised(self) -> Mapping[str, Any]: ...  # the simulated worker processes by name (read only here)

    def transact(self, fn: Callable[[Any], Any]) -> Any: ...

    def arm(self, point: CrashPoint) -> None: ...

    def kill(self, name: str, why: str) -> None: ...

    def drain(self, name: str) -> None: ...  # SIGTERM: it finishes what it holds, ends, and is started again

    def drive(self, name: str, gen: Any, on_done: Any = None) -> Any: ...  # a simpy process running ``gen``

    # Runs ``start(stopped)`` while the fault's window is open; ``stopped()`` turns true when it closes (as
    # chaos.native.NativeNemesis.window does with a thread and an Event).
    def window(self, fault: str, on: bool, start: Callable[[Callable[[], bool]], Any]) -> None: ...


def apply_fault(faults: FaultRegistry, world: SimulatedWorld, fault: str, params: dict[str, Any], *,
                on: bool) -> None:
    """Start (on) or stop one fault of a system's registry in a simulated world. ValueError for an unknown fault,
    one the simulation cannot model, or bad parameters."""
    faults.half_for(fault, "sim", params)(world, params, on)
