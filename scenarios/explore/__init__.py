"""`sortie explore`: many simulated runs, each drawn from its own seed (a workload mix and a fault schedule:
the system's ExploreSpec.draw), every one checked by every invariant; a failing run shrunk to a small incident file
with a one-line repro (scenarios.explore.shrink); the system's coverage targets (ExploreSpec.targets) counted over all
runs.

Runs are tasks on dask.distributed: a LocalCluster of worker processes by default, or an existing cluster's
scheduler. A run depends only on its seed, so the results do not depend on how many workers there are."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import resource
import subprocess
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scenarios.explore.shrink import shrink, size
from scenarios.incident import dump_incident, load_incident
from scenarios.runner import ScenarioResult, simulate
from scenarios.scenario import Scenario
from scenarios.systems import DEFAULT_SYSTEM, ExploreSpec, System, load_system
from scenarios.verdicts import VIOLATED

MIN_RUNS_FOR_COVERAGE = 500  # below this many runs an unreached target is reported, not failed
SHRINK_BUDGET_S = 300.0  # a safety net: the shrink's budget is SHRINK_STEPS, which does not depend on the machine
SHRINK_STEPS = 400
MAX_SHRUNK = 3  # failures shrunk per explore: the first run of each distinct violated invariant, up to this many


def run_seed(seed: int, index: int) -> int:
    """The seed of run ``index`` of an explore with ``seed``, spread out: explores with nearby seeds share no runs."""
    return int.from_bytes(hashlib.sha256(f"sortie-explore:{seed}:{index}".encode()).digest()[:4], "big")


def _explored(system: str) -> tuple[System, ExploreSpec]:
    sys_ = load_system(system)
    if sys_.explore is None:
        raise ValueError(f"the {system} system cannot be explored (it has no explore description)")
    return sys_, sys_.explore


def _simulate(s: Scenario, seed: int, bug: str | None) -> tuple[ScenarioResult, Counter[str]]:
    with _explored(s.system)[1].counting() as seen:
        result = simulate(s, seed, inject_bug=bug)
    return result, seen


def _violated(result: ScenarioResult) -> list[str]:
    return [v.invariant for v in result.verdicts if v.status == VIOLATED]


def run_one(index: int, seed: int, bug: str | None, system: str = DEFAULT_SYSTEM) -> dict[str, Any]:
    """One explored run (a dask task): its outcome, its coverage, and what it cost."""
    rs = run_seed(seed, index)
    spec = _explored(system)[1]
    s = spec.draw(rs)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    out: dict[str, Any] = {"run": index, "seed": rs, "faults": sorted({f.fault for f in s.faults}),
                           "size": spec.users(s.workload)}
    try:
        result, seen = _simulate(s, rs, bug)
        out.update(violated=_violated(result), operations=len(result.history.ops), coverage=dict(seen), error=None)
    except Exception:  # a harness error (a bug of Sortie's), kept with the run that raised it
        out.update(violated=[], operations=0, coverage={}, error=traceback.format_exc(limit=8))
    out["cost"] = {"wall_s": time.perf_counter() - wall0, "cpu_s": time.process_time() - cpu0,
                   "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}
    return out


def still_fails(s: Scenario, run_seed_: int, bug: str | None, invariant: str) -> bool:
    """Does case ``s`` still violate ``invariant`` (a shrinking candidate, a dask task)?"""
    try:
        return invariant in _violated(_simulate(s, run_seed_, bug)[0])
    except Exception:
        return False


MapFn = Callable[..., list[Any]]  # map(fn, items, **same_kwargs) -> results in order (builtin-style or on Dask)


def _map_here(fn: Callable[..., Any], items: list[Any], **kwargs: Any) -> list[Any]:
    return [fn(item, **kwargs) for item in items]


def shrink_run(index: int, seed: int, bug: str | None, invariant: str, commit: str, *,
               budget_s: float = SHRINK_BUDGET_S, max_steps: int = SHRINK_STEPS, map_fn: MapFn = _map_here,
               batch: int = 1, system: str = DEFAULT_SYSTEM) -> dict[str, Any]:
    """Shrink failing run ``index`` to a small case that still violates ``invariant``, judging ``batch``
    candidates at a time with ``map_fn`` (on Dask: one per worker)."""
    rs = run_seed(seed, index)
    spec = _explored(system)[1]
    original = spec.draw(rs)
    wall0 = time.perf_counter()

    def judge(candidates: list[Scenario]) -> list[bool]:
        return map_fn(still_fails, candidates, run_seed_=rs, bug=bug, invariant=invariant)

    done = shrink(original, judge, batch=batch, max_steps=max_steps, budget_s=budget_s)
    small = done.case
    result, seen = _simulate(small, rs, bug)
    verdict = next(v for v in result.verdicts if v.invariant == invariant)
    name = f"{invariant}-run{index}{'-' + bug if bug else ''}"
    repro = f"sortie simulate failures/{name}.yaml --seed {rs}" + (f" --inject-bug {bug}" if bug else "") + \
        (f" --system {system}" if system != DEFAULT_SYSTEM else "")
    found_by = {"invariant": invariant, "explore_seed": seed, "run": index, "run_seed": rs, "inject_bug": bug,
                "commit": commit, "repro": repro, "violations": [v.as_json() for v in verdict.violations[:5]]}
    small_id = dataclasses.replace(small, id=f"{invariant}-run{index}")
    return {"name": name, "invariant": invariant, "run": index, "seed": rs, "bug": bug, "repro": repro,
            "commit": commit, "incident": dump_incident(small_id, found_by),
            "original": {"faults": len(original.faults), "size": spec.users(original.workload)},
            "shrunk": {"faults": len(small.faults), "fault_kinds": sorted({f.fault for f in small.faults}),
                       "size": spec.users(small.workload), "operations": len(result.history.ops),
                       "window_s": size(small)[2]},
            "shrink_steps": done.steps, "shrink_stopped": done.stopped, "coverage": dict(seen),
            "still_violated": invariant in _violated(result), "violations": found_by["violations"],
            "cost": {"shrink_wall_s": time.perf_counter() - wall0, "shrink_runs": done.runs}}


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=Path(__file__).resolve().parent, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@dataclass
class ExploreResult:
    seed: int
    runs_requested: int
    bug: str | None
    system: str = DEFAULT_SYSTEM
    runs: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)  # shrunk, one per distinct invariant
    interrupted: str | None = None  # why the explore stopped early (time budget, Ctrl-C, --until-found)
    require_coverage: bool = False  # fail on an unreached target whatever the number of runs
    workers: int = 0
    wall_s: float = 0.0
    shrink_wall_s: float = 0.0

    @property
    def failing_runs(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if r["violated"]]

    def is_find(self, run: dict[str, Any]) -> bool:
        """With a bug switched on, did this run catch it: does it violate an invariant the bug's registry entry
        names (a violation of another invariant is still a failure, but not evidence that the bug was found)?"""
        if self.bug is None:
            return bool(run["violated"])
        return bool(set(_expected(self.system, self.bug)) & set(run["violated"]))

    @property
    def finds(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if self.is_find(r)]

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if r["error"]]

    def coverage(self) -> dict[str, dict[str, Any]]:
        table = {}
        for name, doc in sorted(_explored(self.system)[1].targets.items()):
            reached = [r for r in self.runs if r["coverage"].get(name)]
            table[name] = {"doc": doc, "runs_reached": len(reached),
                           "hits": sum(r["coverage"][name] for r in reached)}
        return table

    @property
    def unreached(self) -> list[str]:
        return [name for name, c in self.coverage().items() if c["runs_reached"] == 0]

    @property
    def coverage_checked(self) -> bool:
        return self.require_coverage or len(self.runs) >= MIN_RUNS_FOR_COVERAGE

    def exit_code(self) -> int:
        """0: all held (with --bug: the bug was found); 1: an invariant was violated (with --bug: not found),
        a coverage target went unreached in >= 500 runs, or no run finished; 5: a harness error."""
        if self.errors:
            return 5
        if self.bug:
            return 0 if self.finds else 1
        if self.failing_runs or not self.runs or (self.coverage_checked and self.unreached):
            return 1
        return 0

    def as_json(self) -> dict[str, Any]:
        """Everything but timings is a function of (seed, runs, bug): the same with any number of workers."""
        cpu = sum(r["cost"]["cpu_s"] for r in self.runs)
        first = min((r["run"] for r in self.finds), default=None)
        return {
            "system": self.system, "size_unit": _explored(self.system)[1].unit,
            "seed": self.seed, "runs_requested": self.runs_requested, "runs": len(self.runs),
            "inject_bug": self.bug,
            "interrupted": self.interrupted,
            "failing_runs": len(self.failing_runs),
            "runs_to_first_failure": None if first is None else first + 1,  # with a bug: to the first find
            "violated": dict(sorted(Counter(i for r in self.failing_runs for i in r["violated"]).items())),
            "coverage": self.coverage(), "coverage_checked": self.coverage_checked, "unreached": self.unreached,
            "failures": [{k: v for k, v in f.items() if k != "cost"} for f in self.failures],
            "errors": [{"run": r["run"], "seed": r["seed"], "error": r["error"]} for r in self.errors],
            "exit_code": self.exit_code(),
            "run_list": [{k: v for k, v in r.items() if k != "cost"} for r in self.runs],
            "timings": {
                "workers": self.workers, "wall_s": round(self.wall_s, 2), "run_cpu_s": round(cpu, 2),
                "runs_per_cpu_minute": round(len(self.runs) / (cpu / 60.0), 1) if cpu else None,
                "peak_rss_mb_per_worker": round(max((r["cost"]["rss_mb"] for r in self.runs), default=0.0), 1),
                "shrink_wall_s": round(self.shrink_wall_s, 2),
                "shrink_wall_s_each": {f["name"]: round(f["cost"]["shrink_wall_s"], 2) for f in self.failures},
                "shrink_runs_each": {f["name"]: f["cost"]["shrink_runs"] for f in self.failures},
            },
        }


def _client(workers: int, scheduler: str | None) -> Any:
    from dask.distributed import Client, LocalCluster

    if scheduler:
        return Client(scheduler)
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                           silence_logs=logging.ERROR)
    return Client(cluster)


def explore(runs: int, seed: int, *, bug: str | None = None, workers: int = 1, scheduler: str | None = None,
            minutes: float | None = None, until_found: bool = False, require_coverage: bool = False,
            on_run: Callable[[dict[str, Any]], None] | None = None,
            on_phase: Callable[[str], None] | None = None, shrink_budget_s: float = SHRINK_BUDGET_S,
            shrink_steps: int = SHRINK_STEPS, system: str = DEFAULT_SYSTEM) -> ExploreResult:
    """Run ``runs`` explored runs, then shrink the first failing run of each violated invariant. Ctrl-C, the
    time budget or (``until_found``) the first failing run stops the runs; what finished is kept (and shrunk).
    Stopping early makes which runs finished depend on the workers; a full explore does not."""
    from dask.distributed import as_completed

    sys_, _ = _explored(system)
    if bug is not None and bug not in sys_.bug_names():
        raise ValueError(f"unknown bug {bug!r} of {system}")
    out = ExploreResult(seed=seed, runs_requested=runs, bug=bug, system=system, require_coverage=require_coverage)
    deadline = time.monotonic() + minutes * 60.0 if minutes else None
    wall0 = time.perf_counter()
    with _client(workers, scheduler) as client:
        out.workers = len(client.scheduler_info().get("workers", {})) or workers
        futures = client.map(run_one, range(runs), seed=seed, bug=bug, system=system, pure=False)
        try:
            for fut in as_completed(futures):
                out.runs.append(fut.result())
                if on_run:
                    on_run(out.runs[-1])
                if deadline and time.monotonic() > deadline:
                    out.interrupted = f"time budget of {minutes} minutes"
                    break
                if until_found and out.is_find(out.runs[-1]):
                    out.interrupted = ("stopped at the first run that caught the bug (--until-found)" if bug
                                       else "stopped at the first failing run (--until-found)")
                    break
        except KeyboardInterrupt:
            out.interrupted = "interrupted (Ctrl-C)"
        client.cancel(futures)
        out.runs.sort(key=lambda r: r["run"])
        out.wall_s = time.perf_counter() - wall0
        firsts: dict[str, int] = {}
        for r in out.runs:
            for inv in r["violated"]:
                firsts.setdefault(inv, r["run"])
        expected = set(_expected(system, bug)) if bug else set()
        # With a bug, its own invariants are shrunk first: the case that shows the bug is the one to keep.
        chosen = sorted(firsts.items(), key=lambda kv: (kv[0] not in expected, kv[1], kv[0]))[:MAX_SHRUNK]
        if chosen:
            if on_phase:
                on_phase(f"shrinking {len(chosen)} failure(s)")
            t0 = time.perf_counter()
            commit = git_commit()

            def on_dask(fn: Callable[..., Any], items: list[Any], **kwargs: Any) -> list[Any]:
                gathered: list[Any] = client.gather(client.map(fn, items, pure=False, **kwargs))
                return gathered

            try:
                for inv, index in chosen:  # one at a time, each judging a candidate per worker
                    out.failures.append(shrink_run(index, seed, bug, inv, commit, budget_s=shrink_budget_s,
                                                   max_steps=shrink_steps, map_fn=on_dask, batch=out.workers,
                                                   system=system))
            except KeyboardInterrupt:
                out.interrupted = (out.interrupted or "") + "; shrinking interrupted (Ctrl-C)"
            out.shrink_wall_s = time.perf_counter() - t0
    return out


def _expected(system: str, bug: str) -> tuple[str, ...]:
    """The invariants a bug's registry entry says catch it (none named: every invariant of the system)."""
    sys_ = load_system(system)
    entry = sys_.bugs.get(bug)
    return tuple(entry.invariants) if entry is not None else sys_.invariants.ids


def write_failures(result: ExploreResult, out_dir: Path) -> list[Path]:
    folder = out_dir / "failures"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in result.failures:
        path = folder / f"{f['name']}.yaml"
        path.write_text(f"# {f['repro']}  (from {out_dir}, commit {f['commit']})\n" + f["incident"])
        load_incident(path)  # what was written is what `sortie simulate FILE` reads
        paths.append(path)
    return paths
