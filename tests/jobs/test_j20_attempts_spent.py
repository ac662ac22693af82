"""J20: a job dead of its attempts spent exactly MaxRetry + 1 failures and reclaims since its creation or re-drive (seed
004's Claim: a lost claim is no attempt). The injected lost-claim-counted bumps retry on every lost claim: with two
instances racing, jobs die early, and only J20 sees it (J4 bounds the attempts from above); redrive-keeps-retry
leaves a re-driven job's spent count, and its next failure buries it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from reference.jobs import bugs
from reference.jobs.pool import PoolConfig
from scenarios.verdicts import HELD, VIOLATED
from systems.jobs.checkers import JobsState, attempts_bounded, dead_jobs_spent_every_attempt
from systems.jobs.sim import JobsSpec, simulate_jobs

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _row(row_id: int, frm: str | None, to: str, actor: str = "instance-a.1", message: str = "boom") -> dict[str, Any]:
    return {"id": row_id, "job_id": 1, "from_status": frm, "to_status": to, "actor": actor, "message": message,
            "created_at": T0 + timedelta(seconds=row_id), "detail": {}}


def _life(failures: int, start: int = 1) -> list[dict[str, Any]]:
    """Claims each ended by a failure, the last one burying the job."""
    rows = []
    for i in range(failures):
        rows.append(_row(start + 2 * i, "pending", "running"))
        rows.append(_row(start + 2 * i + 1, "running", "pending" if i < failures - 1 else "dead"))
    return rows


def _state(log: list[dict[str, Any]], max_retry: int = 2) -> JobsState:
    return JobsState([], log, [], {}, [], [], T0, max_retry)


def test_j20_wants_exactly_max_retry_plus_one_attempts_per_death() -> None:
    created = [_row(0, None, "pending", "client")]
    assert dead_jobs_spent_every_attempt(_state(created + _life(3))).status == HELD
    early = dead_jobs_spent_every_attempt(_state(created + _life(2)))
    assert early.status == VIOLATED and "dead after 2 attempts" in early.violations[0].message
    assert dead_jobs_spent_every_attempt(_state(created + _life(4))).status == VIOLATED


def test_j20_counts_reclaims_and_afresh_from_a_redrive_and_skips_burials() -> None:
    reclaimed = [_row(0, None, "pending", "client"), _row(1, "pending", "running"),
                 _row(2, "running", "pending", "reclaimer"), *_life(2, start=3)]
    assert dead_jobs_spent_every_attempt(_state(reclaimed)).status == HELD
    redriven = [*reclaimed, _row(9, "dead", "pending", "operator:ops"), *_life(2, start=10)]
    assert dead_jobs_spent_every_attempt(_state(redriven)).status == VIOLATED
    buried = [_row(0, None, "pending", "client"), _row(1, "pending", "running"),
              _row(2, "running", "dead", message="payload is not JSON")]
    assert dead_jobs_spent_every_attempt(_state(buried)).checked == 0


def test_a_lost_claim_that_costs_a_retry_passes_j4_and_fails_j20() -> None:
    spec = JobsSpec(jobs=10, failing=2)
    cfg = PoolConfig(stale_after_s=60.0, reclaim_every_s=10.0, heartbeat_s=15.0)
    with bugs.BUGS.injected(bugs.LOST_CLAIM_COUNTED):
        run = simulate_jobs(spec, 1, "fixed", cfg=cfg)
    assert attempts_bounded(run.state).status == HELD
    assert dead_jobs_spent_every_attempt(run.state).status == VIOLATED
    clean = simulate_jobs(spec, 1, "fixed", cfg=cfg)
    verdict = dead_jobs_spent_every_attempt(clean.state)
    assert verdict.status == HELD and verdict.checked >= 2


def test_a_redrive_that_keeps_the_spent_count_passes_j4_and_fails_j20() -> None:
    """Row 7: an operator's re-drive counts the job's attempts afresh (J15's workload, smaller)."""
    spec = JobsSpec(jobs=4, failing=1, redrives=1, window_s=10.0)
    with bugs.BUGS.injected(bugs.REDRIVE_KEEPS_RETRY):
        run = simulate_jobs(spec, 1, "fixed")
    assert attempts_bounded(run.state).status == HELD
    assert dead_jobs_spent_every_attempt(run.state).status == VIOLATED
    clean = dead_jobs_spent_every_attempt(simulate_jobs(spec, 1, "fixed").state)
    assert clean.status == HELD and clean.checked == 2  # dead, re-driven, dead again
