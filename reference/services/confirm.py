"""confirm_draft (seed 000 §4.1 steps 1-5, §6.3): checks, then task + audit + outbox in one transaction.

Idempotency: the key is per user operation and stable across the user's retries. The same key returns
the same task; the same key with another payload is a conflict. The database's uq_task_idempotency is
the arbiter: two concurrent confirms may both find no task, both try to insert, and the loser reads
the winner's task. One task per draft version, ever: confirming a version again with another key answers
with the task it made, whatever its state (uq_task_draft_version arbitrates the race); to fly the plan
again the user revises the draft.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from reference import bugs
from reference.effects import Message, Publish, Transact, Tx, Work
from reference.errors import Conflict, ValidationFailed
from reference.models import DroneTask, SiteArea, TaskEventOutbox
from reference.services.drafts import Plan, approval_status, check_plan, has_any_approval, owned_draft, route_of
from reference.states import TaskStatus
from reference.tasks import TASK_CREATED, add_audit, add_outbox

MAX_KEY_LENGTH = 160


@dataclass(frozen=True)
class ConfirmDraft:
    user_id: str
    draft_id: str
    draft_version: int
    idempotency_key: str

    def request_hash(self) -> str:
        body = json.dumps({"draft_id": str(self.draft_id), "draft_version": self.draft_version}, sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True)
class TaskCreated:
    task_id: str
    status: str
    version: int
    replayed: bool  # True when the key had already created this task


def _existing(tx: Tx, cmd: ConfirmDraft) -> TaskCreated | None:
    task = tx.session.scalars(
        select(DroneTask).where(DroneTask.user_id == cmd.user_id, DroneTask.idempotency_key == cmd.idempotency_key)
    ).first()
    if task is None:
        return None
    if task.request_hash != cmd.request_hash():
        raise Conflict("IDEMPOTENCY_KEY_REUSED",
                       "this idempotency key was used for another confirmation; use a new key",
                       task_id=str(task.id))
    return TaskCreated(str(task.id), task.status, task.version, replayed=True)


def _of_version(tx: Tx, draft_id: uuid.UUID | str, version: int) -> TaskCreated | None:
    """The task a draft version already made (uq_task_draft_version: at most one), as a replay."""
    task = tx.session.scalars(select(DroneTask).where(DroneTask.draft_id == uuid.UUID(str(draft_id)),
                                                      DroneTask.draft_version == version)).first()
    return None if task is None else TaskCreated(str(task.id), task.status, task.version, replayed=True)


def _validate_and_insert(tx: Tx, cmd: ConfirmDraft, published: Message | None = None) -> TaskCreated:
    draft = owned_draft(tx, cmd.draft_id, cmd.user_id)
    if draft.version == cmd.draft_version and (made := _of_version(tx, draft.id, draft.version)) is not None:
        return made  # confirmed before (another key, another click): the same task, never a second flight
    if draft.status != "READY":
        raise Conflict("DRAFT_NOT_READY", f"draft is {draft.status}, not READY", draft_status=draft.status)
    if draft.version != cmd.draft_version:
        raise Conflict("STALE_DRAFT_VERSION",
                       f"draft is at version {draft.version}; you confirmed version {cmd.draft_version}",
                       current_version=draft.version)
    area = tx.session.get(SiteArea, draft.area_id)
    assert area is not None  # draft.area_id is a foreign key
    route = route_of(tx, draft)
    plan = Plan(draft.device_id, route.waypoints, draft.parameters["altitude_m"], draft.parameters["actions"],
                draft.parameters.get("speed_mps", 8.0))
    check_plan(tx, cmd.user_id, area, plan)  # permissions may have changed since the draft was made
    if not area.airspace_open:
        raise Conflict("AIRSPACE_CLOSED", f"airspace over area {area.id} is closed", area_id=area.id)
    if area.requires_approval:
        status = approval_status(tx, draft.id, draft.version)
        if status != "APPROVED":
            other = status is None and has_any_approval(tx, draft.id)
            code = "APPROVAL_VERSION_MISMATCH" if other else "APPROVAL_REQUIRED"
            raise Conflict(code, f"no approval for draft version {draft.version}", approval_status=status)
    task_id = tx.new_id() if published is None else uuid.UUID(published.task_id)
    snapshot: dict[str, Any] = {
        "device_id": draft.device_id,
        "area": {"id": area.id, "polygon": area.polygon, "max_altitude_m": area.max_altitude_m},
        "route": {"id": str(route.id), "version": route.version, "waypoints": route.waypoints},
        "parameters": dict(draft.parameters),
        "draft_version": draft.version,
    }
    tx.session.add(DroneTask(
        id=task_id, draft_id=draft.id, draft_version=draft.version, user_id=cmd.user_id, device_id=draft.device_id,
        route_id=route.id, status=TaskStatus.CREATED.value, version=0, idempotency_key=cmd.idempotency_key,
        dispatch_attempts=0, created_at=tx.now, updated_at=tx.now, area_id=area.id, route_version=route.version,
        snapshot=snapshot, request_hash=cmd.request_hash(), last_telemetry_seq=0, alert_count=0,
    ))
    tx.session.flush()  # the unique key decides here, before audit and outbox
    add_audit(tx, actor=cmd.user_id, action="TASK_CREATED", task_id=task_id, to_status=TaskStatus.CREATED.value,
              to_version=0, correlation_id=cmd.idempotency_key,
              detail={"draft_id": str(draft.id), "draft_version": draft.version})
    if published is None:
        add_outbox(tx, task_id, TASK_CREATED, 0, {"user_id": cmd.user_id, "device_id": draft.device_id})
    else:  # INJECTED BUG publish-before-commit: the row records a message that is already out
        tx.session.connection().execute(insert(TaskEventOutbox.__table__), {
            "id": uuid.UUID(published.event_id), "task_id": task_id, "event_type": TASK_CREATED, "task_version": 0,
            "payload": published.payload, "status": "SENT", "attempts": 1, "available_at": tx.now,
            "created_at": tx.now, "sent_at": tx.now})
    return TaskCreated(str(task_id), TaskStatus.CREATED.value, 0, replayed=False)


def validate_command(cmd: ConfirmDraft) -> None:
    check_idempotency_key(cmd.idempotency_key)
    if isinstance(cmd.draft_version, bool) or not isinstance(cmd.draft_version, int) or cmd.draft_version < 1:
        raise ValidationFailed("INVALID_PARAMETERS", "draft_version must be a positive integer", field="draft_version")


def check_idempotency_key(key: str) -> None:
    """1..160 characters, no control character (NUL included: not storable in PostgreSQL text)."""
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ValidationFailed("INVALID_IDEMPOTENCY_KEY", f"idempotency key must be 1..{MAX_KEY_LENGTH} characters",
                               status=400, field="idempotency_key")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in key):  # NUL and control characters: not storable
        raise ValidationFailed("INVALID_IDEMPOTENCY_KEY", "idempotency key must not contain control characters",
                               status=400, field="idempotency_key")


def confirm_draft(cmd: ConfirmDraft) -> Work[TaskCreated]:
    validate_command(cmd)
    existing = yield Transact(lambda tx: _existing(tx, cmd), "confirm.lookup")
    if existing is not None:
        return existing
    published = None
    if bugs.active(bugs.PUBLISH_BEFORE_COMMIT):
        published = yield from _publish_first(cmd)
    try:
        return (yield Transact(lambda tx: _validate_and_insert(tx, cmd, published), "confirm.create"))
    except IntegrityError:
        # A concurrent confirm with the same key, or of the same draft version, won the insert: answer with its task.
        winner = yield Transact(lambda tx: _existing(tx, cmd) or _of_version(tx, cmd.draft_id, cmd.draft_version),
                                "confirm.lookup")
        if winner is None:
            raise
        return winner


def _publish_first(cmd: ConfirmDraft) -> Work[Message]:
    """INJECTED BUG publish-before-commit: TaskCreated is sent by the request itself, before the creating
    transaction commits, fire-and-forget; the outbox row is then stored as already SENT. A rollback leaves
    the message out; a broker error loses it, and nothing retries it."""

    def ids(tx: Tx) -> Message:
        draft = owned_draft(tx, cmd.draft_id, cmd.user_id)
        return Message(str(tx.new_id()), TASK_CREATED, str(tx.new_id()), 0,
                       {"user_id": cmd.user_id, "device_id": draft.device_id}, tx.now.isoformat())

    msg = yield Transact(ids, "confirm.lookup")
    try:
        yield Publish(msg)
    except Exception:
        pass  # "the database is the truth": the defect assumes the message is not needed
    return msg
