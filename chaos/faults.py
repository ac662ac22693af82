"""The fault registry (Jepsen's nemesis): each system registers its faults under its own name
(``registry(system)``), and both shells look a fault up there by name (chaos.simulated.apply_fault,
chaos.native.NativeNemesis.apply); an incident file's fault steps are checked against its system's registry.

A fault is one object: a name, what it does, its simulation half and its real-stack half side by side. A half is
``(target, params, on) -> None``: it starts (on) or stops the fault. The simulation half acts on a SimulatedWorld
(chaos/simulated.py), the native half on a nemesis (chaos/native.py: NativeTarget, and NativeNemesis for a stack of
stack.providers). A half is None where the shell has no form for the fault.

Made here are the generic kinds, which work for any system given small ports: link cuts and latency (Toxiproxy,
by the system's link names), database, broker, object store and cache outages, database errors, crash points and
held transactions, process kills, pauses and restarts, stopped services. A system's own faults live with it.
Crash points are one mechanism for both shells (chaos/crashpoints.py, kernel/failpoints.py)."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import text

from chaos.crashpoints import Points, crash_points
from harness.history import INFO, NEMESIS

if TYPE_CHECKING:
    from chaos.native import NativeNemesis, NativeTarget
    from chaos.simulated import SimulatedWorld

Shell = Literal["sim", "native"]
Params = dict[str, Any]
SimHalf = Callable[[Any, Params, bool], None]  # its world: a SimulatedWorld (SimWorld, or a system's own subclass)
NativeHalf = Callable[[Any, Params, bool], None]  # its target: a NativeTarget (NativeNemesis, or a system's own)
Check = Callable[[Params, Shell], None]  # raises ValueError (or KeyError for a missing parameter)

_NO_FORM = {"sim": "the simulation cannot model {!r}", "native": "fault {!r} has no real-stack form"}


@dataclass(frozen=True)
class Fault:
    name: str
    doc: str  # one line: what the fault does
    sim: SimHalf | None  # None: the simulation cannot model it
    native: NativeHalf | None  # None: the real stack has no form for it
    check: Check | None = None  # the parameters, for a shell
    points: Points | None = None  # a crash-point fault: the points it arms (chaos/crashpoints.py)

    @property
    def crash(self) -> bool:
        return self.points is not None

    def half(self, shell: Shell) -> SimHalf | NativeHalf | None:
        return self.sim if shell == "sim" else self.native

    def validate(self, params: Params, shell: Shell) -> None:
        """ValueError when the parameters do not make a fault this shell can apply."""
        if self.check is None:
            return
        try:
            self.check(params, shell)
        except KeyError as err:
            raise ValueError(f"{self.name}: params.{err.args[0]} is missing") from None


class FaultRegistry(Mapping[str, Fault]):
    """One system's faults by name, in the order it registered them."""

    def __init__(self, system: str) -> None:
        self.system = system
        self._faults: dict[str, Fault] = {}
        # What a NativeNemesis of this system does once, when it is made (e.g. install its database triggers).
        self.native_setup: list[Callable[[NativeNemesis], None]] = []

    def __getitem__(self, name: str) -> Fault:
        return self._faults[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._faults)

    def __len__(self) -> int:
        return len(self._faults)

    def register(self, *faults: Fault) -> None:
        for fault in faults:
            assert fault.name not in self._faults, (self.system, fault.name)
            self._faults[fault.name] = fault

    def names(self, shell: Shell) -> frozenset[str]:
        """The faults that have a form in ``shell``."""
        return frozenset(name for name, fault in self.items() if fault.half(shell) is not None)

    def half_for(self, name: str, shell: Shell, params: Params) -> Callable[[Any, Params, bool], None]:
        """The half of fault ``name`` that ``shell`` applies, its parameters checked. ValueError for an unknown
        fault, a fault without a form in that shell, or bad parameters."""
        fault = self.get(name)
        if fault is None:
            raise ValueError(f"unknown fault {name!r}; known faults: {', '.join(sorted(self))}")
        apply = fault.half(shell)
        if apply is None:
            raise ValueError(_NO_FORM[shell].format(name))
        fault.validate(params, shell)
        return apply


_REGISTRIES: dict[str, FaultRegistry] = {}


def registry(system: str) -> FaultRegistry:
    """The faults of ``system``: those its package registered when the harness loaded it (by its name)."""
    return _REGISTRIES.setdefault(system, FaultRegistry(system))


def needs(*keys: str) -> Check:
    def check(params: Params, shell: Shell) -> None:
        missing = [key for key in keys if key not in params]
        if missing:
            raise KeyError(missing[0])

    return check


# ---------------------------------------------------------------------------------------------- links and outages
# The real stack cuts Toxiproxy links for the window; the simulation flips the dependency's switch.


