"""The one place a task changes status: a conditional UPDATE on (id, status, version) whose row count
must be 1, with its audit row and outbox event in the same transaction (seed 000 §5.3)."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict, Unpack

from sqlalchemy import Row, bindparam, insert, select, update

from reference.copilot import bugs, coverage
from reference.copilot.effects import Tx
from reference.copilot.errors import StaleWrite
from reference.copilot.models import DroneTask, TaskAuditLog, TaskEventOutbox, TaskReport
from reference.copilot.states import TaskStatus, is_legal

# Event types written to the outbox. Consumers subscribe to some; every change is published so
# downstream readers can follow the task by version (seed 003).
LOST_RACE = coverage.target(
    "conditional-update-lost", "a conditional task update matched no row (rowcount 0): another transaction moved the "
    "task between this one's read and its write, and the version predicate refused the stale write")

TASK_CREATED = "TaskCreated"
TASK_STATUS_CHANGED = "TaskStatusChanged"
TASK_CANCEL_REQUESTED = "TaskCancelRequested"
TASK_COMPLETED = "TaskCompleted"
TASK_DISPATCH_RESULT = "TaskDispatchResult"  # for the frontend: how a dispatch ended (flying, failed, unknown)

# The event type a transition publishes when it is not a plain status change.
_EVENT_FOR_TARGET = {
    TaskStatus.CANCEL_PENDING: TASK_CANCEL_REQUESTED,
    TaskStatus.COMPLETED: TASK_COMPLETED,
}




def event_for(frm: TaskStatus, to: TaskStatus) -> str:
    """The event type a transition publishes: every way out of DISPATCHING is a dispatch result (seed 000 §4)."""
    if frm == TaskStatus.DISPATCHING:
        return TASK_DISPATCH_RESULT
    return _EVENT_FOR_TARGET.get(to, TASK_STATUS_CHANGED)


_TASK_TABLE = DroneTask.__table__
_OUTBOX_INSERT = insert(TaskEventOutbox.__table__)
_AUDIT_INSERT = insert(TaskAuditLog.__table__)


class IllegalTransition(Exception):
    def __init__(self, task_id: Any, frm: str, to: str) -> None:
        super().__init__(f"task {task_id}: {frm} -> {to} is not a legal transition")
        self.task_id, self.frm, self.to = task_id, frm, to


@dataclass(frozen=True)
class TaskView:
    """An immutable copy of a task row, safe to hand out of a transaction."""

    id: uuid.UUID
    user_id: str
    device_id: str
    status: TaskStatus
    version: int
    external_task_id: str | None
    dispatch_attempts: int
    snapshot: dict[str, Any]
    updated_at: datetime
    last_error_code: str | None

    @classmethod
    def of(cls, t: DroneTask | Row[Any]) -> TaskView:
        return cls(
            id=t.id,
            user_id=t.user_id,
            device_id=t.device_id,
            status=TaskStatus(t.status),
            version=t.version,
            external_task_id=t.external_task_id,
            dispatch_attempts=t.dispatch_attempts,
            snapshot=t.snapshot,
            updated_at=t.updated_at,
            last_error_code=t.last_error_code,
        )


_TASK_BY_ID = select(_TASK_TABLE).where(_TASK_TABLE.c.id == bindparam("task_id"))


def load(tx: Tx, task_id: uuid.UUID | str) -> Row[Any] | None:
    """The task row as a read-only snapshot (a Core row: no ORM identity map to go stale, and about five
    times cheaper than an ORM load on the hot paths). Changes go through transition()."""
    return tx.conn.execute(_TASK_BY_ID, {"task_id": _uuid(task_id)}).first()


def outbox_row(tx: Tx, task_id: uuid.UUID, event_type: str, task_version: int, payload: dict[str, Any]
               ) -> dict[str, Any]:
    """A PENDING outbox row for the event (written in the transaction of the change it announces)."""
    return {"id": tx.new_id(), "task_id": task_id, "event_type": event_type, "task_version": task_version,
            "payload": payload, "status": "PENDING", "attempts": 0, "available_at": tx.now, "created_at": tx.now}


def add_outbox(tx: Tx, task_id: uuid.UUID, event_type: str, task_version: int, payload: dict[str, Any]) -> None:
    # Core inserts (here and in add_audit): on the hot path, a quarter of the cost of an ORM flush.
    tx.conn.execute(_OUTBOX_INSERT, outbox_row(tx, task_id, event_type, task_version, payload))


class AuditFields(TypedDict, total=False):
    """What an audit row may say besides its actor and action (each absent field is NULL; ``result`` is OK)."""

    task_id: uuid.UUID | None
    draft_id: uuid.UUID | None
    from_status: str | None
    to_status: str | None
    from_version: int | None
    to_version: int | None
    correlation_id: str | None
    result: str
    detail: dict[str, Any] | None


_AUDIT_FIELDS = frozenset(AuditFields.__annotations__)


def audit_row(tx: Tx, *, actor: str, action: str, **fields: Unpack[AuditFields]) -> dict[str, Any]:
    """An audit row; written by add_audit, or with other rows by the caller, then passed to audit_written."""
    if unknown := fields.keys() - _AUDIT_FIELDS:  # (a TypedDict is not checked at run time)
        raise TypeError(f"audit_row: unknown field(s) {', '.join(sorted(unknown))}")
    return {
        "task_id": fields.get("task_id"), "draft_id": fields.get("draft_id"), "actor": actor, "action": action,
        "from_status": fields.get("from_status"), "to_status": fields.get("to_status"),
        "from_version": fields.get("from_version"), "to_version": fields.get("to_version"),
        # the request's correlation id (seed 000 §7.3) unless the row names its own (a consumed event's id)
        "correlation_id": fields.get("correlation_id") or _request_of(tx), "result": fields.get("result", "OK"),
        "detail": fields.get("detail") or {}, "created_at": tx.now}


def _request_of(tx: Tx) -> str | None:
    if bugs.active(bugs.AUDIT_WITHOUT_REQUEST_ID):  # INJECTED BUG audit-without-request-id
        return None
    return getattr(tx, "request_id", None)


def item_correlation(item_id: str) -> str | None:
    """The correlation id a person's action on an item (a task cancelled, an event re-driven) names for its audit row:
    none, so the row carries the request's."""
    if bugs.active(bugs.AUDIT_CORRELATED_TO_THE_ITEM):  # INJECTED BUG audit-correlated-to-the-item: the item's id
        return item_id
    return None


