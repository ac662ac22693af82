"""The job system's known defects (kernel.bugs), each a guarded branch in the fixed variant that puts back what the
seed does (or a plausible mistake of a port), so `sortie selfcheck --system jobs` shows the catalogue catches each.
``--inject-bug seed`` (the whole seed-faithful variant) is the job system's other injectable case."""

from __future__ import annotations

from kernel.bugs import Bug, BugRegistry

CLAIM_IGNORES_BACKOFF = "claim-ignores-backoff"
UNFENCED_OUTCOME = "unfenced-outcome"
RECLAIM_NOT_COUNTED = "reclaim-not-counted"
CLAIMABLE_IGNORES_DEPENDENCIES = "claimable-ignores-dependencies"
HARD_FAILURE_RELEASES = "hard-failure-releases"
CLAIM_UNLOGGED = "claim-unlogged"
LOOP_ENDS_ON_DB_ERROR = "loop-ends-on-db-error"
BACKOFF_COUNTS_THE_FAILURE = "backoff-counts-the-failure"
LOST_CLAIM_COUNTED = "lost-claim-counted"
REDRIVE_KEEPS_RETRY = "redrive-keeps-retry"
RENEWAL_REWRITES_THE_CLAIM_ROW = "renewal-rewrites-the-claim-row"
CANDIDATES_BY_DUE_TIME = "candidates-by-due-time"
CLAIM_IGNORES_THE_DRAIN = "claim-ignores-the-drain"
REASON_KEEPS_THE_STACK = "reason-keeps-the-stack"

BUGS = BugRegistry([
    Bug(CLAIM_IGNORES_BACKOFF, "claim without the due check",
        "retries wait next_run_at = now + min(2^retry s, 1 h) (seed 004 Fail)",
        "reference/jobs/repo.py FixedRepo._claim_where",
        "the claim re-checks only the status (the seed's Claim): a candidate read before another worker failed it "
        "is claimed at once, before its backoff", ("J3",), ("J1",)),
    Bug(UNFENCED_OUTCOME, "outcome writes without the claim's fencing",
        "a job's outcome is written by the claim that holds it", "reference/jobs/repo.py FixedRepo._held",
        "done and fail update by id and status only (the seed's Done/Fail): a worker whose claim was reclaimed and "
        "claimed again elsewhere still writes the job's outcome", ("J2",), ("J10",)),
    Bug(RECLAIM_NOT_COUNTED, "reclaim without counting an attempt",
        "dead after MaxRetry attempts (seed 004)", "reference/jobs/repo.py FixedRepo.reclaim_stale",
        "a reclaim puts the job back without counting it (the seed's ReclaimStale): a job whose work kills its "
        "worker is retried forever; and its plain UPDATE waits on a row a stuck transaction locks, with every other "
        "stale claim behind it (on PostgreSQL: J17 runs on the real stack only)", ("J4", "J6", "J24"), ("J9", "J17")),
    Bug(CLAIMABLE_IGNORES_DEPENDENCIES, "candidates without the in-degree check",
        "a job is claimable when no dependency is unmet (seed 002 §4.3)", "reference/jobs/repo.py SeedRepo.claimable",
        "the candidate query and the claim ignore unmet dependencies: a child runs before its parents",
        ("J8",), ("J8",)),
    Bug(HARD_FAILURE_RELEASES, "a failed hard parent releases its children",
        "hard: the parent must succeed (seed 002 dependency_type)", "reference/jobs/dag.py release_children",
        "a dead or cancelled parent releases its hard edges like a done one: the report runs without its inspection",
        ("J8", "J10"), ("J8",)),
    Bug(CLAIM_UNLOGGED, "a claim without its log row",
        "every status change writes its task_log row in the same transaction (seed 002 §4.4)",
        "reference/jobs/repo.py SeedRepo.claim", "the claim's job_log row is not written", ("J5",), ("J1",)),
    Bug(LOOP_ENDS_ON_DB_ERROR, "a database error ends a worker's loop",
        "a failed candidates read skips the round, the next one tries again (seed 004's worker loop)",
        "reference/jobs/pool.py worker_loop",
        "the candidates read's database error leaves the worker's loop: its thread stops "
        "taking work while the instance runs on", ("J11",), ("J7",)),
    Bug(BACKOFF_COUNTS_THE_FAILURE, "the backoff counts the failure it follows",
        "next_run_at = now + min(2^retry s, 1 h), retry counted before this failure: the first waits 1 s "
        "(seed 004 Fail)",
        "reference/jobs/repo.py FixedRepo.fail_with",
        "the backoff's exponent is the retry count after the failure: every retry waits twice as long as the seed "
        "says (2 s, 4 s, ... instead of 1 s, 2 s, ...), and no claim comes early", ("J12",), ("J1",)),
    Bug(LOST_CLAIM_COUNTED, "a lost claim costs the job a retry",
        "a lost claim (another instance won) is not an attempt (seed 004 Claim)",
        "reference/jobs/repo.py SeedRepo.claim",
        "a worker whose conditional claim found the row taken counts its try against the job (retry + 1): a job two "
        "instances race for goes dead after fewer than MaxRetry + 1 attempts", ("J20",), ("J1",)),
    Bug(REDRIVE_KEEPS_RETRY, "a re-drive keeps the spent retry count",
        "a re-driven job's attempts count afresh (seed 004: dead waits for a person; the job API's re-drive)",
        "reference/jobs/repo.py redrive",
        "the operator's re-drive puts the job back pending without resetting retry: its first failure buries it "
        "again, one attempt where MaxRetry + 1 were due", ("J20",), ("J15",)),
    Bug(RENEWAL_REWRITES_THE_CLAIM_ROW, "a claim's renewal rewrites its log row",
        "task_log is append-only: no UPDATE, no DELETE (seed 002 §4.2, §4.6)",
        "reference/jobs/repo.py FixedRepo.heartbeat",
        "each heartbeat stamps its renewal into the claim's job_log row (an UPDATE of the log) instead of leaving the "
        "log alone: the history's claim rows change under whoever read them", ("J21",), ("J4",)),
    Bug(CANDIDATES_BY_DUE_TIME, "candidates read by due time",
        "candidates are read FIFO by id, at most ClaimBatch per round (seed 004 Claimable)",
        "reference/jobs/repo.py SeedRepo.claimable",
        "the candidates read orders by next_run_at before id: a retried job waits behind every job enqueued before "
        "its backoff ended, and the batch is no longer FIFO", ("J22",), ("J1",)),
    Bug(CLAIM_IGNORES_THE_DRAIN, "a claim that does not count as taking work",
        "a worker asked to stop writes the outcome of what it holds and claims nothing more (seed 004 Pool.Run)",
        "reference/jobs/pool.py _claim_and_run",
        "the claim's transaction is not marked as taking work (kernel.effects.opens_unit), so a draining worker "
        "still claims a job before it stops, and leaves it to the reclaimer", ("J23",), ("J16",)),
    Bug(REASON_KEEPS_THE_STACK, "a failure reason that keeps the whole stack",
        "the failure reason is a summary of at most 256 characters (seed 004 Fail)",
        "reference/jobs/pool.py _claim_and_run",
        "the handler's error is stored whole as the job's reason: an agent that answers its stack writes kilobytes "
        "into every failed attempt's row", ("J19",), ("J1",)),
])
NAMES = BUGS.names
