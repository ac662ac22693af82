"""The job system's rule-traceability matrix (issue 54; scenarios.rules): every normative rule of seed 004 (the job
table, its claim, retry and reclaim; cited by the function that states it) and of seed 002's task_log and
task_dependency (§4.1-4.6), every edge of the state machine (reference/jobs/models.py), and the rules the fixed
variant adds (docs/systems/jobs.md). A row names an invariant only where its checker (systems/jobs/checkers.py)
judges the rule, and a bug only where the bug's registry entry (reference/jobs/bugs.py) names one of the row's
invariants and one of its scenarios. The scenarios of an edge row are those that took the edge in simulation at
seed 1. docs/systems/jobs-rules.md is generated from it."""

from __future__ import annotations

from scenarios.rules import Rule

REF = "reference (docs/systems/jobs.md)"


def _r(section: str, kind: str, rule: str, inv: str = "", run: str = "", bugs: str = "", reason: str = "",
       gap: str = "", sim_only: str = "", native_only: str = "") -> Rule:
    """One row: ``run`` the scenarios that exercise it in both shells, ``sim_only`` and ``native_only`` those that
    run in one shell only (their files say why)."""
    return Rule(section, rule, kind, tuple(inv.split()), sim=(*run.split(), *sim_only.split()),
                native=(*run.split(), *native_only.split()), bugs=tuple(bugs.split()), reason=reason, gap=gap)


