"""The job system's HTTP API: what `sortie load --system jobs` drives with Locust and `sortie fuzz` attacks. Served by
gunicorn (``reference.jobs.http.app:create_app()``) on the application role's link to PostgreSQL, with the variant's
repository (``SORTIE_JOBS_VARIANT``: fixed or seed) and the secret its bearer tokens are signed with
(``SORTIE_JOBS_TOKEN_SECRET``). Its OpenAPI document (openapi.yaml, served at ``/openapi.json``) is the contract:
every request body is validated against it (kernel.openapi), so the document says what is refused.

    POST /v1/jobs             {"type", "key", "payload"?, "timeout_s"?}          enqueuer -> {"job_id"}
    POST /v1/missions         {"id", "steps": [{"name", "type", "payload"?, "timeout_s"?}],
                               "edges"?: [[child, parent, kind]]}                  enqueuer -> {"jobs": {name: id}}
    GET  /v1/jobs/ID          enqueuer (its own), reader, operator                -> {"id", "status", "retry"}
    POST /v1/jobs/ID/cancel   operator: a pending job and its hard descendants    -> {"id", "status", "cancelled"}
    POST /v1/jobs/ID/redrive  operator: a dead job back to pending                -> {"id", "status", "retry"}
    GET  /health, GET /openapi.json (no authentication)

Every error is problem+json with a stable ``code`` and nothing written: 400 MALFORMED_JSON / INVALID_REQUEST, 401
UNAUTHENTICATED / INVALID_TOKEN, 403 FORBIDDEN, 404 JOB_NOT_FOUND / NOT_FOUND, 405 METHOD_NOT_ALLOWED, 409 KEY_TAKEN
/ MISSION_CONFLICT / NOT_PENDING / NOT_DEAD, 413 PAYLOAD_TOO_LARGE (the body, or a payload over 16,000 characters),
415 UNSUPPORTED_MEDIA_TYPE, 422 MISSION_REFUSED, 503 DATABASE_UNAVAILABLE (the link is down; retry with the same
key), 500 INTERNAL_ERROR (no exception text; the log has it with the ``error_id``)."""

from __future__ import annotations

import json
import logging
import os
import re
from datetime import UTC, datetime
from typing import Any

from flask import Flask, Response
from sqlalchemy import create_engine, select

from kernel.effects import Tx
from kernel.http_api import ApiContext
from kernel.http_problems import Problem, install_error_handlers
from kernel.sqlite import real_transactions
from kernel.tokens import Caller, TokenVerifier
from reference.jobs.dag import Mission, MissionConflict, MissionRefused, Step, cancel, create_mission
from reference.jobs.http.auth import ENQUEUER, OPERATOR, READER, ROLES
from reference.jobs.http.openapi import document_json, request_bodies
from reference.jobs.models import Job
from reference.jobs.repo import OPERATOR_ACTOR, REPOS, redrive
from reference.jobs.rows import NewJob

log = logging.getLogger("sortie.jobs.api")

MAX_BODY_BYTES = 256 * 1024
MAX_PAYLOAD_CHARS = 16_000
MAX_JOB_ID = 2**63 - 1  # BIGINT: a larger id names no job (and must not reach PostgreSQL, which refuses it)
_JOB_ID = re.compile(r"[1-9][0-9]{0,18}")  # a positive decimal integer, no sign, no leading zero


def operator_actor(me: Caller) -> str:
    """The job_log actor of an operator's change (the column holds 64 characters)."""
    return f"{OPERATOR_ACTOR}{me.user_id}"[:64]


def job_id_of(text: str) -> int:
    """The job a path names; JOB_NOT_FOUND for anything but a positive 64-bit integer."""
    if not _JOB_ID.fullmatch(text) or int(text) > MAX_JOB_ID:
        raise Problem(404, "JOB_NOT_FOUND", f"no job {text[:80]!r}")
    return int(text)


def _payload(value: Any, where: str) -> Any:
    if len(json.dumps(value)) > MAX_PAYLOAD_CHARS:
        raise Problem(413, "PAYLOAD_TOO_LARGE", f"{where}payload: at most {MAX_PAYLOAD_CHARS} characters of JSON",
                      limit=MAX_PAYLOAD_CHARS)
    return value


def parse_job(body: dict[str, Any], by: str = "") -> NewJob:
    """A body the document accepted (JobRequest) as the job to enqueue."""
    return NewJob(body["type"], body["key"], _payload(body.get("payload"), ""),
                  timeout_s=int(body.get("timeout_s", 300)), enqueued_by=by)


def parse_mission(body: dict[str, Any]) -> Mission:
    """A body the document accepted (MissionRequest) as the mission to create."""
    steps = tuple(Step(s["name"], s["type"], _payload(s.get("payload"), f"steps[{i}]."), int(s.get("timeout_s", 300)))
                  for i, s in enumerate(body["steps"]))
    return Mission(body["id"], steps, tuple((c, p, k) for c, p, k in body.get("edges", [])))


