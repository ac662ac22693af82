"""The application layer: every use case of the Copilot API as a function of a command and ports, returning a
``Reply`` (an answer or a problem, with the HTTP status it carries).

Use cases are generators of effects like the workers (``reference.copilot.effects``), so each shell runs the same
code: the HTTP shell (``reference.copilot.http.app``) authenticates, parses the body and runs ``handle`` with its
Runtime; the simulation's users run it as a simulated process, so validation, request dedup and the error
mapping are exercised in the main job. Commands carry what a client sent, unchecked: checking it is the use
case's job. Errors map to problems here and only here (docs/architecture.md).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from sqlalchemy import exc as sa_exc

from kernel import problems
from kernel.logs import DEFECT_MARK, is_defect, one_line
from reference.copilot import bugs
from reference.copilot.effects import Transact
from reference.copilot.errors import DomainError, StaleWrite, ValidationFailed
from reference.copilot.platform import (
    EVENT_ALERT,
    EVENT_CANCELLED,
    EVENT_COMPLETED,
    EVENT_FAILED,
    EVENT_TELEMETRY,
    PlatformEvent,
)
from reference.copilot.ports import Cache
from reference.copilot.services import ops
from reference.copilot.services.cancel import request_cancel
from reference.copilot.services.confirm import ConfirmDraft, check_idempotency_key, confirm_draft
from reference.copilot.services.drafts import (
    Plan,
    create_draft,
    decide_approval,
    draft_by_key,
    draft_request_hash,
    revise_draft,
)
from reference.copilot.services.events import ingest_platform_events
from reference.copilot.services.queries import (
    approval_dict,
    draft_dict,
    get_draft,
    task_events,
    task_snapshot,
    user_tasks,
)
from reference.copilot.services.review import MAX_REASON_CHARS, resolve_review
from reference.copilot.services.security import SECURITY_CODES, record_refusal

log = logging.getLogger("sortie.api")

PROBLEM_TYPE_BASE = "https://sortie.dev/problems/"
RETRY_AFTER_S = "1"
SNAPSHOT_CACHE_TTL_S = 1.0  # how stale a polled task snapshot may be (it carries its version)
# Request dedup of confirms: a repeat of the same request (user, key, draft and version) within this window is
# answered from the cache without a database round trip. The database's unique key stays the arbiter: a miss
# (or no cache) goes to the database and gets the same task; only a replay's status may lag by up to this long.
CONFIRM_DEDUP_TTL_S = 5.0
MAX_GOAL_CHARS = 4000
MAX_VERSION = 2**31 - 1  # draft versions are INTEGER columns
MAX_EVENT_SEQ = 2**31 - 1
MAX_EVENT_AT = 253402300799.0  # 9999-12-31T23:59:59Z
MAX_EXTERNAL_ID = 160
MAX_WEBHOOK_EVENTS = 500  # the platform sends at most this many events in one batch (simulator.app.MAX_BATCH)
EVENT_KINDS = frozenset({EVENT_TELEMETRY, EVENT_ALERT, EVENT_COMPLETED, EVENT_FAILED, EVENT_CANCELLED})
_AFTER_VERSION = re.compile(r"-?[0-9]{1,18}")
_LIMIT = re.compile(r"[0-9]{1,4}")
LIST_TASKS_DEFAULT, LIST_TASKS_MAX = 50, 200  # GET /v1/tasks: a resyncing client's page; more is another request


@dataclass(frozen=True)
class Principal:
    """Who calls: the HTTP shell takes it from a verified token, the simulation's users are it."""

    user_id: str
    role: str
    # The request's correlation id (X-Request-Id, seed 000 §7.3: every audit row the request writes carries it). Which
    # request, not who: no part of equality, so a principal is the same caller in every request.
    request_id: str | None = field(default=None, compare=False)


# ------------------------------------------------------------------------------------------------ commands


@dataclass(frozen=True)
class CreateDraft:
    caller: Principal
    body: Any  # {"goal", "area_id", "plan"}
    key: str | None = None  # the Idempotency-Key header


@dataclass(frozen=True)
class ReadDraft:
    caller: Principal
    draft_id: str


@dataclass(frozen=True)
class ReviseDraft:
    caller: Principal
    draft_id: str
    body: Any  # {"expected_version", "plan"}


