"""The status service's HTTP API (seed 003 §3.5, §3.8, §7, §13.2): a thin shell over reference.statussync.service.
Served by gunicorn (``reference.statussync.http.app:create_app()``) with ``SORTIE_STATUSSYNC_DATABASE_URL``, the
secret the callers' bearer tokens are signed with (``SORTIE_STATUSSYNC_TOKEN_SECRET``), Centrifugo's HMAC token key
(``SORTIE_STATUSSYNC_CENTRIFUGO_SECRET``, at least 32 characters) and, for the status page, the official JavaScript
client's browser bundle (``SORTIE_STATUSSYNC_JS_CLIENT``: a file the deployment installs, stack.centrifugo's
``install_js_client``; without it the page's client answers 404 JS_CLIENT_NOT_INSTALLED). Its OpenAPI document
(openapi.yaml, served at ``/openapi.json``) validates every request body.

    POST /internal/v1/tasks                  coordinator: a task with its steps (§3.1)  -> each step's context
    POST /internal/v1/task-events            Bearer <executionToken>: one event (§3.5)   -> the service's answer
    POST /internal/v1/tasks/ID/corrections   admin: the audited correction of a result (§4.2)
    GET  /api/tasks                          user: their tasks' summaries (§6.1)
    GET  /api/tasks/ID                       user: the snapshot, summary and detail (§3.8)
    GET  /api/tasks/ID/events?afterTaskVersion=N&limit=M   user: the committed timeline after version N (§3.8)
    POST /api/tasks/status:batchGet          user: summaries newer than the versions they know (§13.2)
    GET  /api/realtime/session               user: a Centrifugo connection token, the summary channel (§7.1)
    POST /api/realtime/subscription-token    user: a detail channel's token, after the task's ACL (§7.2)
    GET  /app/, /app/tasks.js, /app/centrifuge.js   the status page (no authentication: its address carries
                                             the user's token in the fragment) and the official JS client
    GET  /health, GET /openapi.json (no authentication)

A user's bearer token names ``tenant/user`` as its subject (role ``user``); a task of another user answers 404.
Every error is problem+json with a stable ``code``. An event the service judges and refuses keeps its answer in the
dedup table (a retry gets it again) and comes back as problem+json carrying that answer; an execution token the
service did not sign is refused by the service before anything is read or written (401 TOKEN_REFUSED), so a forger
cannot claim an eventId that a real producer will send."""

from __future__ import annotations

import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jwt
from flask import Flask, Response, request, send_file
from sqlalchemy import create_engine, select
from werkzeug.routing import BaseConverter

from kernel import jsonbody
from kernel.effects import Tx
from kernel.http_api import ApiContext
from kernel.http_problems import Problem, install_error_handlers
from kernel.sqlite import real_transactions
from kernel.tokens import Caller, TokenVerifier, bearer_token
from reference.statussync.bugs import BUGS
from reference.statussync.bugs import ENV_VAR as BUGS_ENV_VAR
from reference.statussync.http.auth import ADMIN_ROLE, COORDINATOR_ROLE, ROLES, USER
from reference.statussync.http.openapi import document_json, request_bodies
from reference.statussync.models import Task, TaskEventLog
from reference.statussync.service import (
    Correction,
    NewTask,
    Refused,
    batch_get,
    correct_task,
    create_task,
    heartbeat,
    report_event,
    subscription_token,
    user_channel,
    user_summaries,
    views,
)

log = logging.getLogger("sortie.statussync.api")

PAGE_DIR = Path(__file__).with_name("page")  # the status page: index.html and its script
MAX_BODY_BYTES = 64 * 1024
TASK_ID_PATTERN = r"[A-Za-z0-9._-]{1,36}"  # the document's TaskId (a test keeps them equal)
MAX_TIMELINE = 500  # events per timeline page
CENTRIFUGO_TOKEN_TTL_S = 600.0

# A schema-valid event the registry or the state machine refuses (422): the document lists these codes on that
# answer (x-schema-valid-refusals), as no schema can state them.
REFUSED_UNPROCESSABLE = ("UNKNOWN_STATUS", "SCHEMA_REFUSED", "ILLEGAL_TRANSITION", "UNKNOWN_STEP",
                         "UNKNOWN_EVENT_TYPE")