def add_audit(tx: Tx, *, actor: str, action: str, **fields: Unpack[AuditFields]) -> None:
    row = audit_row(tx, actor=actor, action=action, **fields)
    tx.conn.execute(_AUDIT_INSERT, row)
    audit_written(tx, row)


def audit_written(tx: Tx, row: dict[str, Any]) -> None:
    """An audit row is written in ``tx`` (just before or after its statement): where the injected audit-outside-tx
    bug acts."""
    if bugs.active(bugs.AUDIT_OUTSIDE_TX):
        _audit_survives_rollback(tx, row)
    if bugs.active(bugs.AUDIT_REWRITTEN) and row["task_id"] is not None and row["from_version"] is not None:
        # INJECTED BUG audit-rewritten: the earlier rows of the task are marked superseded (an UPDATE of the log)
        log = TaskAuditLog.__table__
        tx.conn.execute(update(log).where(log.c.task_id == row["task_id"], log.c.to_version < row["from_version"])
                        .values(result="SUPERSEDED"))


def _audit_survives_rollback(tx: Tx, row: dict[str, Any]) -> None:
    """INJECTED BUG audit-outside-tx: the audit row is committed on its own, not with the change it
    describes. Emulated portably (SQLite's single connection cannot hold a second transaction): when the
    task's transaction rolls back, the row is written again in a fresh transaction, which is exactly
    what an autonomous transaction committed earlier would have left behind."""
    engine = tx.conn.engine

    def rewrite() -> None:
        try:
            with engine.begin() as own:
                own.execute(_AUDIT_INSERT, row)
        except Exception:  # the database is down: then the audit is lost too
            pass

    tx.after_rollback(rewrite)


# The report row (services.reports uploads it) is written with the COMPLETED transition, as the audit and outbox rows
# are with every transition.
REPORT_PREFIX = "reports/"
# The TaskCompleted consumer uploads at once; the sweeper only picks up reports older than this.
SWEEP_GRACE_S = 60.0


def report_key(task_id: object) -> str:
    return f"{REPORT_PREFIX}{task_id}.json"


def add_pending_report(tx: Tx, task_id: uuid.UUID) -> None:
    """In the COMPLETED transition's transaction, so a completed task always has a report row."""
    if tx.session.get(TaskReport, task_id) is None:
        tx.session.add(TaskReport(task_id=task_id, status="PENDING", object_key=report_key(task_id), attempts=0,
                                  next_attempt_at=tx.now + timedelta(seconds=SWEEP_GRACE_S), created_at=tx.now))


