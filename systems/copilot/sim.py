"""The Copilot in the simulation shell: its schema and outbox trigger on the interleaving database, the broker,
platform, object store and cache models (scenarios.sim.world), the reference's workers as many as the stack runs
(reference.copilot.topology), the fleet, the simulated users, and its invariants I1-I20 (scenarios.checkers)."""

from __future__ import annotations

from typing import Any

from reference.copilot.policy import Policy
from reference.copilot.services.consumer import DISPATCHER, REPORT_WORKER, consumer_loop
from reference.copilot.services.outbox import publisher_loop
from reference.copilot.services.reconcile import reconciler_loop
from reference.copilot.settings import policy_with
from reference.copilot.topology import Topology
from scenarios.checkers import CheckContext, Verdict, check_all
from scenarios.scenario import Scenario
from scenarios.sim.world import SimWorld
from scenarios.state import FinalState, unsettled_rows
from scenarios.workload import SimUsers, WorkloadSpec, seed_fleet
from simulator.model import PlatformConfig


def start_reference(world: SimWorld, policy: Policy, topology: Topology | None = None) -> None:
    """The reference's workers, as many as the real stack runs (reference.copilot.topology), supervised: a killed
    worker restarts after a pause, like systemd."""
    loops = {"publisher": lambda: publisher_loop(policy), "dispatcher": lambda: consumer_loop(DISPATCHER, policy),
             "report-worker": lambda: consumer_loop(REPORT_WORKER, policy),
             "reconciler": lambda: reconciler_loop(policy)}
    for name, role in (topology or Topology()).workers():
        world.supervise(name, loops[role])
    world.env.process(world.event_pump())


def unsettled(world: SimWorld) -> int:
    """Rows still to settle, and messages still in the broker (a paused consumer has not taken them yet: ending
    the run then would blame the consumer for an event it was about to take; found by `sortie explore`)."""
    with world.sessions() as s:
        rows = unsettled_rows(s)
    return rows + world.broker.depth()


class CopilotDeployment:
    def __init__(self, scenario: Scenario, seed: int, *, policy: Policy | None = None,
                 platform: PlatformConfig | None = None, workload: WorkloadSpec | None = None) -> None:
        self.policy = policy_with(scenario.policy, policy or Policy())
        self.spec = workload or scenario.workload
        self.seed = seed
        self.world = SimWorld(seed, policy=self.policy,
                              platform=platform or PlatformConfig(flight_median_s=scenario.flight_median_s))
        self.users: SimUsers | None = None

    def start(self) -> None:
        world = self.world
        fleet = world.transact(lambda tx: seed_fleet(tx, self.spec))
        for devices in fleet.devices_by_area.values():
            for did in devices:
                world.platform.add_device(did)
        start_reference(world, self.policy)
        self.users = SimUsers(world, self.spec, fleet, self.seed)
        self.users.start()

    def workload_done(self) -> bool:
        return self.users is not None and self.users.done and not self.users.active

    def unsettled(self) -> int:
        return unsettled(self.world)

    def busy_until(self) -> float | None:
        """While flights are in the air, and until the last one ended (in the history's clock)."""
        model, world = self.world.platform, self.world
        if model.flights_in_air:
            return float("inf")
        return (model.last_flight_end or 0.0) - (world.platform_now() - world.env.now)

    def final_state(self, heal_time: float) -> FinalState:
        return self.world.final_state(heal_time=heal_time)

    def verdicts(self, state: Any, scenario: Scenario) -> list[Verdict]:
        return check_all(CheckContext(self.world.history, state, scenario.recovery_bound_s, self.policy,
                                      fast_path_modelled=True), list(scenario.invariants))

    def stats(self) -> dict[str, Any]:
        world = self.world
        return {**world.stats, "restarts": {n: s.restarts for n, s in world.supervised.items() if s.restarts},
                "broker_published": world.broker.published, "broker_delivered": world.broker.delivered,
                "objects": len(world.store.objects), "db": dict(world.db.stats), "cache": dict(world.cache.stats)}