# A refused event's code -> its HTTP status: stale or conflicting (409), not the caller's to send (403), no such
# task (404), a body the registry or the state machine refuses (422). Any other refusal: 422.
REFUSAL_STATUS = {"EVENT_ID_CONFLICT": 409, "STALE_ATTEMPT": 409, "STALE_SEQUENCE": 409, "TASK_TERMINAL": 409,
                  "STEP_TERMINAL": 409, "TOKEN_MISMATCH": 403, "TOKEN_REFUSED": 401, "NOT_THIS_STEPS_PRODUCER": 403,
                  "EVENT_NOT_ALLOWED": 403, "UNKNOWN_TASK": 404, "MALFORMED": 400,
                  "TASK_NOT_FOUND": 404, "NOTHING_TO_CORRECT": 409, **dict.fromkeys(REFUSED_UNPROCESSABLE, 422)}


def tenant_user(me: Caller) -> tuple[str, str]:
    """A user token's subject as (tenant, user): ``tenant/user``, both non-empty."""
    tenant, _, user = me.user_id.partition("/")
    if not tenant or not user or "/" in user:
        raise Problem(403, "FORBIDDEN", "a user token's subject is tenant/user")
    return tenant, user


def _ascii_decimal(value: str) -> bool:
    """Digits 0-9 only (str.isdecimal also takes other scripts' digits, which the document does not)."""
    return value.isascii() and value.isdecimal()


def version_of(text: Any, where: str) -> int:
    """A version as the API writes it (a decimal string; §8.1) or a non-negative integer."""
    value = str(text)
    if not _ascii_decimal(value) or len(value) > 19:
        raise Problem(400, "INVALID_REQUEST", f"{where}: a version is a decimal string of at most 19 digits")
    return int(value)


def refusal(answer: dict[str, Any]) -> Problem:
    """A judged refusal as its problem, carrying the service's answer (the same answer a retry gets)."""
    code = str(answer.get("code") or "REFUSED")
    extra = {k: v for k, v in answer.items() if k != "code"}
    return Problem(REFUSAL_STATUS.get(code, 422), code, f"the event is refused: {code}", **extra)


class TaskIdConverter(BaseConverter):
    """A task id as the document's TaskId pattern has it, so that ``/api/tasks/status:batchGet`` is never read as
    the snapshot of a task of that name (a GET there answers 405, not a 404 for a task)."""

    regex = TASK_ID_PATTERN


class _Api(ApiContext):
    """What every route uses (kernel.http_api), and the Centrifugo tokens it signs."""

    def __init__(self, url: str, secret: str, centrifugo_secret: str) -> None:
        # In process on SQLite (its tests) as on MariaDB: a refused request rolls back. MariaDB's DATETIME takes
        # naive UTC, so the transaction clock is naive
        super().__init__(real_transactions(create_engine(url, pool_pre_ping=True, pool_recycle=600)),
                         TokenVerifier(secret, ROLES), request_bodies(), max_body_bytes=MAX_BODY_BYTES,
                         now=lambda: datetime.now(UTC).replace(tzinfo=None), log=log)
        self.centrifugo_secret = centrifugo_secret

    def user(self) -> tuple[str, str]:
        return tenant_user(self.caller(USER))

    def body(self, operation_id: str) -> dict[str, Any]:
        value = jsonbody.read_request(request, MAX_BODY_BYTES)
        self.bodies.check(operation_id, value)
        return value  # an object: the document's schema asks for one

    def centrifugo_token(self, claims: dict[str, Any]) -> str:
        return jwt.encode(claims, self.centrifugo_secret, algorithm="HS256")


def create_app(database_url: str | None = None, token_secret: str | None = None,
               centrifugo_secret: str | None = None, js_client: Path | None = None) -> Flask:
    url = database_url or os.environ["SORTIE_STATUSSYNC_DATABASE_URL"]
    secret = token_secret or os.environ.get("SORTIE_STATUSSYNC_TOKEN_SECRET", "")
    hmac_key = centrifugo_secret or os.environ.get("SORTIE_STATUSSYNC_CENTRIFUGO_SECRET", "")
    if not secret:
        raise SystemExit("SORTIE_STATUSSYNC_TOKEN_SECRET is required (the key the bearer tokens are signed with)")
    if len(hmac_key) < 32:
        raise SystemExit("SORTIE_STATUSSYNC_CENTRIFUGO_SECRET is required: Centrifugo's HMAC key, >= 32 characters")
    if os.environ.get(BUGS_ENV_VAR):  # selfcheck on a real stack: an unknown name stops the start here
        BUGS.activate(os.environ[BUGS_ENV_VAR])
    api = _Api(url, secret, hmac_key)
    spec = document_json()  # parsed at start: a broken document fails the start, not a request
    app = Flask("sortie-statussync-api")
    app.url_map.converters["task_id"] = TaskIdConverter
    install_error_handlers(app, log)

    @app.get("/health")
    def health() -> Any:
        return {"ok": True}

    @app.get("/openapi.json")
    def openapi() -> Response:
        return Response(spec, status=200, mimetype="application/json")

    _internal_routes(app, api)
    _correction_routes(app, api)
    _read_routes(app, api)
    _realtime_routes(app, api)
    bundle = js_client or (Path(os.environ["SORTIE_STATUSSYNC_JS_CLIENT"])
                           if os.environ.get("SORTIE_STATUSSYNC_JS_CLIENT") else None)
    _page_routes(app, bundle)
    return app


