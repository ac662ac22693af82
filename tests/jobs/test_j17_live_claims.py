"""J17: the reclaimer takes back only the claim of a worker killed, stopped or cut off the database; a worker that
stops renewing a live claim (the seed, or a heartbeat that never runs) loses it while it still works."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from reference.jobs.pool import PoolConfig
from scenarios.verdicts import HELD, UNCHECKED, VIOLATED
from systems.jobs.checkers import JobsState, live_claims_are_not_reclaimed
from systems.jobs.sim import JobsSpec, simulate_jobs

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LOG = [{"id": i, "job_id": 1, "from_status": frm, "to_status": to, "actor": actor, "message": "", "detail": {},
        "created_at": T0 + timedelta(seconds=at)}
       for i, (frm, to, actor, at) in enumerate([(None, "pending", "enqueue", 0), ("pending", "running", "w.1", 1),
                                                 ("running", "pending", "reclaimer", 90)])]


def _state(kills: list[tuple[float, str]] | None,
           outages: tuple[tuple[float, float | None], ...] = ()) -> JobsState:
    return JobsState([], LOG, [], {}, [], [], T0, 6, t0=T0.timestamp(), kills=kills, outages=list(outages))


def test_a_reclaim_needs_its_holder_killed_stopped_or_cut_off() -> None:
    verdict = live_claims_are_not_reclaimed(_state([]))
    assert verdict.status == VIOLATED and verdict.checked == 1
    assert "w.1 was neither killed, stopped nor cut off" in verdict.violations[0].message
    assert live_claims_are_not_reclaimed(_state([(30.0, "w.1")])).status == HELD
    assert live_claims_are_not_reclaimed(_state([(30.0, "w.2")])).status == VIOLATED
    assert live_claims_are_not_reclaimed(_state([], ((20.0, 60.0),))).status == HELD
    assert live_claims_are_not_reclaimed(_state([], ((95.0, None),))).status == VIOLATED
    assert live_claims_are_not_reclaimed(_state(None)).status == UNCHECKED


def test_a_stall_recorded_as_the_claims_transaction_began_is_the_claims_own() -> None:
    """Nightly J17-run1134: a hold-transaction on job.claim recorded 0.4 ms before the claim row's stamp (the row is
    written inside the held transaction)."""
    assert live_claims_are_not_reclaimed(_state([(0.9996, "w.1")])).status == HELD
    assert live_claims_are_not_reclaimed(_state([(-5.0, "w.1")])).status == VIOLATED  # before its claim: not its stall


def test_the_seed_reclaims_a_live_handler_longer_than_the_threshold_and_the_fixed_variant_does_not() -> None:
    spec = JobsSpec(jobs=6, work_median_s=200.0, work_sigma=0.1)
    cfg = PoolConfig(stale_after_s=60.0, reclaim_every_s=10.0, heartbeat_s=15.0)
    assert live_claims_are_not_reclaimed(simulate_jobs(spec, 1, "fixed", cfg=cfg).state).status == HELD
    assert live_claims_are_not_reclaimed(simulate_jobs(spec, 1, "seed", cfg=cfg).state).status == VIOLATED
