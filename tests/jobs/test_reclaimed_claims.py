"""Reading job_log for the claims the reclaimer took back: what the native runner wakes a zombie on."""

from __future__ import annotations

from reference.jobs.models import DONE, PENDING, RUNNING
from reference.jobs.repo import RECLAIMER
from systems.jobs.checkers import ReclaimedClaim, reclaimed_claims


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


def test_the_zombie_expectation_needs_a_job_of_the_paused_worker_claimed_by_another() -> None:
    """J3 and J10 ask it: the zombie's late write must meet another worker's claim, or the run proved nothing."""
    from types import SimpleNamespace

    from harness.history import INFO, NEMESIS, History
    from systems.jobs import SYSTEM

    expect = SYSTEM.expectations["zombie-outclaimed"]
    history = History()
    history.add(1.0, NEMESIS, INFO, "pause", {"process": "a.w1"})
    taken = [_row(1, "a.w1", RUNNING, 11), _row(1, RECLAIMER, PENDING)]
    assert expect(history, SimpleNamespace(log=_ids([*taken, _row(1, "b.w1", RUNNING, 12)]))) is None
    assert expect(history, SimpleNamespace(log=_ids([*taken, _row(1, "a.w1", RUNNING, 12)]))) is not None
    assert expect(history, SimpleNamespace(log=_ids(taken))) is not None  # reclaimed, never claimed again
    assert expect(History(), SimpleNamespace(log=_ids([*taken, _row(1, "b.w1", RUNNING, 12)]))) is not None


def _ids(rows: list[dict]) -> list[dict]:
    return [{**r, "id": i} for i, r in enumerate(rows, 1)]
