"""J22: a worker's candidates read answers at most ClaimBatch jobs in id order (seed 004's Claimable: FIFO), and the
jobs it wins before its next read are those candidates, in that order. The injected candidates-by-due-time orders the
read by next_run_at first: a retried job falls behind newer ones, and only J22 sees it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from reference.jobs import bugs
from reference.jobs.pool import PoolConfig
from scenarios.verdicts import HELD, UNCHECKED, VIOLATED
from systems.jobs.checkers import JobsState, claims_follow_the_candidates
from systems.jobs.sim import JobsSpec, simulate_jobs

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _state(rounds: list[dict[str, Any]] | None) -> JobsState:
    state = JobsState([], [], [], {}, [], [], T0, 6)
    state.rounds, state.claim_batch = rounds, 3
    return state


def _round(candidates: list[int], claimed: list[int]) -> dict[str, Any]:
    return {"process": "instance-a.1", "at": 1.0, "candidates": candidates, "claimed": claimed}


def test_j22_wants_fifo_candidates_within_the_batch_claimed_in_their_order() -> None:
    assert claims_follow_the_candidates(_state([_round([1, 2, 5], [1, 5]), _round([], [])])).status == HELD
    for bad in (_round([2, 1], [2]), _round([1, 2, 3, 4], []), _round([1, 2], [2, 1]), _round([1, 2], [3])):
        assert claims_follow_the_candidates(_state([bad])).status == VIOLATED, bad
    assert claims_follow_the_candidates(_state(None)).status == UNCHECKED


def test_candidates_read_by_due_time_fail_j22() -> None:
    spec = JobsSpec(jobs=20, fail_rate=0.3, window_s=20.0, same_key_ratio=0.0)
    cfg = PoolConfig(stale_after_s=60.0, reclaim_every_s=10.0, heartbeat_s=15.0)
    with bugs.BUGS.injected(bugs.CANDIDATES_BY_DUE_TIME):
        run = simulate_jobs(spec, 1, "fixed", cfg=cfg)
    assert claims_follow_the_candidates(run.state).status == VIOLATED
    clean = claims_follow_the_candidates(simulate_jobs(spec, 1, "fixed", cfg=cfg).state)
    assert clean.status == HELD and clean.checked
