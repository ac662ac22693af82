"""The final state a run leaves behind, read from the database, the platform's ledger and the object
store into plain data, so the checkers run the same on SQLite, PostgreSQL or a hand-built fixture."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from reference.copilot import platform as p
from reference.copilot.models import (
    ApprovalOrder,
    DeadLetter,
    DispatchAttempt,
    DroneTask,
    EventFailure,
    FlightRoute,
    PlatformEventRow,
    ProcessedEvent,
    SecurityEvent,
    SiteArea,
    TaskAuditLog,
    TaskDraft,
    TaskEventOutbox,
    TaskReport,
    UserAreaPermission,
    UserDevicePermission,
)
from reference.copilot.states import TERMINAL, TaskStatus

# Task statuses no automatic path changes any more: terminal, or waiting for a supervisor.
SETTLED = {s.value for s in TERMINAL} | {TaskStatus.MANUAL_REVIEW.value}


def epoch(dt: datetime | None) -> float | None:
    if dt is None:
        return None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


@dataclass
class FinalState:
    """Everything as dicts; times are epoch seconds. ``t0`` is the epoch time of history time 0."""

    t0: float = 0.0
    tasks: list[dict[str, Any]] = field(default_factory=list)
    audit: list[dict[str, Any]] = field(default_factory=list)
    # The audit rows as a watcher read them during the run (I47); None: not observed in this shell.
    audit_seen: list[dict[str, Any]] | None = None
    outbox: list[dict[str, Any]] = field(default_factory=list)
    processed: list[dict[str, Any]] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)
    dispatch_attempts: list[dict[str, Any]] = field(default_factory=list)  # dispatch_attempt rows: each create recorded
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    security_log: list[dict[str, Any]] = field(default_factory=list)  # refusals the application recorded
    event_failures: list[dict[str, Any]] = field(default_factory=list)  # failed handlings a consumer recorded
    # Defects in the code that were raised and carried on from (kernel.logs.DEFECTS), where the shell sees them (the
    # simulation: every process is its own); None: not observed in this shell.
    defects: list[dict[str, Any]] | None = None
    areas: list[dict[str, Any]] = field(default_factory=list)  # airspace_open is the end state (history: when)
    approvals: list[dict[str, Any]] = field(default_factory=list)
    # The drafts as they end (their current version's device and parameters) and every version's route row.
    drafts: list[dict[str, Any]] = field(default_factory=list)
    routes: list[dict[str, Any]] = field(default_factory=list)
    area_permissions: set[tuple[str, str]] = field(default_factory=set)  # (user, area)
    device_permissions: set[tuple[str, str]] = field(default_factory=set)  # (user, device)
    alert_events: dict[str, int] = field(default_factory=dict)  # task id -> distinct alerts stored
    telemetry_max_seq: dict[str, int] = field(default_factory=dict)  # task id -> highest telemetry seq stored
    orphan_events: dict[str, int] = field(default_factory=dict)  # external id -> events stored with no task
    # The outbox rows' budget audits in order: {"action": OUTBOX_DEAD | OUTBOX_REDRIVEN, "event_id", "at", "attempts"
    # (claims it had when it went DEAD, or that a re-drive took away)}.
    outbox_budget: list[dict[str, Any]] = field(default_factory=list)
    # The operator alerts raised (reference.copilot.alerts): {"code", and the item it names: event_id, task_id or
    # job_id};
    # None: not observed in this shell.
    alerts: list[dict[str, Any]] | None = None
    # The webhook's answers to the platform summed over the batches it took: sent, accepted, duplicates, orphans;
    # and how many batches went unanswered (a 5xx, or the API killed: maybe after its commit).
    # Only the simulation sees every answer (on a real stack the platform simulator gets them): None there.
    webhook_answers: dict[str, int] | None = None
    ledger: list[dict[str, Any]] = field(default_factory=list)
    objects: dict[str, str] = field(default_factory=dict)  # key -> sha256
    ledger_clock_comparable: bool = True  # False when the platform's clock is scaled (real stack)
    platform_time_scale: float = 1.0  # platform seconds per wall second of the backend's clock (real stack: 60)
    # How the platform's events arrived at the backend (platform_event rows; see event_arrivals()).
    event_arrivals: dict[str, Any] = field(default_factory=dict)
    heal_time: float = 0.0  # history time when the last fault healed
    end_time: float = 0.0  # history time when the run stopped

    def counts(self) -> dict[str, int]:
        by_status: dict[str, int] = {}
        for t in self.tasks:
            by_status[t["status"]] = by_status.get(t["status"], 0) + 1
        return {"tasks": len(self.tasks), "flights": len(self.ledger), **dict(sorted(by_status.items()))}


def audit_rows(session: Session, after_id: int = 0) -> list[dict[str, Any]]:
    """The task_audit_log rows after ``after_id``, in order, as plain data (the end's, and those a run's watcher
    reads while it runs: I47)."""
    return [
        {"id": a.id, "task_id": str(a.task_id) if a.task_id else None,
         "draft_id": str(a.draft_id) if a.draft_id else None, "action": a.action, "actor": a.actor,
         "from": a.from_status, "to": a.to_status, "from_version": a.from_version, "to_version": a.to_version,
         "at": epoch(a.created_at), "result": a.result, "correlation_id": a.correlation_id}
        for a in session.scalars(select(TaskAuditLog).where(TaskAuditLog.id > after_id).order_by(TaskAuditLog.id))
    ]


def read_database(session: Session, state: FinalState) -> FinalState:
    s = session
    state.tasks = [
        {"id": str(t.id), "user_id": t.user_id, "idempotency_key": t.idempotency_key, "status": t.status,
         "version": t.version, "external_task_id": t.external_task_id, "device_id": t.device_id,
         "created_at": epoch(t.created_at), "updated_at": epoch(t.updated_at), "alert_count": t.alert_count,
         "last_telemetry_seq": t.last_telemetry_seq, "dispatch_attempts": t.dispatch_attempts,
         "last_error_code": t.last_error_code, "area_id": t.area_id, "draft_id": str(t.draft_id),
         "draft_version": t.draft_version, "route_id": str(t.route_id), "route_version": t.route_version,
         "snapshot": t.snapshot}
        for t in s.scalars(select(DroneTask).order_by(DroneTask.created_at, DroneTask.id))
    ]
    state.audit = audit_rows(s)
    state.outbox = [
        {"id": str(o.id), "task_id": str(o.task_id), "event_type": o.event_type, "task_version": o.task_version,
         "status": o.status, "created_at": epoch(o.created_at), "sent_at": epoch(o.sent_at), "attempts": o.attempts,
         "last_error": o.last_error, "redrive_count": o.redrive_count}
        for o in s.scalars(select(TaskEventOutbox).order_by(TaskEventOutbox.created_at, TaskEventOutbox.id))
    ]
    state.outbox_budget = [
        {"action": a.action, "event_id": str((a.detail or {}).get("event_id")), "at": epoch(a.created_at),
         "attempts": (a.detail or {}).get("attempts", (a.detail or {}).get("attempts_spent"))}
        for a in s.scalars(select(TaskAuditLog).where(TaskAuditLog.action.in_(("OUTBOX_DEAD", "OUTBOX_REDRIVEN")))
                           .order_by(TaskAuditLog.id))
    ]
    state.processed = [
        {"consumer": p.consumer, "event_id": str(p.event_id), "task_id": str(p.task_id) if p.task_id else None,
         "at": epoch(p.processed_at)}
        for p in s.scalars(select(ProcessedEvent).order_by(ProcessedEvent.consumer, ProcessedEvent.event_id))
    ]
    state.dispatch_attempts = [
        {"task_id": str(a.task_id), "attempt": a.attempt, "request_id": a.request_id, "outcome": a.outcome,
         "external_task_id": a.external_task_id, "error_code": a.error_code}
        for a in s.scalars(select(DispatchAttempt).order_by(DispatchAttempt.task_id, DispatchAttempt.attempt))
    ]
    state.reports = [
        {"task_id": str(r.task_id), "status": r.status, "object_key": r.object_key, "sha256": r.sha256,
         "attempts": r.attempts, "last_error": r.last_error, "redrive_count": r.redrive_count}
        for r in s.scalars(select(TaskReport).order_by(TaskReport.task_id))
    ]
    state.security_log = [
        {"actor": e.actor, "action": e.action, "code": e.code, "draft_id": str(e.draft_id) if e.draft_id else None}
        for e in s.scalars(select(SecurityEvent).order_by(SecurityEvent.id))
    ]
    state.dead_letters = [
        {"id": d.id, "consumer": d.consumer, "event_id": str(d.event_id), "task_id": str(d.task_id),
         "event_type": d.event_type, "error_code": d.error_code, "attempts": d.attempts, "history": d.history,
         "redriven": d.redriven_at is not None, "redrive_count": d.redrive_count, "created_at": epoch(d.created_at)}
        for d in s.scalars(select(DeadLetter).order_by(DeadLetter.id))
    ]
    state.event_failures = [
        {"consumer": f.consumer, "event_id": str(f.event_id), "attempt": f.delivery_attempt, "code": f.error_code,
         "at": epoch(f.at)}
        for f in s.scalars(select(EventFailure).order_by(EventFailure.id))
    ]
    state.areas = [
        {"id": a.id, "airspace_open": a.airspace_open, "requires_approval": a.requires_approval,
         "polygon": a.polygon, "max_altitude_m": a.max_altitude_m}
        for a in s.scalars(select(SiteArea).order_by(SiteArea.id))
    ]
    state.approvals = [
        {"id": str(a.id), "draft_id": str(a.draft_id), "draft_version": a.draft_version, "status": a.status,
         "approver_id": a.approver_id, "decided_at": epoch(a.decided_at)}
        for a in s.scalars(select(ApprovalOrder).order_by(ApprovalOrder.decided_at, ApprovalOrder.id))
    ]
    state.drafts = [
        {"id": str(d.id), "user_id": d.user_id, "status": d.status, "version": d.version, "area_id": d.area_id,
         "device_id": d.device_id, "parameters": d.parameters, "route_id": str(d.route_id),
         "idempotency_key": d.idempotency_key}
        for d in s.scalars(select(TaskDraft).order_by(TaskDraft.created_at, TaskDraft.id))
    ]
    state.routes = [
        {"id": str(r.id), "draft_id": str(r.draft_id), "version": r.version, "waypoints": r.waypoints}
        for r in s.scalars(select(FlightRoute).order_by(FlightRoute.draft_id, FlightRoute.version))
    ]
    state.area_permissions = {(p.user_id, p.area_id) for p in s.scalars(select(UserAreaPermission))}
    state.device_permissions = {(p.user_id, p.device_id) for p in s.scalars(select(UserDevicePermission))}
    state.alert_events = {
        str(tid): int(n) for tid, n in s.execute(
            select(PlatformEventRow.task_id, func.count()).where(PlatformEventRow.kind == "alert",
                                                                 PlatformEventRow.task_id.is_not(None))
            .group_by(PlatformEventRow.task_id))}
    state.telemetry_max_seq = {
        str(tid): int(n) for tid, n in s.execute(
            select(PlatformEventRow.task_id, func.max(PlatformEventRow.seq)).where(
                PlatformEventRow.kind == "telemetry", PlatformEventRow.task_id.is_not(None))
            .group_by(PlatformEventRow.task_id))}
    state.orphan_events = {
        str(ext): int(n) for ext, n in s.execute(
            select(PlatformEventRow.external_task_id, func.count()).where(PlatformEventRow.task_id.is_(None))
            .group_by(PlatformEventRow.external_task_id))}
    state.event_arrivals = event_arrivals(s, state.platform_time_scale)
    return state


TERMINAL_EVENT_KINDS = (p.EVENT_COMPLETED, p.EVENT_FAILED, p.EVENT_CANCELLED)


def event_arrivals(session: Session, time_scale: float = 1.0) -> dict[str, Any]:
    """How the platform's events reached the backend, from the stored rows (one per (flight, seq): a
    duplicate is not stored twice, the shells record those in the history). Per flight, in the order
    received (received_at, then insertion):
    - ``reordered``: events received after an event of the same flight with a higher sequence (a batch is
      stored in sequence order, so this counts disorder across deliveries only);
    - ``terminal_lateness_s``: external id -> how much later than the flight's promptest event its terminal
      event arrived, in platform seconds: an event's delay is ``received_at * time_scale - occurred_at``
      (received on the backend's clock, occurred on the platform's, which runs ``time_scale`` times faster
      on the real stack), so comparing delays within a flight cancels the clocks' offset.
    One pass over the rows, ordered; per flight only a few numbers are kept."""
    rows = session.execute(
        select(PlatformEventRow.external_task_id, PlatformEventRow.seq, PlatformEventRow.kind,
               PlatformEventRow.occurred_at, PlatformEventRow.received_at)
        .order_by(PlatformEventRow.external_task_id, PlatformEventRow.received_at, PlatformEventRow.id))
    stored = reordered = flights = 0
    lateness: dict[str, float] = {}
    current: str | None = None
    top_seq, min_delay, terminal_delay = 0, float("inf"), None

    def close() -> None:
        if current is not None and terminal_delay is not None:
            lateness[current] = round(terminal_delay - min_delay, 3)

    for ext, seq, kind, occurred, received in rows:
        if ext != current:
            close()
            current, flights = ext, flights + 1
            top_seq, min_delay, terminal_delay = 0, float("inf"), None
        stored += 1
        if seq < top_seq:
            reordered += 1
        top_seq = max(top_seq, seq)
        delay = (epoch(received) or 0.0) * time_scale - (epoch(occurred) or 0.0)
        min_delay = min(min_delay, delay)
        if kind in TERMINAL_EVENT_KINDS:
            terminal_delay = delay
    close()
    return {"stored": stored, "flights": flights, "reordered": reordered, "terminal_lateness_s": lateness}


def object_digests(objects: dict[str, bytes]) -> dict[str, str]:
    return {k: hashlib.sha256(v).hexdigest() for k, v in sorted(objects.items())}


def unsettled_rows(session: Session) -> int:
    """Rows an automatic path will still change: tasks not yet settled (SETTLED), outbox events not yet sent and
    reports not yet uploaded. A DEAD row waits for an operator, not for time: it is settled."""
    tasks = session.scalar(select(func.count()).select_from(DroneTask).where(DroneTask.status.not_in(SETTLED)))
    outbox = session.scalar(select(func.count()).select_from(TaskEventOutbox)
                            .where(TaskEventOutbox.status.not_in(("SENT", "DEAD"))))
    reports = session.scalar(select(func.count()).select_from(TaskReport)
                             .where(TaskReport.status.not_in(("UPLOADED", "DEAD"))))
    return int(tasks or 0) + int(outbox or 0) + int(reports or 0)
