"""`sortie explore` (scenarios/explore): the drawing covers the fault registry, a drawn case is an incident file,
the shrinker makes a failing case smaller and keeps it failing, a shrunk repro reproduces its violation on its
own, the coverage targets are counted where they are declared, and the results do not depend on the number of
Dask workers."""

from __future__ import annotations

import ast
import json
import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.copilot import bugs, coverage
from reference.copilot.http.notify import STREAMS_PER_USER
from scenarios.catalogue import load_catalogue
from scenarios.explore import ExploreResult, explore, run_one, run_seed, shrink_run, write_failures
from scenarios.explore.bench import summarize
from scenarios.explore.shrink import FIXPOINT, STEP_BUDGET, shrink
from scenarios.incident import dump_incident, parse_incident
from scenarios.runner import simulate
from scenarios.scenario import FaultStep
from systems.copilot.checkers import INVARIANTS, publisher_rounds
from systems.copilot.explore import (
    CYCLES,
    DRAWS,
    NOT_DRAWN,
    RACING_HOLDS,
    ROLE_EFFECTS,
    ROLE_TRANSACTIONS,
    STRANDINGS,
    STREAM_DRAWS,
    _refused_mid_batch,
    _window_edges,
    case,
    draw_case,
    draw_workload,
    workload_steps,
)
from systems.copilot.faults import FAULTS

CATALOGUE = load_catalogue("copilot")

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_SOURCE = "\n".join(p.read_text() for p in (ROOT / "reference").rglob("*.py"))


def _module_strings(tree: ast.Module) -> dict[str, str]:
    """A module's string constants: ``NAME = "..."`` and ``A, B = "...", "..."``."""
    out: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        pairs = (zip(target.elts, value.elts, strict=False) if isinstance(target, ast.Tuple)
                 and isinstance(value, ast.Tuple) else [(target, value)])
        for t, v in pairs:
            if isinstance(t, ast.Name) and isinstance(v, ast.Constant) and isinstance(v.value, str):
                out[t.id] = v.value
    return out


def _transaction_names() -> set[str]:
    """The names the reference gives its transactions: ``Transact(work, "name")`` (or a module constant), the API's
    ``_tx`` and ``_read``."""
    found = set()
    for path in (ROOT / "reference").rglob("*.py"):
        tree = ast.parse(path.read_text())
        strings = _module_strings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("Transact", "_tx", "_read") and len(node.args) >= 2):
                name = node.args[1]
                if isinstance(name, ast.Constant):
                    found.add(name.value)
                elif isinstance(name, ast.Name) and name.id in strings:
                    found.add(strings[name.id])
    return found


def test_every_simulation_fault_is_drawn_or_says_why_not() -> None:
    assert set(DRAWS) | set(STREAM_DRAWS) | set(NOT_DRAWN) == set(FAULTS.names("sim"))
    assert not (set(DRAWS) | set(STREAM_DRAWS)) & set(NOT_DRAWN)


def test_crash_point_effects_are_names_the_reference_performs() -> None:
    """A point the reference never reaches would make a crash-point draw that can never fire."""
    generic = {"receive", "ack", "publish", "putobject"}  # effect classes: Receive, Ack, Publish, PutObject
    for role, effects in ROLE_EFFECTS.items():
        for name in effects:
            if name in generic:
                continue
            assert re.search(rf'"{re.escape(name)}"', REFERENCE_SOURCE), f"{role}: no effect named {name!r}"
    transactions = _transaction_names()
    for role, txs in ROLE_TRANSACTIONS.items():
        assert set(txs) <= transactions, f"{role}: not transactions {set(txs) - transactions}"
    for role, tx in (*RACING_HOLDS, *(r for _, readers, _ in CYCLES.values() for r in readers)):
        assert tx in ROLE_TRANSACTIONS[role]
    for _, crash, _ in STRANDINGS.values():
        assert crash is None or crash[1] in ROLE_EFFECTS[crash[0]]
    # Half of the crash points open a declared coverage window: every window has such an edge to draw.
    edges = _window_edges()
    assert len(edges) == len(coverage.WINDOWS)
    for w, its_edges in zip(coverage.WINDOWS, edges, strict=True):
        assert its_edges, w.target
        assert all(role in w.roles and e in w.opens for role, e in its_edges), w.target


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_a_drawn_case_is_a_valid_incident_file_and_reads_back_the_same(seed: int) -> None:
    case = draw_case(seed)
    assert draw_case(seed) == case  # a function of its seed
    for step in case.faults:
        assert step.fault in DRAWS or step.fault in STREAM_DRAWS
    back = parse_incident(dump_incident(case, {"invariant": "I1"}), "drawn.yaml")
    assert (back.workload, back.faults, back.shells) == (case.workload, case.faults, case.shells)


