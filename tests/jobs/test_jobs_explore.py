"""`sortie explore --system jobs`: the job system's draws are incident files of that system, its coverage targets are
its own (not the Copilot's) and are counted where they are declared, the fixed variant survives explored runs, and
the seed-faithful variant is found and shrunk to a file whose one-line repro fails on its own."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.copilot import coverage as copilot_coverage
from reference.jobs import coverage as job_coverage
from reports.explore import write_explore_report
from scenarios.catalogue import load_catalogue
from scenarios.explore import ExploreResult, run_one, shrink_run, write_failures
from scenarios.explore.shrink import FIXPOINT, STEP_BUDGET
from scenarios.incident import dump_incident, parse_incident
from scenarios.runner import simulate
from systems.jobs.explore import DRAWS, draw_case
from systems.jobs.variants import SEED

JOBS = "jobs"


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_a_drawn_job_case_is_an_incident_file_of_the_job_system(seed: int) -> None:
    case = draw_case(seed)
    assert draw_case(seed) == case and case.system == JOBS
    assert {f.fault for f in case.faults} <= {*DRAWS, "drain"}  # drains: drawn apart (systems.jobs.explore._drains)
    back = parse_incident(dump_incident(case, {"invariant": "J1"}), "drawn.yaml")
    assert (back.system, back.workload, back.faults, back.policy) == (case.system, case.workload, case.faults,
                                                                      case.policy)


def test_each_system_reports_only_its_own_coverage_targets() -> None:
    assert set(job_coverage.COVERAGE.targets) == {
        "claim-lost-race", "outcome-superseded", "stale-reclaimed", "enqueue-key-collision", "hard-parent-cascade",
        "time-edge-released", "claim→outcome"}
    assert not set(job_coverage.COVERAGE.targets) & set(copilot_coverage.TARGETS)


def test_job_targets_are_counted_where_they_are_declared() -> None:
    catalogue = load_catalogue(JOBS)
    with job_coverage.COVERAGE.counting() as seen, copilot_coverage.counting() as copilot_seen:
        assert simulate(catalogue["J1"], 1).passed  # two instances, no faults
    assert seen["claim-lost-race"] >= 1
    assert "claim→outcome" not in seen  # a handler's own failure is the job's outcome, not a fault in the window
    assert not copilot_seen  # the Copilot's counters do not move for another system's run
    with job_coverage.COVERAGE.counting() as seen:  # a zombie resumes after its job was reclaimed and finished
        assert simulate(catalogue["J3"], 1).passed
    assert seen["stale-reclaimed"] >= 1 and seen["outcome-superseded"] >= 1 and seen["claim→outcome"] >= 1


def test_the_fixed_variant_keeps_every_invariant_over_explored_runs() -> None:
    runs = [run_one(i, 3, None, system=JOBS) for i in range(12)]
    assert [r["error"] for r in runs] == [None] * 12
    assert [r for r in runs if r["violated"]] == []
    assert sum(1 for r in runs if r["faults"]) >= 6  # most runs drew faults


def test_the_seed_variant_is_found_and_its_shrunk_repro_fails_alone(tmp_path: Path) -> None:
    runs = [run_one(i, 1, SEED, system=JOBS) for i in range(6)]
    assert sum(1 for r in runs if r["violated"]) >= 3  # the seed's defects are not rare
    # The smallest failing run (by its operations, not its time: the choice is the same on every machine) keeps
    # the shrink short: a run where a job is reclaimed forever lasts until the recovery bound.
    failing = min((r for r in runs if r["violated"]), key=lambda r: (r["operations"], r["run"]))
    invariant = failing["violated"][0]
    shrunk = shrink_run(failing["run"], 1, SEED, invariant, "test", max_steps=20, system=JOBS)
    assert shrunk["still_violated"] and shrunk["shrink_stopped"] in (FIXPOINT, STEP_BUDGET)
    assert shrunk["shrunk"]["faults"] <= len(draw_case(failing["seed"]).faults)
    assert shrunk["repro"].endswith(f"--inject-bug {SEED} --system {JOBS}")
    result = ExploreResult(seed=1, runs_requested=1, bug=SEED, system=JOBS, runs=[failing], failures=[shrunk])
    assert result.exit_code() == 0  # found
    [path] = write_failures(result, tmp_path)
    page = write_explore_report(tmp_path, result.as_json()).read_text()
    assert f"--inject-bug {SEED} --system {JOBS}" in page and f"{shrunk['shrunk']['size']} jobs," in page
    assert 'class="timeline"' in page  # the shrunk run simulated again, drawn from the job system's state
    from sortie.cli import main

    out = CliRunner().invoke(main, ["simulate", str(path), "--seed", str(shrunk["seed"]), "--inject-bug", SEED,
                                    "--system", JOBS, "--jobs", "1", "--out", str(tmp_path / "repro")])
    assert out.exit_code == 1, out.output
    [scenario] = json.loads((tmp_path / "repro" / "summary.json").read_text())["scenarios"]
    assert scenario["invariants"][invariant] == "violated"
