"""Read-side queries shared by the shells: plain functions of a transaction returning JSON-ready dicts.

Ownership is checked here: another user's draft or task is reported as not found (no existence oracle).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row, select

from reference.copilot.db import as_utc
from reference.copilot.effects import Tx
from reference.copilot.errors import NotFound
from reference.copilot.models import ApprovalOrder, DroneTask, TaskAuditLog, TaskDraft
from reference.copilot.services.drafts import owned_draft, reviewable_draft, route_of
from reference.copilot.tasks import load


def iso(value: datetime | None) -> str | None:
    """UTC ISO 8601 with a Z. SQLite hands timezone-aware columns back naive: they were written in UTC."""
    if value is None:
        return None
    return as_utc(value).astimezone(UTC).isoformat().replace("+00:00", "Z")


def draft_dict(tx: Tx, draft: TaskDraft) -> dict[str, Any]:
    route = route_of(tx, draft)
    return {
        "id": str(draft.id),
        "version": draft.version,
        "status": draft.status,
        "goal": draft.goal,
        "area_id": draft.area_id,
        "device_id": draft.device_id,
        "parameters": dict(draft.parameters),
        "route": {"id": str(route.id), "version": route.version, "waypoints": route.waypoints},
        "created_at": iso(draft.created_at),
        "updated_at": iso(draft.updated_at),
    }


def get_draft(tx: Tx, user_id: str, draft_id: uuid.UUID | str, role: str = "operator") -> dict[str, Any]:
    """An operator reads their own drafts; an approver, the drafts of the areas they approve for."""
    draft = reviewable_draft(tx, draft_id, user_id) if role == "approver" else owned_draft(tx, draft_id, user_id)
    return draft_dict(tx, draft)


def approval_dict(order: ApprovalOrder) -> dict[str, Any]:
    return {
        "id": str(order.id),
        "draft_id": str(order.draft_id),
        "draft_version": order.draft_version,
        "status": order.status,
        "approver_id": order.approver_id,
        "decided_at": iso(order.decided_at),
    }


def owned_task(tx: Tx, task_id: uuid.UUID | str, user_id: str) -> Row[Any]:
    try:
        tid = task_id if isinstance(task_id, uuid.UUID) else uuid.UUID(str(task_id))
    except ValueError:
        raise NotFound("TASK_NOT_FOUND", f"task {task_id} does not exist") from None
    task = load(tx, tid)
    if task is None or task.user_id != user_id:
        raise NotFound("TASK_NOT_FOUND", f"task {task_id} does not exist")
    return task


def task_dict(task: Row[Any]) -> dict[str, Any]:
    return {
        "id": str(task.id),
        "status": task.status,
        "version": task.version,
        "external_task_id": task.external_task_id,
        "device_id": task.device_id,
        "area_id": task.area_id,
        "draft_id": str(task.draft_id),
        "draft_version": task.draft_version,
        "snapshot": task.snapshot,
        "last_error_code": task.last_error_code,
        "alert_count": task.alert_count,
        "last_telemetry_seq": task.last_telemetry_seq,
        "created_at": iso(task.created_at),
        "updated_at": iso(task.updated_at),
    }


def user_tasks(tx: Tx, user_id: str, limit: int) -> dict[str, Any]:
    """The caller's ``limit`` most recently changed tasks, newest change first: what a stream client rereads to
    resync, which finds the tasks it never heard of too. The user's tasks are found through the index of
    uq_task_idempotency (user_id first); a user has tens of tasks a day, so sorting them is cheap."""
    t = DroneTask.__table__
    rows = tx.session.execute(select(t.c.id, t.c.status, t.c.version, t.c.updated_at).where(t.c.user_id == user_id)
                      .order_by(t.c.updated_at.desc(), t.c.id.desc()).limit(limit)).all()
    return {"tasks": [{"id": str(r.id), "status": r.status, "version": r.version, "updated_at": iso(r.updated_at)}
                      for r in rows], "limit": limit}


def task_snapshot(tx: Tx, user_id: str, task_id: uuid.UUID | str) -> dict[str, Any]:
    return task_dict(owned_task(tx, task_id, user_id))


def task_events(
    tx: Tx, user_id: str, task_id: uuid.UUID | str, after_version: int = -1, limit: int | None = None
) -> dict[str, Any]:
    """The task's audited transitions with ``to_version > after_version``, ascending (seed 003 resync).

    The creation is version 0, so ``after_version=-1`` (the default) lists the whole history and a client
    that last saw version N asks for ``after_version=N``.
    """
    task = owned_task(tx, task_id, user_id)
    query = (
        select(TaskAuditLog)
        .where(
            TaskAuditLog.task_id == task.id,
            TaskAuditLog.to_version.is_not(None),
            TaskAuditLog.to_status.is_not(None),
            TaskAuditLog.to_version > after_version,
        )
        .order_by(TaskAuditLog.to_version, TaskAuditLog.id)
    )
    if limit is not None:
        query = query.limit(limit)
    rows = tx.session.scalars(query).all()
    return {
        "task_id": str(task.id),
        "version": task.version,
        "events": [
            {
                "version": r.to_version,
                "from": r.from_status,
                "to": r.to_status,
                "action": r.action,
                "actor": r.actor,
                "at": iso(r.created_at),
            }
            for r in rows
        ],
    }
