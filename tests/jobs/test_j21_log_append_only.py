"""J21: the job_log rows the harness read during a run are at its end, unchanged (seed 002 §4.2, §4.6: task_log is
append-only). The injected renewal-rewrites-the-claim-row stamps each heartbeat into the claim's log row; every other
invariant holds under it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from reference.jobs import bugs
from reference.jobs.pool import PoolConfig
from scenarios.verdicts import HELD, UNCHECKED, VIOLATED
from systems.jobs.checkers import INVARIANTS, JobsState, job_log_is_append_only
from systems.jobs.sim import JobsSpec, simulate_jobs

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _row(row_id: int, to: str, detail: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": row_id, "job_id": 1, "from_status": None, "to_status": to, "actor": "instance-a.1", "message": "",
            "created_at": T0, "detail": detail or {}}


def _state(seen: list[dict[str, Any]] | None, final: list[dict[str, Any]]) -> JobsState:
    state = JobsState([], final, [], {}, [], [], T0, 6)
    state.log_seen = seen
    return state


def test_j21_wants_every_row_read_during_the_run_at_its_end_unchanged() -> None:
    seen = [_row(1, "pending"), _row(2, "running", {"token": 1})]
    assert job_log_is_append_only(_state(seen, [*seen, _row(3, "done")])).status == HELD
    rewritten = job_log_is_append_only(_state(seen, [seen[0], _row(2, "running", {"token": 2})]))
    assert rewritten.status == VIOLATED and rewritten.violations[0].message.endswith("read: detail")
    deleted = job_log_is_append_only(_state(seen, [seen[1]]))
    assert deleted.status == VIOLATED and "deleted" in deleted.violations[0].message
    assert job_log_is_append_only(_state(None, seen)).status == UNCHECKED


def test_a_renewal_that_rewrites_the_claim_row_fails_j21_alone() -> None:
    spec = JobsSpec(jobs=3, work_median_s=40.0, work_sigma=0.0, window_s=5.0)
    cfg = PoolConfig(stale_after_s=60.0, reclaim_every_s=10.0, heartbeat_s=15.0)
    with bugs.BUGS.injected(bugs.RENEWAL_REWRITES_THE_CLAIM_ROW):
        run = simulate_jobs(spec, 1, "fixed", cfg=cfg)
    assert [v.invariant for v in run.verdicts if v.status == VIOLATED] == ["J21"]
    clean = simulate_jobs(spec, 1, "fixed", cfg=cfg)
    verdict = next(v for v in INVARIANTS.check(clean.state) if v.invariant == "J21")
    assert verdict.status == HELD and verdict.checked >= 6  # each job's creation and claim at least