def _page_routes(app: Flask, js_client: Path | None) -> None:
    """The status page: static files, no authentication (the page sends the user's token on every API call)."""

    @app.get("/app/")
    def page() -> Response:
        return send_file(PAGE_DIR / "index.html", mimetype="text/html", max_age=0)

    @app.get("/app/tasks.js")
    def page_script() -> Response:
        return send_file(PAGE_DIR / "tasks.js", mimetype="text/javascript", max_age=0)

    @app.get("/app/centrifuge.js")
    def page_client() -> Response:
        if js_client is None or not js_client.is_file():
            raise Problem(404, "JS_CLIENT_NOT_INSTALLED", "the JavaScript client is not installed here: start the "
                          "API with SORTIE_STATUSSYNC_JS_CLIENT naming its bundle (sortie stack install fetches it)")
        return send_file(js_client, mimetype="text/javascript", max_age=0)


def _internal_routes(app: Flask, api: _Api) -> None:
    """What producers call: the coordinator creates tasks; every producer reports events."""

    @app.post("/internal/v1/tasks")
    def create() -> Any:
        api.caller(COORDINATOR_ROLE)
        body = api.body("createTask")
        new = NewTask(body["taskId"], body["tenantId"], body["ownerId"], body["title"],
                      tuple((s["stepId"], s["operationCode"]) for s in body["steps"]))
        try:
            answer = api.in_tx(lambda tx: create_task(tx, new))
        except Refused as refused:
            raise Problem(422, refused.code, f"the task is refused: {refused.code}") from None
        if not answer.get("accepted"):
            raise refusal(answer)
        return answer

    @app.post("/internal/v1/task-events")
    def report() -> Any:
        token = bearer_token(request.headers.get("Authorization"))  # the service judges it (TOKEN_REFUSED: 401)
        event = api.body("reportEvent")
        key = request.headers.get("Idempotency-Key")
        if key is not None and key != event["eventId"]:
            raise Problem(400, "IDEMPOTENCY_KEY_MISMATCH", "the Idempotency-Key header must equal the eventId")
        if event["eventType"] == "STEP_HEARTBEAT":
            return _heartbeat(api, event, token)
        answer = api.in_tx(lambda tx: report_event(tx, event, token).answer)
        if not answer.get("accepted"):
            raise refusal(answer)
        return answer


def _correction_routes(app: Flask, api: _Api) -> None:
    """An administrator's correction (§4.2): the operator is the token's subject, never a field of the body."""

    @app.post("/internal/v1/tasks/<task_id:task_id>/corrections")
    def correct(task_id: str) -> Any:
        tenant, operator = tenant_user(api.caller(ADMIN_ROLE))
        body = api.body("correctTask")
        correction = Correction(body["correctionId"], task_id, tenant, operator, body["reason"], body["businessStatus"])
        try:
            answer = api.in_tx(lambda tx: correct_task(tx, correction))
        except Refused as refused:
            raise refusal({"code": refused.code, "taskId": task_id}) from None
        if not answer.get("accepted"):
            raise refusal(answer)
        return answer


def _heartbeat(api: _Api, event: dict[str, Any], token: str) -> Any:
    """§3.5: a heartbeat moves only last_heartbeat_at: no version, no dedup row, nothing published. Its token must
    be the step attempt's (the service checks it)."""
    if event.get("stepId") is None or event.get("stepAttempt") is None:  # schema-valid: the document lists it
        raise Problem(422, "HEARTBEAT_WITHOUT_STEP", "a heartbeat names its stepId and stepAttempt")
    try:
        beat = api.in_tx(lambda tx: heartbeat(tx, event["taskId"], event["stepId"], int(event["stepAttempt"]),
                                              event["producerId"], token))
    except Refused as refused:
        raise refusal({"code": refused.code, "taskId": event["taskId"], "eventId": event["eventId"]}) from None
    if not beat:
        raise Problem(409, "NOT_RUNNING", "the step attempt is not this producer's running one")
    return {"accepted": True, "heartbeat": True, "taskId": event["taskId"], "eventId": event["eventId"]}


