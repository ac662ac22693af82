"""`sortie selfcheck --system jobs`: each of the job system's injected defects (reference.jobs.bugs) is caught by the
scenarios and invariants its registry entry names, at seeds 1-3 (2 and 3 nightly: the test command's budget)."""

from __future__ import annotations

import pytest

from reference.jobs.bugs import BUGS
from scenarios.selfcheck import selfcheck_sim


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.nightly),
                                  pytest.param(3, marks=pytest.mark.nightly)])
def test_every_job_system_bug_is_caught_where_its_entry_says(seed: int) -> None:
    report = selfcheck_sim(seed=seed, workers=2, system="jobs")
    assert report.system == "jobs" and len(report.verdicts) == len(BUGS.bugs) >= 5
    for verdict in report.verdicts:
        bug = verdict.bug
        caught_by = {r.scenario: set(r.violated) for r in verdict.caught_by}
        assert set(bug.scenarios) <= set(caught_by), (bug.name, caught_by)
        assert set(bug.invariants) <= set().union(*caught_by.values()), (bug.name, caught_by)
        assert not [r.error for r in verdict.runs if r.error], bug.name
