"""The job system's producer API on the real stack: what `sortie load --system jobs` drives with Locust. Served by
gunicorn (``systems.jobs.api_http:create_app()``) on the application role's link to PostgreSQL (through Toxiproxy,
as the workers' is), with the variant's repository (``SORTIE_JOBS_VARIANT``: fixed or seed).

    POST /v1/jobs      {"type", "key", "payload"?, "timeout_s"?}            -> 200 {"job_id"}
    POST /v1/missions  {"id", "steps": [{"name", "type", "payload"?, "timeout_s"?}],
                        "edges"?: [[child, parent, kind]]}                   -> 200 {"jobs": {name: job_id}}
    GET  /v1/jobs/ID                                                         -> 200 {"id", "status", "retry"}
    GET  /health

An enqueue is idempotent by its key (seed 004 Enqueue): the same key again answers the first job's id, so a client
retries a request that got no answer with the same key. Errors are problem+json with a ``code``: 400
INVALID_REQUEST (a malformed body; nothing written), 422 MISSION_REFUSED (a cycle, an unknown step, a bad edge
kind; nothing written), 404 JOB_NOT_FOUND, 503 DATABASE_UNAVAILABLE (the link is down; retry with the same key)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any

from flask import Flask, Response, jsonify, request
from sqlalchemy import create_engine, exc, select
from sqlalchemy.orm import Session

from kernel.effects import Tx
from reference.jobs.dag import Mission, MissionRefused, Step, create_mission
from reference.jobs.models import Job
from reference.jobs.repo import REPOS
from reference.jobs.rows import NewJob

MAX_STEPS = 64  # a mission's jobs; more is refused (one transaction holds them all)
MAX_PAYLOAD_CHARS = 16_000


class Problem(Exception):
    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


def _no_ids() -> Any:
    raise AssertionError("the job system draws no UUIDs")


def _text(body: dict[str, Any], name: str, where: str = "") -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise Problem(400, "INVALID_REQUEST", f"{where}{name}: a non-empty string of at most 200 characters")
    return value


def _timeout(body: dict[str, Any], where: str = "") -> int:
    value = body.get("timeout_s", 300)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 86_400:
        raise Problem(400, "INVALID_REQUEST", f"{where}timeout_s: an integer from 1 to 86400")
    return value


def _payload(body: dict[str, Any], where: str = "") -> Any:
    payload = body.get("payload")
    if len(json.dumps(payload)) > MAX_PAYLOAD_CHARS:
        raise Problem(400, "INVALID_REQUEST", f"{where}payload: at most {MAX_PAYLOAD_CHARS} characters of JSON")
    return payload


def _body() -> dict[str, Any]:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise Problem(400, "INVALID_REQUEST", "the body must be a JSON object")
    return body


def parse_job(body: dict[str, Any]) -> NewJob:
    return NewJob(_text(body, "type"), _text(body, "key"), _payload(body), timeout_s=_timeout(body))


def parse_mission(body: dict[str, Any]) -> Mission:
    steps_in, edges_in = body.get("steps"), body.get("edges", [])
    if not isinstance(steps_in, list) or not 1 <= len(steps_in) <= MAX_STEPS:
        raise Problem(400, "INVALID_REQUEST", f"steps: a list of 1 to {MAX_STEPS} steps")
    steps = []
    for i, s in enumerate(steps_in):
        if not isinstance(s, dict):
            raise Problem(400, "INVALID_REQUEST", f"steps[{i}]: an object")
        where = f"steps[{i}]."
        steps.append(Step(_text(s, "name", where), _text(s, "type", where), _payload(s, where), _timeout(s, where)))
    if not isinstance(edges_in, list) or not all(
            isinstance(e, list) and len(e) == 3 and all(isinstance(x, str) for x in e) for e in edges_in):
        raise Problem(400, "INVALID_REQUEST", "edges: a list of [child, parent, kind] string triples")
    return Mission(_text(body, "id"), tuple(steps), tuple((c, p, k) for c, p, k in edges_in))


def mission_request(mission_id: str, width: int) -> dict[str, Any]:
    """The body of a load mission: survey -> ``width`` inspects (hard) -> report (hard from each) -> notify (soft)."""
    inspects = [f"inspect-{i}" for i in range(1, width + 1)]
    steps = [{"name": "survey", "type": "survey", "timeout_s": 120},
             *({"name": n, "type": "inspect"} for n in inspects),
             {"name": "report", "type": "report"}, {"name": "notify", "type": "report"}]
    edges = [*([n, "survey", "hard"] for n in inspects), *(["report", n, "hard"] for n in inspects),
             ["notify", "report", "soft"]]
    return {"id": mission_id, "steps": steps, "edges": edges}


def create_app(database_url: str | None = None, variant: str | None = None) -> Flask:
    url = database_url or os.environ["SORTIE_JOBS_DATABASE_URL"]
    name = variant or os.environ.get("SORTIE_JOBS_VARIANT", "fixed")
    if name not in REPOS:
        raise SystemExit(f"SORTIE_JOBS_VARIANT: {name!r} is not one of {', '.join(sorted(REPOS))}")
    repo = REPOS[name]
    engine = create_engine(url, pool_size=8, max_overflow=8, pool_pre_ping=True)
    app = Flask("sortie-jobs-api")

    def in_tx(fn: Any) -> Any:
        try:
            with Session(engine) as session, session.begin():
                return fn(Tx(session, datetime.now(UTC), _no_ids))
        except exc.OperationalError as err:  # the link is down (or PostgreSQL is): the caller retries its key
            engine.dispose()
            raise Problem(503, "DATABASE_UNAVAILABLE", str(err.orig).strip()[:200]) from None

    @app.errorhandler(Problem)
    def _problem(p: Problem) -> Response:
        resp = jsonify({"type": "about:blank", "title": p.code.replace("_", " ").lower(), "status": p.status,
                        "code": p.code, "detail": p.detail})
        resp.status_code = p.status
        resp.mimetype = "application/problem+json"
        return resp

    @app.post("/v1/jobs")
    def enqueue() -> Any:
        new = parse_job(_body())
        return jsonify({"job_id": in_tx(lambda tx: repo.enqueue(tx, new))})

    @app.post("/v1/missions")
    def mission() -> Any:
        m = parse_mission(_body())

        def create(tx: Tx) -> dict[str, int]:
            try:
                return create_mission(tx, m, repo.enqueue)
            except MissionRefused as err:
                raise Problem(422, "MISSION_REFUSED", str(err)) from None

        return jsonify({"jobs": in_tx(create)})

    @app.get("/v1/jobs/<int:job_id>")
    def read(job_id: int) -> Any:
        row = in_tx(lambda tx: tx.session.execute(select(Job.id, Job.status, Job.retry).where(Job.id == job_id))
                    .first())
        if row is None:
            raise Problem(404, "JOB_NOT_FOUND", f"no job {job_id}")
        return jsonify({"id": row.id, "status": row.status, "retry": row.retry})

    @app.get("/health")
    def health() -> Any:
        return jsonify({"ok": True, "variant": name})

    return app
