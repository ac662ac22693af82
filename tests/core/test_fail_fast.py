"""`sortie simulate --fail-fast --no-report` (scripts/mutation.sh's runner): stop at the first scenario that does not
pass, write only what ended, skip report.html."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate_many
from sortie import exits
from sortie.cli import main

CATALOGUE = load_catalogue("copilot")

BUG = "no-version-check"  # C6 catches it (I4); C1 and C2 pass with it


@pytest.mark.sim
@pytest.mark.parametrize("jobs", [1, 2])
def test_simulate_many_stops_at_the_first_scenario_that_does_not_pass(jobs: int) -> None:
    chosen = [CATALOGUE[i] for i in ("C6", "C1", "C2", "C3")]
    results = simulate_many(chosen, 1, inject_bug=BUG, jobs=jobs, fail_fast=True)
    assert any(not r.passed for r in results)
    assert len(results) < len(chosen)
    assert [r.id for r in results] == [s.id for s in chosen if s.id in {r.id for r in results}]  # the order asked
    everything = simulate_many(chosen[:2], 1, inject_bug=BUG, jobs=jobs)
    assert [r.id for r in everything] == ["C6", "C1"]  # without it, every scenario runs


@pytest.mark.sim
def test_the_cli_writes_what_ended_and_names_what_did_not_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["simulate", "--scenario", "C6", "--scenario", "C1", "--seed", "1", "--jobs",
                                       "1", "--inject-bug", BUG, "--fail-fast", "--no-report", "--out", str(out)])
    assert result.exit_code == exits.VIOLATED, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert [s["id"] for s in summary["scenarios"]] == ["C6"]
    assert summary.get("not_run_after_first_failure") == ["C1"], summary.keys()
    assert not (out / "report.html").exists()
