"""The status sync's rule-traceability matrix (scenarios.rules): the normative rules of seed 003 §3-§8, §10, §13 and
the §17 checklist, each with the invariants (systems/statussync/checkers.py) that judge it on a history, the
catalogue scenarios that exercise it in simulation and on the real stack, and the registered bugs
(reference/statussync/bugs.py) that break it; a rule nothing judges says why, or is a gap naming what would judge
it. docs/systems/statussync-rules.md is generated from it."""

from __future__ import annotations

from scenarios.rules import Rule

REF = "reference (docs/systems/statussync.md)"
# The catalogue's scenarios without a native form (their why_not says why; tests/statussync/test_statussync_native.py
# keeps this equal to the catalogue). Every other scenario's native run plays the same workload and faults on the
# real stack and is judged by the same checkers, so by default a row's native scenarios are its simulated ones but
# these.
SIM_ONLY = frozenset({"Y21"})


def _r(section: str, kind: str, rule: str, inv: str = "", sim: str = "", bugs: str = "", reason: str = "",
       gap: str = "", native: str | None = None) -> Rule:
    """``native``: the row's native scenarios when they are not its simulated ones that run natively."""
    ran = tuple(s for s in sim.split() if s not in SIM_ONLY) if native is None else tuple(native.split())
    return Rule(f"seed 003 {section}" if section[0] == "§" else section, rule, kind, tuple(inv.split()),
                sim=tuple(sim.split()), native=ran, bugs=tuple(bugs.split()), reason=reason, gap=gap)