@dataclass(frozen=True)
class Approve:
    caller: Principal
    draft_id: str
    body: Any  # {"draft_version", "decision": "approve" | "reject"}


@dataclass(frozen=True)
class Confirm:
    caller: Principal
    draft_id: str
    key: str | None  # the Idempotency-Key header
    body: Any  # {"draft_version"}


@dataclass(frozen=True)
class ListTasks:
    caller: Principal
    limit: str | None = None  # the query parameter, as sent


@dataclass(frozen=True)
class ReadTask:
    caller: Principal
    task_id: str


@dataclass(frozen=True)
class ReadTaskEvents:
    caller: Principal
    task_id: str
    after_version: str = "-1"  # the query parameter, as sent


@dataclass(frozen=True)
class Cancel:
    caller: Principal
    task_id: str


@dataclass(frozen=True)
class ResolveReview:
    """A supervisor takes a task out of MANUAL_REVIEW (reference.copilot.services.review)."""

    caller: Principal
    task_id: str
    body: Any  # {"resolution": "executing" | "completed" | "failed" | "cancelled" | "redispatch", "reason"}


@dataclass(frozen=True)
class ListDead:
    """A supervisor lists what waits for a re-drive on their areas (reference.copilot.services.ops)."""

    caller: Principal


@dataclass(frozen=True)
class Redrive:
    """A supervisor re-drives one waiting item: kind "outbox" (an event id), "report" (a task id) or
    "dead-letter" (its id)."""

    caller: Principal
    kind: str
    item_id: str
    body: Any  # {"reason"}


@dataclass(frozen=True)
class IngestEvents:
    """The platform's webhook (authenticated by the shell: it is not a user's request)."""

    body: Any  # a list of events


Command = (CreateDraft | ReadDraft | ReviseDraft | Approve | Confirm | ListTasks | ReadTask | ReadTaskEvents | Cancel
           | ResolveReview | ListDead | Redrive | IngestEvents)


# ------------------------------------------------------------------------------------------------ replies


@dataclass(frozen=True)
class Reply:
    """What the API answers: an HTTP status, a JSON body (problem+json when ``status >= 400``), headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def code(self) -> str | None:
        """A problem's stable code (docs/architecture.md); None for an answer."""
        code = self.body.get("code") if not self.ok else None
        return code if isinstance(code, str) else None


def problem_type(code: str) -> str:
    return PROBLEM_TYPE_BASE + code.lower().replace("_", "-")


def problem(status: int, code: str, detail: str, extra: dict[str, Any] | None = None,
            headers: dict[str, str] | None = None) -> Reply:
    """A problem reply; ``extra`` members (a DomainError's detail) never replace standard ones."""
    body = problems.body(status, code, detail, extra, problem_type(code))
    out = dict(headers or {})
    if status in (429, 503):
        out.setdefault("Retry-After", RETRY_AFTER_S)
    if status == 401:
        out.setdefault("WWW-Authenticate", "Bearer")
    return Reply(status, json.loads(json.dumps(body, default=str)), out)


def db_unavailable(exc: BaseException) -> bool:
    """Connection-level failures: the database is down, unreachable, locked or the pool is exhausted."""
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.DisconnectionError
                  | sa_exc.TimeoutError):
        return True
    return isinstance(exc, sa_exc.DBAPIError) and bool(exc.connection_invalidated)


def problem_of(error: Exception) -> Reply:
    """The one mapping from an exception to what the caller is told."""
    if isinstance(error, DomainError):
        return problem(error.status, error.code, error.message, error.detail)
    if isinstance(error, StaleWrite):
        return problem(409, "TASK_CHANGED", "the task changed concurrently; read it again and retry",
                       {"task_id": str(error.task_id)})
    if isinstance(error, sa_exc.SQLAlchemyError) and db_unavailable(error):
        log.info("database unavailable: %s", type(error).__name__)  # an expected outage, answered with a 503
        return problem(503, "SERVICE_UNAVAILABLE", "the database is unavailable; retry with the same request")
    error_id = uuid.uuid4().hex
    if is_defect(error):  # with the mark the harness reads in the API's log (kernel.logs.defects_in_log)
        log.error("unhandled error %s %s%s", error_id, DEFECT_MARK, one_line(error), exc_info=error)
    else:
        log.error("unhandled error %s", error_id, exc_info=error)
    return problem(500, "INTERNAL_ERROR", "an internal error occurred", {"error_id": error_id})


