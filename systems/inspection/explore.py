"""`sortie explore --system inspection`: random deployments and fault schedules of the pipeline, each drawn from its
run seed (swarm testing: most runs enable only a few kinds of fault) and checked by V1-V28; a failure is shrunk by the
generic loop (scenarios.explore.shrink) with this system's smaller workloads.

A run draws a fleet (devices, slots, workers joining at once or later, IS nodes), a short WARMING, and faults among
the motifs the pipeline must survive: a worker killed (at a random moment, or right after a commit: the commit->ack
window) and restarted later; a heartbeat stalled through DEAD; a worker stopped in the middle of a batch past DEAD; a
database outage across commit->ack; a broker outage, with an IS node killed around its outbox and publish; the leader
stopped; a slot unbound; full queues; a drain; in a quarter of the runs, a reshard (TOTAL_SLOTS grown, its map in
force after a notice); and in a third, the leader's lease notices lost for a window (Redis: INV-14) or never sent,
under whatever else the run drew."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from typing import Any

from reference.inspection import coverage
from scenarios.explore.shrink import fewer, plainer, shorter_window
from scenarios.scenario import FaultStep, Scenario
from scenarios.systems import ExploreSpec
from systems.inspection.checkers import INVARIANTS
from systems.inspection.sim import InspectionSpec

SETTLE_S = 400.0  # what an explored run is given after its last fault heals


def _w(rng: random.Random, spec: InspectionSpec) -> str:
    return f"worker-{rng.randint(1, spec.workers)}"


def _at(rng: random.Random, spec: InspectionSpec) -> float:
    return round(rng.uniform(30.0, spec.window_s), 1)


def _kill(rng: random.Random, spec: InspectionSpec) -> FaultStep:
    return FaultStep(_at(rng, spec), "worker-kill", None, {"worker": _w(rng, spec),
                                                           "restart_after_s": rng.choice((5.0, 20.0, 60.0, 90.0))})


def _kill_after_commit(rng: random.Random, spec: InspectionSpec) -> FaultStep:
    return FaultStep(_at(rng, spec), "crash-point", None, {"role": "worker", "effect": "batch.commit",
                                                           "when": "after", "action": "kill", "count": 1})


def _stall(rng: random.Random, spec: InspectionSpec) -> FaultStep:
    return FaultStep(_at(rng, spec), "heartbeat-stall", round(rng.uniform(10.0, 60.0), 1), {"worker": _w(rng, spec)})


def _pause(rng: random.Random, spec: InspectionSpec) -> FaultStep:
    return FaultStep(_at(rng, spec), "worker-pause", None, {"worker": _w(rng, spec),
                                                            "at": rng.choice(("batch.commit", "amqp.ack")),
                                                            "seconds": round(rng.uniform(5.0, 120.0), 1)})


def _db(rng: random.Random, spec: InspectionSpec) -> FaultStep:
    return FaultStep(_at(rng, spec), "db-outage", round(rng.uniform(3.0, 60.0), 1))


def _broker(rng: random.Random, spec: InspectionSpec) -> FaultStep:
    return FaultStep(_at(rng, spec), "broker-outage", round(rng.uniform(3.0, 60.0), 1))


def _probe(rng: random.Random, spec: InspectionSpec) -> FaultStep:
    return FaultStep(_at(rng, spec), "crash-point", None, {
        "role": "probe", "effect": rng.choice(("outbox.append", "amqp.publish", "outbox.confirm")),
        "when": rng.choice(("before", "after")), "action": "kill", "count": rng.randint(1, 2)})


def _leader(rng: random.Random, spec: InspectionSpec) -> FaultStep:
    return FaultStep(_at(rng, spec), "leader-pause", round(rng.uniform(5.0, 45.0), 1))


def _unbound(rng: random.Random, spec: InspectionSpec) -> FaultStep:
    return FaultStep(_at(rng, spec), "queue-unbound", round(rng.uniform(5.0, 30.0), 1),
                     {"slot": rng.randrange(spec.total_slots)})


def _full(rng: random.Random, spec: InspectionSpec) -> FaultStep:
    return FaultStep(_at(rng, spec), "queue-limit", round(rng.uniform(10.0, 60.0), 1),
                     {"max_length": rng.randint(1, 3)})


DRAWS = {"worker-kill": _kill, "kill-after-commit": _kill_after_commit, "heartbeat-stall": _stall,
         "worker-pause": _pause, "db-outage": _db, "broker-outage": _broker, "probe-kill": _probe,
         "leader-pause": _leader, "queue-unbound": _unbound, "queue-limit": _full}


def _draw_workload(rng: random.Random) -> tuple[InspectionSpec, dict[str, Any]]:
    workers = rng.choice((2, 3, 3))
    late = rng.random() < 0.3
    window = round(rng.uniform(60.0, 150.0), 1)
    spec = InspectionSpec(
        devices=rng.choice((6, 10, 16)), total_slots=rng.choice((3, 4, 6)), workers=workers,
        worker_starts=tuple([0.0] * (workers - 1) + [round(rng.uniform(20.0, window), 1)]) if late else (),
        probes=rng.choice((1, 2)), window_s=window, critical_ratio=rng.choice((0.0, 0.25, 0.5)),
        drain_worker="worker-1" if rng.random() < 0.1 else "", drain_at_s=round(rng.uniform(30.0, window), 1))
    policy = {"warming_s": rng.choice((6.0, 10.0, 20.0)), "cycle_s": rng.choice((5.0, 10.0))}
    return spec, policy


def _draw_reshard(run_seed: int, spec: InspectionSpec, policy: dict[str, Any]
                  ) -> tuple[InspectionSpec, dict[str, Any]]:
    """A quarter of the runs reshard (§3.4: TOTAL_SLOTS grown by one to three, the new map in force after a notice
    of 0-30 s), from their own generator: every other draw stays what it was without it."""
    rng = random.Random(f"explore-inspection-reshard:{run_seed}")
    if rng.random() >= 0.25:
        return spec, policy
    spec = dataclasses.replace(spec, reshard_to=spec.total_slots + rng.randint(1, 3),
                               reshard_at_s=round(rng.uniform(20.0, spec.window_s), 1))
    return spec, {**policy, "reshard_notice_s": rng.choice((0.0, 10.0, 30.0)),
                  "reshard_grace_s": rng.choice((10.0, 30.0))}


def _draw_notices(run_seed: int, spec: InspectionSpec, steps: list[FaultStep], policy: dict[str, Any]
                  ) -> tuple[list[FaultStep], dict[str, Any]]:
    """A sixth of the runs lose the leader's lease notices for a window, a sixth send none (§4.1, INV-14: the
    database decides, a notice only wakes a worker sooner), from their own generator: every other draw stays."""
    rng = random.Random(f"explore-inspection-notices:{run_seed}")
    draw = rng.random()
    if draw < 1 / 6:
        at = round(rng.uniform(0.0, spec.window_s), 1)
        lost = FaultStep(at=at, fault="notice-loss", params={}, duration=round(rng.uniform(10.0, 200.0), 1))
        return sorted([*steps, lost], key=lambda s: (s.at, s.fault)), policy
    if draw < 2 / 6:
        return steps, {**policy, "lease_notices": 0}
    return steps, policy


def draw_case(run_seed: int) -> Scenario:
    rng = random.Random(f"explore-inspection:{run_seed}")
    spec, policy = _draw_workload(rng)
    kinds = rng.sample(sorted(DRAWS), rng.choices((0, 1, 2, 3), weights=(5, 40, 40, 15))[0])
    steps = sorted((DRAWS[k](rng, spec) for k in kinds), key=lambda s: (s.at, s.fault))
    spec, policy = _draw_reshard(run_seed, spec, policy)
    steps, policy = _draw_notices(run_seed, spec, steps, policy)
    return case(f"X{run_seed}", spec, tuple(steps), policy)


def case(case_id: str, spec: InspectionSpec, faults: tuple[FaultStep, ...], policy: dict[str, Any]) -> Scenario:
    kinds = sorted({f.fault for f in faults})
    return Scenario(id=case_id, slug="explored", title=f"explored: {', '.join(kinds) or 'no faults'}",
                    workload=spec, faults=faults, recovery_bound_s=SETTLE_S, exercised=_explored, shells=("sim",),
                    invariants=INVARIANTS.ids, policy=dict(policy), system="inspection")


def _explored(history: object, state: object) -> str | None:
    """An explored run has no expectation of its own: its invariants are the check."""
    return None


def rebuild(s: Scenario, **changes: Any) -> Scenario:
    return case(s.id, changes.get("workload", s.workload), changes.get("faults", s.faults), s.policy)


def workload_steps(w: InspectionSpec) -> Iterator[tuple[str, Any]]:
    """Smaller: fewer devices, a shorter window, one IS node, no drain, workers all from the start, no reshard."""
    yield from fewer(w, "devices")
    yield from shorter_window(w)
    yield from plainer(w, (("probes", 1), ("drain_worker", ""), ("worker_starts", ()), ("critical_ratio", 0.0),
                           ("reshard_to", 0)))


EXPLORE = ExploreSpec(draw=draw_case, workload_steps=workload_steps, rebuild=rebuild,
                      users=lambda w: w.devices, unit="devices", targets=coverage.COVERAGE.targets,
                      counting=coverage.COVERAGE.counting)

__all__ = ["DRAWS", "EXPLORE", "draw_case"]
