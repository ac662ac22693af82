"""The Copilot-facing HTTP API: drafts, approvals, confirmation, task reads, cancel, SSE and the
platform's webhook. Routes only authenticate, parse and map: each use case, its validation, request dedup
and the error mapping are in the application layer (reference.copilot.api), which the simulation runs too.

Every mutating request is one transaction (confirm: the few of its generator), so a refusal writes
nothing. Errors are always ``application/problem+json`` with a stable ``code`` (docs/architecture.md); a 500
carries no exception text, which goes to the server log with an ``error_id``.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import select
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from flask import Flask, Response, g, request
from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from werkzeug.exceptions import HTTPException

from kernel import jsonbody
from kernel.jsonbody import MAX_JSON_DEPTH
from kernel.ports import Notifier
from reference.copilot import api
from reference.copilot.api import problem_of
from reference.copilot.errors import DomainError
from reference.copilot.http import sse
from reference.copilot.http.auth import Principal, TokenVerifier, bearer_token
from reference.copilot.http.client import REQUEST_ID_HEADER
from reference.copilot.http.notify import CLOSED, NotificationHub, Subscription
from reference.copilot.http.openapi import document_json
from reference.copilot.http.server_timing import header as server_timing_header
from reference.copilot.ports import Cache
from reference.copilot.runtime import EVENTS_WITH_DUPLICATES, Runtime, events_value

log = logging.getLogger("sortie.api")
_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,160}")  # fits the audit row's correlation_id (160)

EXTENSION_KEY = "sortie_api"
PROBLEM_MIMETYPE = "application/problem+json"
MAX_BODY_BYTES = 256 * 1024
MAX_WEBHOOK_BODY_BYTES = 1024 * 1024  # the platform batches up to 500 events
HEARTBEAT_S = sse.HEARTBEAT_S
LIVENESS_S = 1.0  # an idle stream looks this often whether its client left (its thread and slot are freed then)



def response_of(reply: api.Reply) -> Response:
    """A use case's reply as an HTTP response (problem+json for a problem)."""
    resp = Response(json.dumps(reply.body, default=str), status=reply.status,
                    mimetype=PROBLEM_MIMETYPE if reply.status >= 400 else "application/json")
    for k, v in reply.headers.items():
        resp.headers[k] = v
    return resp


def problem(status: int, code: str, detail: str, extra: dict[str, Any] | None = None,
            headers: dict[str, str] | None = None) -> Response:
    return response_of(api.problem(status, code, detail, extra, headers))


# ------------------------------------------------------------------------------------------------ bodies


def read_json(limit: int = MAX_BODY_BYTES) -> Any:
    """The request body as JSON (kernel.jsonbody.read_request): 413 above ``limit`` bytes, 415 unless sent as JSON,
    400 MALFORMED_JSON when it does not parse, repeats a key in one object or nests deeper than MAX_JSON_DEPTH, 400
    UNSTORABLE_STRING when a string holds a NUL or a lone surrogate."""
    try:
        return jsonbody.read_request(request, limit, MAX_JSON_DEPTH)
    except jsonbody.UnstorableString as err:  # JSON Schema allows it: the document names this code apart
        raise DomainError("UNSTORABLE_STRING", str(err), status=400) from None
    except jsonbody.BodyRefused as err:
        raise DomainError(err.code, err.detail, status=err.status, **err.extra) from None


def _client_gone(sock: socket.socket | None) -> bool:
    """Whether a stream's client closed its connection (readable, and nothing to read). Without this a stream the
    client left held its thread and its slot of the per-user cap until the next heartbeat failed to write."""
    if sock is None:  # another server than gunicorn: the next write finds out
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _stream_events(sub: Subscription, heartbeat_s: float, expires_at: float,
                   client: socket.socket | None) -> Iterator[bytes]:
    """An API stream's bytes: the opening, each change, a heartbeat when idle; ends with EXPIRED when the token
    expires, and when the hub closes or the client left (looked at every LIVENESS_S while idle)."""
    try:
        yield sse.OPEN
        beat_at = time.monotonic() + heartbeat_s
        while True:
            wait = sse.next_wait(min(beat_at - time.monotonic(), LIVENESS_S), expires_at, time.time())
            if wait is None:
                yield sse.EXPIRED
                return
            item = sub.get(wait)
            if item is CLOSED or (item is None and _client_gone(client)):
                return
            if item is not None:
                yield sse.event(item)  # type: ignore[arg-type]
            elif time.monotonic() >= beat_at:
                yield sse.HEARTBEAT
            else:
                continue
            beat_at = time.monotonic() + heartbeat_s
    finally:
        sub.close()


