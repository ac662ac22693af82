"""What the automatic paths gave up on, for a supervisor to look at and re-drive (seed 000 §5.5: "kept for manual
investigation, or re-delivered after review").

Three kinds wait for a person: an outbox row gone DEAD (the publisher's attempts ran out: a long broker outage), a
report gone DEAD (the report worker's upload attempts ran out: a long object-store outage), and a consumer's dead
letter (a message that failed on every delivery). A supervisor sees and re-drives those of tasks in areas they hold
a permission on (others are "not found", as everywhere in the API). A re-drive gives the item a fresh budget of
attempts, takes a reason, and writes an audit row in the same transaction; re-driving an item that is not waiting
(never dead, or already re-driven) is a conflict, so a double click does nothing twice."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select

from reference.copilot import bugs
from reference.copilot.effects import Tx
from reference.copilot.errors import Conflict, NotFound, ValidationFailed
from reference.copilot.models import DeadLetter, DroneTask, TaskEventOutbox, TaskReport, UserAreaPermission
from reference.copilot.services.queries import iso as _iso
from reference.copilot.tasks import add_audit, item_correlation

MAX_REASON_CHARS = 2000
KINDS = ("outbox", "report", "dead-letter")


def _areas(tx: Tx, supervisor: str) -> set[str]:
    return set(tx.session.scalars(select(UserAreaPermission.area_id).where(UserAreaPermission.user_id == supervisor)))


def _task_areas(tx: Tx, task_ids: set[uuid.UUID]) -> dict[uuid.UUID, str]:
    if not task_ids:
        return {}
    rows = tx.session.execute(select(DroneTask.id, DroneTask.area_id).where(DroneTask.id.in_(sorted(task_ids))))
    return {task_id: area_id for task_id, area_id in rows}


def dead_items(tx: Tx, supervisor: str, limit: int = 200) -> dict[str, list[dict[str, Any]]]:
    """Everything waiting for a re-drive on the supervisor's areas, oldest first, at most ``limit`` of each kind."""
    outbox = list(tx.session.scalars(select(TaskEventOutbox).where(TaskEventOutbox.status == "DEAD")
                                     .order_by(TaskEventOutbox.dead_at, TaskEventOutbox.id)))
    reports = list(tx.session.scalars(select(TaskReport).where(TaskReport.status == "DEAD")
                                      .order_by(TaskReport.dead_at, TaskReport.task_id)))
    letters = list(tx.session.scalars(select(DeadLetter).where(DeadLetter.redriven_at.is_(None),
                                                               DeadLetter.task_id.is_not(None))
                                      .order_by(DeadLetter.id)))
    mine = _areas(tx, supervisor)
    area_of = _task_areas(tx, {o.task_id for o in outbox} | {r.task_id for r in reports}
                          | {d.task_id for d in letters if d.task_id is not None})

    def visible(task_id: uuid.UUID | None) -> bool:
        return task_id is not None and area_of.get(task_id) in mine

    return {
        "outbox": [{"event_id": str(o.id), "task_id": str(o.task_id), "event_type": o.event_type,
                    "attempts": o.attempts, "last_error": o.last_error, "dead_at": _iso(o.dead_at),
                    "redrive_count": o.redrive_count} for o in outbox if visible(o.task_id)][:limit],
        "reports": [{"task_id": str(r.task_id), "object_key": r.object_key, "attempts": r.attempts,
                     "last_error": r.last_error, "dead_at": _iso(r.dead_at), "redrive_count": r.redrive_count}
                    for r in reports if visible(r.task_id)][:limit],
        "dead_letters": [{"id": d.id, "consumer": d.consumer, "event_id": str(d.event_id), "task_id": str(d.task_id),
                          "event_type": d.event_type, "error_code": d.error_code, "error_message": d.error_message,
                          "attempts": d.attempts, "created_at": _iso(d.created_at),
                          "redrive_count": d.redrive_count} for d in letters if visible(d.task_id)][:limit],
    }


