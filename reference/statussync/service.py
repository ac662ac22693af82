"""The status service's write side (§3.1, §3.2, §3.5, §3.6, §4, §5.1): task creation with its steps and outbox rows in
one transaction, and the one event entry. An event is judged under the task's row lock (a locking read): its eventId
against the dedup table (the first answer again; the same id with other content refused), its execution token, its
attempt and sourceSeq, the registry of the definition version the task bound, the state machine; an accepted event
gets the next taskVersion and stepVersion, and the state, the immutable event, the dedup result and the outbox rows
(a USER_SUMMARY and a TASK_DETAIL projection, built from the validated state, never the producer's JSON) commit in
that one transaction. A refusal is stored in the dedup table too, so a retried refusal gets its first answer; except
a token the service did not sign, refused before anything is read or written (a stored refusal would let a forger
claim the eventId a real producer will send).

Functions of a transaction (kernel.effects.Tx); ``report`` is the entry as a generator of effects, so a crash can
land between the commit and the caller receiving the answer."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from kernel.effects import Transact, Tx
from reference.statussync import coverage as cov
from reference.statussync.bugs import BUGS
from reference.statussync.models import (
    FAILED,
    HEALTHY,
    PENDING,
    RUNNING,
    STALE,
    TASK_DETAIL,
    TERMINAL,
    USER_SUMMARY,
    OperationDefinition,
    StatusDefinition,
    StepStream,
    Task,
    TaskCorrection,
    TaskEventDedup,
    TaskEventLog,
    TaskOutbox,
    TaskStep,
)
from reference.statussync.registry import COORDINATOR, LEGAL, STEP_LIFECYCLE, TASK_LIFECYCLE, producer_of
from reference.statussync.tokens import CLAIMS, BadToken, canonical, issue, verify

SECRET = "statussync-execution-token-key"  # the deployment's signing key (configuration on a real stack)
TASK_NOT_FOUND = "TASK_NOT_FOUND"  # no such task, or another user's (the same answer: ids cannot be probed)
TOKEN_REFUSED = "TOKEN_REFUSED"  # the execution token is not one this service signed (nothing read, nothing kept)
STEP_RETRY = "STEP_RETRY_CREATED"  # the coordinator opens a new step attempt (§4.1: a retry is a new attempt)
COORDINATOR_EVENTS = ("TASK_COMPLETED", "TASK_FAILED", STEP_RETRY)
SUMMARY_FIELDS = ("id", "product", "taskType", "title", "lifecycleStatus", "businessStatus", "health", "version",
                  "startedAt", "finishedAt", "failedStepId", "failureCode", "failureMessage", "summaryData")
STEP_FIELDS = ("id", "attempt", "operationCode", "lifecycleStatus", "businessStatus", "health", "version",
               "durationMs", "data", "error")


@dataclass(frozen=True)
class NewTask:
    task_id: str
    tenant_id: str
    owner_id: str
    title: str
    steps: tuple[tuple[str, str], ...]  # (stepId, operationCode)
    product: str = "DOCUMENT"
    task_type: str = "DOCUMENT_PROCESS"


class Refused(Exception):
    """A request the service refuses (its answer says why)."""

    def __init__(self, code: str, stale: bool = False) -> None:
        super().__init__(code)
        self.code, self.stale = code, stale


def user_channel(tenant: str, owner: str) -> str:
    return f"task_user:{tenant}/{owner}"


def detail_channel(tenant: str, task_id: str) -> str:
    return f"task_detail:{tenant}/{task_id}"


def payload_hash(event: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(event)).hexdigest()


def _iso(value: datetime | None) -> str | None:
    return None if value is None else (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()


def _latest_definition(conn: Connection, table: Any, tenant: str, task_type: str) -> int:
    return int(conn.execute(select(func.max(table.c.definition_version)).where(
        table.c.tenant_id == tenant, table.c.task_type == task_type)).scalar_one())


# ---------------------------------------------------------------------------------------------- creation (§3.1)


def step_token(task_id: str, step_id: str | None, attempt: int | None, operation: str | None, producer: str) -> str:
    return issue(SECRET, {"taskId": task_id, "taskAttempt": 1, "stepId": step_id, "stepAttempt": attempt,
                          "operationCode": operation, "producerId": producer})


def create_task(tx: Tx, new: NewTask) -> dict[str, Any]:
    """The task, its steps, its first event and outbox rows in one transaction, binding the latest definition
    versions; the answer carries each step's execution context (§3.3). Idempotent on the task id."""
    conn = tx.conn
    key = f"create:{new.task_id}"
    if (first := _deduped(conn, key, {"create": new.task_id, "steps": [list(s) for s in new.steps]})) is not None:
        return first
    ops = {r.operation_code: r for r in conn.execute(select(OperationDefinition.__table__))}
    unknown = [op for _, op in new.steps if op not in ops]
    if unknown:
        raise Refused("UNKNOWN_OPERATION")
    if len({step for step, _ in new.steps}) < len(new.steps):  # a step is its (task, stepId, attempt) row
        raise Refused("DUPLICATE_STEP")
    status_version = _latest_definition(conn, StatusDefinition.__table__, new.tenant_id, new.task_type)
    op_version = _latest_definition(conn, OperationDefinition.__table__, new.tenant_id, new.task_type)
    now = tx.now
    conn.execute(insert(Task.__table__).values(
        id=new.task_id, tenant_id=new.tenant_id, owner_id=new.owner_id, product=new.product, task_type=new.task_type,
        title=new.title, lifecycle_status=PENDING, business_status="QUEUED", status_definition_version=status_version,
        operation_definition_version=op_version, attempt=1, coordinator_source_seq=1, version=1, health=HEALTHY,
        summary_schema="document.process.summary.v1", summary_data={"fileName": f"{new.title}.pdf"},
        created_at=now, updated_at=now))
    contexts = []
    for step_id, operation in new.steps:
        producer = producer_of(operation)
        conn.execute(insert(TaskStep.__table__).values(
            task_id=new.task_id, step_id=step_id, attempt=1, operation_code=operation, service_name=producer,
            source_seq=0, version=1, lifecycle_status=PENDING, business_status="QUEUED", health=HEALTHY,
            updated_at=now))
        contexts.append({"taskId": new.task_id, "taskAttempt": 1, "stepId": step_id, "operationCode": operation,
                         "stepAttempt": 1, "producerId": producer, "statusDefinitionVersion": status_version,
                         "operationDefinitionVersion": op_version,
                         "executionToken": step_token(new.task_id, step_id, 1, operation, producer)})
    event = {"eventId": key, "taskId": new.task_id, "taskAttempt": 1, "producerId": COORDINATOR, "sourceSeq": 1,
             "eventType": "TASK_CREATED", "occurredAt": _iso(now)}
    _log(conn, event, new.task_id, 1, None, None, PENDING, "QUEUED", HEALTHY, None, None, now)
    conn.execute(insert(TaskOutbox.__table__), _outbox_rows(_task(conn, new.task_id), _steps(conn, new.task_id),
                                                            "TASK_CREATED", None, now))
    answer = {"accepted": True, "duplicate": False, "taskId": new.task_id, "taskVersion": "1",
              "coordinatorToken": step_token(new.task_id, None, None, None, COORDINATOR), "steps": contexts}
    _remember(conn, key, new.task_id, {"create": new.task_id, "steps": [list(s) for s in new.steps]}, answer, now)
    return answer


