"""Runs a scenario in the simulation shell and checks it. The CLI and pytest both call this."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from chaos.simulated import apply_fault
from harness.history import History
from reference import bugs
from reference.policy import Policy
from reference.services.consumer import DISPATCHER, REPORT_WORKER, consumer_loop
from reference.services.outbox import publisher_loop
from reference.services.reconcile import reconciler_loop
from reference.settings import policy_with
from reference.topology import Topology
from scenarios.checkers import HELD, UNCHECKED, VIOLATED, CheckContext, Verdict, check_all
from scenarios.expectations import unexercised_kind
from scenarios.scenario import Scenario
from scenarios.sim.world import SimWorld
from scenarios.state import FinalState, unsettled_rows
from scenarios.timeline import fault_timeline
from scenarios.workload import SimUsers, WorkloadSpec, seed_fleet
from simulator.model import PlatformConfig


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
    state: FinalState
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


def start_reference(world: SimWorld, policy: Policy, topology: Topology | None = None) -> None:
    """The reference's workers, as many as the real stack runs (reference.topology), supervised: a killed
    worker restarts after a pause, like systemd."""
    loops = {"publisher": lambda: publisher_loop(policy), "dispatcher": lambda: consumer_loop(DISPATCHER, policy),
             "report-worker": lambda: consumer_loop(REPORT_WORKER, policy),
             "reconciler": lambda: reconciler_loop(policy)}
    for name, role in (topology or Topology()).workers():
        world.supervise(name, loops[role])
    world.env.process(world.event_pump())


def _unsettled(world: SimWorld) -> int:
    with world.sessions() as s:
        rows = unsettled_rows(s)
    # Messages still in the broker (a paused consumer has not taken them yet) are not settled either: ending the
    # run then would blame the consumer for an event it was about to take (found by `sortie explore`).
    return rows + world.broker.depth()


def run_until_quiet(world: SimWorld, users: SimUsers, heal: float, bound_s: float, step_s: float = 10.0,
                    cap_s: float = 6 * 3600.0) -> None:
    """Run until the workload is done, faults have healed and nothing is left to settle. A task that
    never settles keeps the run going until every flight has ended and the recovery bound has passed
    after that, so the checkers see it stuck; ``cap_s`` stops a run that never quiets."""
    env, model = world.env, world.platform
    while env.now < cap_s:
        env.run(until=env.now + step_s)
        if not users.done or users.active or env.now < heal:
            continue
        if _unsettled(world) == 0:
            return
        last_end = (model.last_flight_end or 0.0) - (world.platform_now() - env.now)
        if model.flights_in_air == 0 and env.now > max(heal, last_end) + bound_s + 60.0:
            return


def simulate(
    scenario: Scenario, seed: int, *, policy: Policy | None = None, platform: PlatformConfig | None = None,
    workload: WorkloadSpec | None = None, settle_step_s: float = 10.0,
    inject_bug: str | None = None,
) -> ScenarioResult:
    if inject_bug:  # the reference with one known defect switched on (reference.bugs): expected to fail
        with bugs.injected(inject_bug):
            result = simulate(scenario, seed, policy=policy, platform=platform, workload=workload,
                              settle_step_s=settle_step_s)
        result.stats["injected_bug"] = inject_bug
        return result
    wall0 = time.perf_counter()
    policy = policy_with(scenario.policy, policy or Policy())
    spec = workload or scenario.workload
    world = SimWorld(seed, policy=policy,
                     platform=platform or PlatformConfig(flight_median_s=scenario.flight_median_s))
    fleet = world.transact(lambda tx: seed_fleet(tx, spec))
    for devices in fleet.devices_by_area.values():
        for did in devices:
            world.platform.add_device(did)
    start_reference(world, policy)
    world.env.process(fault_timeline(world.env, scenario.faults,
                                     lambda fault, params, on: apply_fault(world, fault, params, on=on), world.history))
    users = SimUsers(world, spec, fleet, seed)
    users.start()
    heal = scenario.heal_time()
    run_until_quiet(world, users, heal, scenario.recovery_bound_s, settle_step_s)
    state = world.final_state(heal_time=heal)
    world.close()
    verdicts = check_all(CheckContext(world.history, state, scenario.recovery_bound_s, policy),
                         list(scenario.invariants))
    exercised = scenario.exercised(world.history, state)
    passed = exercised is None and all(v.status in (HELD, UNCHECKED) for v in verdicts)
    return ScenarioResult(
        id=scenario.id, slug=scenario.slug, title=scenario.title, seed=seed, passed=passed, verdicts=verdicts,
        exercised=exercised, history_digest=world.history.digest(), counts=state.counts(), virtual_s=world.env.now,
        wall_s=time.perf_counter() - wall0, history=world.history, state=state,
        stats={**world.stats, "restarts": {n: s.restarts for n, s in world.supervised.items() if s.restarts},
               "broker_published": world.broker.published, "broker_delivered": world.broker.delivered,
               "objects": len(world.store.objects), "db": dict(world.db.stats),
               "cache": dict(world.cache.stats)},
    )


def _simulate_ref(job: tuple[str, int, str | None]) -> ScenarioResult:
    from scenarios.catalogue import resolve

    ref, seed, bug = job
    return simulate(resolve(ref), seed, inject_bug=bug)


def simulate_many(scenarios: list[Scenario], seed: int, *, inject_bug: str | None = None, jobs: int = 1,
                  on_result: Any = None) -> list[ScenarioResult]:
    """Several scenarios, in ``jobs`` processes (each run is deterministic on its own, so the results do not
    depend on how they are spread). Results come back in the order asked; ``on_result`` sees each as it ends."""
    if jobs <= 1 or len(scenarios) <= 1:
        out = []
        for scn in scenarios:
            out.append(simulate(scn, seed, inject_bug=inject_bug))
            if on_result:
                on_result(out[-1])
        return out
    import multiprocessing

    refs = [(s.id if _in_catalogue(s) else s.source, seed, inject_bug) for s in scenarios]
    by_ref: dict[int, ScenarioResult] = {}
    with multiprocessing.get_context("fork").Pool(min(jobs, len(refs))) as pool:
        for i, result in pool.imap_unordered(_indexed, list(enumerate(refs))):
            by_ref[i] = result
            if on_result:
                on_result(result)
    return [by_ref[i] for i in range(len(refs))]


def _indexed(item: tuple[int, tuple[str, int, str | None]]) -> tuple[int, ScenarioResult]:
    return item[0], _simulate_ref(item[1])


def _in_catalogue(s: Scenario) -> bool:
    from scenarios.catalogue import CATALOGUE

    return CATALOGUE.get(s.id) is s
