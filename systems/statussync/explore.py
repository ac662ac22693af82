"""`sortie explore --system statussync`: random workloads and fault schedules of the status sync, each drawn from its
run seed (swarm testing: most runs enable a few kinds of fault), checked by S1-S15; a failure is shrunk by the
generic loop with this system's smaller workloads.

A run draws a workload (tasks, users, parallel steps, failing, flaky and reordered tasks, late workers, retried,
reused and forged reports, clients joining late, details opened, batchGet, a small history, a registry change) and
faults among: kills and SIGSTOPs of producers and relays around their steps, transactions held before their write,
database outages and errors inside a transaction, Centrifugo answering 503 or 429, Centrifugo restarting, deliveries
reordered, relays paused, clients' links cut. Its motifs are the coverage targets (reference.statussync.coverage):
a change between subscribe and snapshot, a relay stopped past its lease, a backlog beyond the history during a
disconnect, racing producers, an old attempt waking up, a heartbeat timeout racing completion."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from reference.statussync import coverage
from scenarios.explore.shrink import fewer, plainer, shorter_window
from scenarios.scenario import FaultStep, Scenario
from scenarios.systems import ExploreSpec
from systems.statussync.checkers import INVARIANTS
from systems.statussync.sim import SyncSpec

PRODUCER_STEPS = ("ledger.record", "event.report", "ledger.answer", "ledger.load")
RELAY_STEPS = ("outbox.claim", "publish", "outbox.published", "outbox.retry")


def _draw_workload(rng: random.Random) -> SyncSpec:
    tasks = rng.randint(1, 8)
    special = rng.sample(range(tasks), k=min(tasks, rng.choice((0, 1, 2, 3))))
    kinds = [rng.choice(("failing", "flaky", "reordered")) for _ in special]
    return SyncSpec(
        tasks=tasks, users=rng.choice((1, 2, 3)), window_s=round(rng.uniform(2.0, 40.0), 1),
        parallel=rng.random() < 0.4, progress=rng.choice((0, 1, 2, 4)), work_s=rng.choice((2.0, 6.0, 15.0)),
        failing=kinds.count("failing"), flaky=kinds.count("flaky"), reordered=kinds.count("reordered"),
        late_workers=rng.choice((0, 0, 1)), retries=rng.choice((0, 0, 2)), reuses=rng.choice((0, 0, 1)),
        forged=rng.choice((0, 0, 1)), details=rng.choice((0, 1, 3)), foreign_details=rng.choice((0, 0, 1)),
        join_spread_s=rng.choice((0.0, 0.0, 30.0)), batch_get_s=rng.choice((0.0, 0.0, 30.0)),
        history_size=rng.choice((5, 50)), history_ttl_s=rng.choice((60.0, 300.0)),
        step_timeout_s=rng.choice((60.0, 120.0)), stale_after_s=rng.choice((10.0, 20.0)),
        registry_change_at=rng.choice((-1.0, -1.0, 10.0)))


def _zombie(rng: random.Random, spec: SyncSpec) -> FaultStep:
    """A parser stopped past its step timeout (an old attempt waking up) or only past the stale threshold (a heartbeat
    timeout racing its completion)."""
    if rng.random() < 0.6:  # it wakes while the new attempt still works (within a step's work after it opened)
        seconds = spec.step_timeout_s + rng.uniform(2.0, max(3.0, spec.work_s))
    else:
        seconds = spec.stale_after_s + rng.uniform(3.0, 30.0)
    return FaultStep(round(rng.uniform(0.0, spec.window_s), 1), "crash-point", None, {
        "role": "parser", "effect": rng.choice(("ledger.answer", "ledger.record")), "when": "after",
        "action": "stop", "count": rng.randint(1, 2), "seconds": round(seconds, 1)})


def _answer_lost(rng: random.Random, spec: SyncSpec) -> FaultStep:
    """A producer killed after the service committed its event, before it recorded the answer (an API crash)."""
    return FaultStep(round(rng.uniform(0.0, spec.window_s), 1), "crash-point", None, {
        "role": "producer", "effect": rng.choice(("event.report", "ledger.answer")),
        "when": "after" if rng.random() < 0.5 else "before", "action": "kill", "count": rng.randint(1, 3)})


def _relay_after_publish(rng: random.Random, spec: SyncSpec) -> FaultStep:
    """A relay killed, or stopped past its lease, between a publish and its mark."""
    action = rng.choice(("kill", "stop"))
    params: dict[str, Any] = {"role": "relay", "effect": "publish", "when": "after", "action": action,
                              "count": rng.randint(1, 2)}
    if action == "stop":
        params["seconds"] = round(rng.uniform(5.0, 60.0), 1)
    return FaultStep(round(rng.uniform(0.0, spec.window_s), 1), "crash-point", None, params)


def _crash(rng: random.Random, w: float) -> FaultStep:
    relay = rng.random() < 0.4
    action = rng.choice(("kill", "kill", "stop"))
    params: dict[str, Any] = {"role": "relay" if relay else rng.choice(("producer", "parser")),
                              "effect": rng.choice(RELAY_STEPS if relay else PRODUCER_STEPS),
                              "when": rng.choice(("before", "after")), "action": action, "count": rng.randint(1, 3)}
    if action == "stop":
        params["seconds"] = round(rng.uniform(5.0, 150.0), 1)
    return FaultStep(round(rng.uniform(0.0, w), 1), "crash-point", None, params)


def _hold(rng: random.Random, w: float) -> FaultStep:
    return FaultStep(round(rng.uniform(0.0, w), 1), "hold-transaction", None, {
        "role": rng.choice(("relay", "producer", "health")),
        "tx": rng.choice(("outbox.claim", "event.report", "health.change", "outbox.published")),
        "seconds": round(rng.uniform(1.0, 40.0), 1), "count": rng.randint(1, 2)})


def _window(fault: str, lo: float, hi: float, params: dict[str, Any] | None = None) -> Any:
    def draw(rng: random.Random, w: float) -> FaultStep:
        return FaultStep(round(rng.uniform(0.0, w + 10.0), 1), fault, round(rng.uniform(lo, hi), 1), params or {})
    return draw


def _errors(rng: random.Random, w: float) -> FaultStep:
    return FaultStep(round(rng.uniform(0.0, w), 1), "centrifugo-errors", round(rng.uniform(2.0, 40.0), 1),
                     {"status": rng.choice((503, 429))})


def _cut(rng: random.Random, w: float) -> FaultStep:
    return FaultStep(round(rng.uniform(0.0, w), 1), "clients-cut", round(rng.uniform(2.0, 90.0), 1),
                     {"share": rng.choice((0.3, 1.0))})


def _restart(rng: random.Random, w: float) -> FaultStep:
    return FaultStep(round(rng.uniform(1.0, w + 5.0), 1), "centrifugo-restart", 1.0)


def _db_error(rng: random.Random, w: float) -> FaultStep:
    return FaultStep(round(rng.uniform(0.0, w), 1), "db-error", round(rng.uniform(1.0, 10.0), 1),
                     {"tables": [rng.choice(("task_outbox", "task_event_log", "task_event_dedup"))]})


DRAWS = {"crash-point": _crash, "hold-transaction": _hold, "db-outage": _window("db-outage", 1.0, 20.0),
         "db-error": _db_error, "centrifugo-errors": _errors, "centrifugo-restart": _restart,
         "delivery-reorder": _window("delivery-reorder", 5.0, 40.0, {"spread_s": 2.0}),
         "relays-paused": _window("relays-paused", 5.0, 60.0), "clients-cut": _cut}
# Drawn from the workload, not only its window: the coverage targets' motifs.
MOTIFS = {"zombie": _zombie, "answer-lost": _answer_lost, "relay-after-publish": _relay_after_publish}


def draw_case(run_seed: int) -> Scenario:
    rng = random.Random(f"explore-statussync:{run_seed}")
    spec = _draw_workload(rng)
    kinds = rng.sample(sorted(DRAWS) + sorted(MOTIFS), rng.choices((0, 1, 2, 3), weights=(10, 40, 35, 15))[0])
    steps = sorted((MOTIFS[k](rng, spec) if k in MOTIFS else DRAWS[k](rng, spec.window_s) for k in kinds),
                   key=lambda s: (s.at, s.fault))
    return case(f"X{run_seed}", spec, tuple(steps))


def case(case_id: str, spec: SyncSpec, faults: tuple[FaultStep, ...]) -> Scenario:
    kinds = sorted({f.fault for f in faults})
    faulted = sum((f.duration or 0.0) + float(f.params.get("seconds", 0.0)) * int(f.params.get("count", 1))
                  for f in faults)
    return Scenario(id=case_id, slug="explored", title=f"explored: {', '.join(kinds) or 'no faults'}",
                    workload=spec, faults=faults, recovery_bound_s=round(600.0 + faulted, 1),
                    exercised=lambda h, s: None, shells=("sim",), invariants=INVARIANTS.ids, system="statussync")


def rebuild(s: Scenario, **changes: Any) -> Scenario:
    return case(s.id, changes.get("workload", s.workload), changes.get("faults", s.faults))


def workload_steps(w: SyncSpec) -> Iterator[tuple[str, Any]]:
    yield from fewer(w, "tasks")
    yield from fewer(w, "users")
    yield from shorter_window(w)
    yield from plainer(w, (("parallel", False), ("progress", 0), ("failing", 0), ("flaky", 0), ("reordered", 0),
                           ("late_workers", 0), ("retries", 0), ("reuses", 0), ("forged", 0), ("details", 0),
                           ("foreign_details", 0), ("join_spread_s", 0.0), ("batch_get_s", 0.0),
                           ("registry_change_at", -1.0)))


EXPLORE = ExploreSpec(draw=draw_case, workload_steps=workload_steps, rebuild=rebuild, users=lambda w: w.tasks,
                      unit="tasks", targets=coverage.COVERAGE.targets, counting=coverage.COVERAGE.counting)
