"""The job system through the harness core: its YAML catalogue runs in the same runner as the Copilot's (the runner,
the incident parser and the catalogue loader name no system), every scenario passes on the fixed variant and
replays exactly, and the seed-faithful variant (``--inject-bug seed``) fails the scenarios its defects predict."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from scenarios.catalogue import load_catalogue
from scenarios.incident import IncidentError, parse_incident
from scenarios.runner import simulate
from sortie.cli import main

JOBS = load_catalogue("jobs")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("scenario_id", sorted(i for i, s in JOBS.items() if "sim" in s.shells))
def test_every_job_scenario_passes_on_the_fixed_variant_and_replays(scenario_id: str) -> None:
    a, b = simulate(JOBS[scenario_id], 1), simulate(JOBS[scenario_id], 1)
    assert a.passed, (a.exercised, [(v.invariant, v.violations[:2]) for v in a.verdicts if v.status == "violated"])
    assert a.history_digest == b.history_digest
    assert {v.invariant for v in a.verdicts} == set(JOBS[scenario_id].invariants)


# What the seed-faithful variant breaks, per scenario (docs/systems/jobs.md tells each).
SEED_BREAKS = {"J1": {"J3"}, "J4": {"J2"}, "J9": {"J4", "J6"}, "J10": {"J2"}}


@pytest.mark.parametrize(("scenario_id", "broken"), sorted(SEED_BREAKS.items()))
def test_the_seed_variant_breaks_what_its_defects_predict(scenario_id: str, broken: set[str]) -> None:
    result = simulate(JOBS[scenario_id], 1, inject_bug="seed")
    assert not result.passed
    assert broken <= {v.invariant for v in result.verdicts if v.status == "violated"}
    assert result.stats["variant"] == "seed" and result.stats["injected_bug"] == "seed"


def test_the_cli_runs_another_system_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(main, ["simulate", "--system", "jobs", "--scenario", "J5", "--jobs", "1",
                              "--out", str(tmp_path / "j")])
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "j" / "report.html").exists()
    bad = runner.invoke(main, ["simulate", "--system", "nope", "--all", "--out", str(tmp_path / "n")])
    assert bad.exit_code == 2 and "unknown system 'nope'" in bad.output
    wrong_bug = runner.invoke(main, ["simulate", "--system", "jobs", "--all", "--inject-bug", "blind-resend",
                                     "--out", str(tmp_path / "b")])
    assert wrong_bug.exit_code == 2 and "not a known bug of jobs" in wrong_bug.output
    seed = runner.invoke(main, ["simulate", "--system", "jobs", "--variant", "seed", "--scenario", "J9", "--jobs", "1",
                                "--out", str(tmp_path / "s")])
    assert seed.exit_code == 1, seed.output  # the seed-faithful variant: a job that kills its worker, forever
    unknown = runner.invoke(main, ["simulate", "--system", "jobs", "--variant", "mine", "--all", "--out",
                                   str(tmp_path / "v")])
    assert unknown.exit_code == 2 and "'mine' is not a variant of jobs" in unknown.output
    both = runner.invoke(main, ["simulate", "--system", "jobs", "--variant", "seed", "--inject-bug", "seed", "--all",
                                "--out", str(tmp_path / "v")])
    assert both.exit_code == 2 and "give one" in both.output
    listed = runner.invoke(main, ["scenarios", "--system", "jobs", "--json"])
    assert listed.exit_code == 0 and [r["id"] for r in __import__("json").loads(listed.output)] == list(JOBS)


GOOD = """system: jobs
id: X1
slug: x
title: x
workload: {jobs: 3}
expect:
- {tasks: {status: done, min: 3}}
"""


@pytest.mark.parametrize(("text", "line", "field", "says"), [
    (GOOD.replace("system: jobs", "system: nope"), 1, "system", "unknown system"),
    (GOOD.replace("{jobs: 3}", "{jobs: 3, confirms: 2}"), 5, "workload.confirms", "Extra inputs"),
    (GOOD + "invariants: [I1]\n", 8, "invariants[0]", "Input should be"),
    (GOOD.replace("expect:", "params: {variant: mine}\nexpect:"), 6, "params", "variant"),
    (GOOD.replace("expect:", "policy: {claim_batch: 5, stale: 1}\nexpect:"), 6, "policy", "unknown pool setting"),
    (GOOD.replace("{tasks: {status: done, min: 3}}", "{check: no-such-check}"), 7, "expect[0].check", "unknown check"),
])
def test_a_malformed_job_incident_is_refused_with_line_and_field(text: str, line: int, field: str, says: str) -> None:
    with pytest.raises(IncidentError) as err:
        parse_incident(text, "x.yaml")
    assert (err.value.line, err.value.field) == (line, field) and says in err.value.message


def test_the_core_names_no_system() -> None:
    """The runner, the system loader, the incident parser and the catalogue loader: no system's name, no branch on
    one (the Copilot is the default system's name, in one constant)."""
    core = ["scenarios/runner.py", "scenarios/systems.py", "scenarios/incident.py", "scenarios/catalogue/__init__.py"]
    for path in core:
        code = "\\n".join(line.split("#")[0] for line in (ROOT / path).read_text().splitlines()
                         if not line.lstrip().startswith(('"', "'")))
        assert not re.search(r"\\bjobs?\\.|systems\\.(copilot|jobs)|\\bJobs|\\bCopilot[A-Z]", code), path
        assert code.count('"copilot"') == (1 if path == "scenarios/systems.py" else 0), path
