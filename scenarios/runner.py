"""Runs a scenario of any system in the simulation shell and checks it (the system's deployment, scenarios.systems,
provides what differs). The CLI and pytest both call this."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import simpy

from chaos.faults import registry
from chaos.simulated import apply_fault
from harness.history import History
from scenarios.scenario import Scenario
from scenarios.systems import Deployment, load_system
from scenarios.timeline import fault_timeline
from scenarios.verdicts import HELD, UNCHECKED, VIOLATED, Verdict, unexercised_kind


@dataclass
class ScenarioResult:
    id: str
    slug: str
    title: str
    seed: int
    passed: bool
    verdicts: list[Verdict]
    exercised: str | None  # None: the fault fired; else why the run proves nothing
    history_digest: str
    counts: dict[str, int]
    virtual_s: float
    wall_s: float
    history: History
    state: Any  # the system's final state (Deployment.final_state)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def outcome(self) -> str:
        """passed | invariant violated | fault did not fire | expectation not met (the first that applies)."""
        if any(v.status == VIOLATED for v in self.verdicts):
            return "invariant violated"
        return unexercised_kind(self.exercised) or "passed"

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id, "slug": self.slug, "title": self.title, "seed": self.seed, "passed": self.passed,
            "outcome": self.outcome, "exercised": self.exercised is None, "not_exercised_reason": self.exercised,
            "not_exercised_kind": unexercised_kind(self.exercised),
            "invariants": {v.invariant: v.status for v in self.verdicts},
            "verdicts": [v.as_json() for v in self.verdicts],
            "history_digest": self.history_digest, "operations": len(self.history.ops),
            "task_counts": self.counts, "virtual_seconds": round(self.virtual_s, 3),
            "wall_seconds": round(self.wall_s, 3), "stats": self.stats,
        }


def run_until_quiet(dep: Deployment, heal: float, bound_s: float, step_s: float = 10.0,
                    cap_s: float = 6 * 3600.0, timeline: simpy.Process | None = None) -> None:
    """Run until the workload is done, the fault ``timeline`` has played out (a one-shot step at the heal time, such
    as R11's re-drive, would otherwise be cut off by a run that settled before it) and nothing is left to settle.
    A run that never settles keeps going until nothing outside the reference runs any more (Deployment.busy_until)
    and the recovery bound has passed after that, so the checkers see what is stuck; ``cap_s`` stops a run that
    never quiets."""
    env = dep.world.env
    while env.now < cap_s:
        env.run(until=env.now + step_s)
        if not dep.workload_done() or env.now < heal or (timeline is not None and not timeline.triggered):
            continue
        if dep.unsettled() == 0:
            return
        busy = dep.busy_until()
        if busy is not None and busy == float("inf"):
            continue
        if env.now > max(heal, busy or 0.0) + bound_s + 60.0:
            return


def simulate(scenario: Scenario, seed: int, *, settle_step_s: float = 10.0, inject_bug: str | None = None,
             **overrides: Any) -> ScenarioResult:
    """One scenario of its system (scenario.system) in simulation: deploy, play the fault timeline and the
    workload, wait for quiet, read the end, check every invariant and the scenario's expectations. ``overrides``
    go to the system's deployment (the Copilot's ``policy``, ``platform``, ``workload``)."""
    system = load_system(scenario.system)
    if inject_bug:  # the reference with one known defect switched on: expected to fail
        with system.injected(inject_bug):
            result = simulate(scenario, seed, settle_step_s=settle_step_s, **overrides)
        result.stats["injected_bug"] = inject_bug
        return result
    wall0 = time.perf_counter()
    dep = system.deploy(scenario, seed, **overrides)
    world = dep.world
    faults = registry(scenario.system)
    timeline = world.env.process(fault_timeline(
        world.env, scenario.faults, lambda fault, params, on: apply_fault(faults, world, fault, params, on=on),
        world.history, wait_for_stops=True))
    dep.start()
    heal = scenario.heal_time()
    run_until_quiet(dep, heal, scenario.recovery_bound_s, settle_step_s, timeline=timeline)
    state = dep.final_state(heal)
    world.close()
    verdicts = dep.verdicts(state, scenario)
    exercised = scenario.exercised(world.history, state)
    passed = exercised is None and all(v.status in (HELD, UNCHECKED) for v in verdicts)
    return ScenarioResult(
        id=scenario.id, slug=scenario.slug, title=scenario.title, seed=seed, passed=passed, verdicts=verdicts,
        exercised=exercised, history_digest=world.history.digest(), counts=state.counts(), virtual_s=world.env.now,
        wall_s=time.perf_counter() - wall0, history=world.history, state=state, stats=dep.stats(),
    )


def _simulate_ref(job: tuple[str, str, int, str | None]) -> ScenarioResult:
    from scenarios.catalogue import resolve

    system, ref, seed, bug = job
    return simulate(resolve(ref, system), seed, inject_bug=bug)


def simulate_many(scenarios: list[Scenario], seed: int, *, inject_bug: str | None = None, jobs: int = 1,
                  on_result: Any = None, fail_fast: bool = False) -> list[ScenarioResult]:
    """Several scenarios, in ``jobs`` processes (each run is deterministic on its own, so the results do not
    depend on how they are spread). Results come back in the order asked; ``on_result`` sees each as it ends.
    ``fail_fast``: stop at the first that did not pass (the others still running are stopped; the results are
    then those that ended, in the order asked)."""
    if jobs <= 1 or len(scenarios) <= 1:
        out = []
        for scn in scenarios:
            out.append(simulate(scn, seed, inject_bug=inject_bug))
            if on_result:
                on_result(out[-1])
            if fail_fast and not out[-1].passed:
                break
        return out
    import multiprocessing

    refs = [(s.system, s.id if _in_catalogue(s) else s.source, seed, inject_bug) for s in scenarios]
    by_ref: dict[int, ScenarioResult] = {}
    with multiprocessing.get_context("fork").Pool(min(jobs, len(refs))) as pool:  # leaving it terminates the rest
        for i, result in pool.imap_unordered(_indexed, list(enumerate(refs))):
            by_ref[i] = result
            if on_result:
                on_result(result)
            if fail_fast and not result.passed:
                break
    return [by_ref[i] for i in range(len(refs)) if i in by_ref]


def _indexed(item: tuple[int, tuple[str, str, int, str | None]]) -> tuple[int, ScenarioResult]:
    return item[0], _simulate_ref(item[1])


def _in_catalogue(s: Scenario) -> bool:
    from scenarios.catalogue import load_catalogue

    return load_catalogue(s.system).get(s.id) is s