def _check_reason(reason: str) -> None:
    if not reason.strip() or len(reason) > MAX_REASON_CHARS:
        raise ValidationFailed("INVALID_PARAMETERS", f"reason must be 1..{MAX_REASON_CHARS} characters", field="reason")


def _owned(tx: Tx, task_id: uuid.UUID | None, supervisor: str, not_found: NotFound) -> None:
    task = tx.session.get(DroneTask, task_id) if task_id is not None else None
    if task is None or tx.session.get(UserAreaPermission, (supervisor, task.area_id)) is None:
        raise not_found  # no oracle for other areas


def _uuid(value: str, not_found: NotFound) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise not_found from None


def redrive(tx: Tx, kind: str, item_id: str, supervisor: str, reason: str) -> dict[str, Any]:
    """Re-drive one waiting item of ``kind`` (KINDS); returns what it became."""
    _check_reason(reason)
    operator = f"operator:{supervisor}"
    if kind == "outbox":
        missing = NotFound("OUTBOX_EVENT_NOT_FOUND", f"outbox event {item_id} does not exist")
        row = tx.session.get(TaskEventOutbox, _uuid(item_id, missing), with_for_update=True)
        if row is None:
            raise missing
        _owned(tx, row.task_id, supervisor, missing)
        if row.status != "DEAD":
            raise Conflict("NOT_DEAD", f"outbox event {item_id} is {row.status}, not DEAD", item_status=row.status)
        spent = row.attempts
        row.status, row.attempts, row.available_at, row.dead_at = "PENDING", 0, tx.now, None
        if bugs.active(bugs.REDRIVE_NO_FRESH_BUDGET):
            row.attempts = spent
        row.redrive_count += 1
        add_audit(tx, actor=operator, action="OUTBOX_REDRIVEN", task_id=row.task_id,
                  correlation_id=item_correlation(str(row.id)),
                  detail={"event_id": str(row.id), "event_type": row.event_type, "attempts_spent": spent,
                          "reason": reason})
        return {"kind": kind, "id": str(row.id), "status": row.status, "redrive_count": row.redrive_count}
    if kind == "report":
        missing = NotFound("REPORT_NOT_FOUND", f"report of task {item_id} does not exist")
        report = tx.session.get(TaskReport, _uuid(item_id, missing), with_for_update=True)
        if report is None:
            raise missing
        _owned(tx, report.task_id, supervisor, missing)
        if report.status != "DEAD":
            raise Conflict("NOT_DEAD", f"report of task {item_id} is {report.status}, not DEAD",
                           item_status=report.status)
        spent = report.attempts
        report.status, report.attempts, report.next_attempt_at, report.dead_at = "PENDING", 0, tx.now, None
        report.redrive_count += 1
        add_audit(tx, actor=operator, action="REPORT_REDRIVEN", task_id=report.task_id,
                  correlation_id=item_correlation(str(report.task_id)),
                  detail={"object_key": report.object_key, "attempts_spent": spent, "reason": reason})
        return {"kind": kind, "id": str(report.task_id), "status": report.status,
                "redrive_count": report.redrive_count}
    if kind == "dead-letter":
        from reference.copilot.services.consumer import redrive as redrive_dead_letter

        missing = NotFound("DEAD_LETTER_NOT_FOUND", f"dead letter {item_id} does not exist")
        # ASCII digits only: str.isdigit() is also true of '²' or '١', which int() refuses (a 500, not a 404)
        if not (str(item_id).isascii() and str(item_id).isdigit()) or len(str(item_id)) > 18:
            raise missing
        letter = tx.session.get(DeadLetter, int(item_id), with_for_update=True)  # concurrent re-drives queue here
        if letter is None:
            raise missing
        _owned(tx, letter.task_id, supervisor, missing)
        event_id = redrive_dead_letter(tx, letter.id, operator, reason=reason)
        return {"kind": kind, "id": str(letter.id), "event_id": event_id, "status": "REDRIVEN",
                "redrive_count": letter.redrive_count}
    raise NotFound("UNKNOWN_KIND", f"no such kind {kind!r}: one of {', '.join(KINDS)}")
