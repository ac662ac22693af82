"""`sortie explore --system jobs`: random deployments and fault schedules of the job system, each drawn from its run
seed (swarm testing: most runs enable only a few kinds of fault) and checked by J1-J11; a failure is shrunk by the
same loop as the Copilot's (scenarios.explore.shrink) with this system's smaller workloads.

A run draws: a workload (singles and missions, their sizes and failure modes, double clicks), the pool's settings
(reclaim threshold and period, heartbeat, MaxRetry, batch), and faults among: kills and SIGSTOPs of a pool
instance's worker around any of its steps (claim, execute, the failure's read, the outcome, the heartbeat), a
transaction of a worker held before its write, database outages and latency; and, in a quarter of the runs, drawn
apart so that the other draws stay as they were, an instance drained (SIGTERM) once or twice. The coverage targets
are the job system's own (reference.jobs.coverage): a lost claim race, a superseded outcome, a reclaim, a key
collision, a cascade, a time edge, a fault between a claim and its outcome."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterator
from typing import Any

from reference.jobs import coverage
from reference.jobs.pool import PoolConfig
from reference.jobs.repo import backoff_s
from scenarios.explore.shrink import fewer, plainer, shorter_window
from scenarios.scenario import FaultStep, Scenario
from scenarios.systems import ExploreSpec
from systems.jobs.checkers import INVARIANTS
from systems.jobs.sim import INSTANCES, MISSION_STEPS, JobsSpec

# The steps of a pool worker a crash point can land around (reference.jobs.pool's effect names).
WORKER_STEPS = ("job.claimable", "job.claim", "execute", "job.fail.read", "job.fail", "job.done", "job.heartbeat")
HELD = ("job.claim", "job.done", "job.fail", "job.heartbeat", "job.reclaim")  # transactions that read, then write
RECOVERY_BOUND_S = 3600.0  # the least an explored run is given to settle
SETTLE_MARGIN_S = 600.0


def _draw_workload(rng: random.Random) -> tuple[JobsSpec, dict[str, float]]:
    missions = rng.choice((0, 0, 1, 2, 4))
    spec = JobsSpec(
        jobs=rng.randint(0 if missions else 2, 30), window_s=round(rng.uniform(5.0, 90.0), 1),
        workers_per_instance=rng.choice((1, 2, 2, 3)), same_key_ratio=rng.choice((0.0, 0.1, 0.5)),
        work_median_s=rng.choice((2.0, 5.0, 20.0, 100.0)), work_sigma=rng.choice((0.0, 0.5)),
        fail_rate=rng.choice((0.0, 0.0, 0.1, 0.3)), failing=rng.choice((0, 0, 1)), hanging=rng.choice((0, 0, 0, 1)),
        crashing=rng.choice((0, 0, 0, 1)), flaky=rng.choice((0, 0, 2)), poison=rng.choice((0, 0, 1)),
        unregistered=rng.choice((0, 0, 1)), missions=missions,
        failing_steps=rng.choice(((), (), ("inspect-1",), ("survey",))))
    stale = rng.choice((30.0, 60.0, 120.0))
    policy = {"stale_after_s": stale, "reclaim_every_s": rng.choice((5.0, 10.0)),
              "heartbeat_s": round(stale / rng.choice((3.0, 4.0)), 1), "max_retry": rng.choice((2, 3, 6)),
              "claim_batch": rng.choice((1, 3, 10)), "handler_timeout_s": rng.choice((120.0, 300.0))}
    return spec, policy


def _crash(rng: random.Random, w: float) -> FaultStep:
    action = rng.choice(("kill", "kill", "stop"))
    params: dict[str, Any] = {"role": rng.choice(INSTANCES), "effect": rng.choice(WORKER_STEPS),
                              "when": rng.choice(("before", "after")), "action": action, "count": rng.randint(1, 3)}
    if action == "stop":
        params["seconds"] = round(rng.uniform(20.0, 250.0), 1)
    return FaultStep(round(rng.uniform(0.0, w), 1), "crash-point", None, params)


def _hold(rng: random.Random, w: float) -> FaultStep:
    return FaultStep(round(rng.uniform(0.0, w), 1), "hold-transaction", None, {
        "role": rng.choice(INSTANCES), "tx": rng.choice(HELD), "seconds": round(rng.uniform(1.0, 40.0), 1),
        "count": rng.randint(1, 3)})


def _outage(rng: random.Random, w: float) -> FaultStep:
    return FaultStep(round(rng.uniform(0.0, w + 60.0), 1), "db-outage", round(rng.uniform(2.0, 60.0), 1))


def _latency(rng: random.Random, w: float) -> FaultStep:
    return FaultStep(round(rng.uniform(0.0, w), 1), "db-latency", round(rng.uniform(10.0, 120.0), 1),
                     {"ms": rng.choice((50, 200, 1000))})


DRAWS = {"crash-point": _crash, "hold-transaction": _hold, "db-outage": _outage, "db-latency": _latency}
DRAIN_SHARE = 0.25  # of the runs that also drain an instance (J23)


def _drains(run_seed: int, w: float) -> list[FaultStep]:
    """The drains of a run, from their own generator: adding them left every run's other draws unchanged."""
    rng = random.Random(f"explore-jobs-drain:{run_seed}")
    if rng.random() >= DRAIN_SHARE:
        return []
    return [FaultStep(round(rng.uniform(0.0, w + 60.0), 1), "drain", None, {"instance": rng.choice(INSTANCES)})
            for _ in range(rng.choice((1, 2)))]