RULES: tuple[Rule, ...] = (
    # Seed 004: the single state machine and its edges (the fixed variant's pending -> cancelled is seed 002's DAG).
    _r("seed 004 (package), seed 002 §4.1", "MUST", "one state machine, pending -> running -> done / dead; no "
       "intermediate status is added (progress lives in the payload); a terminal job never changes, but a dead job a "
       "person re-drives", "J5", "J1 J8"),
    _r("seed 004 Enqueue", "edge", "(none) -> pending: an enqueue writes the job pending, due now, with its log row",
       "J5 J6", "J5 J7"),
    _r("seed 004 Claim", "edge", "pending -> running: a claim is one conditional UPDATE ... WHERE id AND status = "
       "'pending'; only a row count of 1 makes it this instance's job", "J5 J1 J2", "J1 J2",
       bugs="claim-unlogged"),
    _r("seed 004 Done", "edge", "running -> done: the outcome of the claim that ran the job", "J5 J1 J2", "J3 J10",
       bugs="unfenced-outcome"),
    _r("seed 004 Fail", "edge", "running -> pending: a failure with retries left puts the job back, due after its "
       "backoff", "J5 J3", "J1 J7", bugs="claim-ignores-backoff"),
    _r("seed 004 Fail", "edge", "running -> dead: the failure past MaxRetry buries the job (alert, a person)",
       "J5 J4", "J1 J9", bugs="reclaim-not-counted"),
    _r("seed 004 Fail (dead: 人工介入)", "edge", "dead -> pending: an operator re-drives a dead job (the job API's "
       "POST /v1/jobs/ID/redrive): due now, retry 0, logged with the operator as actor; its attempts count afresh",
       "J5 J4 J20 J13", bugs="redrive-keeps-retry", sim_only="J15"),
    _r("seed 004 ReclaimStale", "edge", "running -> pending: a claim older than the stale threshold is taken back "
       "(the fixed variant counts it as an attempt)", "J5 J4 J6", "J2 J9", bugs="reclaim-not-counted"),
    _r("seed 002 §4.3, " + REF, "edge", "pending -> cancelled: a job whose hard parent ended dead or cancelled is "
       "cancelled, with its descendants", "J10 J5", "J8", bugs="hard-failure-releases"),
    # Seed 004: claiming, two instances
    _r("seed 004 (package), Claim", "MUST", "two instances share the table: of two concurrent claims of one job "
       "exactly one wins, and a job's work takes effect once", "J1 J2", "J1 J2"),
    _r("seed 004 Claimable", "guard", "a pending job is claimable only once its next_run_at is due", "J3", "J1 J7",
       bugs="claim-ignores-backoff"),
    _r("seed 004 Claimable", "MUST", "candidates are read FIFO (id order), at most ClaimBatch per round (the seed's "
       "bound against one instance starving the other), without a lock: a candidate is not a claim; a worker claims "
       "its candidates in that order (J22 judges each read the simulation observes)", "J22",
       bugs="candidates-by-due-time", sim_only="J1 J7"),
    _r("seed 004 Claimable", "MUST", "a failed candidates read skips the round with a warning; the pool carries on",
       "J11", "J7", bugs="loop-ends-on-db-error"),
    _r("seed 004 Claim", "bound", "a lost claim (another instance won) is not an attempt: it costs no retry: a job "
       "dead of its attempts spent exactly MaxRetry + 1 failures and reclaims (J4 bounds them from above)", "J20 J4",
       "J1 J9", bugs="lost-claim-counted"),
    # Seed 004: retries and dead jobs
    _r("seed 004 Fail", "timing", "a failure's retry is due at now + min(2^retry s, 1 h), retry counted before the "
       "failure, no jitter: J12 judges each next_run_at against the formula from below and above, J3 that no claim "
       "comes before it", "J12 J3", "J1 J7", bugs="backoff-counts-the-failure", sim_only="J14"),
    _r("seed 004 Fail", "bound", "a job runs at most MaxRetry + 1 times and is dead after that many failed attempts",
       "J4", "J9 J1", bugs="reclaim-not-counted"),
    _r("seed 004 Fail", "audit", "a dead job raises an alert for a person (ALERT JOB_DEAD), once, and a job alive "
       "none (the simulation hears the alerts, the native shell reads them in the instances' logs)", "J13",
       "J1 J6 J9"),
    _r("seed 004 Fail", "MUST", "the failure reason is a summary of at most 256 characters, never a full stack (the "
       "agent of an always-failing job answers its whole stack, in both shells)", "J19", "J1 J13",
       bugs="reason-keeps-the-stack"),
    _r("seed 004 Fail, Done", "MUST", "handlers are idempotent by key: a retry or a re-run after a reclaim finds the "
       "work done and does not repeat its effect", "J1", "J2 J3 J10"),
    _r("seed 004 (Task.Type, Payload)", "MUST", "an unregistered type or a payload that does not parse goes dead "
       "at once, with an alert, without retries", "J16 J13", "J6"),
    # Seed 004: reclaim
    _r("seed 004 ReclaimStale", "timing", "the reclaimer runs periodically and returns every stale claim to "
       "pending: no job is left running by a dead worker, and a stopped one's claim is back within the threshold plus "
       "two periods", "J6 J24", "J2 J3 J9"),
    _r("seed 004 ReclaimStale", "timing", "the stale threshold must exceed the longest handler, or a healthy job is "
       "reclaimed and run twice (the fixed variant renews a live claim every heartbeat_s; the native shell records "
       "each kill and SIGSTOP of an instance, which stops all its workers)", "J17", "J4 J2 J7"),
    _r("seed 004 Done, ReclaimStale", "MUST", "after a reclaim the job may be claimed by another instance; the "
       "handler's idempotence is the last line", "J1", "J2 J3"),
    # Seed 004: enqueue
    _r("seed 004 (package), Enqueue", "MUST", "an idempotent key (type + business key) per job: a repeat or a "
       "concurrent duplicate enqueue answers the existing job, never a second one, and is not an error", "J7",
       "J5 J7"),
    _r("seed 004 Enqueue", "guard", "Type and IdempotentKey are required; a payload that cannot be serialised is "
       "refused",
       reason="preconditions on the caller's arguments (a programming error, refused before any write): the "
       "producers never send one, and no fault changes it"),
    _r("seed 004 (package)", "MUST", "a dispatch is not a completion: callers poll for the terminal status; an "
       "unreachable agent is logged, never blocks the caller",
       reason="a duty of the business domain that calls Enqueue; the reference has no agent and no caller of its "
       "own"),
    _r("seed 004 (Task.ID)", "security", "the auto-increment id is internal; only the idempotent key is exposed",
       reason="an interface rule of the job API (reference/jobs/http/app.py), not behaviour a history records; the "
       "API departs from it: it answers a job's id and reads by it (an enqueuer only its own jobs: 404 for "
       "another's)"),
    _r("issue 55 (the job API)", "security", "the job API answers only a caller with a valid token, in a role that "
       "may: an enqueuer enqueues and reads its own jobs (another caller's key is refused, KEY_TAKEN), a reader "
       "reads, an operator cancels and re-drives; every refusal is problem+json and writes nothing",
       reason="an interface rule of the job API (reference/jobs/http/app.py, its OpenAPI document), tested by "
       "tests/jobs/test_jobs_api.py and on gunicorn and PostgreSQL by tests/postgres/test_jobs_api_pg.py; a run's "
       "history records no request"),
    _r("issue 55 (the job API)", "bound", "the job API keeps its document's figures: a body of at most 256 KiB and a "
       "payload of at most 16,000 characters as JSON (413), a job id any positive 64-bit integer (another: 404 before "
       "the database), a job or step naming no timeout_s takes 300 s, an operator's name cut to the log's actor "
       "column; a database it cannot reach answers 503 DATABASE_UNAVAILABLE, writes nothing, and the same request "
       "succeeds once it is back (a connection closed under the pool is replaced before use)",
       reason="interface rules of the job API (reference/jobs/http/app.py, its OpenAPI document), tested at each edge "
       "by tests/jobs/test_jobs_api.py (mutation testing, 2026-12-07: each figure changed by one was green before); a "
       "run's history records no request"),
    _r("seed 004 (package), Pool.Run", "MUST", "a cancelled context drains the jobs in flight and then exits "
       "(graceful stop): a worker asked to stop writes the outcome of the job it holds and claims nothing more (the "
       "drain fault: SIGTERM, then the instance is started again; natively also the stop at every run's end); its "
       "loops end only so (J11)", "J23 J11", "J16 J7", bugs="claim-ignores-the-drain"),
    _r("seed 004 (TaskCfg)", "timing", "suggested numbers: MaxRetry 6, ClaimBatch 10, a 10 min stale threshold "
       "reclaimed every 60 s",
       reason="suggestions (建议): the pool's configuration (systems/jobs/variants.py pool_config), which a "
       "scenario's policy sets; the rows above judge the behaviour under any of them"),
    # Seed 002: task_log
    _r("seed 002 §4.2, §4.4, §4.6", "audit", "every status change writes its task_log row (from, to, message, "
       "detail) in the change's transaction", "J5", "J1 J2", bugs="claim-unlogged"),
    _r("seed 002 §4.2, §4.6", "security", "task_log is append-only: no UPDATE, no DELETE: J21 compares the rows "
       "the simulation's harness read during the run with the log at its end (on PostgreSQL the application role's "
       "grants refuse both: tests/postgres/test_jobs_pg.py)", "J21", bugs="renewal-rewrites-the-claim-row",
       sim_only="J1 J4"),
    _r("seed 002 §4.1", "MUST", "status is an enum and only legal transitions happen: never from done back to "
       "running", "J5", "J1 J8"),
    _r("seed 002 §4.1", "MUST", "a version (optimistic lock) keeps concurrent schedulers from overwriting each "
       "other's status", "J2 J1", "J1 J10", bugs="unfenced-outcome"),
    _r("seed 002 §4.1", "MUST", "priority (higher first) and schedule_at (delayed start) order the scheduler's "
       "query",
       reason="seed 004's Claimable, the system's claim, is FIFO by id with next_run_at; the port takes seed 002's "
       "task_log and DAG, not its priority and schedule_at columns"),
    # Seed 002: task_dependency (the DAG)
    _r("seed 002 §4.3", "guard", "hard edge: the child runs only after its parent succeeded", "J8", "J8",
       bugs="claimable-ignores-dependencies hard-failure-releases"),
    _r("seed 002 §4.3", "guard", "soft edge: the child runs once its parent ended, whatever the outcome", "J8", "J8"),
    _r("seed 002 §4.3", "timing", "time edge: the child runs once its parent ended or timed out (timeout_s after it "
       "started)", "J8", "J8 J11"),
    _r("seed 002 §4.3", "MUST", "a job is claimable only when its in-degree is 0, and the in-degree is kept in the "
       "transaction that releases an edge", "J9 J8", "J8", bugs="claimable-ignores-dependencies"),
    _r("seed 002 §4.3", "guard", "no duplicate edge and no self-dependency (UNIQUE, CHECK), and a known kind "
       "(hard, soft, time)", "J15", "J12"),
    _r(REF, "reference", "a mission whose edges form a cycle, leave the mission or name two steps alike is refused, "
       "and a mission is written whole or not at all", "J15", "J12"),
    _r("seed 004 Enqueue, " + REF, "reference", "a mission id is its idempotent key and a mission is created once, "
       "whole: the same mission again answers its jobs; the same id with other steps or edges is refused "
       "(MISSION_CONFLICT) and writes nothing, so no job ever waits on an edge that was never written", "J15 J9 J7",
       "J12"),
    _r("seed 002 §4.2, §4.5", "MUST", "log partitioning and retention, and the listed indexes",
       reason="operations and performance (pg_cron, indexes): no rule of behaviour a run could break"),
    # What the fixed variant adds (docs/systems/jobs.md)
    _r(REF, "reference", "outcomes carry the claim's fencing token: a worker whose claim was reclaimed writes "
       "nothing", "J2", "J3 J10", bugs="unfenced-outcome"),
    _r(REF, "reference", "a reclaim counts as an attempt: a job whose work kills its worker goes dead after "
       "MaxRetry + 1", "J4 J6", "J9", bugs="reclaim-not-counted"),
    _r(REF, "reference", "a reclaim skips rows a stuck transaction holds (SKIP LOCKED) and takes them in a later "
       "period: a worker stopped before its commit holds up no other stale claim, each taken back within "
       "stale_after_s plus two reclaim periods (the simulation's write lock is the whole database's: J17's file says "
       "why it runs natively only; tests/postgres/test_jobs_pg.py shows it on one PostgreSQL transaction)", "J24",
       bugs="reclaim-not-counted", native_only="J17"),
    _r(REF, "reference", "a failure counts its retry in SQL (retry = retry + 1 in the conditional update), so two "
       "writers never lose one", "J4", "J10"),
    _r(REF, "reference", "a pool worker's or reclaimer's loop runs until its instance drains or dies", "J11", "J7",
       bugs="loop-ends-on-db-error"),
    _r(REF, "reference", "the pool's loops carry on from a failed round or write (the seed: skip the round, "
       "reclaim settles it), and the code raises no defect (an exception no outage raises: a TypeError, a KeyError)",
       "J14", "J1 J7"),
    _r(REF, "reference", "a worker gives a hung handler's call up at the handler timeout (checked at the heartbeat "
       "that reaches it) and fails the attempt, which is retried after its backoff", "J18 J12", "J13"),
    _r(REF, "reference", "timestamps come from the workers' clock, never the server's now()",
       reason="a port decision that keeps the simulation's virtual time and the checkers' clocks one; J3 and J8 "
       "read those times"),
)
