"""dispatch_task (seed 000 §4.1 steps 8-10, §6.4, §5.5).

Pre-dispatch recheck, then DISPATCHING and the attempt row are committed *before* the platform call.
The call carries the platform's idempotency key. A timeout or 5xx means the outcome is unknown: it is
answered by a query (or a resend with the same key, which the platform dedupes), never by a blind
resend. With neither key nor query the task goes to MANUAL_REVIEW.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from dataclasses import dataclass
from enum import Enum
from typing import Any

from sqlalchemy import bindparam, insert, select, update

from reference.copilot import bugs, coverage
from reference.copilot import platform as p
from reference.copilot.effects import CallPlatform, Transact, Tx, Work
from reference.copilot.errors import StaleWrite
from reference.copilot.models import DispatchAttempt, SiteArea
from reference.copilot.policy import Policy
from reference.copilot.services.drafts import approval_status
from reference.copilot.services.settle import close_attempt, settle
from reference.copilot.states import TaskStatus as S
from reference.copilot.tasks import TaskView, fresh, load, transition

ACTOR = "dispatcher"
# A DISPATCH_FAILED with one of these codes may be dispatched again (nothing was created).
REDISPATCHABLE = frozenset({"NOT_CREATED"})


class Outcome(Enum):
    NOT_FOUND = "not-found"  # the platform answered: no flight for this request
    UNKNOWN = "unknown"  # no answer, or no way to ask


@dataclass(frozen=True)
class DispatchPlan:
    task_id: uuid.UUID
    version: int  # the task's version at DISPATCHING: the write-back is fenced on it
    attempt: int
    request: p.CreateFlight


def request_id(task_id: object, attempt: int) -> str:
    return f"{task_id}:{attempt}"


_AREA_TABLE, _ATTEMPT = SiteArea.__table__, DispatchAttempt.__table__
# Built once (the dispatcher runs these for every task): the pre-flight read of the area, and the attempt row.
_AREA = select(_AREA_TABLE.c.airspace_open, _AREA_TABLE.c.requires_approval).where(
    _AREA_TABLE.c.id == bindparam("area_id"))
_REOPEN_ATTEMPT = (update(_ATTEMPT)
                   .where(_ATTEMPT.c.task_id == bindparam("w_task_id"), _ATTEMPT.c.attempt == bindparam("w_attempt"))
                   .values(outcome="PENDING", error_code=None, external_task_id=None,
                           started_at=bindparam("started_at", type_=_ATTEMPT.c.started_at.type), finished_at=None)
                   .execution_options(preserve_rowcount=True))
_OPEN_ATTEMPT = insert(_ATTEMPT)


def _recheck(tx: Tx, task: object, device: p.DeviceState, policy: Policy) -> tuple[str, str] | None:
    """The checks at draft time are not trusted at flight time (seed 000 §7.3)."""
    area = tx.conn.execute(_AREA, {"area_id": task.area_id}).first()  # type: ignore[attr-defined]
    airspace_open = area is not None and (area.airspace_open or bugs.active(bugs.SKIP_AIRSPACE_RECHECK))
    if area is None or not airspace_open:  # INJECTED BUG skip-airspace-recheck: trusts the confirm-time check
        return "AIRSPACE_CLOSED", f"airspace over {task.area_id} is closed"  # type: ignore[attr-defined]
    if bugs.active(bugs.SKIP_DEVICE_RECHECK):  # INJECTED BUG skip-device-recheck: trusts the confirm-time checks
        return None
    if area.requires_approval and approval_status(tx, task.draft_id, task.draft_version) != "APPROVED":  # type: ignore[attr-defined]
        return "APPROVAL_REVOKED", "the approval for the confirmed draft version is no longer valid"
    if not device.known:
        return "DEVICE_UNKNOWN", f"the platform does not know device {device.device_id}"
    if not device.online:
        return "DEVICE_OFFLINE", f"device {device.device_id} is offline"
    if device.battery < policy.min_battery:
        return "BATTERY_LOW", f"device {device.device_id} battery {device.battery:.0f}% < {policy.min_battery:.0f}%"
    return None


UNFIT_AT_PREFLIGHT = coverage.target(
    "preflight-unfit", "a task met an offline, drained or unknown device, or a revoked approval, at its pre-flight "
    "check (seed 000 §7.3: the confirm-time checks are not trusted at flight time)")
_UNFIT_CODES = frozenset({"APPROVAL_REVOKED", "DEVICE_UNKNOWN", "DEVICE_OFFLINE", "BATTERY_LOW"})


def _begin(tx: Tx, task_id: uuid.UUID, device: p.DeviceState, caps: p.PlatformCapabilities,
           policy: Policy) -> DispatchPlan | None:
    task = load(tx, task_id)
    if task is None or task.status != S.QUEUED:
        return None  # someone else moved it (another dispatcher, a cancel): nothing to do
    v = transition(tx, task, S.VALIDATING, actor=ACTOR, action="PRECHECK_STARTED")
    task = load(tx, task_id)
    assert task is not None and task.version == v
    problem = _recheck(tx, task, device, policy)
    if problem is not None:
        code, message = problem
        if code in _UNFIT_CODES:
            coverage.reached(UNFIT_AT_PREFLIGHT)
        transition(tx, task, S.FAILED, actor=ACTOR, action="PRECHECK_FAILED",
                   set_values={"last_error_code": code, "last_error_message": message},
                   detail={"code": code, "message": message})
        return None
    attempt = task.dispatch_attempts + 1
    rid = request_id(task.id, attempt)
    v = transition(tx, task, S.DISPATCHING, actor=ACTOR, action="DISPATCH_STARTED",
                   set_values={"dispatch_attempts": attempt}, detail={"attempt": attempt, "request_id": rid})
    conn = tx.conn
    # A supervisor's re-dispatch from MANUAL_REVIEW reopens the same attempt (the same key); else a new one.
    if conn.execute(_REOPEN_ATTEMPT, {"w_task_id": task.id, "w_attempt": attempt, "started_at": tx.now}).rowcount == 0:
        conn.execute(_OPEN_ATTEMPT, {"task_id": task.id, "attempt": attempt, "request_id": rid, "outcome": "PENDING",
                                     "started_at": tx.now})
    snap = task.snapshot
    # The request id goes out even when the platform does not dedupe on it: it is what a query finds.
    return DispatchPlan(task.id, v, attempt, p.CreateFlight(
        request_id=None if bugs.active(bugs.BLIND_RESEND) else rid,  # INJECTED BUG blind-resend: no key
        device_id=task.device_id,
        reference=str(task.id),
        waypoints=snap["route"]["waypoints"],
        altitude_m=snap["parameters"]["altitude_m"],
        actions=list(snap["parameters"]["actions"]),
    ))


def _accepted(tx: Tx, plan: DispatchPlan, flight: p.FlightInfo, reason: str) -> str:
    task = load(tx, plan.task_id)
    if task is None:
        return "missing"
    if bugs.active(bugs.NO_VERSION_CHECK):
        return _accepted_as_planned(tx, plan, task, flight, reason)
    if task.status == S.DISPATCHING and task.version != plan.version:
        raise StaleWrite(plan.task_id, S.DISPATCHING, plan.version)  # a newer dispatch owns the task
    path = settle(tx, plan.task_id, flight.status, flight.external_id, actor=ACTOR, reason=reason)
    return path[-1] if path else task.status


def _accepted_as_planned(tx: Tx, plan: DispatchPlan, task: Any, flight: p.FlightInfo, reason: str) -> str:
    """INJECTED BUG no-version-check: the write-back applies DISPATCHING -> EXECUTING to the task as the
    dispatcher left it (status DISPATCHING, the plan's version) instead of the row it just read; with
    transition()'s UPDATE matching the id only, a write that lost a race overwrites the newer state."""
    as_left = dataclasses.replace(TaskView.of(task), status=S.DISPATCHING, version=plan.version)
    detail = {"platform_status": flight.status, "external_task_id": flight.external_id, "reason": reason}
    transition(tx, as_left, S.EXECUTING, actor=ACTOR, action="FLIGHT_CONFIRMED",
               set_values={"external_task_id": flight.external_id}, detail=detail)
    close_attempt(tx, plan.task_id, plan.attempt, "ACCEPTED", external_id=flight.external_id)
    path = settle(tx, plan.task_id, flight.status, flight.external_id, actor=ACTOR, reason=reason)
    return path[-1] if path else S.EXECUTING


def _failed(tx: Tx, plan: DispatchPlan, code: str, message: str, *, policy: Policy) -> str:
    """DISPATCHING -> DISPATCH_FAILED, then the check: re-queue only when nothing was created."""
    task = load(tx, plan.task_id)
    if task is None or task.status != S.DISPATCHING or task.version != plan.version:
        return task.status if task is not None else "missing"
    transition(tx, task, S.DISPATCH_FAILED, actor=ACTOR, action="DISPATCH_FAILED",
               set_values={"last_error_code": code, "last_error_message": message[:2000]},
               detail={"code": code, "attempt": plan.attempt})
    close_attempt(tx, plan.task_id, plan.attempt, "FAILED", code)
    return after_dispatch_failed(tx, plan.task_id, policy=policy, actor=ACTOR)


def after_dispatch_failed(tx: Tx, task_id: object, *, policy: Policy, actor: str) -> str:
    task = load(tx, task_id)  # type: ignore[arg-type]
    if task is None or task.status != S.DISPATCH_FAILED:
        return task.status if task is not None else "missing"
    if task.last_error_code in REDISPATCHABLE and task.dispatch_attempts < policy.max_dispatch_attempts:
        transition(tx, task, S.QUEUED, actor=actor, action="REDISPATCH_QUEUED",
                   detail={"after_attempt": task.dispatch_attempts})
        return S.QUEUED
    transition(tx, task, S.FAILED, actor=actor, action="DISPATCH_ABANDONED",
               detail={"code": task.last_error_code, "attempts": task.dispatch_attempts})
    return S.FAILED


def _manual_review(tx: Tx, plan: DispatchPlan, code: str) -> str:
    task = load(tx, plan.task_id)
    if task is None or task.status != S.DISPATCHING or task.version != plan.version:
        return task.status if task is not None else "missing"
    transition(tx, task, S.MANUAL_REVIEW, actor=ACTOR, action="OUTCOME_UNKNOWN",
               set_values={"last_error_code": code},
               detail={"code": code, "request_id": plan.request.request_id, "attempt": plan.attempt})
    close_attempt(tx, plan.task_id, plan.attempt, "UNKNOWN", code)
    return S.MANUAL_REVIEW


ACCEPTED_UNWRITTEN = coverage.window(
    "accept→write-back", "a fault hit a flight the platform accepted before its id was written back: the dispatcher "
    "died or stopped after the answer, its write-back failed, or the answer itself was lost (found by query)",
    ("create_flight",), ("dispatch.write_back",), roles=("dispatcher", "reconciler"))


def query_outcome(rid: str, caps: p.PlatformCapabilities, task_id: str) -> Work[p.FlightInfo | Outcome]:
    """Ask the platform whether a create with this request id made a flight."""
    if not caps.query_by_request_id:
        return Outcome.UNKNOWN
    try:
        found = yield CallPlatform("find_by_request_id", (rid,), task_id)
    except p.PlatformError:
        return Outcome.UNKNOWN
    return found if found is not None else Outcome.NOT_FOUND


RETRIES_EXHAUSTED = "retries-exhausted"  # create_flight's budget ran out with no answer that settles the task


def create_flight(plan: DispatchPlan, caps: p.PlatformCapabilities, policy: Policy) -> Work[str]:
    """Call the platform until its answer is known, within the retry budget."""
    tid = str(plan.task_id)
    rid = request_id(plan.task_id, plan.attempt)
    retry = policy.platform_retry
    for n in retry.tries():
        if n:
            yield from retry.backoff(n - 1)
        try:
            flight = yield CallPlatform("create_flight", (plan.request,), tid, n)
        except (p.PlatformRejected, p.PlatformNotFound) as exc:
            if bugs.active(bugs.REJECTION_RETRIED):
                continue  # INJECTED BUG rejection-retried: a definite rejection resent like a throttle
            return (yield Transact(functools.partial(_failed, plan=plan, code="PLATFORM_REJECTED", message=str(exc),
                                                     policy=policy),
                                   "dispatch.rejected"))
        except p.PlatformError as exc:
            if exc.outcome_known:
                continue  # throttled / refused: nothing was created, a resend is safe
            if bugs.active(bugs.BLIND_RESEND):
                continue  # INJECTED BUG blind-resend: resend after a timeout without asking the platform
            found = yield from query_outcome(rid, caps, tid)
            if isinstance(found, p.FlightInfo):
                coverage.reached(ACCEPTED_UNWRITTEN)  # accepted, answer lost
                return (yield from _write_back(plan, found, "found by query after " + exc.code))
            if found is Outcome.NOT_FOUND or caps.idempotency_key:
                continue  # nothing was created, or the platform dedupes a resend with the same key
            if not caps.query_by_request_id:
                return (yield Transact(lambda tx: _manual_review(tx, plan, "NO_KEY_NO_QUERY"), "dispatch.manual"))
            return "unknown"  # the query failed too: DISPATCHING stays, the reconciler settles it
        else:
            return (yield from _write_back(plan, flight, "accepted"))
    return RETRIES_EXHAUSTED  # still DISPATCHING; the reconciler queries later


def _write_back(plan: DispatchPlan, flight: p.FlightInfo, reason: str) -> Work[str]:
    try:
        return (yield Transact(lambda tx: _accepted(tx, plan, flight, reason), "dispatch.write_back"))
    except StaleWrite:
        return "fenced"


def dispatch_task(task_id: uuid.UUID | str, policy: Policy) -> Work[str]:
    """Dispatch a QUEUED task. Safe to run twice at once: conditional updates let one win."""
    tid = uuid.UUID(str(task_id))
    view = yield Transact(lambda tx: fresh(tx, tid), "dispatch.read")
    if view is None or view.status != S.QUEUED:
        return "skipped"
    caps = yield CallPlatform("capabilities", (), str(tid))
    retry = policy.platform_retry
    device = None
    for n in retry.tries():
        if n:
            yield from retry.backoff(n - 1)
        try:
            device = yield CallPlatform("get_device", (view.device_id,), str(tid), n)
            break
        except p.PlatformNotFound:
            device = p.DeviceState(view.device_id, online=False, battery=0.0, known=False)
            break
        except p.PlatformError:
            continue
    if device is None:
        return "device-check-failed"  # stays QUEUED; the reconciler tries again later
    try:
        plan = yield Transact(lambda tx: _begin(tx, tid, device, caps, policy), "dispatch.begin")
    except StaleWrite:
        return "fenced"
    if plan is None:
        return "not-dispatched"
    return (yield from create_flight(plan, caps, policy))


def latest_attempt(tx: Tx, task_id: uuid.UUID) -> DispatchAttempt | None:
    return tx.session.scalars(
        select(DispatchAttempt).where(DispatchAttempt.task_id == task_id).order_by(DispatchAttempt.attempt.desc())
    ).first()
