"""Reading job_log for the claims the reclaimer took back: what the native runner wakes a zombie on."""

from __future__ import annotations

from jobs.models import DONE, PENDING, RUNNING
from jobs.repo import RECLAIMER
from systems.jobs.stack import ReclaimedClaim, reclaimed_claims


def _row(job: int, actor: str, to: str, token: int | None = None) -> dict:
    return {"job_id": job, "actor": actor, "to_status": to, "detail": {"token": token} if token else None}


def test_each_reclaimed_claim_names_its_holder_token_and_who_claimed_the_job_next() -> None:
    log = [
        _row(1, "a.w1", RUNNING, 11), _row(2, "a.w2", RUNNING, 21),
        _row(1, RECLAIMER, PENDING), _row(2, RECLAIMER, PENDING),
        _row(1, "b.w1", RUNNING, 12),  # job 1 claimed again by another worker
        _row(1, "b.w1", DONE, 12),
        _row(2, "a.w2", RUNNING, 22),  # job 2 claimed again by the worker that lost it
        _row(2, RECLAIMER, PENDING),  # and reclaimed once more, not claimed since
        _row(3, RECLAIMER, PENDING),  # a reclaim of a claim this log never showed: no holder to name
    ]
    assert reclaimed_claims(log) == [
        ReclaimedClaim(1, "a.w1", 11, "b.w1"),
        ReclaimedClaim(2, "a.w2", 21, "a.w2"),
        ReclaimedClaim(2, "a.w2", 22, None),
    ]


def test_no_reclaim_no_claims() -> None:
    assert reclaimed_claims([_row(1, "a.w1", RUNNING, 1), _row(1, "a.w1", DONE, 1)]) == []
