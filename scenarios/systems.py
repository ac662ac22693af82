"""What the harness core needs of a system under test (docs/adding-a-system.md), and where it finds one.

A system is a package ``systems/NAME`` whose ``SYSTEM`` is a :class:`System`: its catalogue, the workload its
scenarios describe, its invariant ids and named expectations, how it injects a known defect, and how to deploy it
in simulation for one scenario run (a :class:`Deployment`). The runner, the incident parser and the CLI go through
this and nothing else, so adding a system adds a package, not a branch (``load_system`` imports the package by
its name; no list of systems lives here).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from scenarios.rules import Rule
    from scenarios.scenario import Scenario
    from scenarios.sim.world import SimWorld
    from scenarios.verdicts import Invariants, Verdict

DEFAULT_SYSTEM = "copilot"


class RunState(Protocol):
    """What a run left, as the runner and the report read it (a system's final state has more, for its checkers).
    Times are seconds on the history's clock except ``t0`` and the rows' own times, which are epoch seconds."""

    t0: float  # epoch seconds of history time 0
    heal_time: float  # history time when the last fault healed
    end_time: float  # history time when the run stopped

    @property
    def tasks(self) -> list[dict[str, Any]]:
        """The system's work items (tasks, jobs): id, status, created_at; [] for a system without any."""

    @property
    def audit(self) -> list[dict[str, Any]]:
        """Their status changes: task_id, from, to, at, actor, action (the report's task timeline)."""

    def counts(self) -> dict[str, int]:
        """What summary.json counts (items by status, or the system's own figures)."""


class Deployment(Protocol):
    """One simulated deployment of a system, for one scenario run: built by ``System.deploy``, then driven by the
    runner (start, let the faults and the workload play out, wait for quiet, read the end, check it)."""

    world: SimWorld

    def start(self) -> None:
        """The reference's processes and the workload, as simpy processes of ``world``."""

    def workload_done(self) -> bool:
        """Every user (or producer) has finished what it was going to do."""

    def unsettled(self) -> int:
        """What is still to settle (rows, messages); 0: quiet."""

    def busy_until(self) -> float | None:
        """Virtual time until which something outside the reference still runs (drones in the air), else None."""

    def final_state(self, heal_time: float) -> RunState:
        """What the run left, for the checkers and the report."""

    def verdicts(self, state: Any, scenario: Scenario) -> list[Verdict]:
        """Every invariant of the scenario, checked on the history and ``state``."""

    def stats(self) -> dict[str, Any]:
        """Counters of the run for summary.json."""


@dataclass(frozen=True, eq=False)
class ExploreSpec:
    """What `sortie explore` needs of a system: how a run is drawn from its seed, how a case is made smaller, the
    coverage targets its reference declares and how to count them over one run."""

    draw: Callable[[int], Scenario]  # run seed -> the case (workload, faults, policy)
    workload_steps: Callable[[Any], Any]  # workload -> iterator of (field, smaller value)
    rebuild: Callable[..., Scenario]  # (case, workload=, faults=) -> the case with those
    users: Callable[[Any], int]  # the workload's size, as explore.json reports it (its "size", in ``unit``)
    targets: Mapping[str, str]  # coverage target -> what reaching it means
    counting: Callable[[], AbstractContextManager[Any]]  # counts the targets reached in the block (a Counter)
    unit: str = "confirms"  # what ``users`` counts


@dataclass(frozen=True, eq=False)
class CapacitySpec:
    """A system's capacity model, calibrated on its measured load runs: `sortie capacity` and `sortie parity --load`.
    Both raise FileNotFoundError (a user's mistake: no load.json there) with a one-line message."""

    # (run_dir, seed=, calibrate_dir=) -> the page written: RUN_DIR/capacity.html and capacity.json's model section
    write_report: Callable[..., Path]
    # (measured_dir, calibrate_dir, seed=) -> the simulated percentiles against the measured ones: calibrated_on,
    # goal_pct, runs (each with rows: figure, measured, measured_ci, simulated, error_pct, verdict), held
    load_parity: Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class StackRequest:
    """What `sortie run` and `sortie selfcheck --stack native` ask of a system's real stack (System.stack_runner)."""

    run_dir: Path
    seed: int = 1
    time_factor: float | None = None  # None: the system's own default
    inject_bug: str | None = None  # a known defect (or variant) switched on in every process of the stack
    kind: str = "native"  # the provider (native, containers, external); a system with only its own stack refuses others
    external_config: Path | None = None
    allow_foreign_database: bool = False
    time_scale: float | None = None  # the platform's model seconds per wall second (None: the system's own)


@runtime_checkable
class BugSwitch(Protocol):
    """A stack runner (System.stack_runner's) that can take another bug in place: every process of the application
    restarts with ``bug`` on (and the previous one off in all of them), the infrastructure (database, broker, ...)
    kept; each scenario's run resets the state as between catalogue scenarios. `sortie selfcheck --stack native`
    then starts one stack per run, not one per bug."""

    def switch_bug(self, bug: str) -> None: ...


class StackUnavailable(RuntimeError):
    """The real stack cannot run here (a missing binary, no Docker engine, a provider the system lacks), or a
    command needs one that is not up. The message is one line meant for the user."""


@dataclass(frozen=True)
class FuzzRequest:
    """What `sortie fuzz` asks of a system's deployment for fuzzing (FuzzSpec.in_process, FuzzSpec.stack)."""

    run_dir: Path
    seed: int = 1


class FuzzTarget(Protocol):
    """A deployment of a system that `sortie fuzz` sends requests to: its app in this process (``app``, which the
    fuzzer serves on loopback) or its real stack (``base_url``), its credentials, and its invariants on the database
    the requests left."""

    app: Any | None  # a WSGI application (in process), or None
    base_url: str | None  # the API's URL (a real stack), or None

    def credentials(self, role: str) -> dict[str, str]:
        """The headers that carry a fresh credential of ``role`` (one of FuzzSpec.roles)."""

    def examples(self, role: str) -> dict[str, list[Any]]:
        """Path parameters by name -> ids of rows the deployment seeded that ``role`` may act on: they replace the
        document's examples, so that the fuzzer's examples and coverage phases reach real rows ({}: none)."""

    def verdicts(self) -> list[Verdict]:
        """Every invariant that can be judged on the database the fuzzing left (nothing half-written, no row of a
        user the fuzzer held no credential of touched)."""


@dataclass(frozen=True, eq=False)
class FuzzSpec:
    """What `sortie fuzz` needs of a system: its OpenAPI document, its roles, and a deployment to fuzz (a context
    that yields a FuzzTarget and tears it down): in process, or on its real stack."""

    openapi: Callable[[], dict[str, Any]]  # the OpenAPI document the API serves
    roles: tuple[str, ...]  # every role whose credential the fuzzer sends (one pass each)
    in_process: Callable[[FuzzRequest], AbstractContextManager[FuzzTarget]]
    stack: Callable[[FuzzRequest], AbstractContextManager[FuzzTarget]] | None = None  # None: in process only


class RequestRefused(RuntimeError):
    """A system refused an operator's request through one of its commands (which printed the answer)."""


@dataclass(frozen=True, eq=False)
class System:
    name: str
    title: str
    catalogue_dir: Path
    catalogue_order: str  # scenario id prefixes in catalogue order (C, R, T, B, S)
    workload_type: type  # a dataclass: an incident file's ``workload`` has exactly its fields
    invariants: Invariants[Any]  # its invariants by id (checker, title, doc): what its scenarios may name
    expectations: Mapping[str, Callable[[Any, Any], Any]]
    deploy: Callable[..., Deployment]  # (scenario, seed, **overrides)
    injected: Callable[[str], AbstractContextManager[Any]]  # a known defect switched on for the block
    bug_names: Callable[[], tuple[str, ...]]  # what --inject-bug takes
    # The defects `sortie selfcheck` runs, by name: each with title, rule, where, description, invariants, scenarios
    bugs: Mapping[str, Any]
    # ValueError for a scenario's ``policy`` or ``params`` the system does not take: (which, value)
    check_overrides: Callable[[str, dict[str, Any]], None]
    explore: ExploreSpec | None = None  # None: `sortie explore` does not run this system
    # Named variants of the reference, each the bug that selects it (None: the reference as it is), for --variant.
    variants: Mapping[str, str | None] = field(default_factory=dict)
    # A StackRequest -> a context that starts the system's real stack and yields a runner whose run(scenario, seed)
    # returns a ScenarioResult there (and whose outside_pids() names processes it started that are not children of
    # sortie, for the footprint); StackUnavailable when it cannot run here. None: no real stack.
    stack_runner: Callable[[StackRequest], AbstractContextManager[Any]] | None = None
    # The scenarios CI runs on the real stack (scripts/stack.sh: one stack for them; at most three, each chosen to
    # cover real-stack mechanisms nothing else in CI covers; the whole catalogue is nightly). () without a stack.
    ci_stack_scenarios: tuple[str, ...] = ()
    # The time factor of its whole native catalogue in scripts/nightly.sh: 1 runs the documented windows, where its
    # catalogue's length allows; None: the runner's default (scaled, as in CI).
    nightly_time_factor: float | None = None
    # (loadtests.run.LoadOptions, console or None) -> exit code: a load run on the system's real stack (`sortie load`);
    # ValueError for an option it does not take. None: `sortie load` does not run this system.
    load: Callable[[Any, Any], int] | None = None
    # Its capacity model over its load runs (`sortie capacity`, `sortie parity --load`). None: it has none.
    capacity: CapacitySpec | None = None
    # (profile name, simulated hours, seed, profile the code?) -> a result with as_json(), hotspots and
    # invariants_held: `sortie bench`, the simulation under a traffic profile. None: no benchmark.
    bench: Callable[[str, float, int, bool], Any] | None = None
    # A StackRequest -> the system's stack on the request's provider (stack.providers.Stack), not started: `sortie
    # stack up`; StackUnavailable when the provider cannot run here. None: no stack to bring up.
    stack: Callable[[StackRequest], Any] | None = None
    # () -> the click commands the system adds to the CLI, by the group they join ("sortie": verbs of their own,
    # like its operator actions; "stack": under `sortie stack`, like its stack benchmark). They raise
    # StackUnavailable (exit 4) or RequestRefused (exit 2) and print what they have to say.
    commands: Callable[[], Mapping[str, Sequence[Any]]] | None = None
    # Its rule-traceability matrix (scenarios.rules): every rule of its seed and its reference, with the invariants,
    # scenarios and bugs that judge, exercise and break it; `sortie rules` prints it. Empty: the system has none yet.
    rules: Sequence[Rule] = ()
    # `sortie fuzz`: its API's OpenAPI document, roles and deployments (FuzzSpec). None: no API document yet, and
    # fuzz refuses the system.
    fuzz: FuzzSpec | None = None


@cache
def load_system(name: str) -> System:
    """The system named ``name``: the package ``systems.NAME``, or, for a dotted name, the module of that path
    (importable from the working directory, as ``python -m`` finds one), whose ``SYSTEM`` must carry that same name.
    KeyError for a system that does not exist."""
    dotted = "." in name
    if not all(part.isidentifier() for part in name.split(".")):
        raise KeyError(name)
    module_name = name if dotted else f"systems.{name}"
    if dotted and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is not None and module_name.startswith(err.name):
            raise KeyError(name) from None
        raise
    system = getattr(module, "SYSTEM", None)
    if not isinstance(system, System) or system.name != name:
        raise KeyError(name)
    return system


def system_names() -> tuple[str, ...]:
    """The systems installed (the packages under systems/ that define one)."""
    import pkgutil

    systems_pkg = importlib.import_module("systems")
    out = []
    for info in pkgutil.iter_modules(systems_pkg.__path__):
        try:
            load_system(info.name)
        except KeyError:
            continue
        out.append(info.name)
    return tuple(sorted(out))
