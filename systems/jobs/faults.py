"""The job system's faults, registered in its fault registry (chaos.faults.registry("jobs")): crash points of its
pool instances and reclaimers, transactions held before their write, the database's link cut or slowed, an instance
drained (SIGTERM) and started again, and, under load, its instance-a killed again and again. Both shells apply them
by name: the simulation through scenarios.runner, the real stack (systems.jobs.stack.JobsStack) through a
JobsNemesis."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from chaos import faults as chaos
from chaos.faults import Fault, Params
from chaos.native import Nemesis
from kernel.failpoints import CrashPoint, write_points

FAULTS = chaos.registry("jobs")
DB_PROXY = "jobs-db"  # the database's Toxiproxy link: the application role's only way to it
KILL_EVERY_S = 10.0  # worker-kill: SIGKILL the instance this often during the window (its supervisor restarts it)
# The faults that act on processes, not on the database's link: their windows cut no worker off the database (the
# checkers' outages, J16-J18).
PROCESS_FAULTS = ("crash-point", "drain")


def reclaimer_process(instance: str) -> str:
    """The simulation's process name of an instance's reclaimer (on the stack it is a thread of the instance)."""
    return f"reclaimer-{instance[-1]}"


class JobsNemesis(Nemesis):
    """The job system's real stack (systems.jobs.stack.JobsStack) as the faults' native halves act on it: its
    Toxiproxy link, the crash points file its instances read, its instances."""

    def __init__(self, stack: Any, time_factor: float = 1.0) -> None:
        super().__init__(FAULTS, time_factor)
        self.stack = stack
        self.kills = 0  # worker-kill's SIGKILLs so far

    @property
    def links(self) -> Any:
        return self.stack.toxiproxy.client

    def arm_crash_points(self, points: list[CrashPoint]) -> None:
        """Through the file the instances read; scenario seconds scale like every other window. A stopped instance
        resumes on its own (its helper), or when the run wakes it (NativeCase.wake_once_outclaimed)."""
        write_points(str(self.stack.failpoints), [dataclasses.replace(p, seconds=p.seconds * self.factor)
                                                  for p in points])

    def drain_instance(self, name: str) -> None:
        """SIGTERM instance ``name``: each worker finishes the job it holds and the process exits (it notes when its
        drain began); then start it again, as a rolling deploy does, noted as ``restart`` before the start (the new
        process claims as soon as it runs: the note must come first)."""
        comp = self.stack.instances.get(name)
        if comp is not None:
            comp.stop()  # not wanted meanwhile: the stack's supervisor leaves it alone
            self.stack.note("restart", {"process": name})
            comp.start()

    def kill_instance(self, name: str, every_s: float, stop: threading.Event) -> None:
        """SIGKILL instance ``name`` every ``every_s`` seconds while it runs, until ``stop``; the stack's supervisor
        starts it again. Each kill is noted first, as the instances note theirs (the checkers excuse its claims)."""
        while not stop.is_set():
            comp = self.stack.instances.get(name)
            if comp is not None and comp.running():
                self.stack.note("kill", {"process": name, "why": "worker-kill"})
                comp.kill()
                self.kills += 1
            stop.wait(every_s)


def _worker_kill_native(nemesis: JobsNemesis, params: Params, on: bool) -> None:
    name, every = str(params.get("instance", "instance-a")), float(params.get("every_s", KILL_EVERY_S)) * nemesis.factor
    nemesis.window("worker-kill", on, lambda stop: nemesis.kill_instance(name, every, stop))


def _drain_sim(world: Any, params: Params, on: bool) -> None:
    if on:
        instance = str(params.get("instance", "instance-a"))
        for name in sorted(world.supervised):
            if name.startswith(f"{instance}.") or name == reclaimer_process(instance):
                world.drain(name)


def _drain_native(nemesis: JobsNemesis, params: Params, on: bool) -> None:
    if on:  # the drain lasts as long as the jobs the instance holds: the timeline goes on meanwhile
        threading.Thread(target=nemesis.drain_instance, args=(str(params.get("instance", "instance-a")),),
                         name="drain", daemon=True).start()


FAULTS.register(
    chaos.any_crash_point(),
    # The instances read no held transaction from the crash points file: the simulation's only.
    dataclasses.replace(chaos.hold_transaction(), native=None),
    Fault("db-outage", f"the database is unreachable (link {DB_PROXY} cut)", chaos.db_down, chaos.cut_links(DB_PROXY)),
    chaos.db_latency("db-latency", "every database round trip takes params.ms (200) longer", DB_PROXY, "latency"),
    Fault("drain", "SIGTERM params.instance (instance-a): its workers finish the jobs they hold and take no more, "
          "then it is started again (a rolling deploy)", _drain_sim, _drain_native),
    Fault("worker-kill", "SIGKILL params.instance (instance-a) every params.every_s (10) seconds while the window "
          "lasts (under load: sortie load --system jobs)", None, _worker_kill_native),
)