def test_no_draw_and_no_shrink_step_sends_a_foreign_task_attacker_without_a_victim() -> None:
    """foreign-task's victim is another operator (explore at seed 7 drew one operator: a harness error, 2026-12-05)."""
    attacked = [c.workload for c in map(draw_case, range(20_000)) if "foreign-task" in c.workload.bad_requests]
    assert len(attacked) > 20 and min(w.operators for w in attacked) >= 2
    for w in attacked:
        for field, value in workload_steps(w):
            assert field != "operators" or value >= 2, (w, value)


def test_streams_are_drawn_within_the_hubs_limit_and_no_shrink_step_exceeds_it() -> None:
    """A user's stream beyond STREAMS_PER_USER is refused (429), which the simulated client does not expect: no draw
    and no shrink step (fewer operators) may hold more. Most stream runs hold several streams per operator."""
    held = [c.workload for c in map(draw_case, range(4_000)) if c.workload.sse_streams]
    assert 0.15 < len(held) / 4_000 < 0.35
    assert sum(w.sse_streams > w.operators for w in held) > len(held) / 2
    for w in held:
        assert w.sse_streams <= STREAMS_PER_USER * w.operators
        for field, value in workload_steps(w):
            if field == "operators":
                assert w.sse_streams <= STREAMS_PER_USER * value, (w, value)


def test_run_seeds_differ_between_runs_and_between_explores() -> None:
    seeds = {run_seed(s, i) for s in range(3) for i in range(500)}
    assert len(seeds) == 1500