def _owned(tx: Tx, task_id: str, tenant: str, user: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The task's snapshot if it is the caller's; another's task, or none, is not there (404 either way)."""
    row = tx.conn.execute(select(Task.tenant_id, Task.owner_id).where(Task.id == task_id)).first()
    snapshot = views(tx.conn, task_id) if row is not None and (row.tenant_id, row.owner_id) == (tenant, user) else None
    if snapshot is None:
        raise Problem(404, "TASK_NOT_FOUND", f"no task {task_id[:80]!r}")
    return snapshot


def _timeline(tx: Tx, task_id: str, after: int, limit: int) -> list[dict[str, Any]]:
    rows = tx.conn.execute(select(TaskEventLog.__table__).where(
        TaskEventLog.task_id == task_id, TaskEventLog.task_version > after)
        .order_by(TaskEventLog.task_version).limit(limit)).all()
    return [{"eventId": r.event_id, "taskVersion": str(r.task_version), "eventType": r.event_type,
             "stepId": r.step_id, "operationCode": r.operation_code,
             "stepVersion": None if r.step_version is None else str(r.step_version), "stepAttempt": r.step_attempt,
             "lifecycleStatus": r.lifecycle_status, "businessStatus": r.business_status, "health": r.health,
             "durationMs": r.duration_ms, "errorCode": r.error_code,
             "data": (r.payload or {}).get("data") if isinstance(r.payload, dict) else None,
             "committedAt": r.committed_at.replace(tzinfo=UTC).isoformat()} for r in rows]


def _int_arg(name: str, default: int, low: int, high: int) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    if not _ascii_decimal(raw) or len(raw) > 19 or not low <= int(raw) <= high:
        raise Problem(400, "INVALID_REQUEST", f"{name}: an integer from {low} to {high}")
    return int(raw)


def _read_routes(app: Flask, api: _Api) -> None:
    """What a user reads: their tasks, a snapshot, the timeline, the batch check."""

    @app.get("/api/tasks")
    def list_tasks() -> Any:
        tenant, user = api.user()
        return {"tasks": api.in_tx(lambda tx: user_summaries(tx.conn, tenant, user))}

    @app.get("/api/tasks/<task_id:task_id>")
    def snapshot(task_id: str) -> Any:
        tenant, user = api.user()
        summary, detail = api.in_tx(lambda tx: _owned(tx, task_id, tenant, user))
        return {"summary": summary, "detail": detail}

    @app.get("/api/tasks/<task_id:task_id>/events")
    def timeline(task_id: str) -> Any:
        tenant, user = api.user()
        after = _int_arg("afterTaskVersion", 0, 0, 2**63 - 1)
        limit = _int_arg("limit", 100, 1, MAX_TIMELINE)

        def run(tx: Tx) -> list[dict[str, Any]]:
            _owned(tx, task_id, tenant, user)
            return _timeline(tx, task_id, after, limit)

        events = api.in_tx(run)
        return {"taskId": task_id, "afterTaskVersion": str(after), "events": events}

    @app.post("/api/tasks/status:batchGet")
    def batch() -> Any:
        tenant, user = api.user()
        body = api.body("batchGet")
        known = {t: version_of(body.get("knownVersions", {}).get(t, "0"), f"knownVersions.{t}")
                 for t in body["taskIds"]}
        return {"tasks": api.in_tx(lambda tx: batch_get(tx.conn, tenant, user, known))}


def _realtime_routes(app: Flask, api: _Api) -> None:
    """Centrifugo tokens (§7): the connection subscribes the user's summary channel on the server side; a detail
    channel's token only after the task's ACL, with the channel the server builds (never the caller's)."""

    @app.get("/api/realtime/session")
    def session() -> Any:
        tenant, user = api.user()
        expires = int(time.time() + CENTRIFUGO_TOKEN_TTL_S)
        channels = [user_channel(tenant, user)]
        token = api.centrifugo_token({"sub": f"{tenant}/{user}", "channels": channels, "exp": expires})
        return {"token": token, "user": f"{tenant}/{user}", "channels": channels, "expiresAt": expires}

    @app.post("/api/realtime/subscription-token")
    def detail_token() -> Any:
        tenant, user = api.user()
        task_id = api.body("subscriptionToken")["taskId"]
        try:
            claims = api.in_tx(lambda tx: subscription_token(tx.conn, tenant, user, task_id, time.time(),
                                                             CENTRIFUGO_TOKEN_TTL_S))
        except Refused as refused:  # another's task or none: not there (the service's one answer for both)
            raise Problem(404, refused.code, f"no task {task_id[:80]!r}") from None
        claims["exp"] = int(claims["exp"])
        return {"token": api.centrifugo_token(claims), "channel": claims["channel"], "expiresAt": claims["exp"]}