def transition(
    tx: Tx,
    task: TaskView | DroneTask | Row[Any],
    to: TaskStatus,
    *,
    actor: str,
    action: str,
    operator: bool = False,
    set_values: dict[str, Any] | None = None,
    detail: dict[str, Any] | None = None,
    correlation_id: str | None = None,
    event_type: str | None = None,
) -> int:
    """Move ``task`` from its current (status, version) to ``to``. Returns the new version.

    Raises IllegalTransition for a move the state machine forbids and StaleWrite when the row no longer
    has the expected status and version (someone else moved it first).
    """
    frm = TaskStatus(task.status)
    if not is_legal(frm, to, operator=operator):
        raise IllegalTransition(task.id, frm, to)
    values: dict[str, Any] = {"status": to.value, "version": task.version + 1, "updated_at": tx.now}
    if set_values:
        values.update(set_values)
    if bugs.active(bugs.NO_VERSION_CHECK):
        predicate = "id"  # INJECTED BUG no-version-check: matches the id only, so a stale writer always "wins".
    elif bugs.active(bugs.NO_VERSION_PREDICATE):
        predicate = "status"  # INJECTED BUG no-version-predicate: a stale writer wins when the status came back.
    else:
        predicate = "version"
    params = {f"v_{k}": v for k, v in values.items()}
    params.update(w_id=task.id, w_status=frm.value, w_version=task.version)
    result = tx.flushed().execute(_transition_update(predicate, tuple(values)), params)
    if result.rowcount != 1:
        coverage.reached(LOST_RACE)
    if result.rowcount != 1 and not bugs.active(bugs.IGNORE_ZERO_ROWCOUNT):  # INJECTED BUG: lost race ignored
        raise StaleWrite(task.id, frm.value, task.version)
    new_version = task.version + 1
    add_audit(
        tx,
        actor=actor,
        action=action,
        task_id=task.id,
        from_status=frm.value,
        to_status=to.value,
        from_version=task.version,
        to_version=new_version,
        correlation_id=correlation_id,
        detail=detail,
    )
    add_outbox(
        tx,
        task.id,
        event_type or event_for(frm, to),
        new_version,
        {"from": frm.value, "to": to.value, **({"detail": detail} if detail else {})},
    )
    if to == TaskStatus.COMPLETED:
        add_pending_report(tx, task.id)
    tx.changes.append((task.id, task.user_id, to.value, new_version))
    return new_version


_TRANSITION_WHERE = {
    "id": (_TASK_TABLE.c.id == bindparam("w_id"),),
    "status": (_TASK_TABLE.c.id == bindparam("w_id"), _TASK_TABLE.c.status == bindparam("w_status")),
    "version": (_TASK_TABLE.c.id == bindparam("w_id"), _TASK_TABLE.c.status == bindparam("w_status"),
                _TASK_TABLE.c.version == bindparam("w_version")),
}


@functools.cache
def _transition_update(predicate: str, columns: tuple[str, ...]) -> Any:
    """The conditional UPDATE of transition(), built once per (predicate, columns set): a Core statement with bound
    parameters, so each call skips building the statement and its cache key (transition() runs on every change)."""
    return (update(_TASK_TABLE).where(*_TRANSITION_WHERE[predicate])
            .values({c: bindparam(f"v_{c}") for c in columns}))


def fresh(tx: Tx, task_id: uuid.UUID | str) -> TaskView | None:
    row = load(tx, task_id)
    return TaskView.of(row) if row is not None else None


def stale_tasks(tx: Tx, statuses: dict[TaskStatus, float], limit: int) -> list[TaskView]:
    """Tasks in the given statuses that have not changed for longer than each status's threshold."""
    out: list[TaskView] = []
    conn = tx.conn
    for status, threshold_s in statuses.items():
        rows = conn.execute(_STALE, {"status": status.value, "cutoff": tx.now - timedelta(seconds=threshold_s),
                                     "limit": limit}).all()
        out.extend(TaskView.of(r) for r in rows)
    return out


# Built once: the reconciler scans every few seconds, once per status it watches.
_STALE = (select(_TASK_TABLE)
          .where(_TASK_TABLE.c.status == bindparam("status"),
                 _TASK_TABLE.c.updated_at < bindparam("cutoff", type_=_TASK_TABLE.c.updated_at.type))
          .order_by(_TASK_TABLE.c.updated_at, _TASK_TABLE.c.id)
          .limit(bindparam("limit")))


def _uuid(value: uuid.UUID | str) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