# ------------------------------------------------------------------------------------------------ app


class _Fanout:
    """Keeps a notifier the runtime already had when the hub is added."""

    def __init__(self, *notifiers: Notifier) -> None:
        self.notifiers = notifiers

    def task_changed(self, task_id: str, user_id: str, status: str, version: int) -> None:
        for n in self.notifiers:
            n.task_changed(task_id, user_id, status, version)


def hub_of(app: Flask) -> NotificationHub:
    hub: NotificationHub = app.extensions[EXTENSION_KEY]["hub"]
    return hub


def _task_reads(app: Flask, run: Callable[[api.Command], Response], principal: Callable[[], Principal]) -> None:
    """The routes that read the caller's tasks: the list, one task, its transitions."""

    @app.get("/v1/tasks")
    def list_tasks() -> Response:
        return run(api.ListTasks(principal(), request.args.get("limit")))

    @app.get("/v1/tasks/<task_id>")
    def get_task(task_id: str) -> Response:
        return run(api.ReadTask(principal(), task_id))

    @app.get("/v1/tasks/<task_id>/events")
    def get_task_events(task_id: str) -> Response:
        return run(api.ReadTaskEvents(principal(), task_id, request.args.get("after_version", "-1")))


def _request_id() -> str:
    """This request's correlation id: the client's X-Request-Id, or a fresh one when it sent none or one that is not
    1-160 visible ASCII characters; answered in the same header and written on every audit row the request writes."""
    sent = request.headers.get(REQUEST_ID_HEADER, "")
    g.sortie_request_id = sent if _REQUEST_ID.fullmatch(sent) else uuid.uuid4().hex
    return str(g.sortie_request_id)