def test_the_shrinker_keeps_the_failure_and_removes_what_it_does_not_need() -> None:
    """A made-up failure: it needs a db-outage of at least 4 s and at least 3 confirms. Everything else goes."""
    case = next(c for c in map(draw_case, range(10_000))
                if len(c.faults) >= 3 and c.workload.confirms >= 8 and c.workload.cancel_ratio > 0)
    case = case.__class__(**{**case.__dict__, "faults": (*case.faults, FaultStep(40.0, "db-outage", 30.0))})

    def fails(s):
        return s.workload.confirms >= 3 and any(f.fault == "db-outage" and (f.duration or 0) >= 4 for f in s.faults)

    done = shrink(case, lambda cases: [fails(c) for c in cases], budget_s=60)
    small = done.case
    assert fails(small) and done.stopped == FIXPOINT
    assert [f.fault for f in small.faults] == ["db-outage"]
    assert 4 <= small.faults[0].duration < 8  # halved while it still failed
    assert small.faults[0].at <= 1.0
    assert small.workload.confirms == 3
    assert small.workload.cancel_ratio == 0.0
    assert small.workload.flight_median_s == 10.0  # the Copilot's shortest flights (a step of its workload)
    assert done.runs == done.steps > 0
    # Judged three at a time (three workers), the shrinker reaches the same case in the same steps: the first
    # failing candidate of each batch is the one a one-at-a-time shrinker would have stopped at.
    batched = shrink(case, lambda cases: [fails(c) for c in cases], batch=3, budget_s=60)
    assert (batched.case, batched.steps, batched.stopped) == (small, done.steps, FIXPOINT)
    assert batched.runs >= done.runs
    cut = shrink(case, lambda cases: [fails(c) for c in cases], batch=3, max_steps=done.steps // 2, budget_s=60)
    assert cut.stopped == STEP_BUDGET and cut.steps == done.steps // 2 and fails(cut.case)


def test_coverage_points_and_windows_are_counted_where_they_are_declared() -> None:
    assert set(coverage.TARGETS) >= {"commit→publish", "ack→mark-sent", "consume→ack", "accept→write-back",
                                     "cancel-sent→confirmed", "conditional-update-lost", "redelivery-second-consumer",
                                     "reconciler-query-settled"}
    with coverage.counting() as seen:  # C3 kills a publisher after the broker acked: inside ack→mark-sent
        assert simulate(CATALOGUE["C3"], 1).passed
    assert seen["ack→mark-sent"] >= 1
    assert "accept→write-back" not in seen  # nothing hit a dispatcher there
    with coverage.counting() as seen:  # R2 kills a dispatcher after the platform accepted
        assert simulate(CATALOGUE["R2"], 1).passed
    assert seen["accept→write-back"] >= 1


def _first_failing_run(bug: str, seed: int) -> dict:
    for index in range(40):
        r = run_one(index, seed, bug)
        if r["violated"]:
            return r
    raise AssertionError(f"{bug} not found in 40 runs")


def test_a_shrunk_failure_reproduces_its_violation_from_its_file_alone(tmp_path: Path) -> None:
    bug = bugs.CONSUMER_NO_DEDUP
    r = _first_failing_run(bug, seed=5)
    invariant = r["violated"][0]
    shrunk = shrink_run(r["run"], 5, bug, invariant, "test", budget_s=120)
    assert shrunk["still_violated"] and shrunk["shrink_stopped"] in (FIXPOINT, STEP_BUDGET)
    assert shrunk["shrunk"]["faults"] <= len(draw_case(r["seed"]).faults)
    result = ExploreResult(seed=5, runs_requested=1, bug=bug, runs=[r], failures=[shrunk])
    [path] = write_failures(result, tmp_path)
    # The repro line, run by itself: `sortie simulate FILE --seed N --inject-bug NAME`.
    from sortie.cli import main

    out = CliRunner().invoke(main, ["simulate", str(path), "--seed", str(shrunk["seed"]), "--inject-bug", bug,
                                    "--jobs", "1", "--out", str(tmp_path / "repro")])
    assert out.exit_code == 1, out.output
    [scenario] = json.loads((tmp_path / "repro" / "summary.json").read_text())["scenarios"]
    assert scenario["invariants"][invariant] == "violated"


def test_an_unknown_bug_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown bug"):
        explore(1, 1, bug="no-such-bug")


def test_the_results_do_not_depend_on_the_number_of_workers() -> None:
    """Runs and shrinks alike: with two workers the shrinker judges two candidates at a time."""
    bug = bugs.CONSUMER_NO_DEDUP
    one = explore(6, 11, bug=bug, workers=1, shrink_steps=15).as_json()
    two = explore(6, 11, bug=bug, workers=2, shrink_steps=15).as_json()
    one.pop("timings"), two.pop("timings")
    assert one["failures"], "the bug was not found: choose a seed where it is, so that shrinks are compared"
    assert one == two
    assert [r["run"] for r in one["run_list"]] == list(range(6))


def _run(index: int, violated: list[str]) -> dict:
    return {"run": index, "seed": index, "violated": violated, "coverage": {}, "error": None, "operations": 1,
            "cost": {"wall_s": 0.1, "cpu_s": 0.1, "rss_mb": 1.0}}


def test_with_a_bug_only_a_violation_of_its_own_invariants_counts_as_finding_it() -> None:
    bug = bugs.BUGS[bugs.CONSUMER_NO_DEDUP]
    other = sorted(set(INVARIANTS) - set(bug.invariants))[0]
    result = ExploreResult(seed=1, runs_requested=3, bug=bug.name, runs=[_run(0, [other])])
    assert result.failing_runs and not result.finds
    assert result.exit_code() == 1  # a failure, but not the bug: not found
    result.runs.append(_run(1, [bug.invariants[0]]))
    assert result.exit_code() == 0
    assert result.as_json()["runs_to_first_failure"] == 2
    clean = ExploreResult(seed=1, runs_requested=1, bug=None, runs=[_run(0, [other])])
    assert clean.finds == clean.failing_runs and clean.exit_code() == 1


def test_the_bench_medians_count_a_seed_that_missed_as_more_than_the_budget() -> None:
    def trial(seed: int, first: int | None, faults: int = 1) -> dict:
        shrunk = {"faults": faults, "size": 1, "operations": 10 * faults} if first else None
        return {"bug": "b", "seed": seed, "found": first is not None, "runs_to_first_find": first, "shrunk": shrunk,
                "shrink_s": 2.0 if first else None, "invariant": "I1" if first else None,
                "shrink_stopped": FIXPOINT if first else None}

    row = summarize([trial(1, 4), trial(2, None), trial(3, 9, faults=3)], runs=100)["b"]
    assert row["found"] == 2 and row["median_runs_to_first_find"] == 9
    assert (row["median_faults"], row["max_faults"], row["median_operations"]) == (2, 3, 20)
    assert row["shrinks_stopped_by"] == {FIXPOINT: 2}
    missed = summarize([trial(1, 4), trial(2, None), trial(3, None)], runs=100)["b"]
    assert missed["median_runs_to_first_find"] is None  # most seeds missed it: not found at the median


@pytest.mark.parametrize("draw", range(4))
def test_the_refused_mid_batch_motif_refuses_a_publish_after_an_accepted_one_of_the_same_round(draw: int) -> None:
    """The motif's timing argument (systems/copilot/explore.py _refused_mid_batch) holds for any of its draws: a
    round of a publisher is refused after the broker accepted part of it."""
    rng = random.Random(f"motif:{draw}")
    spec, steps = _refused_mid_batch(rng, draw_workload(rng))
    run = simulate(case(f"M{draw}", spec, tuple(sorted(steps, key=lambda s: s.at))), draw + 1)
    assert any(r.refused for _, r in publisher_rounds(run.history)), steps
