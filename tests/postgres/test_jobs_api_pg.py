"""The job API on the real server, as the job system's stack runs it (gunicorn with gthread workers,
``reference.jobs.http.app:create_app()``, systems.jobs.stack.api_component) on PostgreSQL as the application role:
the bad-input catalogue (issue 55, point 6; several were 500s only PostgreSQL raises: a type over VARCHAR(64), a
BIGINT out of range, NUL), a changed mission refused and concurrent posts of one mission (point 7), tokens and roles
(point 8). Every answer is problem+json, nothing is written, and the server logs no traceback."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.orm import Session

from reference.jobs.http.auth import ENQUEUER, OPERATOR, READER, issue_token
from reference.jobs.migrations import create_app_role, install
from reference.jobs.models import Job, JobDependency, JobLog
from systems.jobs.checkers import INVARIANTS, JobsState
from systems.jobs.sim import read_rows
from systems.jobs.stack import api_component
from tests.jobs.jobs_api_cases import CASES, Case

ROLE, PASSWORD, DB = "jobs_api_app", "jobs-api-pw", "jobs_api"
SECRET = secrets.token_hex(32)


class Server:
    def __init__(self, url: str, owner: Engine, log: Path) -> None:
        self.url, self.owner, self.log = url, owner, log
        self.http = requests.Session()

    def call(self, method: str, path: str, body: Any = None, role: str = ENQUEUER, user: str = "alice",
             raw: bytes | None = None) -> requests.Response:
        headers = {"Authorization": f"Bearer {issue_token(SECRET, user, role)}", "Content-Type": "application/json"}
        return self.http.request(method, f"{self.url}{path}", json=body if raw is None else None, data=raw,
                                 headers=headers, timeout=30)

    def rows(self) -> tuple[int, ...]:
        with self.owner.connect() as conn:
            return tuple(conn.execute(select(func.count()).select_from(t)).scalar_one()
                         for t in (Job.__table__, JobLog.__table__, JobDependency.__table__))

    def verdicts(self) -> dict[str, str]:
        with Session(self.owner) as session:
            jobs, log, edges = read_rows(session)
        state = JobsState(jobs, log, [], {}, [], edges, datetime.now(UTC), 3)
        return {v.invariant: v.status for v in INVARIANTS.check(state, ("J5", "J9", "J10"))}


@pytest.fixture(scope="module")
def server(pg: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    pg.create_database(DB, exist_ok=True)
    owner = create_engine(pg.url(database=DB))
    with owner.begin() as conn:
        install(conn)
        create_app_role(conn, ROLE, PASSWORD)
    log = tmp_path_factory.mktemp("jobs-api") / "jobs-api.log"
    comp, url = api_component(pg.url(ROLE, PASSWORD, DB), "fixed", SECRET, log)
    comp.start()
    try:
        yield Server(url, owner, log)
    finally:
        comp.stop()
        owner.dispose()


@pytest.fixture
def api(server: Server) -> Server:
    with server.owner.begin() as conn:
        conn.execute(text("TRUNCATE job, job_log, job_dependency RESTART IDENTITY CASCADE"))
    return server


def _problem(resp: requests.Response, status: int, code: str) -> None:
    assert resp.status_code == status, (resp.status_code, resp.text[:300])
    assert resp.headers["Content-Type"].startswith("application/problem+json"), resp.headers["Content-Type"]
    assert resp.json()["code"] == code, resp.json()


def test_each_bad_input_is_a_structured_refusal_on_gunicorn_and_postgresql(api: Server) -> None:
    assert api.call("POST", "/v1/jobs", {"type": "survey", "key": "k-existing"}).status_code == 200
    before = api.rows()
    for case in CASES:
        role = OPERATOR if case.path.endswith("/cancel") else ENQUEUER
        resp = api.call(case.method, case.path, role=role, raw=case.body if case.body is not None else b"")
        _problem(resp, case.status, case.code)
    assert api.rows() == before
    logged = api.log.read_text(errors="replace")
    assert "Traceback" not in logged and "unhandled error" not in logged, logged[-3000:]


ONCE_500 = ("type over 64 characters", "NUL in the key", "GET /v1/jobs/2**63", "mission id over 64 characters")


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ONCE_500], ids=lambda c: c.name)
def test_the_refusals_postgresql_once_turned_into_500s(api: Server, case: Case) -> None:
    resp = api.call(case.method, case.path, raw=case.body or b"")
    assert resp.status_code < 500, resp.text[:300]
    _problem(resp, case.status, case.code)


def test_a_changed_mission_is_refused_and_concurrent_posts_of_one_mission_agree(api: Server) -> None:
    first = {"id": "m7", "steps": [{"name": "a", "type": "survey"}, {"name": "b", "type": "inspect"}],
             "edges": [["b", "a", "hard"]]}
    grown = {**first, "steps": [*first["steps"], {"name": "c", "type": "report"}],
             "edges": [*first["edges"], ["c", "a", "hard"]]}
    ids = api.call("POST", "/v1/missions", first).json()["jobs"]
    before = api.rows()
    _problem(api.call("POST", "/v1/missions", grown), 409, "MISSION_CONFLICT")
    assert api.rows() == before
    # Eight identical posts of a new mission at once: one creates it, every one answers its jobs.
    same = {**grown, "id": "m8"}
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: api.call("POST", "/v1/missions", same), range(8)))
    assert {r.status_code for r in answers} == {200} and len({str(r.json()["jobs"]) for r in answers}) == 1
    # The original and a changed one at once: whichever commits first stands, the other is refused; no half.
    with ThreadPoolExecutor(8) as pool:
        raced = list(pool.map(lambda i: api.call("POST", "/v1/missions", {**(first if i % 2 else grown), "id": "m9"}),
                              range(8)))
    assert {r.status_code for r in raced} <= {200, 409}, [r.text[:200] for r in raced]
    assert api.verdicts() == {"J5": "held", "J9": "held", "J10": "held"}
    assert ids == api.call("POST", "/v1/missions", first).json()["jobs"]


def test_tokens_roles_and_owners_on_the_real_server(api: Server) -> None:
    job = api.call("POST", "/v1/jobs", {"type": "survey", "key": "k1"}).json()["job_id"]
    none = api.http.post(f"{api.url}/v1/jobs", json={"type": "survey", "key": "k2"}, timeout=30)
    _problem(none, 401, "UNAUTHENTICATED")
    _problem(api.call("POST", "/v1/jobs", {"type": "survey", "key": "k2"}, role=READER), 403, "FORBIDDEN")
    _problem(api.call("POST", "/v1/jobs", {"type": "survey", "key": "k1"}, user="bob"), 409, "KEY_TAKEN")
    _problem(api.call("GET", f"/v1/jobs/{job}", user="bob"), 404, "JOB_NOT_FOUND")
    assert api.call("GET", f"/v1/jobs/{job}", role=READER, user="bob").json()["status"] == "pending"
    cancelled = api.call("POST", f"/v1/jobs/{job}/cancel", role=OPERATOR, user="olga")
    assert cancelled.status_code == 200 and cancelled.json()["cancelled"] == [job]
    _problem(api.call("POST", f"/v1/jobs/{job}/redrive", role=OPERATOR), 409, "NOT_DEAD")
    assert api.verdicts()["J5"] == "held"


def test_parallel_cancels_and_redrives_of_one_job_each_change_it_once(api: Server) -> None:
    """The Copilot's re-drive let 2-15 of 20 parallel calls through (issue 55, point 2); here each change is one
    conditional UPDATE: of ten at once, one answers 200 and writes its log row, the others 409."""
    pending = api.call("POST", "/v1/jobs", {"type": "survey", "key": "k-cancel"}).json()["job_id"]
    dead = api.call("POST", "/v1/jobs", {"type": "survey", "key": "k-dead"}).json()["job_id"]
    now = datetime.now(UTC)
    with api.owner.begin() as conn:  # as the pool leaves a job dead after its last failure
        conn.execute(Job.__table__.update().where(Job.id == dead).values(status="dead", retry=4))
        conn.execute(JobLog.__table__.insert(), [
            {"job_id": dead, "from_status": f, "to_status": t, "actor": "w", "message": "", "detail": {},
             "created_at": now} for f, t in (("pending", "running"), ("running", "dead"))])
    for path, code in ((f"/v1/jobs/{pending}/cancel", "NOT_PENDING"), (f"/v1/jobs/{dead}/redrive", "NOT_DEAD")):
        with ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(lambda i, p=path: api.call("POST", p, role=OPERATOR, user=f"op-{i}"), range(10)))
        assert sorted(r.status_code for r in answers) == [200] + [409] * 9, [r.text[:100] for r in answers]
        assert {r.json()["code"] for r in answers if r.status_code == 409} == {code}
    with api.owner.connect() as conn:
        changes = conn.execute(select(JobLog.job_id, JobLog.to_status).where(JobLog.actor.like("operator:%"))).all()
    assert sorted(changes) == sorted([(pending, "cancelled"), (dead, "pending")])
    assert api.verdicts()["J5"] == "held"