# ---------------------------------------------------------------------------------------------- the event entry


@dataclass(frozen=True)
class Reported:
    """What one report left: the answer, the event it answers, outbox rows left for a later transaction (none
    unless a bug is on)."""

    answer: dict[str, Any]
    event: dict[str, Any]
    late: list[dict[str, Any]]


def report(event: dict[str, Any], token: str) -> Generator[Any, Any, dict[str, Any]]:
    """The event entry as the API runs it: one transaction, the answer after it (a crash may land in between)."""
    # A partial, not a lambda: a shell that reports over HTTP (the native stack's producers) reads its arguments
    reported = yield Transact(functools.partial(report_event, event=event, token=token), "event.report")
    if reported.late:  # outbox-after-commit: the rows the state's transaction should have written
        yield Transact(lambda tx: _write_late(tx, reported.late), "event.outbox")
    return dict(reported.answer)


def report_event(tx: Tx, event: dict[str, Any], token: str) -> Reported:
    """Judge one event and commit its effect (or its refusal) in this transaction."""
    conn, now = tx.conn, tx.now
    event_id, task_id = str(event.get("eventId") or ""), str(event.get("taskId") or "")
    if not event_id or not task_id:
        return Reported({"accepted": False, "code": "MALFORMED", "eventId": event_id}, event, [])
    try:  # before anything is read or written: a refusal kept for a forger would claim a real producer's eventId
        claims = verify(SECRET, token)
    except BadToken:
        return Reported({"accepted": False, "stale": False, "code": TOKEN_REFUSED, "taskId": task_id,
                         "eventId": event_id}, event, [])
    # The row lock first: one task's events are judged one at a time (§3.6), the dedup lookup included.
    task = conn.execute(select(Task.__table__).where(Task.id == task_id).with_for_update()).first()
    if task is None:
        return Reported({"accepted": False, "code": "UNKNOWN_TASK", "eventId": event_id}, event, [])
    try:  # before the dedup table, for the same reason: eventIds are predictable, and any producer's valid token
        _bound(claims, event)  # bound to another step or task must not claim this one's next eventId
    except Refused as refused:
        return Reported(_refusal(refused, task, event_id), event, [])
    if (first := _deduped(conn, event_id, event)) is not None:
        return Reported(first, event, [])
    try:
        answer, late = _apply(conn, task, event, now)
    except Refused as refused:
        answer, late = _refusal(refused, task, event_id), []
    answer["eventId"] = event_id
    _remember(conn, event_id, task_id, event, answer, now)
    return Reported(answer, event, late)


