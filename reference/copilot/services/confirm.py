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
import re
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, and_, bindparam, exists, literal_column, select
from sqlalchemy.exc import IntegrityError

from reference.copilot import bugs
from reference.copilot.db import insert_together
from reference.copilot.effects import Message, Publish, Transact, Tx, Work
from reference.copilot.errors import Conflict, NotFound, ValidationFailed
from reference.copilot.models import (
    Device,
    DroneTask,
    FlightRoute,
    SiteArea,
    TaskAuditLog,
    TaskDraft,
    TaskEventOutbox,
    UserAreaPermission,
    UserDevicePermission,
)
from reference.copilot.services.drafts import (
    Plan,
    any_approval,
    check_plan_facts,
    check_route,
    latest_decision,
    owned_draft,
)
from reference.copilot.states import TaskStatus
from reference.copilot.tasks import TASK_CREATED, audit_row, audit_written, outbox_row

MAX_KEY_LENGTH = 160
# C0 and C1 control characters, NUL included (not storable in PostgreSQL text): one C-level scan of the key.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


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


# Core statements, built once per process (an ORM load costs several times a Core row on this path).
_TASK = DroneTask.__table__
_AUDIT = TaskAuditLog.__table__
_OUTBOX = TaskEventOutbox.__table__
_BY_KEY = select(_TASK.c.id, _TASK.c.status, _TASK.c.version, _TASK.c.request_hash).where(
    _TASK.c.user_id == bindparam("user_id"), _TASK.c.idempotency_key == bindparam("key"))
_OF_VERSION = select(_TASK.c.id, _TASK.c.status, _TASK.c.version).where(
    _TASK.c.draft_id == bindparam("draft_id"), _TASK.c.draft_version == bindparam("version"))


def _confirm_facts() -> Any:
    """Everything confirm reads, in one statement (one round trip instead of nine): the task this key already made
    (uq_task_idempotency), the draft, the task its current version made (uq_task_draft_version), its route, its
    area, the user's area permission, the draft device's area when the user may operate it, and the approvals
    (drafts.latest_decision, drafts.any_approval). A row always comes back (the key's side is outer-joined to a
    one-row base); the draft's columns are NULL when it does not exist. The rules stay in _create."""
    d, r, a = TaskDraft.__table__, FlightRoute.__table__, SiteArea.__table__
    k, made = _TASK.alias("by_key"), _TASK.alias("of_version")
    dev, dev_perm, area_perm = Device.__table__, UserDevicePermission.__table__, UserAreaPermission.__table__
    user = bindparam("user_id", type_=d.c.user_id.type)
    base = select(literal_column("1").label("one")).subquery("one_row")
    device_area = (select(dev.c.area_id)
                   .join(dev_perm, and_(dev_perm.c.device_id == dev.c.id, dev_perm.c.user_id == user))
                   .where(dev.c.id == d.c.device_id).scalar_subquery())
    area_permitted = exists().where(area_perm.c.user_id == user, area_perm.c.area_id == d.c.area_id)
    return (
        select(
            k.c.id.label("key_task_id"), k.c.status.label("key_task_status"), k.c.version.label("key_task_version"),
            k.c.request_hash.label("key_request_hash"),
            d.c.id.label("draft_id"), d.c.user_id.label("draft_user_id"), d.c.status.label("draft_status"),
            d.c.version.label("draft_version"), d.c.device_id, d.c.parameters,
            made.c.id.label("made_id"), made.c.status.label("made_status"), made.c.version.label("made_version"),
            r.c.id.label("route_id"), r.c.version.label("route_version"), r.c.waypoints,
            a.c.id.label("area_id"), a.c.polygon, a.c.max_altitude_m, a.c.airspace_open, a.c.requires_approval,
            area_permitted.label("area_permitted"), device_area.label("device_area_id"),
            latest_decision(d.c.id, d.c.version).scalar_subquery().label("approval"),
            exists(any_approval(d.c.id)).label("any_approval"),
        )
        .select_from(base)
        .outerjoin(k, and_(k.c.user_id == user, k.c.idempotency_key == bindparam("key")))
        .outerjoin(d, d.c.id == bindparam("draft_id"))
        .outerjoin(made, and_(made.c.draft_id == d.c.id, made.c.draft_version == d.c.version))
        .outerjoin(r, r.c.id == d.c.route_id)
        .outerjoin(a, a.c.id == d.c.area_id)
    )


_FACTS = _confirm_facts()