def cut_links(*links: str) -> NativeHalf:
    """The native half of an outage: the Toxiproxy links ``links`` are cut for the window."""

    def native(nemesis: NativeTarget, params: Params, on: bool) -> None:
        for link in links:
            nemesis.links.set_enabled(link, not on)

    return native


def db_down(world: SimulatedWorld, params: Params, on: bool) -> None:
    world.db_down = on


def broker_down(world: SimulatedWorld, params: Params, on: bool) -> None:
    world.broker.down = on


def store_down(world: SimulatedWorld, params: Params, on: bool) -> None:
    world.store.down = on


def db_latency(name: str, doc: str, link: str, toxic: str) -> Fault:
    """Every database round trip takes params.ms (200) longer: a latency toxic ``toxic`` on link ``link``."""

    def sim(world: SimulatedWorld, params: Params, on: bool) -> None:
        world.db_extra_s = float(params.get("ms", 200)) / 1000.0 if on else 0.0

    def native(nemesis: NativeTarget, params: Params, on: bool) -> None:
        if on:
            nemesis.links.add_toxic(link, toxic, "latency", attributes={"latency": int(params.get("ms", 200))})
        else:
            nemesis.links.remove_toxic(link, toxic)

    return Fault(name, doc, sim, native)


def toxic(name: str, doc: str) -> Fault:
    """Any Toxiproxy toxic: params link, type, stream (downstream), attributes (the real stack only)."""

    def native(nemesis: NativeTarget, params: Params, on: bool) -> None:
        link, kind = params["link"], params["type"]
        if on:
            nemesis.links.add_toxic(link, f"sortie-{kind}", kind, stream=params.get("stream", "downstream"),
                                    attributes=params.get("attributes", {}))
        else:
            nemesis.links.remove_toxic(link, f"sortie-{kind}")

    return Fault(name, doc, None, native, needs("link", "type"))


# ---------------------------------------------------------------------------------------------- database errors


def db_error(name: str, doc: str, native_tables: tuple[str, ...]) -> Fault:
    """Inserts into params.tables fail with a database error inside their transaction. The simulation can fail any
    table's; the real stack those of ``native_tables`` (a harness trigger on each: NativeNemesis
    .install_fault_triggers)."""

    def check(params: Params, shell: Shell) -> None:
        tables = params["tables"]
        if not tables:
            raise ValueError(f"{name}: params.tables names no table")
        if shell == "native" and (others := sorted(set(tables) - set(native_tables))):
            raise ValueError(f"{name}: on the real stack only {', '.join(native_tables)} can fail, not {others}")

    def sim(world: SimulatedWorld, params: Params, on: bool) -> None:
        tables = set(params.get("tables", []))
        world.db_error_tables = world.db_error_tables | tables if on else world.db_error_tables - tables

    def native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
        # A real error raised by PostgreSQL inside the transaction (a harness trigger, NativeNemesis
        # .install_fault_triggers).
        with nemesis.admin.begin() as conn:
            for table in params.get("tables", []):
                if on:
                    conn.execute(text("INSERT INTO sortie_fault (target) VALUES (:t) ON CONFLICT DO NOTHING"),
                                 {"t": table})
                else:
                    conn.execute(text("DELETE FROM sortie_fault WHERE target = :t"), {"t": table})

    return Fault(name, doc, sim, native, check)


# ---------------------------------------------------------------------------------------------- crash points


def crash_fault(name: str, doc: str, points: Points) -> Fault:
    """A fault that arms ``points(params)``, in the simulated world or in the stack's processes (scaled there)."""

    def sim(world: SimulatedWorld, params: Params, on: bool) -> None:
        if on:
            for point in points(params):
                world.arm(point)

    def native(nemesis: NativeTarget, params: Params, on: bool) -> None:
        if on:
            nemesis.arm_crash_points(points(params))

    def check(params: Params, shell: Shell) -> None:
        armed = points(params)
        if shell == "sim" and any(p.when == "before-commit" for p in armed):
            # kernel.failpoints: the simulation's write lock is the whole database's, not the rows a transaction wrote
            raise ValueError(f"{name}: when before-commit is a real stack's only (the simulation's write lock covers "
                             "the whole database: a transaction stopped before its commit would hold up every writer)")

    return Fault(name, doc, sim, native, check, points=points)


def crash_doc(role: str, effect: str, when: str, action: str) -> str:
    """What a fixed crash point does, in one line."""
    what = {"kill": "SIGKILL", "stop": "SIGSTOP (a zombie; SIGCONT after params.seconds)"}.get(action, action)
    effect, _, event = effect.partition(":")  # publish:<event type>: a publish of that event only
    of = f" of a {event}" if event else ""
    return f"{what} a process of role {role} {when} its {effect}{of} (params.count (1) times)"