def _refusal(refused: Refused, task: Any, event_id: str) -> dict[str, Any]:
    """A refusal's answer, with the version it was judged against (what made it old, if it was)."""
    return {"accepted": False, "stale": refused.stale, "code": refused.code, "taskId": task.id,
            "taskVersion": str(task.version), "eventId": event_id}


def _deduped(conn: Connection, event_id: str, event: dict[str, Any]) -> dict[str, Any] | None:
    """The first answer to this eventId; a refusal when the content differs; None for a new eventId."""
    if BUGS.active("dedup-skipped"):
        return None
    row = conn.execute(select(TaskEventDedup.payload_hash, TaskEventDedup.result)
                       .where(TaskEventDedup.event_id == event_id)).first()
    if row is None:
        return None
    if row.payload_hash != payload_hash(event) and not BUGS.active("conflict-not-refused"):
        cov.COVERAGE.reached(cov.CONFLICT_REFUSED)
        return {"accepted": False, "stale": False, "code": "EVENT_ID_CONFLICT", "eventId": event_id}
    cov.COVERAGE.reached(cov.DUPLICATE_ANSWERED)
    return {**dict(row.result), "duplicate": True}


def _remember(conn: Connection, event_id: str, task_id: str, event: dict[str, Any], answer: dict[str, Any],
              now: datetime) -> None:
    if BUGS.active("dedup-skipped") and conn.execute(select(TaskEventDedup.event_id).where(
            TaskEventDedup.event_id == event_id)).first() is not None:
        return
    conn.execute(insert(TaskEventDedup.__table__).values(event_id=event_id, task_id=task_id,
                                                         payload_hash=payload_hash(event), result=answer,
                                                         created_at=now))


def _bound(claims: dict[str, Any], event: dict[str, Any]) -> None:
    """The request's identity fields must be the token's exactly (§3.3: the token, not the body, is the authority)."""
    if BUGS.active("token-unchecked"):
        return
    for claim in CLAIMS:
        if claim == "stepAttempt" and claims.get("stepId") is None:
            continue
        if claims.get(claim) != event.get(claim):
            raise Refused("TOKEN_MISMATCH")
    step = claims.get("stepId")
    if step is None and event.get("eventType") not in COORDINATOR_EVENTS:
        raise Refused("EVENT_NOT_ALLOWED")


def _task(conn: Connection, task_id: str) -> Any:
    return conn.execute(select(Task.__table__).where(Task.id == task_id)).one()


def _status(conn: Connection, task: Any, code: str) -> tuple[str, bool]:
    """(lifecycle, terminal) of a business status in the definition version the task bound (§4.5, §4.6)."""
    version = task.status_definition_version
    if BUGS.active("registry-latest-version"):
        version = _latest_definition(conn, StatusDefinition.__table__, task.tenant_id, task.task_type)
    row = conn.execute(select(StatusDefinition.lifecycle_status, StatusDefinition.terminal).where(
        StatusDefinition.tenant_id == task.tenant_id, StatusDefinition.task_type == task.task_type,
        StatusDefinition.definition_version == version, StatusDefinition.code == code,
        StatusDefinition.enabled.is_(True))).first()
    if row is None:
        raise Refused("UNKNOWN_STATUS")
    return str(row.lifecycle_status), bool(row.terminal)


