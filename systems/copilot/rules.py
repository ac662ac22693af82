"""The Copilot's rule-traceability matrix (issue 54; scenarios.rules): every normative rule of seed 000 (its data
model, state machine, outbox, idempotency, recovery, security and the acceptance tests of §8, each test folded into
the rule it tests), every edge of the state machine (reference/copilot/states.py), and the rules the reference adds
(docs/systems/copilot.md). A row names an invariant only where its checker (systems/copilot/checkers.py) judges the
rule, and a bug only where the bug's registry entry (reference/copilot/bugs.py) names one of the row's invariants
and one of its scenarios. The scenarios of an edge row are those that took the edge in simulation at seed 1 (the
happy path's edges: the ones that take it under their faults; CANCEL_PENDING -> EXECUTING also R4, whose lost cancel
answers must not take it). docs/systems/copilot-rules.md is generated from it."""

from __future__ import annotations

from scenarios.rules import Rule

SEED = "seed 000"
REF = "reference (docs/systems/copilot.md)"
# An edge of the seed's table this reference has no path to: no history of it can take the edge, so none can judge
# it (I4 judges any taken edge legal and audited; it would judge this one on a reference that took it).
NEVER_TAKEN = "no history can take this edge in this reference (I4 would judge it on one that did): "


def _r(section: str, kind: str, rule: str, inv: str = "", run: str = "", sim: str = "", native: str = "",
       bugs: str = "", reason: str = "", gap: str = "") -> Rule:
    """One row: ``run`` lists scenarios run in both shells, ``sim`` and ``native`` those of one shell only."""
    where = section if section.startswith("reference") else f"{SEED} {section}"
    return Rule(where, rule, kind, tuple(inv.split()), sim=tuple(run.split() + sim.split()),
                native=tuple(run.split() + native.split()), bugs=tuple(bugs.split()), reason=reason, gap=gap)


def _edge(frm: str, to: str, rule: str, inv: str = "I4", run: str = "", sim: str = "", bugs: str = "",
          gap: str = "", section: str = "§7.1") -> Rule:
    return _r(section, "edge", f"{frm} -> {to}: {rule}", inv, run, sim, bugs=bugs, gap=gap)


