"""J16: a job no handler can run (an unregistered type, a payload that is not JSON) goes dead at its claim: never done,
never put back by a failure, reclaimed only from a worker that was killed, stopped or cut off the database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from scenarios.verdicts import HELD, VIOLATED
from systems.jobs.checkers import JobsState, unrunnable_jobs_die_at_once

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _row(i: int, frm: str | None, to: str, actor: str) -> dict[str, Any]:
    return {"id": i, "job_id": 1, "from_status": frm, "to_status": to, "actor": actor, "message": "",
            "detail": {}, "created_at": T0 + timedelta(seconds=i)}


def _state(payload: str, type_: str, rows: list[dict[str, Any]], kills: list[tuple[float, str]] | None = None,
           outages: tuple[tuple[float, float | None], ...] = ()) -> JobsState:
    job = {"id": 1, "type": type_, "payload": payload, "status": rows[-1]["to_status"]}
    return JobsState([job], rows, [], {}, [], [], T0, 6, t0=T0.timestamp(), kills=kills, outages=list(outages))


BURIED = [_row(1, None, "pending", "enqueue"), _row(2, "pending", "running", "instance-a.1"),
          _row(3, "running", "dead", "instance-a.1")]
RECLAIMED = [*BURIED[:2], _row(10, "running", "pending", "reclaimer"), _row(11, "pending", "running", "instance-b.1"),
             _row(12, "running", "dead", "instance-b.1")]


def test_buried_at_its_claim_holds_and_a_runnable_job_is_not_judged() -> None:
    assert unrunnable_jobs_die_at_once(_state("{not json", "survey", BURIED, [])).status == HELD
    verdict = unrunnable_jobs_die_at_once(_state('{"a": 1}', "survey", RECLAIMED, []))
    assert verdict.status == HELD and verdict.checked == 0


def test_a_reclaim_from_a_live_worker_or_a_retry_violates() -> None:
    verdict = unrunnable_jobs_die_at_once(_state("{not json", "survey", RECLAIMED, []))
    assert verdict.status == VIOLATED
    assert "neither killed, stopped nor cut off the database" in verdict.violations[0].message
    assert unrunnable_jobs_die_at_once(_state("{not json", "survey", RECLAIMED, [(5.0, "instance-a.1")])).status \
        == HELD
    retried = [*BURIED[:2], _row(3, "running", "pending", "instance-a.1")]
    verdict = unrunnable_jobs_die_at_once(_state("null", "unregistered-type", retried, []))
    assert [v.message for v in verdict.violations] == [
        "its type 'unregistered-type' has no handler, and a worker moved it running -> pending (log row 3) instead "
        "of burying it"]


def test_a_reclaim_from_a_worker_cut_off_the_database_is_excused() -> None:
    """Nightly J16-run1447: claimed at 108 s under a db-latency, the burial's write failed in the db-outage at 113.5 s
    (the pool skips a failed write: the reclaimer settles the job), then the next claim buried it."""
    rows = [*BURIED[:2], _row(10, "running", "pending", "reclaimer"), _row(11, "pending", "running", "instance-b.1"),
            _row(12, "running", "dead", "instance-b.1")]
    assert unrunnable_jobs_die_at_once(_state("null", "unregistered-type", rows, [], ((4.0, 6.0),))).status == HELD
    assert unrunnable_jobs_die_at_once(_state("null", "unregistered-type", rows, [], ((10.5, 11.0),))).status \
        == VIOLATED  # after the reclaim: the worker was live and connected while it held the claim
