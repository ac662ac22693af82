"""The Copilot-facing HTTP API: drafts, approvals, confirmation, task reads, cancel, SSE and the
platform's webhook, over the functional core (reference.services).

Every mutating request is one transaction (confirm: the few of its generator), so a refusal writes
nothing. Errors are always ``application/problem+json`` with a stable ``code`` (DESIGN.md §7); a 500
carries no exception text, which goes to the server log with an ``error_id``.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
import uuid
from collections.abc import Iterator
from typing import Any

from flask import Flask, Response, request
from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from werkzeug.exceptions import HTTPException

from reference.errors import DomainError, StaleWrite, ValidationFailed
from reference.http.auth import Principal, bearer_token, verify_token
from reference.http.notify import CLOSED, NotificationHub, TaskChange
from reference.platform import (
    EVENT_ALERT,
    EVENT_CANCELLED,
    EVENT_COMPLETED,
    EVENT_FAILED,
    EVENT_TELEMETRY,
    PlatformEvent,
)
from reference.ports import Cache, Notifier
from reference.runtime import EVENTS_WITH_DUPLICATES, Runtime, events_value
from reference.services.cancel import request_cancel
from reference.services.confirm import ConfirmDraft, confirm_draft, validate_command
from reference.services.drafts import Plan, create_draft, decide_approval, revise_draft
from reference.services.events import ingest_platform_events
from reference.services.queries import approval_dict, draft_dict, get_draft, task_events, task_snapshot

log = logging.getLogger("sortie.api")

EXTENSION_KEY = "sortie_api"
PROBLEM_TYPE_BASE = "https://sortie.dev/problems/"
PROBLEM_MIMETYPE = "application/problem+json"
MAX_BODY_BYTES = 256 * 1024
MAX_WEBHOOK_BODY_BYTES = 1024 * 1024  # the platform batches up to 500 events
HEARTBEAT_S = 15.0
SNAPSHOT_CACHE_TTL_S = 1.0  # how stale a polled task snapshot may be (it carries its version)
# Request dedup of confirms: a repeat of the same request (user, key, draft and version) within this window is
# answered from Redis without a database round trip. PostgreSQL's unique key stays the arbiter: a miss (or no
# Redis) goes to the database and gets the same task; only a replay's status may lag by up to this long.
CONFIRM_DEDUP_TTL_S = 5.0
RETRY_AFTER_S = "1"
MAX_GOAL_CHARS = 4000
MAX_VERSION = 2**31 - 1  # draft versions are INTEGER columns
MAX_EVENT_SEQ = 2**31 - 1
MAX_EVENT_AT = 253402300799.0  # 9999-12-31T23:59:59Z
MAX_EXTERNAL_ID = 160
EVENT_KINDS = frozenset({EVENT_TELEMETRY, EVENT_ALERT, EVENT_COMPLETED, EVENT_FAILED, EVENT_CANCELLED})
_AFTER_VERSION = re.compile(r"-?[0-9]{1,18}")
_RESERVED = frozenset({"type", "title", "status", "code", "detail", "instance"})


# ------------------------------------------------------------------------------------------------ problems


def problem_type(code: str) -> str:
    return PROBLEM_TYPE_BASE + code.lower().replace("_", "-")


def problem(
    status: int,
    code: str,
    detail: str,
    extra: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """A problem+json response; ``extra`` members (a DomainError's detail) never replace standard ones."""
    body: dict[str, Any] = {
        "type": problem_type(code),
        "title": code.replace("_", " ").capitalize(),
        "status": status,
        "code": code,
        "detail": detail,
    }
    body.update({k: v for k, v in (extra or {}).items() if k not in _RESERVED})
    resp = Response(json.dumps(body, default=str), status=status, mimetype=PROBLEM_MIMETYPE)
    if status == 503:
        resp.headers["Retry-After"] = RETRY_AFTER_S
    if status == 401:
        resp.headers["WWW-Authenticate"] = "Bearer"
    for k, v in (headers or {}).items():
        resp.headers[k] = v
    return resp


def _bad_json(detail: str) -> DomainError:
    return DomainError("MALFORMED_JSON", detail, status=400)


def _missing(field: str) -> ValidationFailed:
    return ValidationFailed("MISSING_FIELD", f"{field} is required", field=field)


def _invalid(field: str, detail: str) -> ValidationFailed:
    return ValidationFailed("INVALID_PARAMETERS", f"{field} {detail}", field=field)


_HTTP_CODES = {
    400: "BAD_REQUEST",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    406: "NOT_ACCEPTABLE",
    408: "REQUEST_TIMEOUT",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    431: "REQUEST_HEADER_FIELDS_TOO_LARGE",
}


def _db_unavailable(exc: BaseException) -> bool:
    """Connection-level failures: the database is down, unreachable, locked or the pool is exhausted."""
    if isinstance(
        exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.DisconnectionError | sa_exc.TimeoutError
    ):
        return True
    return isinstance(exc, sa_exc.DBAPIError) and bool(exc.connection_invalidated)


# ------------------------------------------------------------------------------------------------ bodies


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {literal[:40]}")
    return value


def _reject_constant(literal: str) -> Any:
    raise ValueError(f"{literal} is not valid JSON")


def _clean_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


def _check_strings(value: Any) -> None:
    """Strings (keys too) must be valid Unicode without NUL, so every database can store them."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not _clean_text(item):
                raise _bad_json("strings must be valid UTF-8 text without NUL characters")
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())


def read_json(limit: int = MAX_BODY_BYTES) -> Any:
    """The request body as JSON: 413 above ``limit`` bytes, 400 MALFORMED_JSON when it does not parse."""
    if request.content_length is not None and request.content_length > limit:
        raise DomainError("PAYLOAD_TOO_LARGE", f"the body exceeds {limit} bytes", status=413, limit=limit)
    data = request.stream.read(limit + 1)
    if len(data) > limit:
        raise DomainError("PAYLOAD_TOO_LARGE", f"the body exceeds {limit} bytes", status=413, limit=limit)
    if not data.strip():
        raise _bad_json("the body is empty; a JSON document is required")
    try:
        text_ = data.decode("utf-8").removeprefix("\ufeff")
        value = json.loads(text_, parse_float=_finite_float, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _bad_json("the body is not valid JSON") from None
    _check_strings(value)
    return value


def _str_field(body: dict[str, Any], name: str, *, max_len: int, allow_empty: bool = False) -> str:
    if name not in body:
        raise _missing(name)
    value = body[name]
    if not isinstance(value, str):
        raise _invalid(name, "must be a string")
    if (not allow_empty and not value) or len(value) > max_len:
        raise _invalid(name, f"must be {0 if allow_empty else 1}..{max_len} characters")
    return value


def _version_field(body: dict[str, Any], name: str) -> int:
    if name not in body:
        raise _missing(name)
    value = body[name]
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


def _platform_events(value: Any) -> list[PlatformEvent]:
    if not isinstance(value, list):
        raise _bad_json("the body must be a JSON list of events")
    events = []
    for i, item in enumerate(value):

        def bad(field: str, detail: str, code: str = "INVALID_PARAMETERS", i: int = i) -> ValidationFailed:
            return ValidationFailed(code, f"event {i}: {field} {detail}", field=f"[{i}].{field}", index=i)

        if not isinstance(item, dict):
            raise ValidationFailed(
                "INVALID_PARAMETERS", f"event {i} must be an object", field=f"[{i}]", index=i
            )
        for name in ("external_id", "seq", "kind", "at"):
            if name not in item:
                raise bad(name, "is required", "MISSING_FIELD")
        ext = item["external_id"]
        if not isinstance(ext, str) or not 1 <= len(ext) <= MAX_EXTERNAL_ID:
            raise bad("external_id", f"must be a string of 1..{MAX_EXTERNAL_ID} characters")
        seq = item["seq"]
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_EVENT_SEQ:
            raise bad("seq", f"must be an integer in 0..{MAX_EVENT_SEQ}")
        if item["kind"] not in EVENT_KINDS:
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
        events.append(PlatformEvent.from_json(item))
    return events


# ------------------------------------------------------------------------------------------------ app


class _Fanout:
    """Keeps a notifier the runtime already had when the hub is added."""

    def __init__(self, *notifiers: Notifier) -> None:
        self.notifiers = notifiers

    def task_changed(self, task_id: str, user_id: str, status: str, version: int) -> None:
        for n in self.notifiers:
            n.task_changed(task_id, user_id, status, version)


def _sse(change: TaskChange) -> bytes:
    data = json.dumps(
        {"task_id": change.task_id, "status": change.status, "version": change.version}, separators=(",", ":")
    )
    return f"id: {change.task_id}:{change.version}\nevent: task\ndata: {data}\n\n".encode()


def hub_of(app: Flask) -> NotificationHub:
    hub: NotificationHub = app.extensions[EXTENSION_KEY]["hub"]
    return hub


def create_app(
    runtime: Runtime,
    *,
    token_secret: str,
    webhook_token: str,
    hub: NotificationHub | None = None,
    cache: Cache | None = None,
    heartbeat_s: float = HEARTBEAT_S,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_webhook_body_bytes: int = MAX_WEBHOOK_BODY_BYTES,
) -> Flask:
    """The API over ``runtime``. The hub becomes ``runtime.notifier`` so every commit feeds the streams."""
    if not token_secret or not webhook_token:
        raise ValueError("token_secret and webhook_token must be non-empty")
    hub = hub if hub is not None else NotificationHub()
    if runtime.notifier is None or runtime.notifier is hub:
        runtime.notifier = hub
    else:
        runtime.notifier = _Fanout(runtime.notifier, hub)

    app = Flask("sortie-api")
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions[EXTENSION_KEY] = {"runtime": runtime, "hub": hub}

    def principal() -> Principal:
        return verify_token(token_secret, bearer_token(request.headers.get("Authorization")))

    def body() -> dict[str, Any]:
        value = read_json(max_body_bytes)
        if not isinstance(value, dict):
            raise _bad_json("the body must be a JSON object")
        return value

    def reply(payload: dict[str, Any], status: int = 200, location: str | None = None) -> Response:
        resp = app.json.response(payload)
        resp.status_code = status
        if location:
            resp.headers["Location"] = location
        return resp

    # -------------------------------------------------------------------------------------------- errors

    @app.errorhandler(DomainError)
    def domain_error(exc: DomainError) -> Response:
        return problem(exc.status, exc.code, exc.message, exc.detail)

    @app.errorhandler(StaleWrite)
    def stale_write(exc: StaleWrite) -> Response:
        return problem(
            409,
            "TASK_CHANGED",
            "the task changed concurrently; read it again and retry",
            {"task_id": str(exc.task_id)},
        )

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        code = _HTTP_CODES.get(status) or (exc.name or "error").upper().replace(" ", "_").replace("'", "")
        headers = {}
        allowed = getattr(exc, "valid_methods", None)
        if status == 405 and allowed:
            headers["Allow"] = ", ".join(sorted(allowed))
        return problem(status, code, exc.description or exc.name or "", headers=headers)

    @app.errorhandler(sa_exc.SQLAlchemyError)
    def database_error(exc: sa_exc.SQLAlchemyError) -> Response:
        if _db_unavailable(exc):
            log.warning("database unavailable on %s %s: %s", request.method, request.path, type(exc).__name__)
            return problem(
                503, "SERVICE_UNAVAILABLE", "the database is unavailable; retry with the same request"
            )
        return internal_error(exc)

    @app.errorhandler(Exception)
    def internal_error(exc: Exception) -> Response:
        error_id = uuid.uuid4().hex
        log.error("unhandled error %s on %s %s", error_id, request.method, request.path, exc_info=exc)
        return problem(500, "INTERNAL_ERROR", "an internal error occurred", {"error_id": error_id})

    # -------------------------------------------------------------------------------------------- health

    @app.get("/health")
    def health() -> Response:
        try:
            with runtime.sessions() as session:
                session.execute(text("SELECT 1")).scalar_one()
        except sa_exc.SQLAlchemyError as exc:
            log.warning("health check: database unavailable: %s", type(exc).__name__)
            return problem(
                503, "SERVICE_UNAVAILABLE", "the database is unavailable", {"database": "unavailable"}
            )
        return reply({"status": "ok", "database": "ok"})

    # -------------------------------------------------------------------------------------------- drafts

    @app.post("/v1/drafts")
    def post_draft() -> Response:
        me = principal()
        data = body()
        goal = _str_field(data, "goal", max_len=MAX_GOAL_CHARS, allow_empty=True)
        area_id = _str_field(data, "area_id", max_len=MAX_GOAL_CHARS)
        plan = _plan_field(data)
        out = runtime.transact(lambda tx: draft_dict(tx, create_draft(tx, me.user_id, goal, area_id, plan)))
        return reply(out, 201, f"/v1/drafts/{out['id']}")

    @app.get("/v1/drafts/<draft_id>")
    def get_draft_view(draft_id: str) -> Response:
        me = principal()
        return reply(runtime.transact(lambda tx: get_draft(tx, me.user_id, draft_id)))

    @app.patch("/v1/drafts/<draft_id>")
    def patch_draft(draft_id: str) -> Response:
        me = principal()
        data = body()
        expected = _version_field(data, "expected_version")
        plan = _plan_field(data)
        return reply(
            runtime.transact(
                lambda tx: draft_dict(tx, revise_draft(tx, me.user_id, draft_id, expected, plan))
            )
        )

    @app.post("/v1/drafts/<draft_id>/approvals")
    def post_approval(draft_id: str) -> Response:
        me = principal()
        if me.role != "approver":
            raise DomainError(
                "FORBIDDEN_ROLE", "only approvers may decide approvals", status=403, required_role="approver"
            )
        data = body()
        version = _version_field(data, "draft_version")
        decision = _str_field(data, "decision", max_len=16)
        if decision not in ("approve", "reject"):
            raise _invalid("decision", "must be 'approve' or 'reject'")
        did = _uuid_or_404(draft_id, "DRAFT_NOT_FOUND", "draft")
        out = runtime.transact(
            lambda tx: approval_dict(decide_approval(tx, me.user_id, did, version, decision == "approve"))
        )
        return reply(out, 201)

    @app.post("/v1/drafts/<draft_id>/confirm")
    def post_confirm(draft_id: str) -> Response:
        me = principal()
        key = request.headers.get("Idempotency-Key", "")
        if not key.strip():
            raise DomainError("MISSING_IDEMPOTENCY_KEY", "the Idempotency-Key header is required", status=400)
        data = body()
        version = _version_field(data, "draft_version")
        did = _uuid_or_404(draft_id, "DRAFT_NOT_FOUND", "draft")
        cmd = ConfirmDraft(me.user_id, did, version, key)
        validate_command(cmd)
        dedup_key = f"confirm:{me.user_id}:{cmd.request_hash()}:{key}"
        if cache is not None and (hit := cache.get(dedup_key)) is not None:
            out = json.loads(hit)
            resp = reply(out, 200, f"/v1/tasks/{out['task_id']}")
            resp.headers["X-Dedup"] = "hit"
            return resp
        created = runtime.run(confirm_draft(cmd))
        out = {"task_id": created.task_id, "status": str(created.status), "version": created.version}
        if cache is not None:
            cache.set(dedup_key, json.dumps(out), CONFIRM_DEDUP_TTL_S)
        return reply(out, 200 if created.replayed else 201, f"/v1/tasks/{created.task_id}")

    # -------------------------------------------------------------------------------------------- tasks

    @app.get("/v1/tasks/<task_id>")
    def get_task(task_id: str) -> Response:
        me = principal()
        # A short cache (Redis in production) absorbs polling; keyed by user so only an owner's read fills
        # it. Losing it changes nothing: a miss reads PostgreSQL; clients resync by version anyway.
        key = f"task-snapshot:{me.user_id}:{task_id}"
        if cache is not None and (hit := cache.get(key)) is not None:
            resp = reply(json.loads(hit))
            resp.headers["X-Cache"] = "hit"
            return resp
        snapshot = runtime.transact(lambda tx: task_snapshot(tx, me.user_id, task_id))
        if cache is not None:
            cache.set(key, json.dumps(snapshot), SNAPSHOT_CACHE_TTL_S)
        return reply(snapshot)

    @app.get("/v1/tasks/<task_id>/events")
    def get_task_events(task_id: str) -> Response:
        me = principal()
        raw = request.args.get("after_version", "-1")
        if not _AFTER_VERSION.fullmatch(raw) or int(raw) < -1:
            raise ValidationFailed(
                "INVALID_PARAMETERS", "after_version must be an integer >= -1", field="after_version"
            )
        after = int(raw)
        return reply(runtime.transact(lambda tx: task_events(tx, me.user_id, task_id, after)))

    @app.post("/v1/tasks/<task_id>/cancel")
    def post_cancel(task_id: str) -> Response:
        me = principal()
        answer = runtime.transact(lambda tx: request_cancel(tx, task_id, me.user_id), "cancel")
        return reply(
            {"task_id": answer.task_id, "status": str(answer.status), "version": answer.version}, 202
        )

    @app.get("/v1/stream")
    def stream() -> Response:
        me = principal()
        sub = hub.subscribe(me.user_id)  # now, not on the first read: no change is missed in between

        def events() -> Iterator[bytes]:
            try:
                yield b"retry: 3000\n: stream open\n\n"
                while True:
                    item = sub.get(heartbeat_s)
                    if item is CLOSED:
                        return
                    yield b": heartbeat\n\n" if item is None else _sse(item)  # type: ignore[arg-type]
            finally:
                sub.close()

        resp = Response(events(), mimetype="text/event-stream")
        resp.headers["Cache-Control"] = "no-cache"
        resp.headers["X-Accel-Buffering"] = "no"
        resp.call_on_close(sub.close)  # also when the generator never started
        return resp

    # -------------------------------------------------------------------------------------------- webhook

    @app.post("/v1/platform/events")
    def platform_events() -> Response:
        given = request.headers.get("X-Webhook-Token")
        if not given:
            raise DomainError("UNAUTHENTICATED", "the X-Webhook-Token header is required", status=401)
        if not hmac.compare_digest(given.encode("utf-8", "replace"), webhook_token.encode("utf-8")):
            raise DomainError("INVALID_TOKEN", "the webhook token is invalid", status=401)
        events = _platform_events(read_json(max_webhook_body_bytes))
        result = runtime.transact(lambda tx: ingest_platform_events(tx, events))
        if result.duplicates and runtime.recorder is not None:  # the harness's history: duplicates arrived
            runtime.recorder.op("info", EVENTS_WITH_DUPLICATES, events_value(result.accepted, result.duplicates))
        return reply(
            {"accepted": result.accepted, "duplicates": result.duplicates, "orphans": result.orphans}
        )

    return app