def _key_answer(cmd: ConfirmDraft, task_id: uuid.UUID, status: str, version: int,
                request_hash: str) -> TaskCreated:
    """The task an earlier request with this key made: a replay, or a conflict when the payload differs."""
    if request_hash != cmd.request_hash():
        raise Conflict("IDEMPOTENCY_KEY_REUSED",
                       "this idempotency key was used for another confirmation; use a new key",
                       task_id=str(task_id))
    return TaskCreated(str(task_id), status, version, replayed=True)


def _existing(tx: Tx, cmd: ConfirmDraft) -> TaskCreated | None:
    row = tx.conn.execute(_BY_KEY, {"user_id": cmd.user_id, "key": cmd.idempotency_key}).first()
    return None if row is None else _key_answer(cmd, row.id, row.status, row.version, row.request_hash)


def _of_version(tx: Tx, draft_id: uuid.UUID | str, version: int) -> TaskCreated | None:
    """The task a draft version already made (uq_task_draft_version: at most one), as a replay."""
    task = tx.conn.execute(_OF_VERSION, {"draft_id": uuid.UUID(str(draft_id)),
                                         "version": version}).first()
    return None if task is None else TaskCreated(str(task.id), task.status, task.version, replayed=True)


def _draft_key(draft_id: str) -> uuid.UUID:
    try:
        return draft_id if isinstance(draft_id, uuid.UUID) else uuid.UUID(str(draft_id))
    except ValueError:
        raise NotFound("DRAFT_NOT_FOUND", f"draft {draft_id} does not exist") from None


def _facts(tx: Tx, cmd: ConfirmDraft) -> Row[Any]:
    row = tx.conn.execute(_FACTS, {"user_id": cmd.user_id, "key": cmd.idempotency_key,
                                   "draft_id": _draft_key(cmd.draft_id)}).one()
    return row


@dataclass(frozen=True)
class _Draft:
    """The draft columns the checks name (drafts.check_route reads id and version)."""

    id: uuid.UUID
    version: int


def _create(tx: Tx, cmd: ConfirmDraft, published: Message | None = None, *, by_key: bool = True) -> TaskCreated:
    """The key's task if it made one (``by_key``), else the checks and task + audit + outbox, in one transaction:
    one read, then the three rows in one statement on PostgreSQL (reference.copilot.db.insert_together)."""
    f = _facts(tx, cmd)
    if by_key and f.key_task_id is not None:  # the response was lost and the user clicked again: the same task
        return _key_answer(cmd, f.key_task_id, f.key_task_status, f.key_task_version, f.key_request_hash)
    if f.draft_id is None or f.draft_user_id != cmd.user_id:  # another user's draft: not found (no oracle)
        raise NotFound("DRAFT_NOT_FOUND", f"draft {cmd.draft_id} does not exist")
    draft = _Draft(f.draft_id, f.draft_version)
    if draft.version == cmd.draft_version and f.made_id is not None:
        # confirmed before (another key, another click): the same task, never a second flight
        return TaskCreated(str(f.made_id), f.made_status, f.made_version, replayed=True)
    # INJECTED BUG unready-draft-confirmed: the status unchecked
    if f.draft_status != "READY" and not bugs.active(bugs.UNREADY_DRAFT_CONFIRMED):
        raise Conflict("DRAFT_NOT_READY", f"draft is {f.draft_status}, not READY", draft_status=f.draft_status)
    if draft.version != cmd.draft_version:
        raise Conflict("STALE_DRAFT_VERSION",
                       f"draft is at version {draft.version}; you confirmed version {cmd.draft_version}",
                       current_version=draft.version)
    assert f.area_id is not None  # draft.area_id is a foreign key
    route = None if f.route_id is None else _Route(f.route_id, f.route_version)
    check_route(draft, route)
    area = _Area(f.area_id, f.polygon, f.max_altitude_m)
    plan = Plan(f.device_id, f.waypoints, f.parameters["altitude_m"], f.parameters["actions"],
                f.parameters.get("speed_mps", 8.0))
    # permissions may have changed since the draft was made
    check_plan_facts(area, plan, area_permitted=bool(f.area_permitted), device_area_id=f.device_area_id)
    if not f.airspace_open:
        raise Conflict("AIRSPACE_CLOSED", f"airspace over area {area.id} is closed", area_id=area.id)
    if f.requires_approval:
        status = f.approval
        if status != "APPROVED":
            other = status is None and bool(f.any_approval)
            code = "APPROVAL_VERSION_MISMATCH" if other else "APPROVAL_REQUIRED"
            raise Conflict(code, f"no approval for draft version {draft.version}", approval_status=status)
    task_id = tx.new_id() if published is None else uuid.UUID(published.task_id)
    snapshot: dict[str, Any] = {
        "device_id": f.device_id,
        "area": {"id": area.id, "polygon": area.polygon, "max_altitude_m": area.max_altitude_m},
        "route": {"id": str(f.route_id), "version": f.route_version, "waypoints": f.waypoints},
        "parameters": dict(f.parameters),
        "draft_version": draft.version,
    }
    task = {
        "id": task_id, "draft_id": draft.id, "draft_version": draft.version, "user_id": cmd.user_id,
        "device_id": f.device_id, "route_id": f.route_id, "status": TaskStatus.CREATED.value, "version": 0,
        "idempotency_key": cmd.idempotency_key, "dispatch_attempts": 0, "created_at": tx.now, "updated_at": tx.now,
        "area_id": area.id, "route_version": f.route_version, "snapshot": snapshot, "request_hash": cmd.request_hash(),
        "last_telemetry_seq": 0, "alert_count": 0}
    audit = audit_row(tx, actor=cmd.user_id, action="TASK_CREATED", task_id=task_id, to_status=TaskStatus.CREATED.value,
                      to_version=0,
                      detail={"draft_id": str(draft.id), "draft_version": draft.version})
    if published is None:
        outbox = outbox_row(tx, task_id, TASK_CREATED, 0, {"user_id": cmd.user_id, "device_id": f.device_id})
    else:  # INJECTED BUG publish-before-commit: the row records a message that is already out
        outbox = {"id": uuid.UUID(published.event_id), "task_id": task_id, "event_type": TASK_CREATED,
                  "task_version": 0, "payload": published.payload, "status": "SENT", "attempts": 1,
                  "available_at": tx.now, "created_at": tx.now, "sent_at": tx.now}
    # Task, audit and outbox together (one statement on PostgreSQL). The task's unique keys (idempotency key, draft
    # version) decide: a lost race fails the whole write, and the caller answers with the winner's task.
    audit_written(tx, audit)  # before the write: the injected audit-outside-tx bug commits the audit row on its own
    insert_together(tx.conn, [(_TASK, task), (_AUDIT, audit), (_OUTBOX, outbox)])
    return TaskCreated(str(task_id), TaskStatus.CREATED.value, 0, replayed=False)