# ------------------------------------------------------------------------------------------------ checks


def bad_json(detail: str) -> DomainError:
    return DomainError("MALFORMED_JSON", detail, status=400)


def _missing(name: str) -> ValidationFailed:
    return ValidationFailed("MISSING_FIELD", f"{name} is required", field=name)


def _invalid(name: str, detail: str) -> ValidationFailed:
    return ValidationFailed("INVALID_PARAMETERS", f"{name} {detail}", field=name)


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_json("the body must be a JSON object")
    return body


def _str_field(body: dict[str, Any], name: str, *, max_len: int, allow_empty: bool = False) -> str:
    if name not in body:
        raise _missing(name)
    value = body[name]
    if not isinstance(value, str):
        raise _invalid(name, "must be a string")
    if (not allow_empty and not value) or len(value) > max_len:
        raise _invalid(name, f"must be {0 if allow_empty else 1}..{max_len} characters")
    return value


def whole_float(name: str, value: Any, **detail: Any) -> ValidationFailed | None:
    """NOT_AN_INTEGER for an integer field written as a float (``2.0``): JSON Schema counts it an integer, so the
    document names this refusal apart; None for anything else."""
    if isinstance(value, float) and value.is_integer():
        return ValidationFailed("NOT_AN_INTEGER", f"{name} must be written as an integer ({int(value)}, not {value})",
                                field=name, **detail)
    return None


def _version_field(body: dict[str, Any], name: str) -> int:
    if name not in body:
        raise _missing(name)
    value = body[name]
    if (refused := whole_float(name, value)) is not None:
        raise refused
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(name, "must be an integer")
    if not 1 <= value <= MAX_VERSION:
        raise _invalid(name, f"must be in 1..{MAX_VERSION}")
    return value


def _plan_field(body: dict[str, Any]) -> Plan:
    if "plan" not in body:
        raise _missing("plan")
    try:
        return Plan.from_json(body["plan"])
    except (OverflowError, ValueError):  # float() of an integer beyond the double range
        raise _invalid("plan", "contains a number out of range") from None


