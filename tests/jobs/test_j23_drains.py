"""J23: a worker asked to stop (SIGTERM: the drain fault, seed 004's cancelled context) writes the outcome of the job it
holds and claims nothing more until it is started again; in simulation a drained process ends at its next unit of
work or sleep (scenarios.sim.world.SimWorld.drain), as kernel.runtime's Stopping ends it on the stack."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kernel.effects import Transact
from reference.jobs import pool
from scenarios.catalogue import load_catalogue
from scenarios.runner import simulate
from scenarios.verdicts import HELD, UNCHECKED, VIOLATED
from systems.jobs.checkers import JobsState, drain_windows, draining_workers_finish_what_they_hold, held_at_drains

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _rows(*steps: tuple[str | None, str, str, float]) -> list[dict[str, Any]]:
    return [{"id": i, "job_id": 1, "from_status": f, "to_status": t, "actor": a, "message": "", "detail": {},
             "created_at": T0 + timedelta(seconds=at)} for i, (f, t, a, at) in enumerate(steps)]


CLAIMED = [(None, "pending", "enqueue", 0.0), ("pending", "running", "w.1", 10.0)]
DRAIN = {"process": "w.1", "at": 20.0, "until": 40.0}


def _state(log: list[dict[str, Any]], drains: list[dict[str, Any]] | None = None,
           kills: list[tuple[float, str]] | None = None) -> JobsState:
    return JobsState([], log, [], {}, [], [], T0, 3, t0=T0.timestamp(), kills=kills or [],
                     drains=[DRAIN] if drains is None else drains)


def test_drains_pair_with_the_restart_that_ends_them() -> None:
    events = [(5.0, "restart", "w.2"), (20.0, "drain", "w.1"), (21.0, "drain", "w.1"), (40.0, "restart", "w.1"),
              (50.0, "drain", "w.2")]
    assert drain_windows(events) == [{"process": "w.1", "at": 20.0, "until": 40.0},
                                     {"process": "w.2", "at": 50.0, "until": None}]


def test_a_drained_worker_that_finishes_its_job_holds() -> None:
    s = _state(_rows(*CLAIMED, ("running", "done", "w.1", 30.0), ("pending", "running", "w.1", 45.0)))
    assert draining_workers_finish_what_they_hold(s).status == HELD  # its claim at 45 s: started again at 40 s
    assert held_at_drains(s) == [("w.1", 1)]


@pytest.mark.parametrize(("steps", "message"), [
    ([("running", "pending", "reclaimer", 35.0)],
     "w.1 held it when its drain began, and reclaimer moved it to pending (log row 2) instead of w.1 finishing it"),
    ([], "w.1 held it when its drain began and never wrote its outcome"),
])
def test_a_drained_worker_that_leaves_its_job_violates(steps: list[Any], message: str) -> None:
    verdict = draining_workers_finish_what_they_hold(_state(_rows(*CLAIMED, *steps)))
    assert verdict.status == VIOLATED and [v.message for v in verdict.violations] == [message]
    excused = _state(_rows(*CLAIMED, *steps), kills=[(25.0, "w.1")])  # killed while it drained
    assert draining_workers_finish_what_they_hold(excused).status == HELD
    killed_later = _state(_rows(*CLAIMED, *steps), kills=[(45.0, "w.1")])  # after it was started again
    assert draining_workers_finish_what_they_hold(killed_later).status == VIOLATED


def test_a_claim_while_draining_violates_and_an_unobserved_shell_is_unchecked() -> None:
    log = _rows((None, "pending", "enqueue", 0.0), ("pending", "running", "w.1", 25.0),
                ("running", "done", "w.1", 30.0))
    verdict = draining_workers_finish_what_they_hold(_state(log))
    assert [v.message for v in verdict.violations] == ["w.1 claimed it 5.0 s after its drain began (log row 1)"]
    assert draining_workers_finish_what_they_hold(_state(log, drains=[{**DRAIN, "process": "w.2"}])).status == HELD
    unobserved = JobsState([], log, [], {}, [], [], T0, 3)
    assert draining_workers_finish_what_they_hold(unobserved).status == UNCHECKED


def test_a_pool_whose_claims_ignore_the_drain_is_caught_in_j16(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule broken: a claim not marked as taking work (kernel.effects.opens_unit) lets a draining worker claim the
    rest of its batch. Its own catalogue scenario passes on the fixed pool (tests/jobs/test_jobs_catalogue.py)."""
    def claim_takes_no_work(fn: Any, name: str, **kw: Any) -> Transact:
        return Transact(fn, name, **{**kw, "takes_work": kw.get("takes_work", False) and name != "job.claim"})

    monkeypatch.setattr(pool, "Transact", claim_takes_no_work)
    result = simulate(load_catalogue("jobs")["J16"], 1)
    j23 = next(v for v in result.verdicts if v.invariant == "J23")
    assert j23.status == VIOLATED and "after its drain began" in j23.violations[0].message
