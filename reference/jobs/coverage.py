"""The job system's coverage targets (kernel.coverage): the places a run of the pool must be seen to reach before
its green verdict means anything. Declared here, marked where they happen (reference.jobs.repo, reference.jobs.dag,
reference.jobs.pool)."""

from __future__ import annotations

from kernel.coverage import Coverage

COVERAGE = Coverage()

CLAIM_LOST = COVERAGE.target(
    "claim-lost-race", "a worker's conditional claim matched no row: another worker claimed the candidate first")
OUTCOME_SUPERSEDED = COVERAGE.target(
    "outcome-superseded", "a worker's done, fail or heartbeat matched no row: its claim was reclaimed (and maybe "
    "claimed again) while it worked")
STALE_RECLAIMED = COVERAGE.target(
    "stale-reclaimed", "the reclaimer took back a running job whose claim had aged past the threshold")
KEY_COLLISION = COVERAGE.target(
    "enqueue-key-collision", "an enqueue hit the idempotency key's unique index and returned the first job")
CASCADE_CANCELLED = COVERAGE.target(
    "hard-parent-cascade", "a job that did not succeed cancelled a pending child through a hard edge")
TIME_EDGE_RELEASED = COVERAGE.target(
    "time-edge-released", "the reclaimer released a time edge whose parent ran past its timeout")
CLAIMED_UNFINISHED = COVERAGE.window(
    "claim→outcome", "a fault hit a worker holding a claim before its outcome was written: killed, stopped or "
    "failing between the claim and its done, fail or bury (a lost claim opens it too, until the next candidates' read)",
    ("job.claim",), ("job.done", "job.fail", "job.bury", "job.claimable"), outcomes=("execute",))