def _uuid_or_404(value: str, code: str, what: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise DomainError(code, f"{what} {value} does not exist", status=404) from None


def _list_limit(raw: str | None) -> int:
    if raw is None:
        return LIST_TASKS_DEFAULT
    if not _LIMIT.fullmatch(raw) or not 1 <= int(raw) <= LIST_TASKS_MAX:
        raise ValidationFailed("INVALID_PARAMETERS", f"limit must be an integer from 1 to {LIST_TASKS_MAX}",
                               field="limit")
    return int(raw)


def _after_version(raw: str) -> int:
    if not _AFTER_VERSION.fullmatch(raw) or int(raw) < -1:
        raise ValidationFailed("INVALID_PARAMETERS", "after_version must be an integer >= -1", field="after_version")
    return int(raw)


def platform_events(value: Any) -> list[PlatformEvent]:
    """The webhook's body as events; the first bad one is refused with its index and field."""
    if not isinstance(value, list):
        raise bad_json("the body must be a JSON list of events")
    if len(value) > MAX_WEBHOOK_EVENTS:
        raise ValidationFailed("TOO_MANY_EVENTS", f"a batch holds at most {MAX_WEBHOOK_EVENTS} events",
                               limit=MAX_WEBHOOK_EVENTS)
    return [_platform_event(i, item) for i, item in enumerate(value)]


def _platform_event(i: int, item: Any) -> PlatformEvent:
    """Event ``i`` of a webhook batch, or its refusal (with its index and field)."""

    def bad(name: str, detail: str, code: str = "INVALID_PARAMETERS") -> ValidationFailed:
        return ValidationFailed(code, f"event {i}: {name} {detail}", field=f"[{i}].{name}", index=i)

    if not isinstance(item, dict):
        raise ValidationFailed("INVALID_PARAMETERS", f"event {i} must be an object", field=f"[{i}]", index=i)
    for name in ("external_id", "seq", "kind", "at"):
        if name not in item:
            raise bad(name, "is required", "MISSING_FIELD")
    ext = item["external_id"]
    if not isinstance(ext, str) or not 1 <= len(ext) <= MAX_EXTERNAL_ID:
        raise bad("external_id", f"must be a string of 1..{MAX_EXTERNAL_ID} characters")
    seq = item["seq"]
    if (refused := whole_float(f"[{i}].seq", seq, index=i)) is not None:
        raise refused
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_EVENT_SEQ:
        raise bad("seq", f"must be an integer in 0..{MAX_EVENT_SEQ}")
    if not isinstance(item["kind"], str) or item["kind"] not in EVENT_KINDS:  # a list or object: unhashable
        raise bad("kind", f"must be one of {', '.join(sorted(EVENT_KINDS))}")
    at = item["at"]
    if isinstance(at, bool) or not isinstance(at, int | float) or not 0 <= at <= MAX_EVENT_AT:
        raise bad("at", "must be epoch seconds")
    for name in ("request_id", "reference"):
        v = item.get(name)
        if v is not None and (not isinstance(v, str) or len(v) > MAX_EXTERNAL_ID):
            raise bad(name, f"must be null or a string of at most {MAX_EXTERNAL_ID} characters")
    payload = item.get("payload")
    if payload is not None and not isinstance(payload, dict):
        raise bad("payload", "must be an object")
    return PlatformEvent.from_json(item)


# ------------------------------------------------------------------------------------------------ use cases


@dataclass
class Ports:
    """What the use cases need besides effects: the request-dedup and snapshot cache (Redis on the stack, an
    in-memory model in simulation; losing it changes no outcome)."""

    cache: Cache | None = None


UseCase = Generator[Any, Any, Reply]


def _tx(fn: Callable[[Any], Any], name: str) -> Generator[Any, Any, Any]:
    return (yield Transact(fn, name))


def _read(fn: Callable[[Any], Any], name: str) -> Generator[Any, Any, Any]:
    """A read-only transaction: no lock, no write, so each statement may be its own (kernel.effects.Transact)."""
    return (yield Transact(fn, name, autocommit=True))


def _create_draft(cmd: CreateDraft, ports: Ports) -> UseCase:
    key = _idempotency_key(cmd.key)
    data = _object(cmd.body)
    goal = _str_field(data, "goal", max_len=MAX_GOAL_CHARS, allow_empty=True)
    area_id = _str_field(data, "area_id", max_len=MAX_GOAL_CHARS)
    # "plan": null: the planner still works on it (seed 000 §4.2): a GENERATING draft, its plan written by a revise
    plan = None if "plan" in data and data["plan"] is None else _plan_field(data)
    user, request_hash = cmd.caller.user_id, draft_request_hash(goal, area_id, plan)

    def made(tx: Any) -> dict[str, Any] | None:
        draft = draft_by_key(tx, user, key, request_hash)
        return None if draft is None else draft_dict(tx, draft)

    def create(tx: Any) -> tuple[dict[str, Any], bool]:
        if (out := made(tx)) is not None:  # the response was lost and the user clicked again: the same draft
            return out, True
        return draft_dict(tx, create_draft(tx, user, goal, area_id, plan, idempotency_key=key)), False

    try:
        out, replayed = yield from _tx(create, "draft.create")
    except sa_exc.IntegrityError:  # a concurrent request with the same key made it first
        out, replayed = (yield from _read(made, "draft.lookup")), True
        if out is None:
            raise
    return Reply(200 if replayed else 201, out, {"Location": f"/v1/drafts/{out['id']}"})


def _read_draft(cmd: ReadDraft, ports: Ports) -> UseCase:
    who = cmd.caller
    return Reply(200, (yield from _read(lambda tx: get_draft(tx, who.user_id, cmd.draft_id, who.role), "draft.read")))


def _revise_draft(cmd: ReviseDraft, ports: Ports) -> UseCase:
    data = _object(cmd.body)
    expected = _version_field(data, "expected_version")
    plan = _plan_field(data)
    user = cmd.caller.user_id
    out = yield from _tx(lambda tx: draft_dict(tx, revise_draft(tx, user, cmd.draft_id, expected, plan)),
                         "draft.revise")
    return Reply(200, out)


def _approve(cmd: Approve, ports: Ports) -> UseCase:
    if cmd.caller.role != "approver":
        raise DomainError("FORBIDDEN_ROLE", "only approvers may decide approvals", status=403,
                          required_role="approver")
    data = _object(cmd.body)
    version = _version_field(data, "draft_version")
    decision = _str_field(data, "decision", max_len=16)
    if decision not in ("approve", "reject"):
        raise _invalid("decision", "must be 'approve' or 'reject'")
    did = _uuid_or_404(cmd.draft_id, "DRAFT_NOT_FOUND", "draft")
    out = yield from _tx(lambda tx: approval_dict(decide_approval(tx, cmd.caller.user_id, did, version,
                                                                  decision == "approve")), "draft.approve")
    return Reply(201, out)


def _idempotency_key(key: str | None) -> str:
    """The Idempotency-Key header every creating request carries (seed 000 §6.3: one key per user operation)."""
    if not (key or "").strip():
        raise DomainError("MISSING_IDEMPOTENCY_KEY", "the Idempotency-Key header is required", status=400)
    assert key is not None
    check_idempotency_key(key)
    return key


def _confirm(cmd: Confirm, ports: Ports) -> UseCase:
    key = _idempotency_key(cmd.key)
    version = _version_field(_object(cmd.body), "draft_version")
    did = _uuid_or_404(cmd.draft_id, "DRAFT_NOT_FOUND", "draft")
    confirm = ConfirmDraft(cmd.caller.user_id, did, version, key)  # valid: the key and version are checked above
    cache = ports.cache
    dedup_key = f"confirm:{confirm.user_id}:{confirm.request_hash()}:{key}"
    if bugs.active(bugs.CACHE_KEY_WITHOUT_USER):
        dedup_key = f"confirm:{key}"
    if cache is not None and (hit := cache.get(dedup_key)) is not None:
        out = json.loads(hit)
        return Reply(200, out, {"Location": f"/v1/tasks/{out['task_id']}", "X-Dedup": "hit"})
    created = yield from confirm_draft(confirm)
    out = {"task_id": created.task_id, "status": str(created.status), "version": created.version}
    if cache is not None:
        cache.set(dedup_key, json.dumps(out), CONFIRM_DEDUP_TTL_S)
    return Reply(200 if created.replayed else 201, out, {"Location": f"/v1/tasks/{created.task_id}"})


def _list_tasks(cmd: ListTasks, ports: Ports) -> UseCase:
    limit = _list_limit(cmd.limit)
    return Reply(200, (yield from _read(lambda tx: user_tasks(tx, cmd.caller.user_id, limit), "task.list")))


def _read_task(cmd: ReadTask, ports: Ports) -> UseCase:
    # A short cache absorbs polling; keyed by user so only an owner's read fills it. Losing it changes nothing:
    # a miss reads the database; clients resync by version anyway.
    user, cache = cmd.caller.user_id, ports.cache
    key = f"task-snapshot:{user}:{cmd.task_id}"
    if bugs.active(bugs.CACHE_KEY_WITHOUT_USER):
        key = f"task-snapshot:{cmd.task_id}"
    if cache is not None and (hit := cache.get(key)) is not None:
        return Reply(200, json.loads(hit), {"X-Cache": "hit"})
    snapshot = yield from _read(lambda tx: task_snapshot(tx, user, cmd.task_id), "task.read")
    if cache is not None:
        ttl = SNAPSHOT_CACHE_TTL_S * (1000 if bugs.active(bugs.SNAPSHOT_TTL_MS) else 1)
        cache.set(key, json.dumps(snapshot), ttl)
    return Reply(200, snapshot)


def _read_task_events(cmd: ReadTaskEvents, ports: Ports) -> UseCase:
    after = _after_version(cmd.after_version)
    return Reply(200, (yield from _read(lambda tx: task_events(tx, cmd.caller.user_id, cmd.task_id, after),
                                      "task.events")))


def _cancel(cmd: Cancel, ports: Ports) -> UseCase:
    answer = yield from _tx(lambda tx: request_cancel(tx, cmd.task_id, cmd.caller.user_id), "cancel")
    # 202: this request took the cancel; 200: a repeat, answered the same and nothing written (as a confirm's replay)
    return Reply(202 if answer.taken else 200,
                 {"task_id": answer.task_id, "status": str(answer.status), "version": answer.version})


def _supervisor_only(caller: Principal, what: str) -> None:
    if caller.role != "supervisor":
        raise DomainError("FORBIDDEN_ROLE", f"only supervisors may {what}", status=403, required_role="supervisor")


def _resolve_review(cmd: ResolveReview, ports: Ports) -> UseCase:
    _supervisor_only(cmd.caller, "resolve manual reviews")
    data = _object(cmd.body)
    resolution = _str_field(data, "resolution", max_len=16)
    reason = _str_field(data, "reason", max_len=MAX_REASON_CHARS)
    done = yield from resolve_review(cmd.task_id, cmd.caller.user_id, resolution, reason)
    return Reply(200, {"task_id": done.task_id, "status": done.status, "version": done.version,
                       "platform_status": done.platform_status})


def _list_dead(cmd: ListDead, ports: Ports) -> UseCase:
    _supervisor_only(cmd.caller, "list what waits for a re-drive")
    return Reply(200, (yield from _read(lambda tx: ops.dead_items(tx, cmd.caller.user_id), "ops.dead")))


def _redrive(cmd: Redrive, ports: Ports) -> UseCase:
    _supervisor_only(cmd.caller, "re-drive")
    if cmd.kind not in ops.KINDS:
        raise DomainError("UNKNOWN_KIND", f"no such kind {cmd.kind!r}: one of {', '.join(ops.KINDS)}", status=404)
    reason = _str_field(_object(cmd.body), "reason", max_len=ops.MAX_REASON_CHARS)
    done = yield from _tx(lambda tx: ops.redrive(tx, cmd.kind, cmd.item_id, cmd.caller.user_id, reason), "ops.redrive")
    return Reply(200, done)


def _ingest_events(cmd: IngestEvents, ports: Ports) -> UseCase:
    events = platform_events(cmd.body)
    result = yield from _tx(lambda tx: ingest_platform_events(tx, events), "events.ingest")
    return Reply(200, {"accepted": result.accepted, "duplicates": result.duplicates, "orphans": result.orphans})


_USE_CASES: dict[type, Callable[[Any, Ports], UseCase]] = {
    CreateDraft: _create_draft, ReadDraft: _read_draft, ReviseDraft: _revise_draft, Approve: _approve,
    Confirm: _confirm, ListTasks: _list_tasks, ReadTask: _read_task, ReadTaskEvents: _read_task_events, Cancel: _cancel,
    ResolveReview: _resolve_review, ListDead: _list_dead, Redrive: _redrive, IngestEvents: _ingest_events,
}


def handle(cmd: Command, ports: Ports) -> UseCase:
    """Run one command's use case: its effects are the shell's to perform; every failure becomes a problem."""
    request_id = getattr(getattr(cmd, "caller", None), "request_id", None)
    try:
        use_case = _USE_CASES[type(cmd)](cmd, ports)
        return (yield from (use_case if request_id is None else _serving(request_id, use_case)))
    except Exception as error:
        if isinstance(error, DomainError) and error.code in SECURITY_CODES:
            yield from _log_refusal(cmd, error)
        return problem_of(error)


def _serving(request_id: str, use_case: UseCase) -> UseCase:
    """``use_case`` with each of its transactions told the request it serves (add_audit writes its id)."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = use_case.send(answer) if error is None else use_case.throw(error)
        except StopIteration as stop:
            return stop.value
        answer, error = None, None
        if isinstance(effect, Transact):
            effect = replace(effect, fn=partial(_for_request, request_id, effect.fn))
        try:
            answer = yield effect
        except GeneratorExit:
            use_case.close()
            raise
        except BaseException as exc:  # the shell's answer to the effect is the use case's to handle, as with yield from
            error = exc


def _for_request(request_id: str, fn: Callable[[Any], Any], tx: Any) -> Any:
    tx.request_id = request_id
    return fn(tx)


def _log_refusal(cmd: Command, error: DomainError) -> Generator[Any, Any, None]:
    """A security-relevant refusal goes to the append-only security log, in a transaction of its own (the refused
    one rolled back). If that write fails too, the refusal is still answered; the failure is logged."""
    caller = getattr(cmd, "caller", None)
    if caller is None or bugs.active(bugs.SECURITY_LOG_SKIPPED):  # INJECTED BUG security-log-skipped
        return None
    action = re.sub(r"(?<!^)(?=[A-Z])", "_", type(cmd).__name__).upper()  # CreateDraft -> CREATE_DRAFT
    draft_id = getattr(cmd, "draft_id", None)
    try:
        yield from _tx(lambda tx: record_refusal(tx, caller.user_id, action, error.code, draft_id, error.detail),
                       "security.log")
    except Exception as exc:
        log.error("security log write failed for %s %s by %s: %s", action, error.code, caller.user_id, exc)
    return None
