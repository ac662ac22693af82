"""`sortie selfcheck`: run a system's catalogue with each of its known defects switched on (its System.bugs:
the default system's unless ``system`` names another) and report which scenarios catch it, and with which
invariant. A bug is *caught* by a scenario when the run reports at least one invariant VIOLATED; a run that merely
fails its "did the fault fire" check proves nothing and is reported with that reason, never as a catch. The CLI and
tests/core/test_selfcheck.py share this."""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scenarios.catalogue import load_catalogue
from scenarios.systems import DEFAULT_SYSTEM, BugSwitch, load_system
from scenarios.verdicts import VIOLATED

log = logging.getLogger(__name__)


@dataclass
class BugRun:
    """One scenario run with one bug on."""

    bug: str
    scenario: str
    passed: bool
    violated: list[str]  # invariants VIOLATED (the catch)
    not_exercised: str | None  # why the scenario's fault did not fire, if it did not
    wall_s: float
    examples: list[str] = field(default_factory=list)  # a few violation messages
    error: str | None = None  # the run itself crashed

    @property
    def caught(self) -> bool:
        return bool(self.violated)

    def as_json(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "caught": self.caught, "passed": self.passed, "violated": self.violated,
                "not_exercised_reason": self.not_exercised, "wall_seconds": round(self.wall_s, 3),
                "examples": self.examples, "error": self.error}


@dataclass
class BugVerdict:
    bug: Any  # the system's bug entry: name, title, rule, where, description, invariants, scenarios
    runs: list[BugRun]

    @property
    def caught_by(self) -> list[BugRun]:
        return [r for r in self.runs if r.caught]

    @property
    def caught(self) -> bool:
        return bool(self.caught_by)

    def invariants(self) -> list[str]:
        return sorted({i for r in self.caught_by for i in r.violated}, key=_inv_order)

    def as_json(self) -> dict[str, Any]:
        b = self.bug
        return {"bug": b.name, "title": b.title, "rule": b.rule, "where": b.where, "description": b.description,
                "expected_invariants": list(b.invariants), "caught": self.caught,
                "caught_by": {r.scenario: r.violated for r in self.caught_by}, "invariants": self.invariants(),
                "runs": [r.as_json() for r in self.runs]}


@dataclass
class SelfcheckReport:
    shell: str
    seed: int
    wall_s: float
    workers: int
    verdicts: list[BugVerdict]
    system: str = DEFAULT_SYSTEM
    # named: bugs none of whose named scenarios runs in this shell (left out: the other shell's selfcheck judges them)
    elsewhere: list[str] = field(default_factory=list)

    @property
    def all_caught(self) -> bool:
        return bool(self.verdicts) and all(v.caught for v in self.verdicts)

    def as_json(self) -> dict[str, Any]:
        return {"shell": self.shell, "system": self.system, "seed": self.seed, "wall_seconds": round(self.wall_s, 1),
                "workers": self.workers,
                "all_caught": self.all_caught, "bugs": [v.as_json() for v in self.verdicts]}

    def write(self, out: Path) -> Path:
        import json

        out.mkdir(parents=True, exist_ok=True)
        path = out / "selfcheck.json"
        path.write_text(json.dumps(self.as_json(), indent=2) + "\n")
        return path


def _inv_order(inv: str) -> tuple[int, str]:
    return (int(inv[1:]) if inv[1:].isdigit() else 999, inv)


def scenario_ids(shell: str, ids: Iterable[str] | None = None, system: str = DEFAULT_SYSTEM) -> list[str]:
    """The catalogue scenarios of a shell (iterated, never hard-coded: the catalogue grows)."""
    wanted = set(ids) if ids else None
    return [s.id for s in load_catalogue(system).values() if shell in s.shells and (wanted is None or s.id in wanted)]


def bug_names(names: Iterable[str] | None = None, system: str = DEFAULT_SYSTEM) -> list[str]:
    """The system's defects, in its registry's order (ValueError for a name it does not have)."""
    known = load_system(system).bugs
    chosen = set(names) if names else set(known)
    if unknown := sorted(chosen - set(known)):
        raise ValueError(f"unknown bug(s): {', '.join(unknown)}; known: {', '.join(known)}")
    return [n for n in known if n in chosen]


def _from_result(bug: str, result: Any) -> BugRun:
    bad = [v for v in result.verdicts if v.status == VIOLATED]
    examples = [f"{v.invariant}: {x.message}" for v in bad for x in v.violations[:2]][:4]
    return BugRun(bug, result.id, result.passed, sorted((v.invariant for v in bad), key=_inv_order),
                  result.exercised, result.wall_s, examples)


def run_sim_job(job: tuple[str, str, int] | tuple[str, str, int, str]) -> BugRun:
    """One (bug, scenario, seed[, system]) in simulation. Top-level so a process pool can pickle it."""
    from scenarios.runner import simulate

    bug, sid, seed, system = (*job, DEFAULT_SYSTEM) if len(job) == 3 else job
    started = time.perf_counter()
    try:
        return _from_result(bug, simulate(load_catalogue(system)[sid], seed, inject_bug=bug))
    except Exception as exc:  # a crash is reported, not hidden, and is not a catch
        return BugRun(bug, sid, False, [], None, time.perf_counter() - started, error=f"{type(exc).__name__}: {exc}")


