"""Known defects that can be switched on, one at a time, to show that the harness catches them.

`sortie simulate --inject-bug NAME`, `sortie run --inject-bug NAME` and `sortie selfcheck` use this
registry. Each defect is a small guarded branch at the one place its rule lives (``if bugs.active(...)``);
with no bug active every branch is skipped and the reference behaves exactly as without this module.

How a bug reaches the code: a process-wide switch. The simulation sets it around a run
(``with injected(name)`` in scenarios.runner.simulate); the real stack's processes (the API and every
worker) read it from ``SORTIE_INJECT_BUG`` through ``reference.copilot.settings.Settings.inject_bug``, applied in
``build_runtime``. A switch rather than a field of Policy, because some rules live where no policy is
passed (``transition()``, ``add_audit()``, ``confirm_draft()``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

ENV_VAR = "SORTIE_INJECT_BUG"

PUBLISH_BEFORE_COMMIT = "publish-before-commit"
CONSUMER_NO_DEDUP = "consumer-no-dedup"
BLIND_RESEND = "blind-resend"
CANCEL_UNCONFIRMED = "cancel-unconfirmed"
NO_VERSION_CHECK = "no-version-check"
REPORT_FAILS_TASK = "report-fails-task"
AUDIT_OUTSIDE_TX = "audit-outside-tx"
NO_VERSION_PREDICATE = "no-version-predicate"
IGNORE_ZERO_ROWCOUNT = "ignore-zero-rowcount"
RECONCILE_REDISPATCH_BLIND = "reconcile-redispatch-blind"
RECONCILE_FAIL_BLIND = "reconcile-fail-blind"
RETRY_NO_CAP = "retry-no-cap"
SKIP_AIRSPACE_RECHECK = "skip-airspace-recheck"
SKIP_DEVICE_RECHECK = "skip-device-recheck"
DEAD_LETTER_EARLY = "dead-letter-early"
DEAD_LETTER_UNACKED = "dead-letter-unacked"
ACK_UNRECORDED_FAILURE = "ack-unrecorded-failure"
ACK_FAILURE_ENDS_LOOP = "ack-failure-ends-loop"
REFUSED_ROUND_UNMARKED = "refused-round-unmarked"
STREAM_NEWEST_ONLY = "stream-newest-only"
REDRIVE_NO_FRESH_BUDGET = "redrive-no-fresh-budget"
CACHE_KEY_WITHOUT_USER = "cache-key-without-user"
SNAPSHOT_TTL_MS = "snapshot-ttl-ms"
STREAM_NO_RESYNC = "stream-no-resync"
REJECTION_RETRIED = "rejection-retried"
CANCEL_TIMEOUT_FLIES_ON = "cancel-timeout-flies-on"
SECURITY_LOG_SKIPPED = "security-log-skipped"
ESCALATE_WITHOUT_WAITING = "escalate-without-waiting"
AUDIT_REWRITTEN = "audit-rewritten"
REDRIVE_UNPUBLISHED = "redrive-unpublished"
SELF_APPROVAL_ALLOWED = "self-approval-allowed"
ALTITUDE_CEILING_UNCHECKED = "altitude-ceiling-unchecked"
ROUTE_REWRITTEN = "route-rewritten"
CANCEL_NEEDS_PERMISSION = "cancel-needs-permission"
DEAD_LETTER_SILENT = "dead-letter-silent"
DRAFT_KEY_DROPPED = "draft-key-dropped"
UNREADY_DRAFT_CONFIRMED = "unready-draft-confirmed"
AUDIT_WITHOUT_REQUEST_ID = "audit-without-request-id"
AUDIT_CORRELATED_TO_THE_ITEM = "audit-correlated-to-the-item"


@dataclass(frozen=True)
class Bug:
    name: str
    title: str
    rule: str  # the rule of docs/systems/copilot.md / seed 000 the defect breaks
    where: str  # the guarded branch(es)
    description: str  # what the defective code does
    invariants: tuple[str, ...]  # the invariant(s) expected to catch it
    scenarios: tuple[str, ...]  # catalogue scenarios expected to catch it in simulation (selfcheck finds all)


BUGS: dict[str, Bug] = {b.name: b for b in [
    Bug(PUBLISH_BEFORE_COMMIT, "publish before commit",
        "transactional outbox: the publisher sends after commit and marks sent after the broker's ack",
        "reference/copilot/services/confirm.py confirm_draft",
        "confirm publishes TaskCreated itself, before the creating transaction commits, fire-and-forget "
        "(a broker error is ignored, a rollback leaves the message out), and stores the outbox row as "
        "already SENT, so the outbox never retries it",
        ("I6",), ("C2",)),
    Bug(CONSUMER_NO_DEDUP, "consumer without processed_event dedup",
        "consumer: insert processed_event, check status/version, change state ... in one transaction",
        "reference/copilot/services/consumer.py mark_processed",
        "the consumers neither record nor check the event id in processed_event: every delivery, duplicate or "
        "not, is handled as new",
        ("I6",), ("B1", "C3")),
    Bug(BLIND_RESEND, "blind resend after a dispatch timeout",
        "dispatch: a timeout means 'unknown', answered by a query, never by a blind resend",
        "reference/copilot/services/dispatch.py _begin, create_flight",
        "create_flight goes out without the platform's idempotency key, and after a timeout the dispatcher "
        "resends it without asking the platform first",
        ("I1",), ("R1", "T4")),
    Bug(CANCEL_UNCONFIRMED, "cancel marked CANCELLED without platform confirmation",
        "cancel is CANCEL_PENDING until the platform confirms",
        "reference/copilot/services/cancel.py send_cancel",
        "once the cancel request is sent (accepted, or timed out) the task is marked CANCELLED without waiting "
        "for the platform's cancelled event or a query",
        ("I7",), ("R4",)),
    Bug(NO_VERSION_CHECK, "status update without the version check",
        "every change is a conditional UPDATE on (id, expected status, expected version) whose row count is 1",
        "reference/copilot/tasks.py transition; reference/copilot/services/dispatch.py _accepted",
        "transition()'s UPDATE matches the task id only, and the dispatcher's write-back applies its change "
        "to the task as it left it (DISPATCHING at the plan's version) instead of re-reading it: a write "
        "that lost a race (a resumed zombie, a concurrent worker) overwrites the newer state",
        ("I4",), ("B5",)),
    Bug(REPORT_FAILS_TASK, "report failure flips the task to FAILED",
        "a failed report upload never changes the task's result; it is retried",
        "reference/copilot/services/reports.py upload_report",
        "a failed upload marks the COMPLETED task FAILED with a direct UPDATE (bypassing the state machine), "
        "audited as REPORT_FAILED",
        ("I4",), ("R5",)),
    Bug(AUDIT_OUTSIDE_TX, "audit written outside the task's transaction",
        "task + audit + outbox in one transaction",
        "reference/copilot/tasks.py add_audit",
        "audit rows are committed on their own, not with the change they describe: when the task's transaction "
        "rolls back, its audit row stays (emulated by writing the row again in a fresh transaction after the "
        "rollback, which is what an autonomous transaction leaves behind)",
        ("I5", "I4"), ("C1",)),
    Bug(NO_VERSION_PREDICATE, "conditional update without its version predicate",
        "every change is a conditional UPDATE on (id, expected status, expected version) whose row count is 1",
        "reference/copilot/tasks.py transition",
        "transition()'s UPDATE keeps the status predicate but drops the version: a writer whose read is stale "
        "still wins whenever the task is back in the status it read (EXECUTING -> CANCEL_PENDING -> EXECUTING, "
        "or a re-dispatch back in DISPATCHING)",
        ("I4",), ("C6",)),
    Bug(IGNORE_ZERO_ROWCOUNT, "conditional update whose zero row count is ignored",
        "a conditional UPDATE whose row count is not 1 lost a race: nothing else of that change may be written",
        "reference/copilot/tasks.py transition",
        "transition() does not check the UPDATE's row count: a writer that lost the race to a concurrent "
        "transaction still writes its audit row and outbox event, so the audit chain forks (I4 judges the fork; "
        "I5 does not: the loser's audit row and event are written together)",
        ("I4",), ("C6",)),
    Bug(RECONCILE_REDISPATCH_BLIND, "reconciler re-dispatches a stale DISPATCHING task without asking",
        "reconciler: a stale DISPATCHING task is settled from the platform's answer, never re-sent blindly "
        "(seed 000 §7.2)",
        "reference/copilot/services/reconcile.py _reconcile_dispatching",
        "a DISPATCHING task past its threshold is declared not created without querying the platform, re-queued "
        "and dispatched again under a new attempt (a new idempotency key)",
        ("I1",), ("R6",)),
    Bug(RECONCILE_FAIL_BLIND, "reconciler fails a stale EXECUTING task without asking",
        "reconciler: a stale EXECUTING task is settled from the platform's answer (seed 000 §7.2)",
        "reference/copilot/services/reconcile.py reconcile_task",
        "an EXECUTING task past its threshold is marked FAILED without asking the platform how its flight ended",
        ("I18",), ("R7",)),
    Bug(RETRY_NO_CAP, "platform retries without an attempt cap",
        "bounded retries with exponential backoff and jitter (seed 000 §5.5)",
        "reference/copilot/policy.py RetryPolicy.tries",
        "the platform retry loop ignores the policy's attempt count: a dispatcher keeps calling a failing "
        "platform for as long as it fails",
        ("I19",), ("T1",)),
    Bug(SKIP_AIRSPACE_RECHECK, "dispatch without the pre-flight airspace re-check",
        "pre-dispatch recheck of airspace, device state and approval (seed 000 §7.3)",
        "reference/copilot/services/dispatch.py _recheck",
        "the dispatcher trusts the airspace check made at confirm time and does not look again before takeoff",
        ("I12",), ("S7",)),
    Bug(SKIP_DEVICE_RECHECK, "dispatch without the pre-flight device and approval re-check",
        "pre-dispatch recheck of airspace, device state and approval (seed 000 §7.3)",
        "reference/copilot/services/dispatch.py _recheck",
        "the dispatcher re-checks only the airspace: it trusts the approval and the device as they were at "
        "confirm time, and flies an offline or drained device, or on a revoked approval",
        ("I23", "I14"), ("S8",)),
    # The four below were mutants of consumer.py that survived every check (mutation testing, 2026-12-06).
    Bug(DEAD_LETTER_EARLY, "dead letter at the first failure",
        "retry a failing message up to the policy's deliveries, then a dead letter with its history (seed 000 §6.4)",
        "reference/copilot/services/consumer.py consume_one",
        "a message whose handling fails once is dead-lettered and acked at once, without the retries the policy "
        "allows",
        ("I32",), ("T2",)),
    Bug(DEAD_LETTER_UNACKED, "dead-lettered message left unacked",
        "a dead-lettered message is acked: it leaves the broker (seed 000 §6.4)",
        "reference/copilot/services/consumer.py consume_one",
        "the consumer writes the dead letter but does not ack the delivery: the broker delivers it again and "
        "again, each time failing and dead-lettered anew",
        ("I32",), ("T2",)),
    Bug(ACK_UNRECORDED_FAILURE, "ack of a delivery whose failure was not recorded",
        "ack only after commit (seed 000 §6.4): a delivery whose outcome could not be recorded is left to the broker",
        "reference/copilot/services/consumer.py consumer_loop",
        "when even the record of a delivery's failure fails (the database refuses it), the consumer acks the "
        "delivery anyway: the message is lost",
        ("I33", "I6"), ("B14",)),
    Bug(ACK_FAILURE_ENDS_LOOP, "a refused ack ends the consumer",
        "a worker's loop carries on from what its dependencies throw at it",
        "reference/copilot/services/consumer.py consumer_loop",
        "a consumer whose ack the broker refuses lets the error end its loop: it stops consuming",
        ("I34",), ("B13",)),
    # A mutant of outbox.py that survived every check (mutation testing, 2026-12-06) until B15 refused a publish
    # inside a batch.
    Bug(REFUSED_ROUND_UNMARKED, "a refused round's accepted rows left unmarked",
        "the publisher marks sent what the broker accepted before it claims again (seed 000 §5.2)",
        "reference/copilot/services/outbox.py publish_batch",
        "when the broker refuses a publish in the middle of a batch, the publisher puts back the refused rows but "
        "does not mark sent the ones it had accepted: they go out again when their lease runs out",
        ("I37",), ("B15",)),
    # The stream tier, out of the simulation's reach until issue 54 (point 3) brought it in.
    Bug(STREAM_NEWEST_ONLY, "a user's newer stream displaces the older ones",
        "a dropped stream only delays notifications; a client resyncs by version (seed 000 §7.3): every open stream "
        "of a task's user hears each change",
        "reference/copilot/http/notify.py NotificationHub.subscribe",
        "the hub keeps one subscription per user (a dict user -> stream): a user's second stream (another tab, "
        "another console) takes the fan-out from the first, which stays open and hears nothing more",
        ("I38",), ("B7",)),
    # An operator's re-drive, judged only where the broker refuses again after it (R16, issue 54 point 3).
    Bug(REDRIVE_NO_FRESH_BUDGET, "a re-drive without a fresh budget",
        "a dead item is re-driven by a person with a fresh budget of attempts (seed 000 §5.5)",
        "reference/copilot/services/ops.py redrive",
        "a re-driven outbox row goes back to PENDING with the attempts it spent: the first refusal after the re-drive "
        "sends it DEAD again",
        ("I30",), ("R16",)),
    # The API's caches of answers, judged only where two users hit one entry while it lives (S9, issue 54 point 3).
    Bug(CACHE_KEY_WITHOUT_USER, "caches of answers keyed without the user",
        "a user reads and confirms only their own: a cached answer is one user's (seed 000 §7.3, §6.3: one key per "
        "user operation)",
        "reference/copilot/api.py _confirm, _read_task",
        "the snapshot cache is keyed by the task alone and the confirm dedup by the Idempotency-Key alone: another "
        "user's read of the task within a second gets the owner's snapshot, another user's confirm with the same key "
        "within five seconds gets the owner's task",
        ("I22", "I15"), ("S9",)),
    Bug(SNAPSHOT_TTL_MS, "snapshot cache lifetime in milliseconds read as seconds",
        "the task state is the database's; a cache only absorbs polling for its short lifetime (seed 000 §3.2)",
        "reference/copilot/api.py _read_task",
        "the snapshot cache's entries live a thousand times longer than the API says: a polled task is answered "
        "with the state it had at its first read long after it changed",
        ("I39",), ("S9",)),
    Bug(STREAM_NO_RESYNC, "a stream never told it missed changes",
        "a dropped stream only delays notifications; a client resyncs from the persisted state (seed 000 §7.3): "
        "a stream that may have missed a change is told to resync",
        "reference/copilot/http/notify.py NotificationHub.resync_all",
        "the stream tier's Redis relay comes back after Redis was lost and says nothing to the streams that stayed "
        "open: every change published meanwhile is gone, and those streams show the old states until they drop",
        ("I38",), ("B16",)),
    # Rules of the traceability matrix judged only by a scenario's expectation, or not at all, until issue 54's gaps
    # got their invariants (I43..I45).
    Bug(REJECTION_RETRIED, "a definite rejection retried",
        "a definite rejection is not retried automatically: DISPATCH_FAILED, no second create (seed 000 §5.5, §7.1)",
        "reference/copilot/services/dispatch.py create_flight",
        "the dispatcher treats the platform's definite rejection of a create (a 4xx) like a throttle: it sends the "
        "same create again, up to the retry budget, instead of writing DISPATCH_FAILED",
        ("I44",), ("T3",)),
    Bug(CANCEL_TIMEOUT_FLIES_ON, "a timed-out cancel taken for a refusal",
        "CANCEL_PENDING -> EXECUTING only when the platform refused the cancel (seed 000 §7.1)",
        "reference/copilot/services/cancel.py send_cancel",
        "a cancel whose answer was lost (a timeout) sends the task back to EXECUTING as if the platform had refused "
        "it, though the platform may be bringing the flight home",
        ("I45",), ("R4",)),
    Bug(SECURITY_LOG_SKIPPED, "security-relevant refusals not logged",
        "security-relevant refusals are written to security_log (docs/systems/copilot.md, seed 000 §7.3)",
        "reference/copilot/api.py _log_refusal",
        "a refusal for a forbidden device or area, another version's approval or a reused key is answered but "
        "leaves no security_log row",
        ("I43",), ("S1", "S4")),
    Bug(ESCALATE_WITHOUT_WAITING, "MANUAL_REVIEW at the first unanswered query",
        "DISPATCHING / EXECUTING -> MANUAL_REVIEW only once the platform was silent past escalate_after_s (seed 000 "
        "§7.1, §7.2)",
        "reference/copilot/services/reconcile.py _escalate",
        "the reconciler sends a task to MANUAL_REVIEW the first time the platform does not answer its query, without "
        "waiting the policy's escalate_after_s of silence",
        ("I46",), ("R10",)),
    Bug(AUDIT_REWRITTEN, "the audit log rewritten",
        "the audit log cannot be changed or deleted through the application (seed 000 §7.3)",
        "reference/copilot/tasks.py audit_written",
        "each status change marks the task's earlier audit rows SUPERSEDED (an UPDATE of the log: their result "
        "summary rewritten); in simulation, where no grant refuses it",
        ("I47",), ("R8",)),
    Bug(REDRIVE_UNPUBLISHED, "a dead letter re-driven without its message",
        "a dead item re-driven by a person after review then takes effect (seed 000 §5.5)",
        "reference/copilot/services/consumer.py redrive",
        "the re-drive marks the dead letter re-driven and audits it, but leaves its outbox row as it was: the message "
        "is never published again",
        ("I48",), ("T2",)),
    Bug(SELF_APPROVAL_ALLOWED, "an author approves their own draft",
        "an approver may not approve their own draft (SELF_APPROVAL, docs/systems/copilot.md)",
        "reference/copilot/services/drafts.py decide_approval",
        "decide_approval checks the approver's area permission and the version but not who drafted it: an operator "
        "who also holds the approver role approves their own draft",
        ("I49",), ("S6",)),
    Bug(ALTITUDE_CEILING_UNCHECKED, "the area's altitude ceiling unchecked",
        "parameters drafted by the model are validated by the server: out of range is refused (seed 000 §7.3)",
        "reference/copilot/services/drafts.py check_plan_facts",
        "the altitude check keeps its floor (MIN_ALTITUDE_M) and drops the area's ceiling (max_altitude_m): a plan at "
        "5,000 m is stored as a READY draft",
        ("I50",), ("S2",)),
    Bug(ROUTE_REWRITTEN, "a revision rewrites the confirmed route",
        "the task keeps a snapshot of the confirmed version: a later revision of the draft changes nothing of it "
        "(seed 000 §3.1, §6.1)",
        "reference/copilot/services/drafts.py revise_draft",
        "a revision writes its waypoints and version into the draft's current route row instead of adding a row: a "
        "task confirmed from the earlier version names a route that is no longer the one it confirmed",
        ("I51",), ("C4",)),
    Bug(CANCEL_NEEDS_PERMISSION, "a cancel gated by the permissions",
        "permissions gate starting a flight, never stopping one: a user whose permissions were removed can still "
        "cancel their own tasks (docs/systems/copilot.md)",
        "reference/copilot/services/cancel.py request_cancel",
        "the cancel checks the owner's permission on the task's device, as a confirm does: an operator whose "
        "permissions were removed mid-flight is refused (403 FORBIDDEN_DEVICE) and cannot stop the flight",
        ("I52",), ("S10",)),
    Bug(DEAD_LETTER_SILENT, "a dead letter pages nobody",
        "a consumer's dead letter is for a person to look into, like a DEAD outbox row or report (seed 000 §5.5)",
        "reference/copilot/services/consumer.py consume_one",
        "a message that failed max_deliveries times is dead-lettered and acked, but no DEAD_LETTER alert is raised: "
        "it waits in `sortie ops dead` until someone happens to look",
        ("I31",), ("T2",)),
    Bug(DRAFT_KEY_DROPPED, "a draft's idempotency key not stored",
        "a draft is created synchronously and answered with its id; a retry of the request (same key) gets the same "
        "draft back (seed 000 §4.2, §6.3)",
        "reference/copilot/services/drafts.py create_draft",
        "the draft row is written without its idempotency key: a retry after a lost answer finds nothing by the key "
        "and makes a second draft",
        ("I53",), ("B11",)),
    Bug(UNREADY_DRAFT_CONFIRMED, "a GENERATING draft confirmed",
        "a draft generated in stages is GENERATING until its plan is written (READY); only a READY draft is confirmed "
        "(seed 000 §4.2)",
        "reference/copilot/services/confirm.py _create",
        "the confirm skips the draft's status check: a confirm of an approved draft still GENERATING reads its "
        "empty plan and fails (500) instead of DRAFT_NOT_READY; only the plan's re-check at the confirm keeps the "
        "task from being made (I54 would judge such a task)",
        ("I27",), ("S3",)),
    Bug(AUDIT_WITHOUT_REQUEST_ID, "audit rows without the request's correlation id",
        "each audit row records the request's correlation id (seed 000 §7.3)",
        "reference/copilot/tasks.py audit_row",
        "an audit row carries only a correlation id its writer names (a consumed event's id), never the id of the "
        "request it serves: a person's draft, approval or confirm cannot be traced from the log to its request",
        ("I55",), ("C4",)),
    Bug(AUDIT_CORRELATED_TO_THE_ITEM, "a cancel's and a re-drive's audit rows correlated to their item",
        "each audit row records the request's correlation id (seed 000 §7.3), an operator's re-drive too",
        "reference/copilot/tasks.py item_correlation (in services/cancel.py, ops.py and consumer.py)",
        "a cancel's audit row names the task it cancels as its correlation id, and a re-drive's the event it "
        "re-drives (as a consumed event's row names its event): the user's cancel and the operator's re-drive "
        "cannot be traced from the log to their requests",
        ("I55",), ("R11",)),
]}

NAMES: tuple[str, ...] = tuple(BUGS)

_active: frozenset[str] = frozenset()


class UnknownBug(ValueError):
    def __init__(self, names: Iterable[str]) -> None:
        self.names = sorted(names)
        super().__init__(f"unknown bug(s): {', '.join(self.names)}; known: {', '.join(NAMES)}")


def parse(value: str | Iterable[str] | None) -> frozenset[str]:
    """Bug names from a comma-separated string (the environment) or an iterable; validated."""
    if value is None:
        return frozenset()
    raw = value.split(",") if isinstance(value, str) else list(value)
    names = frozenset(n.strip() for n in raw if n and n.strip())
    unknown = names - set(BUGS)
    if unknown:
        raise UnknownBug(unknown)
    return names


def active(name: str) -> bool:
    """True when the defect ``name`` is switched on in this process."""
    return name in _active


def current() -> frozenset[str]:
    return _active


def activate(value: str | Iterable[str] | None) -> frozenset[str]:
    """Switch on exactly these bugs (none for None or ""); returns the previous set."""
    global _active
    previous, _active = _active, parse(value)
    return previous


@contextmanager
def injected(value: str | Iterable[str] | None) -> Iterator[frozenset[str]]:
    """Run a block with these bugs on (and nothing else), restoring the previous switch after."""
    global _active
    previous = activate(value)
    try:
        yield _active
    finally:
        _active = previous
