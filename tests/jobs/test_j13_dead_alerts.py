"""J13: every job gone dead raises one JOB_DEAD alert naming it, and only such a job; the simulation hears the pool's
alerts (systems.jobs.sim.JobsWorld), the native shell does not (unchecked)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reference.jobs import pool
from scenarios.verdicts import HELD, UNCHECKED, VIOLATED
from systems.jobs.checkers import JobsState, every_dead_job_alerts_once
from systems.jobs.sim import JobsSpec, simulate_jobs

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _job(job_id: int, status: str) -> dict[str, Any]:
    return {"id": job_id, "status": status}


def _dead_row(job_id: int, at_s: float, actor: str = "instance-a.1") -> dict[str, Any]:
    return {"id": job_id, "job_id": job_id, "from_status": "running", "to_status": "dead", "actor": actor,
            "message": "boom", "detail": {"by": "instance-b"} if actor == "reclaimer" else {},
            "created_at": T0 + timedelta(seconds=at_s)}


def _state(jobs: list[dict[str, Any]], log: list[dict[str, Any]], alerts: list[dict[str, Any]] | None,
           kills: tuple[tuple[float, str], ...] = ()) -> JobsState:
    return JobsState(jobs, log, [], {}, [], [], T0, 6, t0=T0.timestamp(), alerts=alerts, kills=list(kills))


def _alert(job_id: int) -> dict[str, Any]:
    return {"code": "JOB_DEAD", "job_id": job_id}


def test_one_alert_per_dead_job_holds() -> None:
    s = _state([_job(1, "dead"), _job(2, "done")], [_dead_row(1, 10.0)], [_alert(1)])
    assert every_dead_job_alerts_once(s).status == HELD


@pytest.mark.parametrize(("alerts", "message"), [
    ([], "dead 1 time(s), and 0 JOB_DEAD alert(s) named it"),
    ([_alert(1), _alert(1)], "dead 1 time(s), and 2 JOB_DEAD alerts named it (one per death is due)"),
])
def test_a_dead_job_unannounced_or_announced_twice_violates(alerts: list[dict[str, Any]], message: str) -> None:
    verdict = every_dead_job_alerts_once(_state([_job(1, "dead")], [_dead_row(1, 10.0)], alerts))
    assert verdict.status == VIOLATED and [v.message for v in verdict.violations] == [message]


def test_an_alert_for_a_job_alive_violates() -> None:
    verdict = every_dead_job_alerts_once(_state([_job(2, "pending")], [], [_alert(2)]))
    assert [v.message for v in verdict.violations] == ["1 JOB_DEAD alert(s) named it, and it never died"]


def test_a_writer_killed_right_after_the_dead_row_is_excused() -> None:
    rows = [_dead_row(1, 10.0), _dead_row(2, 20.0, actor="reclaimer")]
    s = _state([_job(1, "dead"), _job(2, "dead")], rows, [], kills=((11.0, "instance-a.1"), (21.0, "reclaimer-b")))
    assert every_dead_job_alerts_once(s).status == HELD
    assert every_dead_job_alerts_once(_state([_job(1, "dead")], rows[:1], [], kills=((30.0, "instance-a.1"),))) \
        .status == VIOLATED


def test_a_writer_killed_when_its_commit_lands_after_a_slow_database_is_excused() -> None:
    """Nightly J13-run632: the dead row is stamped at 35 s inside a 1000 ms db-latency window (13.2-43.1 s), its
    commit lands when the window ends and the crash-point kills the writer at 43.1 s, before its alert."""
    def state(kill_at: float) -> JobsState:
        s = _state([_job(4, "dead")], [_dead_row(4, 35.1, actor="instance-a.2")], [],
                   kills=((kill_at, "instance-a.2"),))
        s.outages = [(13.2, 43.1)]
        return s

    assert every_dead_job_alerts_once(state(43.15)).status == HELD
    assert every_dead_job_alerts_once(state(43.1 + 6.0)).status == VIOLATED  # past the commit: the alert was due


def test_a_slow_database_still_open_at_the_end_excuses_a_kill_only_until_the_runs_end() -> None:
    """A db fault window open when the run ended (end None) held the commit back at most until the run's end (the
    dead row is in the tables read then): a kill of the writer later than that end plus the slack is not excused."""
    def state(kill_at: float) -> JobsState:
        s = _state([_job(4, "dead")], [_dead_row(4, 35.1, actor="instance-a.2")], [],
                   kills=((kill_at, "instance-a.2"),))
        s.outages, s.end_time = [(13.2, None)], 60.0
        return s

    assert every_dead_job_alerts_once(state(58.0)).status == HELD
    assert every_dead_job_alerts_once(state(60.0 + 6.0)).status == VIOLATED


def test_unchecked_where_the_shell_does_not_hear_alerts() -> None:
    assert every_dead_job_alerts_once(_state([_job(1, "dead")], [], None)).status == UNCHECKED


def test_the_simulation_hears_each_dead_jobs_alert(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = JobsSpec(jobs=10, failing=1, poison=1, unregistered=1)
    run = simulate_jobs(spec, 1, "fixed")
    verdict = every_dead_job_alerts_once(run.state)
    assert verdict.status == HELD and verdict.checked == 3
    monkeypatch.setattr(pool, "alert_dead", lambda job_id, reason: None)  # the pool forgets its alerts
    assert every_dead_job_alerts_once(simulate_jobs(spec, 1, "fixed").state).status == VIOLATED