def selfcheck_sim(bugs: Iterable[str] | None = None, scenarios: Iterable[str] | None = None, *, seed: int = 1,
                  workers: int = 2, on_run: Callable[[BugRun], None] | None = None,
                  system: str = DEFAULT_SYSTEM, named: bool = False) -> SelfcheckReport:
    """Every chosen bug against every chosen simulation scenario (all of both by default): the table is
    complete, every scenario that catches each bug. ``named``: each bug only against the scenarios its registry
    entry names (the promise, checked at another seed for a fraction of the table's runs). Runs are independent,
    so they go to a pool."""
    started = time.perf_counter()
    names, ids = bug_names(bugs, system), scenario_ids("sim", scenarios, system)
    known = load_system(system).bugs
    # Scenario-major order: each scenario's runs for different bugs take similar time, so the pool stays busy.
    jobs = [(b, s, seed, system) for s in ids for b in names if not named or s in known[b].scenarios]
    runs: list[BugRun] = []
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            runs.append(run_sim_job(job))
            if on_run:
                on_run(runs[-1])
    else:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(min(workers, len(jobs)), maxtasksperchild=8) as pool:
            for run in pool.imap_unordered(run_sim_job, jobs):
                runs.append(run)
                if on_run:
                    on_run(run)
    return _report("sim", seed, time.perf_counter() - started, workers, names, ids, runs, system)


class _StackPerSystem:
    """The stack the native selfcheck runs its bugs on: one for the whole run where its runner can switch to the next
    bug in place (scenarios.systems.BugSwitch: every process restarted with it, the infrastructure kept), else a
    fresh one per bug. A switch that fails costs a fresh stack, not the bug's verdict."""

    def __init__(self, open_runner: Callable[[str], AbstractContextManager[Any]],
                 on_stack: Callable[[str], None] | None) -> None:
        self.open_runner, self.on_stack = open_runner, on_stack
        self.contexts = ExitStack()
        self.runner: Any = None

    def runner_for(self, bug: str) -> Any:
        if self.on_stack:
            self.on_stack(bug)
        if isinstance(self.runner, BugSwitch):
            try:
                self.runner.switch_bug(bug)
                return self.runner
            except Exception:  # a stack that cannot switch cleanly is replaced, never reused half-switched
                log.exception("switching the stack to %s failed; starting a fresh one", bug)
        self.close()
        self.runner = self.contexts.enter_context(self.open_runner(bug))
        return self.runner

    def close(self) -> None:
        self.runner = None
        self.contexts.close()


def selfcheck_native(bugs: Iterable[str] | None = None, scenarios: Iterable[str] | None = None, *, seed: int = 1,
                     open_runner: Callable[[str], AbstractContextManager[Any]],
                     on_run: Callable[[BugRun], None] | None = None,
                     on_stack: Callable[[str], None] | None = None, system: str = DEFAULT_SYSTEM,
                     named: bool = False) -> SelfcheckReport:
    """The same on the real stack, the chosen scenarios run one after another with each bug on. Slow: a stack's
    start costs minutes. ``open_runner(bug)`` is the system's stack with that bug on in every process (`sortie
    selfcheck` gives the system's System.stack_runner: systems/ sits above scenarios/, pyproject.toml
    [tool.importlinter]), a context yielding a runner with ``run(scenario, seed)``; a runner that also has
    ``switch_bug`` (BugSwitch) serves every bug, else each bug gets a fresh stack. ``named``: each bug only against
    the scenarios its registry entry names (the table's diagonal); a bug none of whose named scenarios runs on the
    real stack is left out of the verdicts and named in ``elsewhere``."""
    started = time.perf_counter()
    names, ids = bug_names(bugs, system), scenario_ids("native", scenarios, system)
    catalogue, known = load_catalogue(system), load_system(system).bugs
    runs: list[BugRun] = []
    elsewhere = []
    stack = _StackPerSystem(open_runner, on_stack)
    try:
        for bug in names:
            mine = [s for s in ids if not named or s in known[bug].scenarios]
            if not mine:
                elsewhere.append(bug)
                continue
            runner = stack.runner_for(bug)
            for sid in mine:
                t0 = time.perf_counter()
                try:
                    run = _from_result(bug, runner.run(catalogue[sid], seed))
                except Exception as exc:
                    run = BugRun(bug, sid, False, [], None, time.perf_counter() - t0,
                                 error=f"{type(exc).__name__}: {exc}")
                runs.append(run)
                if on_run:
                    on_run(run)
    finally:
        stack.close()
    report = _report("native", seed, time.perf_counter() - started, 1, [n for n in names if n not in elsewhere],
                     ids, runs, system)
    report.elsewhere = elsewhere
    return report


def _report(shell: str, seed: int, wall_s: float, workers: int, names: list[str], ids: list[str],
            runs: list[BugRun], system: str = DEFAULT_SYSTEM) -> SelfcheckReport:
    order = {sid: i for i, sid in enumerate(ids)}
    known = load_system(system).bugs
    verdicts = [BugVerdict(known[b], sorted((r for r in runs if r.bug == b), key=lambda r: order[r.scenario]))
                for b in names]
    return SelfcheckReport(shell, seed, wall_s, workers, verdicts, system)