class _Api(ApiContext):
    """What every route uses (kernel.http_api), and the variant's repository and the job rules of ownership."""

    def __init__(self, url: str, variant: str, secret: str) -> None:
        self.repo = REPOS[variant]
        # In process on SQLite (its tests, `sortie fuzz --in-process`) as on PostgreSQL: a refused mission rolls back
        super().__init__(real_transactions(create_engine(url, pool_size=8, max_overflow=8, pool_pre_ping=True)),
                         TokenVerifier(secret, ROLES), request_bodies(), max_body_bytes=MAX_BODY_BYTES,
                         now=lambda: datetime.now(UTC), log=log)

    @staticmethod
    def owned_by(tx: Tx, ids: list[int], me: Caller) -> None:
        others = tx.conn.execute(select(Job.id).where(Job.id.in_(ids), Job.enqueued_by != me.user_id)).first()
        if others is not None:  # the seed answers the existing job; to another caller it is not theirs to have
            raise Problem(409, "KEY_TAKEN", "a job of another caller holds this key; choose another key")

    @staticmethod
    def visible(tx: Tx, job_id: int, me: Caller) -> Any:
        row = tx.session.execute(select(Job.id, Job.status, Job.retry, Job.enqueued_by).where(Job.id == job_id)) \
            .first()
        if row is None or (me.role == ENQUEUER and row.enqueued_by != me.user_id):  # another's job: not there
            raise Problem(404, "JOB_NOT_FOUND", f"no job {job_id}")
        return row


def create_app(database_url: str | None = None, variant: str | None = None, token_secret: str | None = None) -> Flask:
    url = database_url or os.environ["SORTIE_JOBS_DATABASE_URL"]
    name = variant or os.environ.get("SORTIE_JOBS_VARIANT", "fixed")
    secret = token_secret or os.environ.get("SORTIE_JOBS_TOKEN_SECRET", "")
    if name not in REPOS:
        raise SystemExit(f"SORTIE_JOBS_VARIANT: {name!r} is not one of {', '.join(sorted(REPOS))}")
    if not secret:
        raise SystemExit("SORTIE_JOBS_TOKEN_SECRET is required (the secret the API's bearer tokens are signed with)")
    api = _Api(url, name, secret)
    spec = document_json()  # parsed at start: a broken document fails the start, not a request
    app = Flask("sortie-jobs-api")
    install_error_handlers(app, log)

    @app.get("/health")
    def health() -> Any:
        return {"ok": True, "variant": name}

    @app.get("/openapi.json")
    def openapi() -> Response:
        return Response(spec, status=200, mimetype="application/json")

    _producer_routes(app, api)
    _job_routes(app, api)
    return app


def _producer_routes(app: Flask, api: _Api) -> None:
    """What an enqueuer does: a job, a mission."""

    @app.post("/v1/jobs")
    def enqueue() -> Any:
        me = api.caller(ENQUEUER)
        new = parse_job(api.body("enqueueJob"), me.user_id)

        def run(tx: Tx) -> int:
            job_id = api.repo.enqueue(tx, new)
            api.owned_by(tx, [job_id], me)
            return job_id

        return {"job_id": api.in_tx(run)}

    @app.post("/v1/missions")
    def mission() -> Any:
        me = api.caller(ENQUEUER)
        m = parse_mission(api.body("createMission"))

        def run(tx: Tx) -> dict[str, int]:
            try:
                ids = create_mission(tx, m, api.repo.enqueue, by=me.user_id)
            except MissionRefused as err:
                raise Problem(422, "MISSION_REFUSED", str(err)) from None
            except MissionConflict as err:
                raise Problem(409, "MISSION_CONFLICT", str(err)) from None
            api.owned_by(tx, sorted(ids.values()), me)
            return ids

        return {"jobs": api.in_tx(run)}


def _job_routes(app: Flask, api: _Api) -> None:
    """A job read (its owner, a reader, an operator), cancelled or re-driven (an operator)."""

    @app.get("/v1/jobs/<job_id>")
    def read(job_id: str) -> Any:
        me = api.caller(ENQUEUER, READER, OPERATOR)
        row = api.in_tx(lambda tx: api.visible(tx, job_id_of(job_id), me))
        return {"id": row.id, "status": row.status, "retry": row.retry}

    @app.post("/v1/jobs/<job_id>/cancel")
    def cancel_job(job_id: str) -> Any:
        me, jid = api.caller(OPERATOR), job_id_of(job_id)

        def run(tx: Tx) -> list[int]:
            row = api.visible(tx, jid, me)
            cancelled = cancel(tx, jid, operator_actor(me), "cancelled by an operator")
            if not cancelled:
                raise Problem(409, "NOT_PENDING", f"job {jid} is {row.status}: only a pending job can be cancelled")
            return cancelled

        return {"id": jid, "status": "cancelled", "cancelled": api.in_tx(run)}

    @app.post("/v1/jobs/<job_id>/redrive")
    def redrive_job(job_id: str) -> Any:
        me, jid = api.caller(OPERATOR), job_id_of(job_id)

        def run(tx: Tx) -> None:
            row = api.visible(tx, jid, me)
            if not redrive(tx, jid, operator_actor(me)):
                raise Problem(409, "NOT_DEAD", f"job {jid} is {row.status}: only a dead job can be re-driven")

        api.in_tx(run)
        return {"id": jid, "status": "pending", "retry": 0}