@dataclass(frozen=True)
class _Route:
    id: uuid.UUID
    version: int


@dataclass(frozen=True)
class _Area:
    id: str
    polygon: list[list[float]]
    max_altitude_m: float


def validate_command(cmd: ConfirmDraft) -> None:
    check_idempotency_key(cmd.idempotency_key)
    if isinstance(cmd.draft_version, bool) or not isinstance(cmd.draft_version, int) or cmd.draft_version < 1:
        raise ValidationFailed("INVALID_PARAMETERS", "draft_version must be a positive integer", field="draft_version")


def check_idempotency_key(key: str) -> None:
    """1..160 characters, no control character (NUL included: not storable in PostgreSQL text), no comma."""
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ValidationFailed("INVALID_IDEMPOTENCY_KEY", f"idempotency key must be 1..{MAX_KEY_LENGTH} characters",
                               status=400, field="idempotency_key")
    if _CONTROL.search(key):
        raise ValidationFailed("INVALID_IDEMPOTENCY_KEY", "idempotency key must not contain control characters",
                               status=400, field="idempotency_key")
    if "," in key:  # servers join a repeated header with commas ("k1,k2"): a comma means two keys, or a guess
        raise ValidationFailed("INVALID_IDEMPOTENCY_KEY", "the Idempotency-Key header must appear once, and a key "
                               "holds no comma", status=400, field="idempotency_key")


def confirm_draft(cmd: ConfirmDraft) -> Work[TaskCreated]:
    validate_command(cmd)
    published = None
    if bugs.active(bugs.PUBLISH_BEFORE_COMMIT):  # the defect publishes between the key's lookup and the insert
        existing = yield Transact(lambda tx: _existing(tx, cmd), "confirm.lookup")
        if existing is not None:
            return existing
        published = yield from _publish_first(cmd)
    try:
        # One transaction: the key's task if it made one, else the checks and the insert (it was two, a lookup then
        # the create: a round trip, a pool checkout and a commit more for every confirm). Its read takes no lock and
        # its write is one statement on PostgreSQL, so it runs in autocommit there: no BEGIN, no COMMIT round trip.
        return (yield Transact(lambda tx: _create(tx, cmd, published, by_key=published is None), "confirm.create",
                               autocommit=True))
    except IntegrityError:
        # A concurrent confirm with the same key, or of the same draft version, won the insert: answer with its task.
        winner = yield Transact(lambda tx: _existing(tx, cmd) or _of_version(tx, cmd.draft_id, cmd.draft_version),
                                "confirm.lookup", autocommit=True)
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
