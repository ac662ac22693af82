"""J12: each failure's next_run_at follows seed 004's formula, min(2^retry s, 1 h) with retry counted before the
failure; the injected backoff-counts-the-failure doubles every wait, and J12 (not J3: no claim comes early) sees it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from reference.jobs import bugs
from reference.jobs.pool import PoolConfig
from scenarios.verdicts import HELD, VIOLATED
from systems.jobs.checkers import (
    JobsState,
    retries_follow_the_backoff,
    retries_wait_their_backoff,
    seed_backoff_s,
)
from systems.jobs.sim import JobsSpec, simulate_jobs

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _failure(row_id: int, retry: int, wait_s: float) -> dict[str, Any]:
    at = T0 + timedelta(seconds=row_id)
    return {"id": row_id, "job_id": 1, "from_status": "running", "to_status": "pending", "actor": "instance-a.1",
            "message": "boom", "created_at": at,
            "detail": {"retry": retry, "next_run_at": (at + timedelta(seconds=wait_s)).isoformat(), "token": row_id}}


def _state(log: list[dict[str, Any]]) -> JobsState:
    return JobsState([], log, [], {}, [], [], T0, 20)


def test_the_seed_formula_doubles_from_one_second_up_to_the_hour() -> None:
    assert [seed_backoff_s(r) for r in (0, 1, 2, 5, 11, 12, 40)] == [1.0, 2.0, 4.0, 32.0, 2048.0, 3600.0, 3600.0]


def test_j12_judges_each_wait_from_below_and_above() -> None:
    right = [_failure(1, 1, 1.0), _failure(2, 2, 2.0), _failure(3, 13, 3600.0)]
    assert retries_follow_the_backoff(_state(right)).status == HELD
    short, long_ = _failure(4, 3, 2.0), _failure(5, 13, 4096.0)
    verdict = retries_follow_the_backoff(_state([*right, short, long_]))
    assert verdict.status == VIOLATED and verdict.checked == 5
    assert [v.message.split(" waits ")[1] for v in verdict.violations] == [
        "2.000 s before the retry; seed 004 says min(2^2 s, 1 h) = 4 s",
        "4096.000 s before the retry; seed 004 says min(2^12 s, 1 h) = 3600 s"]


def test_a_backoff_one_step_too_long_passes_j3_and_fails_j12() -> None:
    spec = JobsSpec(jobs=12, flaky=4, fail_rate=0.2)
    cfg = PoolConfig(stale_after_s=60.0, reclaim_every_s=10.0, heartbeat_s=15.0)
    with bugs.BUGS.injected(bugs.BACKOFF_COUNTS_THE_FAILURE):
        run = simulate_jobs(spec, 1, "fixed", cfg=cfg)
    assert retries_wait_their_backoff(run.state).status == HELD
    assert retries_follow_the_backoff(run.state).status == VIOLATED
    clean = simulate_jobs(spec, 1, "fixed", cfg=cfg)
    assert retries_follow_the_backoff(clean.state).status == HELD and retries_follow_the_backoff(clean.state).checked