def _apply(conn: Connection, task: Any, event: dict[str, Any], now: datetime
           ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    kind = str(event.get("eventType"))
    if kind in COORDINATOR_EVENTS:
        return _coordinator_event(conn, task, event, kind, now)
    return _step_event(conn, task, event, kind, now)


def _judge_task(task: Any, lifecycle: str) -> None:
    """§4.2: nothing moves a terminal task in its attempt; only the registry's lifecycle moves are legal."""
    if task.lifecycle_status in TERMINAL and not BUGS.active("terminal-regression"):
        raise Refused("TASK_TERMINAL", stale=True)
    if lifecycle not in LEGAL.get(task.lifecycle_status, {lifecycle}):
        raise Refused("ILLEGAL_TRANSITION")


def _stream_seq(conn: Connection, task_id: str, step_id: str, attempt: int, producer: str) -> int:
    """The producer's last accepted sourceSeq for the step attempt (0: none yet; sequences start at 1)."""
    seq = conn.execute(select(StepStream.source_seq).where(
        StepStream.task_id == task_id, StepStream.step_id == step_id, StepStream.attempt == attempt,
        StepStream.producer_id == producer)).scalar()
    return int(seq or 0)


def _set_stream_seq(conn: Connection, task_id: str, step_id: str, attempt: int, producer: str, seq: int,
                    had: int) -> None:
    keys = {"task_id": task_id, "step_id": step_id, "attempt": attempt, "producer_id": producer}
    if had:
        conn.execute(update(StepStream.__table__).filter_by(**keys).values(source_seq=seq))
    else:
        conn.execute(insert(StepStream.__table__).values(**keys, source_seq=seq))


def _judge_step(conn: Connection, task: Any, event: dict[str, Any]) -> tuple[Any, int]:
    """The step row of the event's attempt, locked, and its producer's last sourceSeq; Refused for an old attempt,
    an old sequence, a producer or operation the step was not defined with."""
    step_id, attempt = str(event.get("stepId")), int(event.get("stepAttempt") or 0)
    current = conn.execute(select(func.max(TaskStep.attempt)).where(
        TaskStep.task_id == task.id, TaskStep.step_id == step_id)).scalar()
    if current is None:
        raise Refused("UNKNOWN_STEP")
    if attempt < current and not BUGS.active("old-attempt-accepted"):
        cov.COVERAGE.reached(cov.STALE_ATTEMPT)
        raise Refused("STALE_ATTEMPT", stale=True)
    step = conn.execute(select(TaskStep.__table__).where(
        TaskStep.task_id == task.id, TaskStep.step_id == step_id, TaskStep.attempt == attempt)
        .with_for_update()).first()
    if step is None:
        raise Refused("UNKNOWN_STEP")
    if step.service_name != event.get("producerId") or step.operation_code != event.get("operationCode"):
        raise Refused("NOT_THIS_STEPS_PRODUCER")
    producer, seq = str(event.get("producerId")), int(event.get("sourceSeq") or 0)
    last = own = _stream_seq(conn, task.id, step_id, attempt, producer)
    if BUGS.active("sequence-per-task"):  # one counter for every producer of the task
        last = int(conn.execute(select(func.max(StepStream.source_seq)).where(
            StepStream.task_id == task.id, StepStream.producer_id != "health-reconciler")).scalar() or 0)
    if seq <= last and not BUGS.active("sequence-unchecked"):
        cov.COVERAGE.reached(cov.STALE_SEQUENCE)
        raise Refused("STALE_SEQUENCE", stale=True)
    if step.lifecycle_status in TERMINAL and not BUGS.active("old-attempt-accepted") \
            and not BUGS.active("sequence-unchecked"):
        raise Refused("STEP_TERMINAL", stale=True)
    return step, own


def _allowed(conn: Connection, task: Any, operation: str, kind: str, event: dict[str, Any]) -> None:
    """§4.7: the operation's event types and data schemas, in the operation definition version the task bound."""
    op = conn.execute(select(OperationDefinition.__table__).where(
        OperationDefinition.tenant_id == task.tenant_id, OperationDefinition.task_type == task.task_type,
        OperationDefinition.definition_version == task.operation_definition_version,
        OperationDefinition.operation_code == operation)).first()
    if op is None or kind not in op.allowed_event_types:
        raise Refused("EVENT_NOT_ALLOWED")
    schema = (event.get("data") or {}).get("schema")
    if schema is not None and schema not in (op.allowed_data_schemas or {}).get(kind, []):
        raise Refused("SCHEMA_REFUSED")


def _step_event(conn: Connection, task: Any, event: dict[str, Any], kind: str, now: datetime
                ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    if kind not in STEP_LIFECYCLE:
        raise Refused("UNKNOWN_EVENT_TYPE")
    lifecycle, terminal = _status(conn, task, str(event.get("businessStatus")))
    if terminal:  # a step cannot end the task (§3.9): only the coordinator's TASK_* events can
        raise Refused("EVENT_NOT_ALLOWED")
    _judge_task(task, RUNNING)
    step, had = _judge_step(conn, task, event)
    _allowed(conn, task, step.operation_code, kind, event)
    step_lifecycle = STEP_LIFECYCLE[kind]
    data = event.get("data") or {}
    error = event.get("error") or {}
    seq = int(event["sourceSeq"])
    values: dict[str, Any] = {
        "lifecycle_status": step_lifecycle, "business_status": event["businessStatus"], "version": step.version + 1,
        "source_seq": seq, "updated_at": now, "last_heartbeat_at": now}
    if data:
        values.update(data_schema=data.get("schema"), state_data=data.get("value"))
    if kind == "STEP_STARTED" and step.started_at is None:
        values["started_at"] = now
    step_health = step.health
    if step_lifecycle in TERMINAL:  # an ended step has no executor whose health could be in doubt
        values.update(finished_at=now, duration_ms=event.get("durationMs"), health=HEALTHY)
        if step.health == STALE:
            cov.COVERAGE.reached(cov.HEALTH_RACED)
        step_health = HEALTHY
    if kind == "STEP_FAILED":
        values.update(error_category=error.get("category"), error_code=error.get("code"),
                      error_message=error.get("userMessage"), error_retryable=error.get("retryable"),
                      diagnostics_ref=error.get("diagnosticsRef"))
    where = [TaskStep.task_id == task.id, TaskStep.step_id == step.step_id, TaskStep.attempt == step.attempt]
    conn.execute(update(TaskStep.__table__).where(*where).values(**values))
    _set_stream_seq(conn, task.id, step.step_id, step.attempt, str(event["producerId"]), seq, had)
    task_values: dict[str, Any] = {"lifecycle_status": RUNNING, "business_status": event["businessStatus"]}
    if task.started_at is None:
        task_values["started_at"] = now
    steps = _steps(conn, task.id)
    if any(s.lifecycle_status == RUNNING for s in _latest(steps).values() if s.step_id != step.step_id):
        cov.COVERAGE.reached(cov.RACING_PRODUCERS)
    task_values["health"] = _task_health(steps, step.step_id, step_health)
    return _commit(conn, task, task_values, event, step.step_id, step.attempt, step.version + 1, step_lifecycle,
                   step_health, now, steps)


def _steps(conn: Connection, task_id: str) -> list[Any]:
    return list(conn.execute(select(TaskStep.__table__).where(TaskStep.task_id == task_id)
                             .order_by(TaskStep.step_id, TaskStep.attempt)).all())


def _latest(steps: Sequence[Any]) -> dict[str, Any]:
    """The last attempt of each step."""
    latest: dict[str, Any] = {}
    for s in steps:
        if s.step_id not in latest or s.attempt > latest[s.step_id].attempt:
            latest[s.step_id] = s
    return latest


def _task_health(steps: Sequence[Any], changed_step: str, changed_health: str) -> str:
    """The task is STALE while the latest attempt of one of its running steps is (§4.3), the changed step counted
    with its new health."""
    stale = any(r.health == STALE and r.lifecycle_status == RUNNING for r in _latest(steps).values()
                if r.step_id != changed_step)
    return STALE if stale or changed_health == STALE else HEALTHY


def _coordinator_event(conn: Connection, task: Any, event: dict[str, Any], kind: str, now: datetime
                       ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    if event.get("producerId") != COORDINATOR:
        raise Refused("EVENT_NOT_ALLOWED")
    if int(event.get("taskAttempt") or 0) < task.attempt:
        raise Refused("STALE_ATTEMPT", stale=True)
    seq = int(event.get("sourceSeq") or 0)
    if seq <= task.coordinator_source_seq:
        cov.COVERAGE.reached(cov.STALE_SEQUENCE)
        raise Refused("STALE_SEQUENCE", stale=True)
    lifecycle, terminal = _status(conn, task, str(event.get("businessStatus")))
    values: dict[str, Any] = {"coordinator_source_seq": seq, "business_status": event["businessStatus"]}
    if kind == STEP_RETRY:
        _judge_task(task, RUNNING)
        return _retry_step(conn, task, event, values, now)
    if lifecycle != TASK_LIFECYCLE[kind] or not terminal:
        raise Refused("ILLEGAL_TRANSITION")
    _judge_task(task, lifecycle)
    values.update(lifecycle_status=lifecycle, finished_at=now, duration_ms=event.get("durationMs"), health=HEALTHY)
    if kind == "TASK_FAILED":
        error = event.get("error") or {}
        values.update(failure_code=error.get("code"), failure_message=error.get("userMessage"),
                      failed_step_id=event.get("failedStepId"))
    return _commit(conn, task, values, event, None, None, None, None, None, now)


def _retry_step(conn: Connection, task: Any, event: dict[str, Any], values: dict[str, Any], now: datetime
                ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    step_id = str(event.get("retryStepId"))
    last = conn.execute(select(TaskStep.__table__).where(TaskStep.task_id == task.id, TaskStep.step_id == step_id)
                        .order_by(TaskStep.attempt.desc()).limit(1).with_for_update()).first()
    if last is None:
        raise Refused("UNKNOWN_STEP")
    attempt = last.attempt + 1
    conn.execute(insert(TaskStep.__table__).values(
        task_id=task.id, step_id=step_id, attempt=attempt, operation_code=last.operation_code,
        service_name=last.service_name, source_seq=0, version=1, lifecycle_status=PENDING,
        business_status=event["businessStatus"], health=HEALTHY, updated_at=now))
    steps = _steps(conn, task.id)
    values.update(lifecycle_status=RUNNING, health=_task_health(steps, step_id, HEALTHY))
    answer, late = _commit(conn, task, values, event, step_id, attempt, 1, PENDING, HEALTHY, now, steps)
    answer["stepAttempt"] = attempt
    answer["executionToken"] = step_token(task.id, step_id, attempt, last.operation_code, last.service_name)
    return answer, late


def _commit(conn: Connection, task: Any, values: dict[str, Any], event: dict[str, Any], step_id: str | None,
            step_attempt: int | None, step_version: int | None, step_lifecycle: str | None,
            step_health: str | None, now: datetime, steps: Sequence[Any] | None = None
            ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The new taskVersion (the locked row's plus one), the task row, the immutable event, the outbox rows (built
    from ``steps``, the task's step rows after this change, read again when not given)."""
    version = task.version + 1
    conn.execute(update(Task.__table__).where(Task.id == task.id).values(**values, version=version, updated_at=now))
    after = SimpleNamespace(**{**task._mapping, **values, "version": version, "updated_at": now})
    steps = _steps(conn, task.id) if steps is None else steps
    _log(conn, event, task.id, version, step_id, step_version, after.lifecycle_status, after.business_status,
         after.health, step_lifecycle, step_health, now, step_attempt)
    kind = str(event.get("eventType"))
    late: list[dict[str, Any]] = []
    if BUGS.active("outbox-after-commit"):
        late = _outbox_rows(after, steps, kind, step_id, now)
    else:
        conn.execute(insert(TaskOutbox.__table__), _outbox_rows(after, steps, kind, step_id, now))
    answer = {"accepted": True, "duplicate": False, "stale": False, "taskId": task.id, "stepId": step_id,
              "taskVersion": str(version), "stepVersion": None if step_version is None else str(step_version),
              "lifecycleStatus": after.lifecycle_status, "businessStatus": after.business_status,
              "committedAt": _iso(now)}
    return answer, late


# ---------------------------------------------------------------------------------------------- the admin correction


CORRECTED = "TASK_CORRECTED"


@dataclass(frozen=True)
class Correction:
    """§4.2: an administrator settles a task's result (never a worker's report in disguise)."""

    correction_id: str  # the idempotency key: the same correction sent again gets its first answer
    task_id: str
    tenant_id: str  # the administrator's tenant: another tenant's task is not there for them
    operator: str  # who: the caller's verified identity, not a field of the request
    reason: str
    business_status: str  # the corrected status: a terminal one of the definition version the task bound


def correct_task(tx: Tx, c: Correction) -> dict[str, Any]:
    """The audited correction command (§4.2): the task moves to ``c.business_status`` with a new taskVersion, its
    event, the audit row (operator, reason, old and new status, when) and its outbox rows in one transaction. Only
    a terminal status: a correction settles a result, which is what no report may change once the task ended; to run
    again is a new attempt, not a correction. Refused: no reason given, no such task (or another tenant's: the
    administrator's tenant), a status the task's registry does not have or that is not terminal, nothing to change;
    the same correction id with other content (EVENT_ID_CONFLICT)."""
    conn, now = tx.conn, tx.now
    if not c.operator.strip() or not c.reason.strip():
        raise Refused("CORRECTION_UNEXPLAINED")
    key = f"correct:{c.correction_id}"
    content = {"correct": c.task_id, "businessStatus": c.business_status, "operator": c.operator, "reason": c.reason}
    task = conn.execute(select(Task.__table__).where(Task.id == c.task_id).with_for_update()).first()
    if task is None or task.tenant_id != c.tenant_id:
        raise Refused(TASK_NOT_FOUND)
    if (first := _deduped(conn, key, content)) is not None:
        return first
    lifecycle, terminal = _status(conn, task, c.business_status)
    if not terminal:
        raise Refused("CORRECTION_NOT_TERMINAL")
    if (lifecycle, c.business_status) == (task.lifecycle_status, task.business_status):
        raise Refused("NOTHING_TO_CORRECT")
    values: dict[str, Any] = {"lifecycle_status": lifecycle, "business_status": c.business_status,
                              "finished_at": task.finished_at or now, "health": HEALTHY}
    if lifecycle != FAILED:  # a failure corrected away takes its failure with it
        values.update(failure_code=None, failure_message=None, failed_step_id=None)
    event = {"eventId": key, "taskId": task.id, "taskAttempt": task.attempt, "producerId": f"admin:{c.operator}",
             "sourceSeq": 0, "eventType": CORRECTED, "businessStatus": c.business_status, "occurredAt": _iso(now)}
    answer, late = _commit(conn, task, values, event, None, None, None, None, None, now)
    if late:  # outbox-after-commit is a bug of the event entry; a correction writes its rows in its transaction
        conn.execute(insert(TaskOutbox.__table__), late)
    conn.execute(insert(TaskCorrection.__table__).values(
        correction_id=c.correction_id, task_id=task.id, task_version=int(answer["taskVersion"]), operator=c.operator,
        reason=c.reason, old_lifecycle_status=task.lifecycle_status, old_business_status=task.business_status,
        new_lifecycle_status=lifecycle, new_business_status=c.business_status, corrected_at=now))
    answer = {**answer, "eventId": key, "correctionId": c.correction_id}
    _remember(conn, key, task.id, content, answer, now)
    return answer


def commit_health(conn: Connection, task: Any, step: Any, health: str, lifecycle: str, event: dict[str, Any],
                  now: datetime) -> None:
    """The health reconciler's STEP_HEALTH_CHANGED (§3.5, §4.3): a new version, the lifecycle it is given."""
    conn.execute(update(TaskStep.__table__).where(
        TaskStep.task_id == step.task_id, TaskStep.step_id == step.step_id, TaskStep.attempt == step.attempt)
        .values(health=health, lifecycle_status=lifecycle, version=step.version + 1, updated_at=now))
    steps = _steps(conn, task.id)
    task_values: dict[str, Any] = {"health": _task_health(steps, step.step_id, health)}
    answer, _ = _commit(conn, task, task_values, event, step.step_id, step.attempt, step.version + 1, lifecycle,
                        health, now, steps)
    _remember(conn, event["eventId"], task.id, event, {**answer, "eventId": event["eventId"]}, now)


def _log(conn: Connection, event: dict[str, Any], task_id: str, version: int, step_id: str | None,
         step_version: int | None, lifecycle: str, business: str, health: str, step_lifecycle: str | None,
         step_health: str | None, now: datetime, step_attempt: int | None = None) -> None:
    data = event.get("data") or {}
    occurred = event.get("occurredAt")
    conn.execute(insert(TaskEventLog.__table__).values(
        event_id=event["eventId"], task_id=task_id, task_version=version, step_id=step_id,
        operation_code=event.get("operationCode"), step_version=step_version,
        task_attempt=int(event.get("taskAttempt") or 1), step_attempt=step_attempt,
        producer_id=event.get("producerId"), source_seq=int(event.get("sourceSeq") or 0),
        event_type=event.get("eventType"), lifecycle_status=lifecycle, business_status=business, health=health,
        step_lifecycle=step_lifecycle, step_health=step_health, data_schema=data.get("schema"),
        error_code=(event.get("error") or {}).get("code"),
        occurred_at=datetime.fromisoformat(occurred) if isinstance(occurred, str) else now, received_at=now,
        committed_at=now, duration_ms=event.get("durationMs"), payload={"data": data} if data else None))


# ---------------------------------------------------------------------------------------------- projections (§3.3.1)


def summary_projection(task: Any, steps: Sequence[Any] | None = None) -> dict[str, Any]:
    """USER_SUMMARY: the task's whitelisted fields only (no step results, no diagnostics)."""
    body = {"id": task.id, "product": task.product, "taskType": task.task_type, "title": task.title,
            "lifecycleStatus": task.lifecycle_status, "businessStatus": task.business_status, "health": task.health,
            "version": str(task.version), "startedAt": _iso(task.started_at), "finishedAt": _iso(task.finished_at),
            "failedStepId": task.failed_step_id, "failureCode": task.failure_code,
            "failureMessage": task.failure_message,
            "summaryData": {"schema": task.summary_schema, "value": task.summary_data}}
    if BUGS.active("summary-leaks-detail") and steps:
        body["steps"] = [{"id": s.step_id, "data": s.state_data, "diagnosticsRef": s.diagnostics_ref} for s in steps]
    return {"kind": "task.summary", "schemaVersion": 1, "task": body}


def detail_projection(task: Any, steps: Sequence[Any]) -> dict[str, Any]:
    """TASK_DETAIL: the task with each step's latest attempt, its data and its redacted error (no diagnosticsRef)."""
    latest = _latest(steps)
    return {"kind": "task.detail", "schemaVersion": 1, "taskId": task.id, "version": str(task.version),
            "taskType": task.task_type, "lifecycleStatus": task.lifecycle_status,
            "businessStatus": task.business_status, "health": task.health,
            "steps": [{"id": s.step_id, "attempt": s.attempt, "operationCode": s.operation_code,
                       "lifecycleStatus": s.lifecycle_status, "businessStatus": s.business_status,
                       "health": s.health, "version": str(s.version), "durationMs": s.duration_ms,
                       "data": {"schema": s.data_schema, "value": s.state_data} if s.data_schema else None,
                       "error": {"code": s.error_code, "message": s.error_message, "retryable": s.error_retryable}
                       if s.error_code else None}
                      for s in sorted(latest.values(), key=lambda s: s.step_id)]}


NOTICES = {"TASK_FAILED": "ERROR", "STEP_FAILED": "WARNING"}


def _notice(task: Any, kind: str, step_id: str | None) -> dict[str, Any] | None:
    """§6.8: a confirmed failure (or STALE health) carries a notice, id taskId:version, on the summary."""
    level = NOTICES.get(kind)
    if kind == "STEP_HEALTH_CHANGED" and task.health == STALE:
        level = "WARNING"
    if level is None:
        return None
    return {"id": f"{task.id}:{task.version}", "type": kind, "level": level, "stepId": step_id,
            "message": task.failure_message or "", "requiresAction": kind == "TASK_FAILED"}


def _outbox_rows(task: Any, steps: Sequence[Any], kind: str, step_id: str | None, now: datetime
                 ) -> list[dict[str, Any]]:
    summary = summary_projection(task, steps)
    if (notice := _notice(task, kind, step_id)) is not None:
        summary["notice"] = notice
    rows = [{"aggregate_id": task.id, "aggregate_version": task.version, "channel": detail_channel(
        task.tenant_id, task.id), "projection": TASK_DETAIL, "payload": detail_projection(task, steps)}]
    if not (BUGS.active("failure-detail-only") and task.lifecycle_status == FAILED):
        rows.insert(0, {"aggregate_id": task.id, "aggregate_version": task.version,
                        "channel": user_channel(task.tenant_id, task.owner_id), "projection": USER_SUMMARY,
                        "payload": summary})
    return [{**r, "status": "PENDING", "available_at": now, "attempts": 0, "created_at": now} for r in rows]


def _write_late(tx: Tx, rows: list[dict[str, Any]]) -> None:
    tx.conn.execute(insert(TaskOutbox.__table__), rows)


# ---------------------------------------------------------------------------------------------- heartbeats, reads


def heartbeat(tx: Tx, task_id: str, step_id: str, attempt: int, producer: str, token: str) -> bool:
    """STEP_HEARTBEAT (§3.5): only last_heartbeat_at, no version, nothing published; False if the step is not the
    producer's running attempt. Refused (TOKEN_REFUSED, TOKEN_MISMATCH) unless ``token`` is the step attempt's
    execution token."""
    try:
        claims = verify(SECRET, token)
    except BadToken:
        raise Refused(TOKEN_REFUSED) from None
    if (claims.get("taskId"), claims.get("stepId"), claims.get("stepAttempt"), claims.get("producerId")) \
            != (task_id, step_id, attempt, producer):
        raise Refused("TOKEN_MISMATCH")
    done = tx.conn.execute(update(TaskStep.__table__).where(
        TaskStep.task_id == task_id, TaskStep.step_id == step_id, TaskStep.attempt == attempt,
        TaskStep.service_name == producer, TaskStep.lifecycle_status == RUNNING).values(last_heartbeat_at=tx.now))
    return bool(done.rowcount)


def views(conn: Connection, task_id: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The snapshot (§3.8): the task's summary and detail projections as of now; None for an unknown task."""
    task = conn.execute(select(Task.__table__).where(Task.id == task_id)).first()
    if task is None:
        return None
    steps = conn.execute(select(TaskStep.__table__).where(TaskStep.task_id == task_id)).all()
    return summary_projection(task), detail_projection(task, steps)


def user_summaries(conn: Connection, tenant: str, owner: str) -> list[dict[str, Any]]:
    """The user's task list snapshot: a summary per task (§6.1)."""
    rows = conn.execute(select(Task.__table__).where(Task.tenant_id == tenant, Task.owner_id == owner)
                        .order_by(Task.updated_at.desc(), Task.id)).all()
    return [summary_projection(t) for t in rows]


def batch_get(conn: Connection, tenant: str, owner: str, known: dict[str, int]) -> list[dict[str, Any]]:
    """status:batchGet (§13.2): the summaries of the caller's tasks among ``known`` whose version is newer."""
    rows = conn.execute(select(Task.__table__).where(Task.id.in_(sorted(known)), Task.tenant_id == tenant,
                                                     Task.owner_id == owner)).all()
    return [summary_projection(t) for t in rows if t.version > known[t.id]]


def subscription_token(conn: Connection, tenant: str, user: str, task_id: str, now: float, ttl_s: float
                       ) -> dict[str, Any]:
    """§7.2: the detail channel's subscription claims, after the task's ACL is checked again (never the caller's
    channel name). Another user's task is refused as one that does not exist (TASK_NOT_FOUND, as every read of it):
    the answer must not tell a prober which task ids exist (§7.2's 403 is Centrifugo's, for a channel without a
    valid token)."""
    task = conn.execute(select(Task.tenant_id, Task.owner_id).where(Task.id == task_id)).first()
    if task is None or ((task.tenant_id != tenant or task.owner_id != user) and not BUGS.active("detail-token-no-acl")):
        raise Refused(TASK_NOT_FOUND)
    return {"sub": f"{tenant}/{user}", "channel": detail_channel(tenant, task_id), "exp": now + ttl_s}