def any_crash_point() -> Fault:
    return crash_fault("crash-point", "any crash point: params role, effect (publish:<event type>: only that event), "
                       "when (after), action (kill), count (1), seconds", lambda p: crash_points("crash-point", p))


def hold_transaction() -> Fault:
    return crash_fault("hold-transaction", "a transaction params.tx of params.role is held params.seconds before its "
                       "write", lambda p: crash_points("hold-transaction", p))


# ---------------------------------------------------------------------------------------------- processes


def _kill_workers(world: SimulatedWorld, roles: tuple[str, ...], every_s: float) -> Generator[Any, Any, None]:
    """SIGKILL, in turn, each worker whose name starts with one of ``roles``, every ``every_s`` seconds,
    while the window lasts; the supervisor restarts them."""
    n = 0
    while world.kill_worker_window:
        victims = sorted(name for name in world.supervised if name.startswith(roles))
        if victims:
            world.kill(victims[n % len(victims)], "kill-worker")
            n += 1
        yield world.env.timeout(every_s)


def kill_worker(default_roles: tuple[str, ...]) -> Fault:
    """kill-worker: SIGKILL, in turn, a worker of params.roles (``default_roles``) every params.every_s (20) seconds
    while the window lasts."""

    def sim(world: SimulatedWorld, params: Params, on: bool) -> None:
        world.kill_worker_window = on
        if on:
            world.env.process(_kill_workers(world, tuple(params.get("roles", default_roles)),
                                            float(params.get("every_s", 20.0))))

    def native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
        roles = tuple(params.get("roles", default_roles))
        every = float(params.get("every_s", 20.0)) * nemesis.factor
        nemesis.window("kill-worker", on, lambda stop: nemesis.kill_workers(roles, every, stop))

    return Fault("kill-worker", f"SIGKILL, in turn, a worker of params.roles ({', '.join(default_roles)}) every "
                 "params.every_s (20) seconds while the window lasts (on the real stack counted from the killed worker "
                 "serving again)", sim, native)


def _restart_process_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    if on:
        for name in sorted(world.supervised):
            if name.startswith(params["process"]):
                world.kill(name, "restart-process")


def _signal_processes(kind: Literal["restart", "pause"]) -> NativeHalf:
    """restart-process (on: restart) and pause-process (on: SIGSTOP, off: SIGCONT) of every process whose name
    starts with params.process."""

    def native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
        for name, comp in list(nemesis.stack.components.items()):
            if not name.startswith(params["process"]):
                continue
            nemesis.record(NEMESIS, INFO, kind if on else "resume", {"process": name})
            if kind == "restart":
                if on:
                    comp.restart()
            elif on:
                comp.pause()
            else:
                comp.resume()

    return native


def restart_process() -> Fault:
    return Fault("restart-process", "restart every process whose name starts with params.process",
                 _restart_process_sim, _signal_processes("restart"), needs("process"))


def pause_process() -> Fault:
    return Fault("pause-process", "SIGSTOP every process whose name starts with params.process; SIGCONT when the "
                 "window ends", None, _signal_processes("pause"), needs("process"))


# ---------------------------------------------------------------------------------------------- dependencies


def stop_service(sim_services: Mapping[str, SimHalf]) -> Fault:
    """stop-service: a dependency params.service is stopped for the window; in the simulation, the services it
    models (``sim_services``: a service -> the outage that stands for it stopped)."""

    def check(params: Params, shell: Shell) -> None:
        service = params["service"]
        if shell == "sim" and service not in sim_services:
            raise ValueError(f"stop-service: the simulation models {', '.join(sim_services)}, not {service!r}")

    def sim(world: SimulatedWorld, params: Params, on: bool) -> None:
        sim_services[params["service"]](world, {}, on)

    def native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
        service = nemesis.stack.services[params["service"]]
        if on:
            service.stop()
        else:
            service.start()

    return Fault("stop-service", "a dependency params.service is stopped for the window (the simulation models "
                 f"{', '.join(sim_services)})", sim, native, check)


def _cache_loss_sim(world: SimulatedWorld, params: Params, on: bool) -> None:
    if on:
        world.cache.flush()
    world.cache.down = on


def _cache_loss_native(nemesis: NativeNemesis, params: Params, on: bool) -> None:
    redis = nemesis.stack.services["redis"]
    if on:
        redis.flushall()
        redis.stop()
    else:
        redis.start()


def redis_loss(doc: str) -> Fault:
    """redis-loss: the cache (service redis) loses its data and stops for the window."""
    return Fault("redis-loss", doc, _cache_loss_sim, _cache_loss_native)
