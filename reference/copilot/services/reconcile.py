"""The reconciler (seed 000 §7.2): scans tasks stuck past a threshold and settles them from the
platform's answer. It never assumes: DISPATCHING is asked about, not declared failed."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from sqlalchemy import Row, select

from kernel.logs import FailedRounds
from reference.copilot import bugs, coverage
from reference.copilot import platform as p
from reference.copilot.db import as_utc
from reference.copilot.effects import CallPlatform, Sleep, Transact, Tx, Work
from reference.copilot.errors import StaleWrite
from reference.copilot.models import TaskEventOutbox
from reference.copilot.policy import Policy
from reference.copilot.services.cancel import send_cancel
from reference.copilot.services.dispatch import (
    RETRIES_EXHAUSTED,
    DispatchPlan,
    Outcome,
    after_dispatch_failed,
    create_flight,
    dispatch_task,
    latest_attempt,
    query_outcome,
)
from reference.copilot.services.reports import due_reports, upload_report
from reference.copilot.services.settle import close_attempt, settle
from reference.copilot.states import TaskStatus as S
from reference.copilot.tasks import TaskView, fresh, load, stale_tasks, transition

log = logging.getLogger(__name__)

ACTOR = "reconciler"


def _created_event_sent(tx: Tx, task_id: uuid.UUID) -> bool:
    row = tx.session.scalars(
        select(TaskEventOutbox.status).where(TaskEventOutbox.task_id == task_id,
                                             TaskEventOutbox.event_type == "TaskCreated")
    ).first()
    return row == "SENT"


def _queue_created(tx: Tx, task_id: uuid.UUID) -> bool:
    """A CREATED task whose event was published long ago but never took effect (dead-lettered or lost)."""
    task = load(tx, task_id)
    if task is None or task.status != S.CREATED or not _created_event_sent(tx, task_id):
        return False  # while the event is unpublished the outbox owns it (C2)
    transition(tx, task, S.QUEUED, actor=ACTOR, action="QUEUED_BY_RECONCILER")
    return True


def _dispatching_plan(tx: Tx, task_id: uuid.UUID) -> tuple[TaskView, str, DispatchPlan] | None:
    task = load(tx, task_id)
    attempt = latest_attempt(tx, task_id)
    if task is None or task.status != S.DISPATCHING or attempt is None:
        return None
    snap = task.snapshot
    plan = DispatchPlan(task.id, task.version, attempt.attempt, p.CreateFlight(
        request_id=attempt.request_id, device_id=task.device_id, reference=str(task.id),
        waypoints=snap["route"]["waypoints"], altitude_m=snap["parameters"]["altitude_m"],
        actions=list(snap["parameters"]["actions"])))
    return TaskView.of(task), attempt.request_id, plan


def _not_created(tx: Tx, task_id: uuid.UUID, version: int, attempt: int, policy: Policy) -> str:
    task = load(tx, task_id)
    if task is None or task.status != S.DISPATCHING or task.version != version:
        return "moved"
    transition(tx, task, S.DISPATCH_FAILED, actor=ACTOR, action="DISPATCH_NOT_CREATED",
               set_values={"last_error_code": "NOT_CREATED",
                           "last_error_message": "the platform has no flight for the request"},
               detail={"code": "NOT_CREATED", "attempt": attempt})
    close_attempt(tx, task_id, attempt, "NOT_CREATED", "NOT_CREATED")
    return after_dispatch_failed(tx, task_id, policy=policy, actor=ACTOR)


def _review(tx: Tx, task: Row[Any], code: str, detail: dict[str, Any]) -> str:
    """MANUAL_REVIEW: a person decides. A dispatch still in flight is closed UNKNOWN, as the dispatcher closes one it
    gives up on (an attempt stays PENDING only while its task is DISPATCHING it)."""
    if task.status == S.DISPATCHING:
        close_attempt(tx, task.id, task.dispatch_attempts, "UNKNOWN", code)
    transition(tx, task, S.MANUAL_REVIEW, actor=ACTOR, action="OUTCOME_UNKNOWN",
               set_values={"last_error_code": code}, detail=detail)
    return S.MANUAL_REVIEW


def _to_manual_review(tx: Tx, task_id: uuid.UUID, version: int, code: str) -> str:
    task = load(tx, task_id)
    if task is None or task.version != version:
        return "moved"
    return _review(tx, task, code, {"code": code})


def _escalate(tx: Tx, task_id: uuid.UUID, version: int, policy: Policy) -> str:
    """The platform did not answer: still "unknown" while the task moved recently, MANUAL_REVIEW once it has been
    quiet for ``policy.escalate_after_s`` (a bounded wait, never a guess)."""
    task = load(tx, task_id)
    if task is None or task.version != version:
        return "moved"
    quiet_s = (as_utc(tx.now) - as_utc(task.updated_at)).total_seconds()
    if quiet_s < policy.escalate_after_s and not bugs.active(bugs.ESCALATE_WITHOUT_WAITING):  # INJECTED BUG
        return "unknown"
    return _review(tx, task, "PLATFORM_SILENT",
                   {"code": "PLATFORM_SILENT", "quiet_s": round(quiet_s, 1), "from": task.status})


def _failed_blind(tx: Tx, task_id: uuid.UUID, version: int) -> str:
    task = load(tx, task_id)
    if task is None or task.status != S.EXECUTING or task.version != version:
        return "moved"
    transition(tx, task, S.FAILED, actor=ACTOR, action="EXECUTION_TIMED_OUT",
               set_values={"last_error_code": "EXECUTION_TIMED_OUT"}, detail={"code": "EXECUTION_TIMED_OUT"})
    return S.FAILED


def reconcile_task(task_id: uuid.UUID | str, policy: Policy) -> Work[str]:
    tid = uuid.UUID(str(task_id))
    view = yield Transact(lambda tx: fresh(tx, tid), "reconcile.read")
    if view is None:
        return "missing"
    status = view.status
    try:
        if status == S.CREATED:
            queued = yield Transact(lambda tx: _queue_created(tx, tid), "reconcile.queue_created")
            if not queued:
                return "waiting-for-outbox"
            coverage.reached(QUEUED_CREATED)
            return (yield from dispatch_task(tid, policy))
        if status == S.QUEUED:
            return (yield from dispatch_task(tid, policy))
        if status == S.DISPATCH_FAILED:
            state = yield Transact(lambda tx: after_dispatch_failed(tx, tid, policy=policy, actor=ACTOR),
                                   "reconcile.dispatch_failed")
            return (yield from dispatch_task(tid, policy)) if state == S.QUEUED else state
        if status == S.DISPATCHING:
            return (yield from _reconcile_dispatching(tid, policy))
        if status == S.EXECUTING and bugs.active(bugs.RECONCILE_FAIL_BLIND):
            # INJECTED BUG reconcile-fail-blind: a quiet flight is declared failed without asking.
            return (yield Transact(lambda tx: _failed_blind(tx, tid, view.version), "reconcile.fail_blind"))
        if status in (S.EXECUTING, S.CANCEL_PENDING) and view.external_task_id:
            return (yield from _reconcile_flight(view, policy))
    except StaleWrite:
        return "moved"
    return "nothing-to-do"


QUERY_SETTLED = coverage.target(
    "reconciler-query-settled", "the reconciler's platform query settled a stale task (the recovery seed 000 §7.2 "
    "asks for, not a blind resend or failure)")
FOUND_NOT_CREATED = coverage.target(
    "reconciler-found-not-created", "the reconciler's query by request id found no flight for a stale DISPATCHING "
    "attempt on a platform without idempotency keys: the attempt closed NOT_CREATED, the task is dispatched anew")
QUEUED_CREATED = coverage.target(
    "reconciler-queued-created", "the reconciler queued a CREATED task whose TaskCreated was sent long ago and never "
    "took effect (a message its consumers lost)")


def _reconcile_dispatching(tid: uuid.UUID, policy: Policy) -> Work[str]:
    found_plan = yield Transact(lambda tx: _dispatching_plan(tx, tid), "reconcile.read_attempt")
    if found_plan is None:
        return "moved"
    view, rid, plan = found_plan
    if bugs.active(bugs.RECONCILE_REDISPATCH_BLIND):
        # INJECTED BUG reconcile-redispatch-blind: no query; declared not created and dispatched anew.
        state = yield Transact(lambda tx: _not_created(tx, tid, view.version, plan.attempt, policy),
                               "reconcile.not_created")
        return (yield from dispatch_task(tid, policy)) if state == S.QUEUED else state
    caps = yield CallPlatform("capabilities", (), str(tid))
    found = yield from query_outcome(rid, caps, str(tid))
    if isinstance(found, p.FlightInfo):
        path = yield Transact(lambda tx: settle(tx, tid, found.status, found.external_id, actor=ACTOR,
                                                reason="found by reconciler query"), "reconcile.settle")
        if path:
            coverage.reached(QUERY_SETTLED)
        return path[-1] if path else "moved"
    if caps.idempotency_key:
        # Resend with the same key, also after "not found": the owner's create may still be on its way (a
        # slow or paused dispatcher), and a new attempt under a new key would then make a second flight
        # (found by a 5x load with a broker outage). The platform dedupes the same key, whoever sends first.
        sent = yield from create_flight(plan, caps, policy)
        if sent != RETRIES_EXHAUSTED:
            return sent
        # Neither the query nor the resend settled it: the same bound as without a key, not DISPATCHING for as long
        # as the platform stays silent (seed 000 §7.2: "如果无法确认，就转入人工核查").
        return (yield Transact(lambda tx: _escalate(tx, tid, view.version, policy), "reconcile.escalate"))
    if found is Outcome.NOT_FOUND:
        # Without a key nothing can dedupe a late create: the stale threshold must outlast the dispatcher's
        # call budget (Policy checks it); a paused dispatcher can still outlast both (docs/systems/copilot.md).
        state = yield Transact(lambda tx: _not_created(tx, tid, view.version, plan.attempt, policy),
                               "reconcile.not_created")
        if state != "moved":
            coverage.reached(FOUND_NOT_CREATED)
        return (yield from dispatch_task(tid, policy)) if state == S.QUEUED else state
    if not caps.query_by_request_id:
        return (yield Transact(lambda tx: _to_manual_review(tx, tid, view.version, "NO_KEY_NO_QUERY"),
                               "reconcile.manual"))
    # The platform did not answer: the next scan asks again, up to the bound.
    return (yield Transact(lambda tx: _escalate(tx, tid, view.version, policy), "reconcile.escalate"))


def _reconcile_flight(view: TaskView, policy: Policy) -> Work[str]:
    ext = view.external_task_id
    assert ext is not None
    try:
        flight = yield CallPlatform("get_flight", (ext,), str(view.id))
    except p.PlatformError:
        return (yield Transact(lambda tx: _escalate(tx, view.id, view.version, policy), "reconcile.escalate"))
    path = yield Transact(lambda tx: settle(tx, view.id, flight.status, ext, actor=ACTOR,
                                            reason="reconciler query"), "reconcile.settle")
    if path:
        coverage.reached(QUERY_SETTLED)
    if not path and view.status == S.CANCEL_PENDING and flight.status not in p.FLIGHT_TERMINAL:
        return (yield from send_cancel(view.id, policy))  # the cancel may never have arrived; it is idempotent
    return path[-1] if path else "unchanged"


def reconcile_once(policy: Policy) -> Work[int]:
    stale = yield Transact(lambda tx: stale_tasks(tx, policy.stale_after_s, policy.reconcile_batch),
                           "reconcile.scan")
    for view in stale:
        yield from reconcile_task(view.id, policy)
    reports = yield Transact(lambda tx: due_reports(tx, policy.reconcile_batch), "reports.scan")
    for task_id in reports:
        yield from upload_report(task_id, policy)
    return len(stale) + len(reports)


def reconciler_loop(policy: Policy) -> Work[None]:
    rounds = FailedRounds(log, "reconcile round")
    while True:
        try:
            yield from reconcile_once(policy)
            rounds.succeeded()
        except Exception as exc:  # the next period tries again
            rounds.failed(exc)
        yield Sleep(policy.reconcile_interval_s)
