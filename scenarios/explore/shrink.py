"""Shrinking a failing explored run to a small one that still violates the same invariant.

A greedy delta-debugging loop over the schedule's own structure (Zeller's ddmin over a handful of faults: each
fault alone first, then one dropped at a time): drop faults, halve a window or move it earlier, simplify a fault's
parameters, halve the workload, drop a kind of user. The first change that still fails is kept and the loop
starts again; it ends when no change fails, or at the budget. The run seed stays fixed.

Candidates are judged in batches (one per worker), and the first failing one in the candidates' order is kept,
so the result is the one a one-at-a-time shrinker reaches, whatever the number of workers. The budget is counted
in those one-at-a-time steps, so it is reproducible too; the wall-clock cap is only a safety net, and when it is
what stopped the shrink, the result says so.

Why not Hypothesis's shrinker: it shrinks the byte stream a strategy drew from, so it would need the schedule
re-expressed as a strategy replayed from that stream, and its passes are tuned for inputs that cost
microseconds, not simulated runs that cost a second; the reductions here are the ones an engineer would make
by hand, each one a readable step (fewer faults, shorter windows, fewer users), and the loop is bounded."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from scenarios.scenario import FaultStep, Scenario
from scenarios.systems import ExploreSpec, load_system

Judge = Callable[[list[Scenario]], list[bool]]  # which of these candidates still fail (run in parallel if it can)

FIXPOINT, STEP_BUDGET, TIME_BUDGET = "no smaller case fails", "step budget", "time budget"


@dataclass(frozen=True)
class Shrunk:
    case: Scenario
    steps: int  # candidates a one-at-a-time shrinker would have run to get here (what the budget counts)
    runs: int  # candidates actually run (a batch runs past its first failing one)
    stopped: str  # FIXPOINT, STEP_BUDGET or TIME_BUDGET (only the last depends on the machine)


def _spec(s: Scenario) -> ExploreSpec:
    spec = load_system(s.system).explore
    assert spec is not None, f"the {s.system} system is not explored"
    return spec


def size(s: Scenario) -> tuple[int, int, float]:
    """What the shrinker makes smaller: faults, the workload's users, the schedule's total window."""
    return len(s.faults), _spec(s).users(s.workload), round(sum(f.duration or 0.0 for f in s.faults), 1)


def shrink(s: Scenario, judge: Judge, *, batch: int = 1, max_steps: int = 400, budget_s: float = 300.0) -> Shrunk:
    """The smallest case found that ``judge`` says still fails (a run violating the same invariant)."""
    deadline = time.monotonic() + budget_s
    steps = runs = 0
    candidates = _candidates(s)
    while True:
        if steps >= max_steps:
            return Shrunk(s, steps, runs, STEP_BUDGET)
        if time.monotonic() >= deadline:
            return Shrunk(s, steps, runs, TIME_BUDGET)
        chunk = list(itertools.islice(candidates, min(batch, max_steps - steps)))
        if not chunk:
            return Shrunk(s, steps, runs, FIXPOINT)
        verdicts = judge(chunk)
        runs += len(chunk)
        first = next((i for i, failed in enumerate(verdicts) if failed), None)
        if first is None:
            steps += len(chunk)
        else:
            steps += first + 1
            s = chunk[first]
            candidates = _candidates(s)


def _candidates(s: Scenario) -> Iterator[Scenario]:
    faults, w, spec = list(s.faults), s.workload, _spec(s)
    if len(faults) > 2:  # one fault alone (ddmin's first split, at its finest): the biggest step, tried first
        for f in faults:
            yield _with(s, faults=(f,))
    for i in range(len(faults)):  # fewer faults
        yield _with(s, faults=tuple(faults[:i] + faults[i + 1:]))
    for field, value in spec.workload_steps(w):  # fewer users and requests
        yield _with(s, workload=dataclasses.replace(w, **{field: value}))
    for i, f in enumerate(faults):  # shorter, earlier, simpler faults
        for smaller in _fault_steps(f):
            yield _with(s, faults=tuple(faults[:i] + [smaller] + faults[i + 1:]))


def fewer(w: Any, field: str) -> Iterator[tuple[str, Any]]:
    """A count, smaller: halved (the big step), then one less."""
    n = getattr(w, field)
    if n > 1:
        yield field, max(1, n // 2)
        if n // 2 != n - 1:
            yield field, n - 1


def shorter_window(w: Any) -> Iterator[tuple[str, Any]]:
    if w.window_s > 1.0:
        yield "window_s", max(1.0, round(w.window_s / 2, 1))


def plainer(w: Any, plain: tuple[tuple[str, Any], ...]) -> Iterator[tuple[str, Any]]:
    """Each field that is not at its plainest value, set to it."""
    for field, value in plain:
        if getattr(w, field) != value:
            yield field, value


def _fault_steps(f: FaultStep) -> Iterator[FaultStep]:
    if f.duration is not None and f.duration > 1.0:
        yield dataclasses.replace(f, duration=max(1.0, round(f.duration / 2, 1)))
    if f.at > 1.0:
        yield dataclasses.replace(f, at=round(f.at / 2, 1))
    p = f.params
    if int(p.get("count", 1)) > 1:
        yield dataclasses.replace(f, params={**p, "count": 1})
    if float(p.get("seconds", 0.0)) > 0.4:
        yield dataclasses.replace(f, params={**p, "seconds": round(float(p["seconds"]) / 2, 1)})
    for key in ("roles", "tables", "lose_event_kinds"):
        if isinstance(p.get(key), list) and len(p[key]) > 1:
            for item in p[key]:
                yield dataclasses.replace(f, params={**p, key: [x for x in p[key] if x != item]})
    if f.fault == "platform" and len(p) > 1:
        for key in sorted(p):
            yield dataclasses.replace(f, params={k: v for k, v in p.items() if k != key})


def _with(s: Scenario, **changes: Any) -> Scenario:
    return _spec(s).rebuild(s, **changes)