def _answer_request_ids(app: Flask) -> None:
    @app.after_request
    def _request_id_header(resp: Response) -> Response:
        if (request_id := g.get("sortie_request_id")) is not None:
            resp.headers[REQUEST_ID_HEADER] = request_id
        return resp


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
    server_timing: bool = False,
    before_stream: Callable[[], None] | None = None,
) -> Flask:
    """The API over ``runtime``. The hub becomes ``runtime.notifier`` so every commit feeds the streams.
    ``server_timing``: every answer carries ``Server-Timing: app;dur=<ms>, cpu;dur=<ms>``, the handler's wall time
    and its thread's CPU time (a load run's per-request API CPU; off by default: timings are an oracle).
    ``before_stream`` runs before each stream subscribes (wsgi: notify.RelayOnDemand feeds the hub from Redis)."""
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
    ports = api.Ports(cache=cache)
    verify = TokenVerifier(token_secret)

    if server_timing:

        @app.before_request
        def _timing_start() -> None:
            g.sortie_timing = (time.perf_counter(), time.thread_time())

        @app.after_request
        def _timing_header(resp: Response) -> Response:
            started = g.get("sortie_timing")
            if started is not None:  # (gthread runs a request on one thread: its CPU time is the request's)
                wall, cpu = time.perf_counter() - started[0], time.thread_time() - started[1]
                resp.headers["Server-Timing"] = server_timing_header(wall, cpu)
            return resp

    _answer_request_ids(app)

    def principal() -> Principal:
        """The verified caller, in this request (its correlation id: _request_id)."""
        return replace(verify(bearer_token(request.headers.get("Authorization"))), request_id=_request_id())

    def body() -> Any:
        return read_json(max_body_bytes)

    def run(cmd: api.Command) -> Response:
        return response_of(runtime.run(api.handle(cmd, ports)))

    # -------------------------------------------------------------------------------------------- errors
    # What fails before a use case runs: authentication, the body's parsing, routing.

    @app.errorhandler(DomainError)
    def domain_error(exc: DomainError) -> Response:
        return response_of(problem_of(exc))

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        code = sse.http_code(status, exc.name or "error")
        headers = {}
        allowed = getattr(exc, "valid_methods", None)
        if status == 405 and allowed:
            headers["Allow"] = ", ".join(sorted(allowed))
        return problem(status, code, exc.description or exc.name or "", headers=headers)

    @app.errorhandler(Exception)
    def internal_error(exc: Exception) -> Response:
        return response_of(problem_of(exc))

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
        return response_of(api.Reply(200, {"status": "ok", "database": "ok"}))

    spec = document_json()  # parsed once per process, here so a broken document fails the start, not a request

    @app.get("/openapi.json")
    def openapi() -> Response:
        """This API's OpenAPI document (reference/copilot/http/openapi.yaml), no authentication."""
        return Response(spec, status=200, mimetype="application/json")

    # -------------------------------------------------------------------------------------------- drafts

    @app.post("/v1/drafts")
    def post_draft() -> Response:
        me, key = principal(), request.headers.get("Idempotency-Key")
        if not (key or "").strip():  # before the body is read, as the key is checked first
            return run(api.CreateDraft(me, None, key))
        return run(api.CreateDraft(me, body(), key))

    @app.get("/v1/drafts/<draft_id>")
    def get_draft_view(draft_id: str) -> Response:
        return run(api.ReadDraft(principal(), draft_id))

    @app.patch("/v1/drafts/<draft_id>")
    def patch_draft(draft_id: str) -> Response:
        return run(api.ReviseDraft(principal(), draft_id, body()))

    @app.post("/v1/drafts/<draft_id>/approvals")
    def post_approval(draft_id: str) -> Response:
        me = principal()
        if me.role != "approver":  # before the body is read: a non-approver learns nothing of its checks
            return run(api.Approve(me, draft_id, None))
        return run(api.Approve(me, draft_id, body()))

    @app.post("/v1/drafts/<draft_id>/confirm")
    def post_confirm(draft_id: str) -> Response:
        me = principal()
        key = request.headers.get("Idempotency-Key")
        if not (key or "").strip():  # before the body is read, as the key is checked first
            return run(api.Confirm(me, draft_id, key, None))
        return run(api.Confirm(me, draft_id, key, body()))

    # -------------------------------------------------------------------------------------------- tasks

    _task_reads(app, run, principal)

    @app.post("/v1/tasks/<task_id>/cancel")
    def post_cancel(task_id: str) -> Response:
        return run(api.Cancel(principal(), task_id))

    @app.post("/v1/tasks/<task_id>/review")
    def post_review(task_id: str) -> Response:
        me = principal()
        if me.role != "supervisor":  # before the body is read: a non-supervisor learns nothing of its checks
            return run(api.ResolveReview(me, task_id, None))
        return run(api.ResolveReview(me, task_id, body()))

    # -------------------------------------------------------------------------------------------- operators

    @app.get("/v1/ops/dead")
    def get_dead() -> Response:
        return run(api.ListDead(principal()))

    @app.post("/v1/ops/dead/<kind>/<item_id>/redrive")
    def post_redrive(kind: str, item_id: str) -> Response:
        me = principal()
        if me.role != "supervisor":  # before the body is read, as for reviews
            return run(api.Redrive(me, kind, item_id, None))
        return run(api.Redrive(me, kind, item_id, body()))

    @app.get("/v1/stream")
    def stream() -> Response:
        me, expires_at = verify.with_expiry(bearer_token(request.headers.get("Authorization")))
        if before_stream is not None:
            before_stream()
        sub = hub.subscribe(me.user_id)  # now, not on the first read: no change is missed in between
        resp = Response(_stream_events(sub, heartbeat_s, expires_at, request.environ.get("gunicorn.socket")),
                        mimetype=sse.MEDIA_TYPE)
        resp.headers.update(sse.HEADERS)
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
        reply = runtime.run(api.handle(api.IngestEvents(read_json(max_webhook_body_bytes)), ports))
        if reply.ok and reply.body["duplicates"] and runtime.recorder is not None:
            # the harness's history: duplicates arrived
            runtime.recorder.op("info", EVENTS_WITH_DUPLICATES,
                                events_value(reply.body["accepted"], reply.body["duplicates"]))
        return response_of(reply)

    return app