RULES: tuple[Rule, ...] = (
    # The lifecycle (§4.1, §4.2): every edge the service takes, and the ones it has no command for yet.
    _r("§3.1", "edge", "(none) -> PENDING: a task is created with its steps, its first version and its outbox rows "
       "in one transaction", "S5 S6", "Y1 Y11"),
    _r("§3.4, §3.5", "edge", "PENDING -> RUNNING: the first accepted step event starts the task", "S5", "Y1 Y5"),
    _r("§3.9", "edge", "RUNNING -> SUCCEEDED: only the coordinator's TASK_COMPLETED ends a task successfully",
       "S5 S13", "Y1 Y14"),
    _r("§3.9, §4.4", "edge", "RUNNING -> FAILED: only the coordinator's TASK_FAILED (after its failure policy) fails "
       "a task", "S5 S13", "Y6 Y13 Y15", bugs="registry-latest-version"),
    _r("§4.1", "edge", "RUNNING -> CANCELLED: a cancelled task", "S5",
       gap="no cancel command is built (the coordinator never cancels); a scenario cancelling a running task"),
    _r("§4.1", "edge", "PENDING -> SUCCEEDED: a task ended before any step started", "S5",
       gap="the coordinator always starts a step first; no scenario ends a task from PENDING"),
    _r("§4.1", "edge", "PENDING -> FAILED: a task failed before any step started", "S5",
       gap="no scenario fails a task before its first step starts"),
    _r("§4.1", "edge", "PENDING -> CANCELLED: a task cancelled before it started", "S5",
       gap="no cancel command is built"),
    # Creation and the event entry
    _r("§3.1", "MUST", "the task, its steps and their notification commands commit in one transaction; the creation "
       "is bound to the definition versions of the moment", "S6 S14", "Y1 Y15"),
    _r("§3.2, §3.5, §10", "MUST", "a producer retries with the same eventId and content; the service answers the "
       "first result again (the same taskVersion) and makes no second change", "S1", "Y1 Y2",
       bugs="dedup-skipped"),
    _r("§3.2, §10, §17", "guard", "the same eventId with other content is refused (payload hash)", "S2", "Y2 Y14",
       bugs="conflict-not-refused producer-seq-in-memory"),
    _r("§3.2, §3.3, §17", "security", "the executionToken binds task, step, attempts, operation and producer; a "
       "request whose fields differ from the token's is refused", "S3", "Y16", bugs="token-unchecked"),
    _r("§3.2, §4.7", "guard", "the operationCode must be the step's registered one, its producer the definition's, "
       "its event type and data schema among the operation's allowed ones", "S3 S14", "Y16 Y1"),
    _r("§3.2, §4.1", "guard", "an older attempt's late event is ignored and changes nothing", "S4", "Y3",
       bugs="old-attempt-accepted"),
    _r("§3.2, §5.1", "guard", "only a sourceSeq above the producer's last accepted one changes state", "S4 S5", "Y4",
       bugs="sequence-unchecked"),
    _r("§3.3, §5, §17", "MUST", "sourceSeq is per producer stream: service A's seq 2 never makes service B's seq 1 "
       "old", "S4", "Y5", bugs="sequence-per-task"),
    _r("§3.3", "MUST", "a producer keeps its outcome, its pending event and its next sourceSeq in its own durable "
       "transaction and restores them on restart", "S2 S13", "Y14", bugs="producer-seq-in-memory"),
    _r("§3.3, §5 (DDL)", "MUST", "the health reconciler is a producer of its own: its events never move a worker's "
       "sourceSeq (the seed's one task_step.source_seq and its log key without the producer do)", "S4", "Y7",
       bugs="health-shares-step-seq"),
    _r("§3.6, §17", "MUST", "taskVersion and stepVersion are assigned under the task's row lock: unique and "
       "contiguous per task and per step attempt, in commit order", "S6", "Y5 Y1"),
    _r("§3.5", "MUST", "a heartbeat only updates lastHeartbeatAt: no version, nothing published", "S6", "Y7"),
    _r("§3.5", "MUST", "the answer carries the acceptance, the versions and the statuses after the commit", "S1",
       "Y1"),
    _r("§3.7, §9.3", "MUST", "durationMs is the producer's monotonic measure; cross-machine wall clocks never "
       "overwrite it", gap="no checker compares task_step.duration_ms with the reported durationMs, and no scenario "
       "skews the producers' clocks (±5 min)"),
    _r("§3.8", "MUST", "GET /api/tasks/{id}/events?afterTaskVersion resumes the timeline and tells a purged window",
       gap="the timeline endpoint and its purge are not built; a scenario purging a timeline window"),
    _r("§3.9", "MUST", "the service never derives a task's end from its steps; only the coordinator reports it",
       "S13 S5", "Y6 Y13"),
    # States, health, registries
    _r("§4.2, §17", "guard", "a terminal status never goes back to running in its attempt (late reports refused)",
       "S5", "Y6", bugs="terminal-regression"),
    _r("§4.2", "audit", "a correction is an audited admin command with operator, reason, old and new value",
       reason="judged by tests/statussync/test_statussync_service.py and test_statussync_api.py (service."
       "correct_task: the audit row, the new version, its event and outbox rows in one transaction, the operator "
       "from the admin's token, refusals writing nothing); no scenario's workload corrects a task"),
    _r("§4.3, §4.4, §17", "MUST", "a heartbeat timeout sets health=STALE and leaves the lifecycle; STALE only on a "
       "running step; HEALTHY again when heartbeats return", "S10", "Y7", bugs="stale-marks-failed"),
    _r("§4.4", "MUST", "a step failure is not a task failure: the coordinator retries with a new attempt where the "
       "operation's failure policy allows, else reports TASK_FAILED", "S13 S4", "Y3 Y13"),
    _r("§4.5, §4.6, §17", "guard", "only registered business statuses are accepted, mapped to the lifecycle by the "
       "definition version the task bound; a new version never changes a running task's meaning", "S14 S13", "Y15",
       bugs="registry-latest-version"),
    _r("§4.6", "MUST", "allowed_from: a business status only follows the statuses its definition allows",
       gap="the service does not check allowed_from (steps running in parallel interleave their stages); a checker "
       "of business-status predecessors per step"),
    # The outbox and the relay
    _r("§5.1, §10, §17", "MUST", "the current state, the immutable event, the versions, the dedup result and the "
       "outbox rows commit in one transaction", "S6", "Y8 Y1", bugs="outbox-after-commit"),
    _r("§5.1", "MUST", "each accepted change writes a USER_SUMMARY and a TASK_DETAIL row, each built from the "
       "validated state, never the producer's JSON", "S6 S11", "Y1"),
    _r("§5.2, §11.4", "MUST", "relays claim with a lease (SKIP LOCKED); a lease that runs out is taken over, so a "
       "killed or stopped relay's rows are published (maybe twice)", "S7 S9", "Y9", bugs="lease-never-expires"),
    _r("§10, §11.4", "bound", "a retryable publish error (timeout, 429, 5xx) backs off exponentially with jitter; a "
       "permanent one goes DEAD; no hot loop", "S7", "Y10", bugs="permanent-retried"),
    _r("§5.2", "MUST", "every publication carries the complete state and its version, so duplicates and reordering "
       "need no global order", "S9 S8", "Y9 Y21"),
    _r("§5.2 (last)", "MUST", "a producer's completion that never reached the service is not the outbox's: the "
       "producer's own ledger reports it after a crash", "S13", "Y14"),
    # Channels, tokens, projections
    _r("§3.3.1, §17", "security", "each projection carries only its whitelist: the summary no step results or "
       "result references; none a diagnostics reference", "S11", "Y1", bugs="summary-leaks-detail"),
    _r("§6.1, §6.2, §6.3", "MUST", "a user's tasks reach its one summary channel; details only reach clients that "
       "opened them", "S8 S15", "Y1 Y17"),
    _r("§6.5, §17", "bound", "at most 20 detail subscriptions a connection, enforced on the server; the client "
       "closes the least recently used first", "S15", "Y17"),
    _r("§6.6", "security", "project, tenant and system broadcasts carry nothing a member may not see",
       gap="broadcast channels are not built"),
    _r("§6.8, §17", "MUST", "a confirmed failure reaches the user summary channel with its notice, even for a user "
       "who opened no detail", "S12 S8", "Y13", bugs="failure-detail-only"),
    _r("§7.1", "security", "the connection token names the user; its channels are server-side subscriptions", "S15",
       "Y17"),
    _r("§7.2, §17", "security", "a detail subscription token is signed only after the task's ACL is checked, for "
       "exactly that channel, short-lived", "S15", "Y17", bugs="detail-token-no-acl"),
    # The client
    _r("§8.1, §12", "MUST", "each object only takes a higher version; duplicates and reordered publications change "
       "nothing", "S9", "Y21 Y9"),
    _r("§8.2, §17", "MUST", "the summary and the detail keep separate version gates", "S8", "Y11",
       bugs="one-version-gate"),
    _r("§8.3, §17", "MUST", "subscribe first, buffer, load the snapshot, replay by version", "S8", "Y11",
       bugs="snapshot-then-subscribe"),
    _r("§8.4, §13.1, §17", "MUST", "a reconnect recovers from history when it is contiguous, else loads the "
       "snapshot; the client never trusts recovered=false", "S8", "Y12 Y20", bugs="ignores-recovered-false"),
    _r("§8.5", "MUST", "notices are deduplicated by their id, apart from the state's gate; a snapshot never shows a "
       "notice again", "S12", "Y13 Y6"),
    _r("§10, §12", "MUST", "every online client converges on the database after the faults heal", "S8",
       "Y12 Y18 Y19 Y20 Y10"),
    _r("§13.2", "timing", "visible unfinished tasks are checked by status:batchGet every 30-60 s with jitter", "S8",
       "Y10"),
    _r("§13.3", "MUST", "terminal states, new attempts and failures are never merged away under overload",
       gap="the relay publishes every row (nothing is merged yet); a merging relay and a progress-storm scenario "
       "that checks terminal rows are never merged"),
    _r("§11.2", "MUST", "two API replicas: a replica lost after its commit loses no change (the retry is answered "
       "from the dedup table)", "S1 S6", "Y1"),
    _r("§11.5, §11.7, §12", "MUST", "nodes share one Redis engine: a node lost, its clients reconnect to another and "
       "recover their gap from the shared history (no new epoch), and converge", "S8 S9", "Y22"),
    _r(REF, "reference", "the simulation's database gives plain reads the latest commit (READ COMMITTED), not "
       "InnoDB's REPEATABLE READ snapshot; every read that decides a write is a locking read", reason="a property of "
       "the simulation shell: no reference rule reads a plain snapshot before it writes (docs/systems/"
       "statussync.md); every native run (the native column above) is on MariaDB's InnoDB at REPEATABLE READ "
       "(stack/mariadb.py), where the snapshot is real"),
)
