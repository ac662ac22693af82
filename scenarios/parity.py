"""Simulation/real parity (`sortie parity`): the same scenario files in both shells, side by side.

Per scenario: the outcome in each shell (passed, invariant violated, fault did not fire, expectation not met), which
must agree; the invariants whose verdicts differ; the faults that fired in each (the nemesis's start-fault
operations of the history, counted per fault); the task outcome counts of each. Task counts are reported, not
required to agree: the real stack's clock and the timings of its outside services (the Copilot's drone platform)
differ from the simulation's, so how many tasks a scenario's users create in its window may too (docs/architecture.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from harness.history import NEMESIS

RunOne = Callable[[Any, int], Any]  # (scenario, seed) -> ScenarioResult


def faults_fired(result: Any) -> dict[str, int]:
    """fault name -> how many times it started, from the result's history."""
    return dict(sorted(Counter(str(op.value.get("fault")) for op in result.history.ops
                               if op.process == NEMESIS and op.f == "start-fault").items()))


def row(sim: Any, native: Any) -> dict[str, Any]:
    sim_inv = {v.invariant: v.status for v in sim.verdicts}
    nat_inv = {v.invariant: v.status for v in native.verdicts}
    differ = {k: [sim_inv.get(k), nat_inv.get(k)] for k in sorted(sim_inv.keys() | nat_inv.keys())
              if sim_inv.get(k) != nat_inv.get(k)}
    fired = {"sim": faults_fired(sim), "native": faults_fired(native)}
    return {"id": sim.id, "sim": sim.outcome, "native": native.outcome, "agree": sim.outcome == native.outcome,
            "invariants_differ": differ, "faults_fired": fired,
            "same_faults_fired": set(fired["sim"]) == set(fired["native"]),
            "task_counts": {"sim": dict(sim.counts), "native": dict(native.counts)},
            "wall_s": {"sim": round(sim.wall_s, 2), "native": round(native.wall_s, 2)}}


def parity(scenarios: Iterable[Any], seed: int, run_sim: RunOne, run_native: RunOne,
           on_row: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Each scenario in simulation, then on the real stack (``run_native`` runs on a started stack); the rows and
    whether every verdict agreed."""
    rows = []
    for scn in scenarios:
        r = row(run_sim(scn, seed), run_native(scn, seed))
        rows.append(r)
        if on_row is not None:
            on_row(r)
    return {"seed": seed, "scenarios": rows, "agree": all(r["agree"] for r in rows),
            "disagree": [r["id"] for r in rows if not r["agree"]]}