def draw_case(run_seed: int) -> Scenario:
    rng = random.Random(f"explore-jobs:{run_seed}")
    spec, policy = _draw_workload(rng)
    kinds = rng.sample(sorted(DRAWS), rng.choices((0, 1, 2, 3), weights=(10, 40, 35, 15))[0])
    steps = [DRAWS[k](rng, spec.window_s) for k in kinds for _ in range(rng.choice((1, 1, 2)))]
    steps += _drains(run_seed, spec.window_s)
    steps.sort(key=lambda s: (s.at, s.fault))
    return case(f"X{run_seed}", spec, tuple(steps), policy)


def recovery_bound_s(spec: JobsSpec, faults: tuple[FaultStep, ...], policy: dict[str, Any]) -> float:
    """How long the fixed variant may need to settle this case: the work spread over the pool's workers, one job
    spending every attempt (each a handler timeout or a reclaim, then its backoff), the faults, and a margin. A
    fixed bound was too short for a hanging job queued behind long missions (found by explore: J6 on the fixed
    variant, a job still running, with a live claim, when the bound ran out)."""
    policy = {**dataclasses.asdict(PoolConfig()), **policy}  # the pool's defaults where the case sets none
    attempts = int(policy["max_retry"]) + 2  # the retries, the first attempt, a reclaim counted as one
    per_attempt = max(float(policy["handler_timeout_s"]), float(policy["stale_after_s"]) + float(
        policy["reclaim_every_s"]))
    jobs = spec.jobs + len(MISSION_STEPS) * spec.missions
    work_s = spec.work_median_s * math.exp(2.0 * spec.work_sigma) * (1.0 + spec.fail_rate * attempts)
    spread = jobs * work_s / max(1, len(INSTANCES) * spec.workers_per_instance)
    chain = attempts * per_attempt + sum(backoff_s(k) for k in range(attempts))
    faulted = sum((f.duration or 0.0) + float(f.params.get("seconds", 0.0)) * f.params.get("count", 1)
                  for f in faults)
    return round(max(RECOVERY_BOUND_S, spec.window_s + spread + chain + faulted + SETTLE_MARGIN_S), 1)


def case(case_id: str, spec: JobsSpec, faults: tuple[FaultStep, ...], policy: dict[str, Any]) -> Scenario:
    kinds = sorted({f.fault for f in faults})
    return Scenario(id=case_id, slug="explored", title=f"explored: {', '.join(kinds) or 'no faults'}",
                    workload=spec, faults=faults, recovery_bound_s=recovery_bound_s(spec, faults, policy),
                    exercised=_explored, shells=("sim",), invariants=INVARIANTS.ids, policy=dict(policy),
                    system="jobs")


def _explored(history: object, state: object) -> str | None:
    """An explored run has no expectation of its own: its invariants are the check."""
    return None


def rebuild(s: Scenario, **changes: Any) -> Scenario:
    return case(s.id, changes.get("workload", s.workload), changes.get("faults", s.faults), s.policy)


def workload_steps(w: JobsSpec) -> Iterator[tuple[str, Any]]:
    """Smaller: fewer jobs and missions, a shorter window, fewer workers, no failure mode the case may not need."""
    yield from fewer(w, "jobs")
    if w.missions > 1:
        yield "missions", max(1, w.missions // 2)
    yield from shorter_window(w)
    yield from plainer(w, (("missions", 0), ("failing", 0), ("hanging", 0), ("crashing", 0), ("flaky", 0),
                           ("poison", 0), ("unregistered", 0), ("fail_rate", 0.0), ("same_key_ratio", 0.0),
                           ("failing_steps", ()), ("workers_per_instance", 1), ("work_sigma", 0.0)))


EXPLORE = ExploreSpec(draw=draw_case, workload_steps=workload_steps, rebuild=rebuild,
                      users=lambda w: w.jobs + len(MISSION_STEPS) * w.missions, unit="jobs",
                      targets=coverage.COVERAGE.targets,
                      counting=coverage.COVERAGE.counting)

__all__ = ["EXPLORE", "draw_case"]
