"""J14: no error that only a defect raises, even one a pool loop carried on from (the Copilot's I27): the
simulation hears what the reference logs with the defect's traceback; the native shell leaves it unchecked."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from reference.jobs import pool
from scenarios.verdicts import HELD, UNCHECKED, VIOLATED
from systems.jobs.checkers import JobsState, no_defect_raised
from systems.jobs.sim import JobsSpec, simulate_jobs


def _state(defects: list[dict[str, Any]] | None) -> JobsState:
    return JobsState([], [], [], {}, [], [], datetime.now(UTC), 6, loops=6, defects=defects)


def test_a_defect_violates_and_an_unobserved_shell_is_unchecked() -> None:
    assert no_defect_raised(_state([])).status == HELD
    verdict = no_defect_raised(_state([{"t": 12.0, "logger": "reference.jobs.pool", "where": "jobs/dag.py:140",
                                         "error": "TypeError: can't compare offset-naive and offset-aware datetimes"}]))
    assert verdict.status == VIOLATED and verdict.violations[0].task_id == "jobs/dag.py:140"
    assert no_defect_raised(_state(None)).status == UNCHECKED


def _broken(tx: Any) -> int:
    raise TypeError("a defect in the reclaimer's second step")


def test_the_simulation_hears_a_defect_the_reclaimer_carried_on_from(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = JobsSpec(jobs=6)
    assert no_defect_raised(simulate_jobs(spec, 1, "fixed").state).status == HELD
    monkeypatch.setattr(pool, "release_due_time_edges", _broken)
    run = simulate_jobs(spec, 1, "fixed")
    assert run.state.jobs and all(j["status"] == "done" for j in run.state.jobs)  # nothing else shows it
    verdict = no_defect_raised(run.state)
    assert verdict.status == VIOLATED and "TypeError" in verdict.violations[0].message
