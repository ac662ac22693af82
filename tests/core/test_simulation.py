"""The scenario catalogue in deterministic simulation: every scenario passes, one seed gives one history,
and a deliberately broken reference is caught by the checkers (so a pass means something)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from reference.copilot import bugs
from scenarios.catalogue import FaultStep, Scenario, load_catalogue
from scenarios.runner import ScenarioResult, simulate
from scenarios.verdicts import HELD, VIOLATED

CATALOGUE = load_catalogue("copilot")

pytestmark = pytest.mark.sim


def explain(result: ScenarioResult) -> str:
    bad = [v.as_json() for v in result.verdicts if v.status not in (HELD, "unchecked")]
    return json.dumps({"scenario": result.id, "seed": result.seed, "exercised": result.exercised is None,
                       "not_exercised_reason": result.exercised, "counts": result.counts, "violations": bad},
                      indent=2, default=str)


@pytest.mark.parametrize("scenario_id", [i for i, s in CATALOGUE.items() if "sim" in s.shells])
def test_catalogue_scenario_passes_with_seed_1_and_replays_exactly(scenario_id: str) -> None:
    result = simulate(CATALOGUE[scenario_id], 1)
    if not result.passed:
        print(explain(result))
    assert result.passed, explain(result)
    assert result.exercised is None
    assert result.counts["tasks"] > 0
    assert simulate(CATALOGUE[scenario_id], 1).history_digest == result.history_digest


# Seeds at which these scenarios once missed their purpose with the reference behaving correctly (found by sweeping
# seeds 1-100): C3's kill landed after events no consumer receives; R11 had no confirm before its broker outage (27,
# 64), then its re-drive at the heal time was cut off (107). scripts/nightly.sh sweeps seeds 1-20 of every scenario.
@pytest.mark.parametrize("scenario_id, seed", [("C3", 15), ("C3", 20), ("R11", 27), ("R11", 64), ("R11", 107)])
def test_scenario_passes_at_a_seed_that_once_missed_its_purpose(scenario_id: str, seed: int) -> None:
    result = simulate(CATALOGUE[scenario_id], seed)
    assert result.passed, explain(result)


@pytest.mark.parametrize("scenario_id", ["C4", "R2"])
def test_one_seed_gives_one_history(scenario_id: str) -> None:
    scenario = CATALOGUE[scenario_id]
    first, again, other = simulate(scenario, 1), simulate(scenario, 1), simulate(scenario, 2)
    assert first.history_digest == again.history_digest
    assert len(first.history.ops) == len(again.history.ops)
    assert first.counts == again.counts
    assert first.history_digest != other.history_digest


def test_a_run_plays_its_whole_fault_timeline_even_when_it_settled_before_the_last_step() -> None:
    """Everything settles long before the heal time here; the one-shot step at the heal time (as R11's re-drive) and
    the window closing there (as R8's) still happen: simpy's run(until=t) stops before the events at t, and the run
    used to end there (R11 then failed at seed 107 without its re-drive, and R8's window never closed)."""
    base = dataclasses.replace(CATALOGUE["C1"], faults=(), workload=dataclasses.replace(
        CATALOGUE["C1"].workload, confirms=2, window_s=10.0), recovery_bound_s=60.0)
    scenario = _with_faults(base, FaultStep(at=1500.0, fault="redrive-dead"),
                            FaultStep(at=100.0, fault="db-latency", duration=1400.0, params={"ms": 1}))
    result = simulate(scenario, 1)
    assert scenario.heal_time() == 1500.0
    started = [op.value["fault"] for op in result.history.ops if op.f == "start-fault"]
    stopped = [op.value["fault"] for op in result.history.ops if op.f == "stop-fault"]
    assert started == ["db-latency", "redrive-dead"] and sorted(stopped) == ["db-latency", "redrive-dead"]
    assert any(op.f == "list-dead" and op.process == "supervisor" for op in result.history.ops)


# ------------------------------------------------------------------------- a broken reference is caught
# The defects come from the one registry, reference.copilot.bugs (the same switch as `--inject-bug` and
# `sortie selfcheck`); tests/core/test_every_bug_is_caught.py checks every registered bug is caught.


def _with_faults(scenario: Scenario, *extra: FaultStep) -> Scenario:
    return dataclasses.replace(scenario, faults=(*scenario.faults, *extra))


def _duplicate_flights(result: ScenarioResult) -> dict[str, int]:
    per_task: dict[str, int] = {}
    for flight in result.state.ledger:
        per_task[str(flight["reference"])] = per_task.get(str(flight["reference"]), 0) + 1
    return {tid: n for tid, n in per_task.items() if n > 1}


def test_blind_resend_after_timeout_is_caught_as_a_duplicate_flight() -> None:
    """R1 as catalogued (accept-then-timeout on a platform with key and query), with the dispatcher broken
    the way docs/systems/copilot.md forbids: no idempotency key on the request, and a blind resend after a timeout."""
    result = simulate(CATALOGUE["R1"], 1, inject_bug=bugs.BLIND_RESEND)
    dups = _duplicate_flights(result)
    assert dups, "the broken reference did not even produce a duplicate flight: the sanity check is void"
    i1 = next(v for v in result.verdicts if v.invariant == "I1")
    assert i1.status == VIOLATED, explain(result)
    assert {v.task_id for v in i1.violations} == set(dups)
    assert all(v.ops for v in i1.violations)
    assert not result.passed
    assert not bugs.current(), "the bug must be switched off again after the run"


def test_blind_resend_on_a_platform_without_idempotency_key_is_caught() -> None:
    """The same defect on R1 with the platform's idempotency key switched off by an extra fault step."""
    scenario = _with_faults(CATALOGUE["R1"], FaultStep(0.0, "platform", None, {"idempotency_key": False}))
    result = simulate(scenario, 1, inject_bug=bugs.BLIND_RESEND)
    dups = _duplicate_flights(result)
    assert dups
    i1 = next(v for v in result.verdicts if v.invariant == "I1")
    assert i1.status == VIOLATED, explain(result)
    assert {v.task_id for v in i1.violations} == set(dups)
    assert not result.passed


# Was a core bug (found by this test): a keyless platform got request_id=None, so the query after a
# timeout could never find the flight and the dispatcher resent the takeoff.
def test_unpatched_reference_on_a_keyless_queryable_platform_flies_once() -> None:
    scenario = _with_faults(CATALOGUE["R1"], FaultStep(0.0, "platform", None, {"idempotency_key": False}))
    result = simulate(scenario, 1)
    assert _duplicate_flights(result) == {}, explain(result)
    i1 = next(v for v in result.verdicts if v.invariant == "I1")
    assert i1.status == HELD
