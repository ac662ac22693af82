"""Task reports (seed 000 §4.1 step 12, §8.2): built after COMPLETED, uploaded to the object store, with
a status of their own. A failed upload never touches the task's result; it is retried with backoff."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import timedelta

from sqlalchemy import bindparam, func, select, update

from reference.copilot import bugs
from reference.copilot.alerts import alert
from reference.copilot.effects import ObjectStoreError, PutObject, Transact, Tx, Work
from reference.copilot.models import DroneTask, PlatformEventRow, TaskAuditLog, TaskReport
from reference.copilot.policy import Policy
from reference.copilot.tasks import TASK_STATUS_CHANGED, add_audit, add_outbox, load

ACTOR = "report-worker"
_REPORT, _EVENTS, _AUDIT = TaskReport.__table__, PlatformEventRow.__table__, TaskAuditLog.__table__
# Built once (the report worker runs them for every completed task): Core rows, no ORM identity map.
_REPORT_BY_TASK = select(_REPORT).where(_REPORT.c.task_id == bindparam("task_id"))
_EVENT_COUNTS = (select(_EVENTS.c.kind, func.count()).where(_EVENTS.c.task_id == bindparam("task_id"))
                 .group_by(_EVENTS.c.kind).order_by(_EVENTS.c.kind))
_TRAIL = (select(_AUDIT.c.created_at, _AUDIT.c.from_status, _AUDIT.c.to_status, _AUDIT.c.actor, _AUDIT.c.action)
          .where(_AUDIT.c.task_id == bindparam("task_id")).order_by(_AUDIT.c.id))
_MARK_UPLOADED = (update(_REPORT).where(_REPORT.c.task_id == bindparam("w_task_id"), _REPORT.c.status != "UPLOADED")
                  .values(status="UPLOADED", uploaded_at=bindparam("at", type_=_REPORT.c.uploaded_at.type),
                          size_bytes=bindparam("size_bytes"), sha256=bindparam("sha256"),
                          attempts=_REPORT.c.attempts + 1, last_error=None))


def _build(tx: Tx, task_id: uuid.UUID) -> tuple[str, bytes] | None:
    conn = tx.conn
    report = conn.execute(_REPORT_BY_TASK, {"task_id": task_id}).first()
    task = load(tx, task_id)
    if report is None or report.status in ("UPLOADED", "DEAD") or task is None:
        return None  # DEAD: the operator's until re-driven (services.ops)
    counts: dict[str, int] = dict(conn.execute(_EVENT_COUNTS, {"task_id": task_id}).all())
    trail = [{"at": a.created_at.isoformat(), "from": a.from_status, "to": a.to_status, "actor": a.actor,
              "action": a.action} for a in conn.execute(_TRAIL, {"task_id": task_id})]
    body = {
        "task_id": str(task.id), "status": task.status, "external_task_id": task.external_task_id,
        "device_id": task.device_id, "area_id": task.area_id, "draft_version": task.draft_version,
        "snapshot": task.snapshot, "alerts": task.alert_count, "last_telemetry_seq": task.last_telemetry_seq,
        "event_counts": counts, "audit_trail": trail,
    }
    return report.object_key, json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _uploaded(tx: Tx, task_id: uuid.UUID, data: bytes) -> None:
    tx.conn.execute(_MARK_UPLOADED, {"w_task_id": task_id, "at": tx.now, "size_bytes": len(data),
                                     "sha256": hashlib.sha256(data).hexdigest()})


def _upload_failed(tx: Tx, task_id: uuid.UUID, error: str, delay_s: float, max_attempts: int) -> bool:
    """Record a failed upload, due again in ``delay_s``; after ``max_attempts`` the report goes DEAD (audited;
    an operator re-drives it). True when it just went DEAD."""

    report = tx.session.get(TaskReport, task_id, populate_existing=True)
    if report is None or report.status in ("UPLOADED", "DEAD"):
        return False
    report.last_error = error[:2000]
    report.attempts += 1
    report.next_attempt_at = tx.now + timedelta(seconds=delay_s)
    if report.attempts < max_attempts:
        report.status = "UPLOAD_FAILED"
        return False
    report.status, report.dead_at = "DEAD", tx.now
    add_audit(tx, actor=ACTOR, action="REPORT_DEAD", task_id=task_id, result="DEAD",
              detail={"object_key": report.object_key, "attempts": report.attempts, "error": error[:200]})
    return True


def upload_report(task_id: uuid.UUID | str, policy: Policy) -> Work[str]:
    tid = uuid.UUID(str(task_id))
    built = yield Transact(lambda tx: _build(tx, tid), "report.build")
    if built is None:
        return "nothing-to-do"
    key, data = built
    try:
        yield PutObject(key, data)
    except ObjectStoreError as exc:
        error = str(exc)
    else:
        yield Transact(lambda tx: _uploaded(tx, tid, data), "report.uploaded")
        return "uploaded"
    attempts = yield Transact(lambda tx: _attempts(tx, tid), "report.read")
    r = policy.report_retry
    delay = min(r.cap_s, r.base_s * 2 ** min(attempts, 16))
    dead = yield Transact(lambda tx: _upload_failed(tx, tid, error, delay, r.attempts), "report.failed")
    if bugs.active(bugs.REPORT_FAILS_TASK):
        yield Transact(lambda tx: _fail_completed_task(tx, tid, error), "report.fail_task")
    if dead:
        alert("REPORT_DEAD", task_id=str(tid), attempts=r.attempts, error=error)
        return "dead"
    return "upload-failed"


def _fail_completed_task(tx: Tx, task_id: uuid.UUID, error: str) -> None:
    """INJECTED BUG report-fails-task: a failed upload marks the COMPLETED task FAILED. The state machine
    refuses that move, so the defective code writes the row directly (with its audit and outbox event)."""
    task = load(tx, task_id)
    if task is None or task.status != "COMPLETED":
        return
    tx.session.execute(update(DroneTask).where(DroneTask.id == task_id, DroneTask.version == task.version)
                       .values(status="FAILED", version=task.version + 1, updated_at=tx.now,
                               last_error_code="REPORT_UPLOAD_FAILED", last_error_message=error[:2000])
                       .execution_options(synchronize_session=False))
    add_audit(tx, actor="report-worker", action="REPORT_FAILED", task_id=task_id, from_status="COMPLETED",
              to_status="FAILED", from_version=task.version, to_version=task.version + 1,
              detail={"error": error[:200]})
    add_outbox(tx, task_id, TASK_STATUS_CHANGED, task.version + 1, {"from": "COMPLETED", "to": "FAILED"})
    tx.changes.append((task_id, task.user_id, "FAILED", task.version + 1))


def _attempts(tx: Tx, tid: uuid.UUID) -> int:
    report = tx.session.get(TaskReport, tid)
    return report.attempts if report is not None else 0


_DUE_REPORTS = (select(_REPORT.c.task_id)
                .where(_REPORT.c.status.in_(("PENDING", "UPLOAD_FAILED")),
                       _REPORT.c.next_attempt_at <= bindparam("now", type_=_REPORT.c.next_attempt_at.type))
                .order_by(_REPORT.c.next_attempt_at, _REPORT.c.task_id).limit(bindparam("limit")))


def due_reports(tx: Tx, limit: int) -> list[uuid.UUID]:
    return list(tx.conn.execute(_DUE_REPORTS, {"now": tx.now, "limit": limit}).scalars())