RULES: tuple[Rule, ...] = (
    # The opening: what the backend is for and what decides.
    _r("(opening), §3.2", "MUST", "task execution follows the persisted PostgreSQL state, never a cache's or a "
       "message's presence: losing Redis or a message changes no outcome", "I10 I3", "B6 R12"),
    _r("(opening)", "security", "the model proposes a plan but never decides that a task is created, approved or "
       "airborne: the service checks and persists those facts (no flight without the user's permission and an "
       "approval of the confirmed version)", "I13 I14", "S1 S6 S8"),
    # §3.1 data relations
    _r("§3.1, §6.1", "MUST", "a confirm creates the task from exactly the draft version confirmed (draft_id, "
       "draft_version kept on the task)", "I15", "C4 S3"),
    _r("§3.1, §6.1", "MUST", "the task keeps a snapshot of the confirmed version's route, area, device and "
       "parameters: a later revision of the draft changes nothing of it", "I51", "C4", bugs="route-rewritten"),
    _r("§3.1, §4.2", "MUST", "an approval is not an execution, a created task is not a dispatched one, a dispatch "
       "is not a takeoff",
       reason="a definition of what the statuses mean; what each one requires is its edge's row below"),
    _r("§3.2", "MUST", "Milvus (vector search) is never the record of a business fact",
       reason="the reference has no vector store: the knowledge retrieval of the seed is outside the task backend "
       "the harness builds"),
    # §4.1 from confirm to execution; §4.2 sync and async
    _r("§4.2, §6.3", "MUST", "a draft is created synchronously in a short transaction and answered with its draft id; "
       "a retry of the request (same key) gets the same draft back", "I53", "B11", bugs="draft-key-dropped"),
    _r("§4.2", "MUST", "a draft generated in stages is persisted as GENERATING, then READY or FAILED: only a READY "
       "version becomes a task (a GENERATING one is refused DRAFT_NOT_READY); here a plan arrives by a revision and no "
       "path writes FAILED", "I54 I27", "S3",
       bugs="unready-draft-confirmed"),
    _r("§4.1, §4.2", "MUST", "the confirm answers with the task id once permission, version, approval and creation "
       "are done; dispatch, execution and the report follow asynchronously", "I15 I3", "C4 B8"),
    # §4.3 messages
    _r("§4.3", "MUST", "every task change is an event (TaskCreated, TaskDispatchResult, TaskCompleted...) carrying "
       "its event id, task id, type, time and the task's version", "I5", "C1 B3"),
    _r("§4.3, §5.2, §6.4, §8.1", "MUST", "consumers assume at-least-once delivery: a duplicate or redelivered event "
       "takes effect once (processed_event inserted in the event's transaction; a conflict ends the handling)",
       "I6 I17", "B1 C3 C5 B4", bugs="consumer-no-dedup"),
    _r("§4.3", "MUST", "the broker carries events; it neither replaces the state machine nor makes the database "
       "and the platform consistent",
       reason="a statement of the design's division of labour; the state machine's and the reconciler's rows are "
       "what it asks of the code"),
    # §5.2 transactional outbox
    _r("§4.1, §5.2, §8.1", "MUST", "task, audit row and outbox event are written in one PostgreSQL transaction: all "
       "or none (a database error during creation leaves none)", "I5 I4", "C1 B3", bugs="audit-outside-tx"),
    _r("§5.2, §8.1", "MUST", "a separate publisher sends an outbox row only after its transaction committed (never "
       "before: a rolled-back task publishes nothing)", "I6", "C1 C2", bugs="publish-before-commit"),
    _r("§5.2", "MUST", "a row is marked sent only after the broker acknowledged it; what the broker refused is put "
       "back and sent again, what it accepted is marked before the publisher claims again", "I37 I6", "B15 C3",
       bugs="refused-round-unmarked"),
    _r("§5.2, §5.5, §8.1", "MUST", "the broker down after commit: the row stays in the outbox, backs off, and is "
       "sent once the broker is back (within the row's retry budget)", "I6 I30 I36", "C2 B2"),
    _r("§5.2, §8.1", "MUST", "the publisher dying after the broker's ack and before marking sent resends the event; "
       "the duplicate creates no second task and no second flight", "I6 I1", "C3", bugs="consumer-no-dedup"),
    # §5.3 atomic state changes
    _r("§5.3, §7.1, §8.1", "MUST", "every status change is a conditional UPDATE on (id, expected status, expected "
       "version) that bumps the version: a writer with a stale read never overwrites a newer state",
       "I4", "B5 C5 C6", bugs="no-version-check no-version-predicate"),
    _r("§5.3", "MUST", "an UPDATE whose row count is not 1 lost: nothing else of that change (audit, event) is "
       "written", "I4", "C6", bugs="ignore-zero-rowcount"),
    _r("§5.3", "audit", "each status change writes its audit row and its follow-up outbox event in its own "
       "transaction: the audit chain replays the task to its row, version by version", "I4 I5", "B3 B5 C5"),
    _r("§5.3, §5.4", "timing", "no transaction or lock is held across a platform call, and none spans a flight (the "
       "reference calls no model, and publishes only after commit: the outbox's rows)", "I20", "B10 B9"),
    # §5.5 timeouts, retries, dead letters, compensation
    # The platform's: I56 reads the real stack's recorded calls (the simulation applies each call's timeout itself,
    # CopilotLatency.client_timeout_s, so no simulated history can show a call without one, and a registered bug
    # must be caught in simulation: tests/core/test_every_bug_is_caught.py). Shown instead by removing the adapter's
    # timeout once: native R1's late answers then came 12 s after the create.
    _r("§5.5", "timing", "every call to the platform and the devices has its own timeout (the adapter's connect 1 s "
       "and read 2 s)", "I56", native="R1 B9"),
    _r("§5.5", "timing", "every call to the database has its own timeouts (connect 3 s, statement 5 s, lock wait 3 s, "
       "idle in a transaction 10 s: reference/copilot/settings.py database_engine)",
       reason="no history can show a database call without its timeout: the simulation runs statements in virtual "
       "time with no server to cancel them, and a native run's statements end far inside 5 s (a Toxiproxy latency "
       "on the PostgreSQL link would slow every process's every statement, not one). Proved on the reference's own "
       "engine and a real PostgreSQL by tests/postgres/test_copilot_db_timeouts.py (nightly): pg_sleep cancelled "
       "by the statement timeout (57014) after 5.0 s, a held advisory lock given up (55P03) after 3.0 s, a server "
       "that accepts and never answers given up by libpq after 3.0 s; with the timeouts removed each of its four "
       "tests fails (the call still waits at the test's 60 s bound)"),
    _r("§5.5, §6.4, §8.2", "MUST", "a timeout means the caller does not know, not that the remote failed: after a "
       "dispatch timeout the platform is asked first, never sent the create again blindly", "I1 I21", "R1 B9",
       bugs="blind-resend"),
    _r("§5.5", "bound", "retryable errors (network, throttling, unavailable) are retried a bounded number of times "
       "with exponential backoff and jitter", "I19", "T1 T6", bugs="retry-no-cap"),
    _r("§5.5, §7.1", "MUST", "a definite rejection is not retried automatically: DISPATCH_FAILED, no second create "
       "of a takeoff", "I44", "T3", bugs="rejection-retried"),
    _r("§5.5", "timing", "the retry numbers come from the platform's limits, configured, never an unverified fixed "
       "count",
       reason="configuration: the numbers are one dataclass (reference/copilot/policy.py) a scenario's policy "
       "overrides; I19 and I30 judge that the code obeys them"),
    _r("§5.5, §6.4", "bound", "a message that keeps failing is dead-lettered at its last allowed delivery (not "
       "sooner, never delivered past it), with its event id, task id, error and retry history (its own failures), "
       "then acked; it counts the re-drives made of it", "I32 I16 I41", "T2",
       bugs="dead-letter-early dead-letter-unacked"),
    _r("§5.5", "audit", "what outlives its retry policy (an outbox event, a report) goes DEAD and pages an "
       "operator once", "I31", "R11"),
    _r("§5.5", "MUST", "a dead item is re-driven only by a person after review, with a fresh budget, audited; it "
       "then takes effect", "I26 I6 I8 I48", "R11 T2", bugs="redrive-unpublished"),
    _r("§5.5", "audit", "a consumer's dead letter is for a person to look into, like a DEAD outbox row or report: it "
       "pages an operator once (DEAD_LETTER)", "I31", "T2 R16", bugs="dead-letter-silent"),
    _r("§5.5, §8.2", "MUST", "compensation repairs from what really happened: a failed report upload is retried and "
       "never changes the task's result", "I8 I4", "R5", bugs="report-fails-task"),
    _r("§5.5, §6.4", "MUST", "a platform with neither idempotency key nor query: an uncertain takeoff is never "
       "resent automatically; it goes to MANUAL_REVIEW", "I1", "T4", bugs="blind-resend"),
    # §6.2 the task table
    _r("§6.2", "MUST", "a task's status is one of the eleven statuses",
       reason="the database refuses any other value (CHECK ck_task_status, checked by name in tests/postgres); "
       "no history can hold one"),
    _r("§6.2, §8.1", "MUST", "UNIQUE (user_id, idempotency_key): concurrent confirms with one key make one task and "
       "every answer names it", "I2", "C4 B8"),
    _r("§6.2", "audit", "the status history is kept in task_audit_log and every dispatch attempt in its own row, not "
       "only the last error", "I4 I21", "R13 R14"),
    _r("§6.2", "MUST", "external_task_id (the platform's id, not ours) is stored to query the platform's real state",
       "I21", "R1 R2 R6"),
    # §6.3 idempotency keys
    _r("§6.3", "MUST", "keys are per business operation: the same key with another draft is refused "
       "(IDEMPOTENCY_KEY_REUSED) and the first task stays the only one", "I2 I15", "S4"),
    _r("§6.3", "MUST", "the client keeps its key across the retries of one user operation",
       reason="a duty of the client: the harness's users keep their key across retries (systems/copilot/users.py); "
       "the server's side of it is the row above and I2"),
    _r("§6.3", "MUST", "confirming a draft version that already made a task answers with that task, never a second "
       "one (whatever the key)", "I42 I15", "C4"),
    # §6.4 consumers
    _r("§6.4", "MUST", "a consumer checks the task's status and version before acting: an event that no longer "
       "applies changes nothing", "I4", "C5 B1"),
    _r("§6.4", "MUST", "a consumer acks only after its outcome committed (processed or dead-lettered)", "I33 I6",
       "B14", bugs="ack-unrecorded-failure"),
    _r("§6.4", "MUST", "DISPATCHING and the attempt are persisted before the platform is called, and the status is "
       "written back from the definite answer", "I21 I20", "R2 R13"),
    _r("§6.4, §8.2", "MUST", "a process dying after a successful dispatch is recovered by asking the platform (or "
       "its key), never by trusting processed_event alone", "I1 I21 I18", "R2 R6 R13",
       bugs="reconcile-redispatch-blind"),
    # §6.5 service interfaces
    _r("§6.5", "MUST", "confirmDraft checks, creates and writes the outbox; dispatchTask runs in the async "
       "consumer; reconcileTask settles the uncertain",
       reason="the shape of the services (reference/copilot/api.py, services/); their behaviour is in the rows "
       "above and below"),
    _r("§6.5", "MUST", "the transaction lives in its own service method (no @Transactional self-invocation), and no "
       "annotation makes the database, broker, object store and platform one transaction",
       reason="Spring's proxy rule: the Python reference opens every transaction explicitly (Runtime.transact); "
       "the cross-system half is the outbox's and I20's rows"),
    # §7.1 the state machine: one row per edge of reference/copilot/states.py
    _r("§7.1", "MUST", "only the table's transitions happen: no jump between arbitrary statuses", "I4", "C5 C6 B5"),
    _r("§7.1, §8.2", "MUST", "terminal tasks never change: late telemetry or a duplicate completion never moves "
       "COMPLETED back", "I4 I9", "R3 R5", bugs="report-fails-task"),
    _edge("(none)", "CREATED", "a confirm creates the task at version 0 with its creation audit and TaskCreated",
          "I4 I5", "C1 C4"),
    _edge("CREATED", "QUEUED", "once, when its TaskCreated is consumed (or the reconciler finds its event lost)",
          "I4 I6 I17", "B1 C3 R12", bugs="consumer-no-dedup"),
    _edge("CREATED", "CANCELLED", "a cancel before any flight exists cancels at once", "I4 I35", "B9"),
    _edge("QUEUED", "VALIDATING", "the dispatcher starts the pre-flight check", "I4", "B4 C5"),
    _edge("QUEUED", "CANCELLED", "a cancel before any flight exists cancels at once", "I4 I35", "B9"),
    _edge("VALIDATING", "DISPATCHING", "only when the pre-flight check passed: airspace open, device fit, an "
          "approval of the confirmed version", "I12 I14 I23 I4", "S7 S8",
          bugs="skip-airspace-recheck skip-device-recheck"),
    _edge("VALIDATING", "FAILED", "the pre-flight check refused, for a cause that held, audited", "I28 I4", "S7 S8"),
    _r("§7.1", "edge", "VALIDATING -> CANCELLED: a cancel during the pre-flight check, before any flight",
       reason=NEVER_TAKEN + "VALIDATING commits only together with DISPATCHING or FAILED (dispatch.begin is one "
       "transaction), so no cancel ever sees it; a reference whose pre-flight check had a transaction of its own "
       "would take it"),
    _edge("DISPATCHING", "EXECUTING", "only on the platform's acceptance (reliable evidence of the flight), with its "
          "external_task_id", "I21 I1 I4", "R1 R2 R6"),
    _edge("DISPATCHING", "DISPATCH_FAILED", "only on a definite rejection, or a query proving no flight was made",
          "I21 I4", "T3 R13 R14 B12"),
    _edge("DISPATCHING", "MANUAL_REVIEW", "the outcome is unknown and cannot be learnt (no key and no query, or the "
          "platform silent past escalate_after_s)", "I46 I1 I3 I4", "T4", sim="R8"),
    _edge("EXECUTING", "COMPLETED", "only on a trusted completion (the platform's event or its answer to a query)",
          "I18 I4", "R3 R7"),
    _edge("EXECUTING", "FAILED", "only when the platform says the flight failed or was aborted", "I18 I4", "T5 R7",
          bugs="reconcile-fail-blind"),
    _edge("EXECUTING", "CANCEL_PENDING", "a user's cancel of a flying task, which is then sent to the platform",
          "I35 I29 I4", "R4 R9 R15 T6"),
    _edge("EXECUTING", "MANUAL_REVIEW", "the platform silent about the flight past escalate_after_s", "I46 I3 I4",
          "R10", sim="R8", bugs="escalate-without-waiting"),
    _edge("DISPATCH_FAILED", "QUEUED", "a re-dispatch after a check (compensation), under max_dispatch_attempts",
          "I21 I1 I4", "R13 R14 B12"),
    _r("§7.1", "edge", "DISPATCH_FAILED -> MANUAL_REVIEW: a failed dispatch whose next step needs a person",
       reason=NEVER_TAKEN + "no code path takes it (after_dispatch_failed re-queues or fails, in the transaction "
       "that wrote DISPATCH_FAILED)"),
    _edge("DISPATCH_FAILED", "FAILED", "a definite rejection, or the attempt cap reached (DISPATCH_ABANDONED)",
          "I21 I4", "T3 R14"),
    _r("§7.1", "edge", "DISPATCH_FAILED -> CANCELLED: the user gives up the retry of a dispatch that made no flight",
       reason=NEVER_TAKEN + "DISPATCH_FAILED commits only together with QUEUED or FAILED (dispatch.rejected, the "
       "reconciler's not-created), so no cancel ever sees it"),
    _edge("CANCEL_PENDING", "CANCELLED", "only on the platform's confirmation of the cancel", "I7 I4",
          "R4 R9 R15", bugs="cancel-unconfirmed", section="§7.1, §7.2"),
    _edge("CANCEL_PENDING", "EXECUTING", "the platform refused the cancel: the flight flies on (a lost answer is no "
          "refusal)", "I45 I4", "C6 R4",
          bugs="cancel-timeout-flies-on"),
    _edge("CANCEL_PENDING", "COMPLETED", "the flight completed before the cancel took", "I18 I4", "B9 T6"),
    _edge("CANCEL_PENDING", "MANUAL_REVIEW", "the platform silent about a pending cancel past escalate_after_s",
          run="R17"),
    _edge("MANUAL_REVIEW", "EXECUTING", "a supervisor's resolution the platform confirms, audited with the operator's "
          "id", "I4 I18 I26", "R10", section="§7.1, §7.3"),
    _edge("MANUAL_REVIEW", "QUEUED", "a supervisor's redispatch, reusing the last attempt's platform key",
          "I4 I1 I21 I26", run="R17", section="§7.1, §7.3"),
    _edge("MANUAL_REVIEW", "COMPLETED", "a supervisor's resolution the platform confirms", "I4 I18 I26", run="R17",
          section="§7.1, §7.3"),
    _edge("MANUAL_REVIEW", "FAILED", "a supervisor's resolution the platform confirms", "I4 I18 I26", run="R17",
          section="§7.1, §7.3"),
    _edge("MANUAL_REVIEW", "CANCELLED", "a supervisor's resolution the platform confirms", "I4 I18 I26", run="R17",
          section="§7.1, §7.3"),
    # §7.2 reconciliation and compensation
    _r("§7.2", "timing", "a reconciler scans tasks stuck in QUEUED, DISPATCHING, EXECUTING (and CANCEL_PENDING) past "
       "their thresholds: every task settles within the recovery bound", "I3", "R6 R7 R9 R12 R13"),
    _r("§7.2", "MUST", "a stale DISPATCHING task is settled from the platform's answer: created -> write back and "
       "advance; definitely not created -> resubmit; unknown -> manual review", "I1 I21 I18", "R6 R13 R14 T4",
       bugs="reconcile-redispatch-blind"),
    _r("§7.2", "MUST", "a stale EXECUTING task is settled from the platform's answer, never declared failed",
       "I18", "R7 T5", bugs="reconcile-fail-blind"),
    _r("§7.2, §8.2", "MUST", "CANCELLED only once the platform confirmed the cancel; a timed-out cancel stays "
       "CANCEL_PENDING", "I7", "R4 R9", bugs="cancel-unconfirmed"),
    _r("§7.2, (opening)", "MUST", "a cancel is sent to the platform only for a task that is CANCEL_PENDING: a cancel "
       "request delivered after its task settled (or after the platform refused it) sends nothing; the persisted "
       "status decides, not the message", "I40", "T7 T6 R15"),
    _r("§7.2", "MUST", "reconciliation reads the database, the broker's records, the platform, the last telemetry "
       "and the recorded requests",
       reason="a list of the reconciler's sources; what it must conclude from them is each stale status's row"),
    # §7.3 audit and security
    _r("§7.3", "audit", "the audit covers a person's confirm, an approval decided or revoked, creation, dispatch, "
       "cancel, failure, manual intervention and completion", "I26 I4", "R10 R11 S6 S8"),
    _r("§7.3", "audit", "each audit row records the actor, the action, the task, the statuses before and after, the "
       "time, the request's correlation id and a result summary (a person's request: its X-Request-Id; a consumed "
       "event: its event id); a repeated request (a replayed draft or confirm, a repeated cancel: answered 200) "
       "writes no row", "I4 I22 I55", "C4 R11 T2", sim="R17 S8",
       bugs="audit-without-request-id audit-correlated-to-the-item"),
    _r("§7.3", "security", "the audit log cannot be changed or deleted through the application", "I47", sim="R8",
       native="S5", bugs="audit-rewritten"),
    _r("§7.3", "security", "a user operates only devices and areas they are permitted: no flight otherwise",
       "I13", "S1"),
    _r("§7.3", "security", "a user reads and cancels only their own tasks (another's is answered as not found)",
       "I22", "S1"),
    _r("§4.1, §7.3", "guard", "right before a flight the airspace is checked again, never trusted from the confirm",
       "I12", "S7", bugs="skip-airspace-recheck"),
    _r("§4.1, §7.3", "guard", "right before a flight the device is checked again: offline, unknown or under the "
       "minimum battery never flies", "I23", "S8", bugs="skip-device-recheck"),
    _r("§6.1, §7.3", "guard", "right before a flight the approval is checked again: an approval of exactly the "
       "confirmed version, not revoked, never a generic 'approved' flag", "I14", "S6 S8",
       bugs="skip-device-recheck"),
    _r("§7.3", "guard", "the pre-flight check refuses only for a cause that held (the dual of the three re-checks)",
       "I28", "S7 S8"),
    _r("§7.3", "security", "device ids, coordinates and action parameters drafted by the model are validated by the "
       "server: out of range is refused with the field, nothing created", "I11 I50", "S2",
       bugs="altitude-ceiling-unchecked"),
    _r("§7.3", "security", "takeoff, return and landing follow the human confirmation and safety policy",
       reason="the only high-risk command the backend sends is the takeoff a person's confirm and approval gate "
       "(the rows above); return and landing are the platform's, not the backend's"),
    _r("§7.3, §8.2", "MUST", "telemetry and alerts may be duplicated, out of order or late: judged by event time, "
       "task and sequence, each alert once, progress never backwards", "I9", "R3"),
    _r("§7.3", "MUST", "a dropped SSE stream affects only notifications, never execution", "I3", "B7"),
    _r("§7.3", "MUST", "a client that reconnects resyncs from the persisted task state by version; every open stream "
       "of a task's user hears each change, so every stream ends at each task's latest status", "I38", "B7",
       bugs="stream-newest-only"),
    _r("§7.3", "MUST", "a stream that may have missed changes (its queue overflowed, or the relay that feeds it lost "
       "Redis) is told to resync, and its client rereads the persisted state, the tasks it never heard of too "
       "(GET /v1/tasks): every stream open through a Redis loss still ends at each task's latest status", "I38",
       "B16", bugs="stream-no-resync"),
    _r("§8.3", "MUST", "the design is not verified until integration tests, fault injection and a platform "
       "simulator have run it",
       reason="a statement about verification: the catalogue, this matrix and `sortie selfcheck` are that run"),
    # What the reference adds (docs/systems/copilot.md): its API's documented answers, caches, operator actions.
    _r(REF, "reference", "every error answer is problem+json with a stable code and no stack trace; a refused "
       "request writes nothing", "I11", "S1 S2 S3 S4 S6 B3"),
    _r(REF, "reference", "a cancel is answered as the task's status says: CANCELLED before any flight, "
       "CANCEL_PENDING in flight, 409 TASK_NOT_CANCELLABLE (retryable) while DISPATCHING", "I35", "C6 R4 T6"),
    _r(REF, "reference", "every answer (a read, a cancel, a review; cached or not) names a status and version the "
       "task really had", "I24", "C6 B6 R10"),
    _r(REF, "reference", "a cached answer (the task snapshot cache, the confirm dedup) is one user's: another user "
       "hitting its entry while it lives gets their own answer; a snapshot is never older than the cache's lifetime",
       "I22 I15 I39 I24", "S9", bugs="cache-key-without-user snapshot-ttl-ms"),
    _r(REF, "reference", "a supervisor's review asks the platform first and refuses a resolution it contradicts; "
       "a redispatch reuses the last attempt's key", "I18 I1 I26", "R10"),
    _r(REF, "reference", "dead items are listed and re-driven by a supervisor with a fresh budget; a second re-drive "
       "answers 409 NOT_DEAD; a re-driven event the broker refuses again backs off, goes DEAD and pages again, and "
       "takes effect once after the next re-drive", "I26 I30 I36 I31 I6", "R11 R16", bugs="redrive-no-fresh-budget"),
    _r(REF, "reference", "an outbox row backs off by its own claims and goes DEAD only after its whole budget", "I30",
       "B2 R11"),
    _r(REF, "reference", "a publisher's claim with room takes every due row; its rounds mark, put back and pause as "
       "its policy says", "I36 I37", "B2 B15", bugs="refused-round-unmarked"),
    _r(REF, "reference", "the reconciler acts only on tasks a fault touched on their way to the platform", "I25",
       "B2 R12"),
    _r(REF, "reference", "a cancel the user asked for reaches the platform while the flight flies (the reconciler "
       "re-sends one that was lost)", "I29", "R15 T6"),
    _r(REF, "reference", "a re-dispatch stops at max_dispatch_attempts: then FAILED (DISPATCH_ABANDONED), never "
       "flown", "I21", "R14"),
    _r(REF, "reference", "a worker's loop carries on from what its dependencies throw; it ends only when stopped",
       "I34", "B13 B3", bugs="ack-failure-ends-loop"),
    _r(REF, "reference", "the code raises no defect (TypeError, KeyError...): a crash the reconciler would repair is "
       "still a crash", "I27", "R2 B4"),
    _r(REF, "reference", "malformed bodies, repeated keys, deep nesting, bad Idempotency-Key and token claims are "
       "refused with their codes (415, 400, 401)",
       reason="each is one request's answer, judged per request by tests/api/adversarial_kinds.py in both stacks; "
       "no fault changes it"),
    _r(REF, "reference", "an unknown device or area is refused exactly as another fleet's (no existence oracle)",
       reason="a property of single answers (their bodies alike), judged by tests/api/adversarial_kinds.py"),
    _r(REF, "reference", "an approver needs a permission on the draft's area and may not approve their own draft "
       "(SELF_APPROVAL)", "I49 I43", "S6", bugs="self-approval-allowed"),
    _r(REF, "reference", "permissions gate starting a flight, never stopping one: a user whose permissions were "
       "removed can still cancel their own tasks", "I52 I29", "S10", bugs="cancel-needs-permission"),
    _r(REF, "security", "security-relevant refusals are written to security_log", "I43", "S1 S4",
       bugs="security-log-skipped"),
    _r(REF, "reference", "the API and the platform simulator publish their OpenAPI documents, kept current",
       reason="documentation, judged by the OpenAPI staleness test and Schemathesis, not by a run"),
)
