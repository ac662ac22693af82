"""The job API (reference.jobs.http.app) in-process on SQLite: the bad-input catalogue (each a structured 4xx, nothing
written), its OpenAPI document (every route described, bodies validated from it), authentication and roles, owner
checks, a changed mission refused (issue 55, point 7), cancel and re-drive; and the test service's refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine, create_engine, event, func, select, update
from sqlalchemy.orm import Session

from kernel import tokens
from reference.jobs.http import app as app_module
from reference.jobs.http import openapi as jobs_openapi
from reference.jobs.http.app import create_app
from reference.jobs.http.auth import ENQUEUER, OPERATOR, READER, ROLES, issue_token
from reference.jobs.http.openapi import DOCS_PATH, document, document_json
from reference.jobs.migrations import install
from reference.jobs.models import DEAD, Job, JobDependency, JobLog
from systems.jobs.checkers import INVARIANTS, JobsState
from systems.jobs.service_http import create_app as create_service
from systems.jobs.sim import read_rows
from tests.jobs.jobs_api_cases import CASES, Case

SECRET = "jobs-api-test-secret-0123456789abcdef"
ROOT = Path(__file__).resolve().parents[2]


class Api:
    def __init__(self, client: FlaskClient, engine: Engine) -> None:
        self.client, self.engine = client, engine

    def auth(self, role: str = ENQUEUER, user: str = "alice") -> dict[str, str]:
        return {"Authorization": f"Bearer {issue_token(SECRET, user, role)}"}

    def post(self, path: str, body: Any = None, role: str = ENQUEUER, user: str = "alice") -> Any:
        return self.client.post(path, json=body, headers=self.auth(role, user))

    def rows(self) -> tuple[int, int, int]:
        with self.engine.connect() as conn:
            return tuple(conn.execute(select(func.count()).select_from(t)).scalar_one()  # type: ignore[return-value]
                         for t in (Job.__table__, JobLog.__table__, JobDependency.__table__))

    def state(self) -> JobsState:
        with Session(self.engine) as session:
            jobs, log, edges = read_rows(session)
        from datetime import UTC, datetime
        return JobsState(jobs, log, [], {}, [], edges, datetime.now(UTC), 3)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        install(conn)
    yield Api(create_app(url, "fixed", SECRET).test_client(), engine)
    engine.dispose()


def _problem(resp: Any, status: int, code: str) -> None:
    assert resp.status_code == status, (resp.status_code, resp.get_data(as_text=True)[:300])
    assert resp.mimetype == "application/problem+json", resp.mimetype
    assert resp.json["code"] == code and resp.json["status"] == status, resp.json


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_bad_input_is_a_structured_refusal_that_writes_nothing(api: Api, case: Case) -> None:
    api.post("/v1/jobs", {"type": "survey", "key": "k-existing"})
    before = api.rows()
    role = OPERATOR if case.path.endswith("/cancel") else ENQUEUER
    resp = api.client.open(case.path, method=case.method, data=case.body, content_type="application/json",
                           headers=api.auth(role))
    _problem(resp, case.status, case.code)
    assert api.rows() == before
    if case.status == 405:
        assert resp.headers["Allow"]


def test_every_route_is_in_the_document_and_every_documented_operation_is_routed(api: Api) -> None:
    doc = document()
    app = api.client.application
    routed = {(str(r.rule).replace("<", "{").replace(">", "}"), m.lower()) for r in app.url_map.iter_rules()
              for m in r.methods or () if m not in ("HEAD", "OPTIONS") and r.endpoint != "static"}
    described = {(path, m) for path, item in doc["paths"].items() for m in item if m != "parameters"}
    assert routed == described
    served = api.client.get("/openapi.json")
    assert served.status_code == 200 and served.json == doc
    assert (ROOT / DOCS_PATH).read_text(encoding="utf-8") == document_json(), \
        "docs/openapi/jobs-api.json is stale: python -m reference.jobs.http.openapi docs/openapi/jobs-api.json"


def test_a_body_the_document_allows_is_accepted_and_one_it_refuses_names_what_is_wrong(api: Api) -> None:
    edge = api.post("/v1/jobs", {"type": "t" * 64, "key": "k" * 200, "payload": {"deep": [[[1]]]}, "timeout_s": 1})
    assert edge.status_code == 200, edge.json
    whole_float = api.post("/v1/jobs", {"type": "survey", "key": "k-float", "timeout_s": 30.0})
    assert whole_float.status_code == 200, whole_float.json  # JSON Schema: 30.0 is an integer
    bad = api.post("/v1/jobs", {"type": "", "key": "k", "timeout_s": 86_401})
    _problem(bad, 400, "INVALID_REQUEST")
    assert any(e.startswith("/type") for e in bad.json["errors"]) and any(e.startswith("/timeout_s")
                                                                           for e in bad.json["errors"])
    big = api.post("/v1/jobs", {"type": "survey", "key": "k-big", "payload": "x" * 20_000})
    _problem(big, 413, "PAYLOAD_TOO_LARGE")  # the document says why (x-schema-valid-refusals): JSON Schema cannot


def test_without_a_good_token_nothing_is_done_and_a_role_does_only_its_own(api: Api) -> None:
    job = api.post("/v1/jobs", {"type": "survey", "key": "k1"}).json["job_id"]
    before = api.rows()
    for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer not-a-jwt"},
                    {"Authorization": f"Bearer {issue_token('another-secret-0123456789abcdef-x', 'alice')}"},
                    {"Authorization": f"Bearer {issue_token(SECRET, 'alice', ttl_s=-60)}"}):
        for method, path in (("POST", "/v1/jobs"), ("GET", f"/v1/jobs/{job}"), ("POST", f"/v1/jobs/{job}/cancel")):
            resp = api.client.open(path, method=method, json={"type": "survey", "key": "k2"}, headers=headers)
            assert resp.status_code == 401 and resp.headers["WWW-Authenticate"] == "Bearer", (headers, resp.json)
            assert resp.json["code"] in ("UNAUTHENTICATED", "INVALID_TOKEN")
    for role, method, path in ((READER, "POST", "/v1/jobs"), (OPERATOR, "POST", "/v1/missions"),
                               (ENQUEUER, "POST", f"/v1/jobs/{job}/cancel"),
                               (READER, "POST", f"/v1/jobs/{job}/redrive")):
        _problem(api.client.open(path, method=method, data=b"{not json", content_type="application/json",
                                 headers=api.auth(role)), 403, "FORBIDDEN")  # refused before the body is read
    assert api.rows() == before


def test_an_enqueuer_sees_only_its_own_jobs_and_cannot_take_anothers_key(api: Api) -> None:
    mine = api.post("/v1/jobs", {"type": "survey", "key": "k1"}, user="alice").json["job_id"]
    assert api.post("/v1/jobs", {"type": "survey", "key": "k1"}, user="alice").json["job_id"] == mine  # idempotent
    before = api.rows()
    _problem(api.post("/v1/jobs", {"type": "survey", "key": "k1"}, user="bob"), 409, "KEY_TAKEN")
    _problem(api.client.get(f"/v1/jobs/{mine}", headers=api.auth(ENQUEUER, "bob")), 404, "JOB_NOT_FOUND")
    mission = {"id": "m1", "steps": [{"name": "a", "type": "survey"}]}
    api.post("/v1/missions", mission, user="alice")
    after = api.rows()
    _problem(api.post("/v1/missions", mission, user="bob"), 409, "KEY_TAKEN")
    assert api.rows() == after and after[0] == before[0] + 1
    for role, user in ((ENQUEUER, "alice"), (READER, "bob"), (OPERATOR, "carol")):
        got = api.client.get(f"/v1/jobs/{mine}", headers=api.auth(role, user))
        assert got.status_code == 200 and got.json == {"id": mine, "status": "pending", "retry": 0}


def test_a_mission_posted_again_with_a_new_step_on_an_existing_one_is_refused_and_writes_nothing(api: Api) -> None:
    """Issue 55, point 7: the re-post answered 200 and stored step c with unmet=1 and no edge, never claimable."""
    first = {"id": "m7", "steps": [{"name": "a", "type": "survey"}, {"name": "b", "type": "inspect"}],
             "edges": [["b", "a", "hard"]]}
    ids = api.post("/v1/missions", first).json["jobs"]
    assert api.post("/v1/missions", first).json["jobs"] == ids  # the same mission again: its jobs
    before = api.rows()
    grown = {**first, "steps": [*first["steps"], {"name": "c", "type": "report"}],
             "edges": [*first["edges"], ["c", "a", "hard"]]}
    _problem(api.post("/v1/missions", grown), 409, "MISSION_CONFLICT")
    rewired = {**first, "edges": [["b", "a", "soft"]]}
    _problem(api.post("/v1/missions", rewired), 409, "MISSION_CONFLICT")
    _problem(api.post("/v1/missions", {**first, "edges": []}), 409, "MISSION_CONFLICT")
    assert api.rows() == before
    assert {v.invariant: v.status for v in INVARIANTS.check(api.state())}["J9"] == "held"


def test_a_mission_first_posted_without_edges_cannot_gain_them(api: Api) -> None:
    plain = {"id": "m8", "steps": [{"name": "a", "type": "survey"}, {"name": "b", "type": "inspect"}]}
    api.post("/v1/missions", plain)
    before = api.rows()
    _problem(api.post("/v1/missions", {**plain, "edges": [["b", "a", "hard"]]}), 409, "MISSION_CONFLICT")
    assert api.rows() == before


def test_an_operator_cancels_a_pending_job_with_its_hard_children_and_redrives_a_dead_one(api: Api) -> None:
    ids = api.post("/v1/missions", {"id": "m9", "steps": [{"name": "a", "type": "survey"},
                                                          {"name": "b", "type": "inspect"}],
                                    "edges": [["b", "a", "hard"]]}).json["jobs"]
    done = api.post(f"/v1/jobs/{ids['a']}/cancel", role=OPERATOR, user="olga")
    assert done.status_code == 200 and done.json == {"id": ids["a"], "status": "cancelled",
                                                      "cancelled": [ids["a"], ids["b"]]}
    _problem(api.post(f"/v1/jobs/{ids['a']}/cancel", role=OPERATOR), 409, "NOT_PENDING")
    _problem(api.post(f"/v1/jobs/{ids['a']}/redrive", role=OPERATOR), 409, "NOT_DEAD")
    _problem(api.post("/v1/jobs/999/redrive", role=OPERATOR), 404, "JOB_NOT_FOUND")
    dead = api.post("/v1/jobs", {"type": "survey", "key": "k-dead"}).json["job_id"]
    with api.engine.begin() as conn:  # as the pool leaves a job that failed MaxRetry + 1 times (its log row too)
        conn.execute(update(Job.__table__).where(Job.id == dead).values(status=DEAD, retry=4))
        conn.execute(JobLog.__table__.insert(), [
            {"job_id": dead, "from_status": "pending", "to_status": "running", "actor": "w", "message": "",
             "detail": {}, "created_at": _now()},
            {"job_id": dead, "from_status": "running", "to_status": "dead", "actor": "w", "message": "failed",
             "detail": {}, "created_at": _now()}])
    again = api.post(f"/v1/jobs/{dead}/redrive", role=OPERATOR, user="olga")
    assert again.status_code == 200 and again.json == {"id": dead, "status": "pending", "retry": 0}
    assert api.client.get(f"/v1/jobs/{dead}", headers=api.auth(READER)).json["status"] == "pending"
    state = api.state()
    last = state.logs_by_job[dead][-1]
    assert (last["from_status"], last["to_status"], last["actor"]) == ("dead", "pending", "operator:olga")
    verdicts = {v.invariant: v.status for v in INVARIANTS.check(state)}
    assert verdicts["J5"] == verdicts["J4"] == verdicts["J9"] == verdicts["J10"] == "held", verdicts


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


# ---------------------------------------------------------------------------------------------------- the service


@pytest.mark.parametrize(("path", "body"), [
    ("/reset", b'{"work_s": "fast"}'),
    ("/reset", b'{"fail_rate": 2}'),
    ("/reset", b'{"work_s": -1}'),
    ("/reset", b'{"failing_keys": "k1"}'),
    ("/reset", b'{"fail_first": {"k": "x"}}'),
    ("/reset", b'{"work_s": NaN}'),
    ("/reset", b'{"surprise": 1}'),
    ("/reset", b"[]"),
    ("/reset", b"{"),
    ("/work", b'{"key": ""}'),
    ("/work", b'{"key": "k", "wait_s": "soon"}'),
    ("/work", b'{"key": "k", "wait_s": -5}'),
    ("/work", b'{"key": "k", "wait_s": 1e999}'),
    ("/work", b'{"key": 7}'),
    ("/work", b"null"),
])
def test_the_services_bad_values_are_a_structured_400_that_changes_nothing(path: str, body: bytes) -> None:
    client = create_service().test_client()
    assert client.post("/reset", json={"work_s": 0.0}).status_code == 200
    resp = client.post(path, data=body, content_type="application/json")
    assert resp.status_code == 400 and resp.mimetype == "application/problem+json", resp.get_data(as_text=True)[:200]
    assert resp.json["status"] == 400 and resp.json["code"] in ("INVALID_REQUEST", "MALFORMED_JSON")
    assert client.get("/ledger").json == {"calls": [], "effects": {}}
    ok = client.post("/work", json={"key": "k", "wait_s": 1})
    assert ok.status_code == 200 and ok.json == {"finished": True}  # work_s 0 still holds: the reset changed nothing
    for method, where, status in (("GET", "/nowhere", 404), ("GET", "/reset", 405)):
        other = client.open(where, method=method)
        assert other.status_code == status and other.mimetype == "application/problem+json"


def test_the_service_answers_json_it_was_given_as_before() -> None:
    client = create_service().test_client()
    assert client.post("/reset", json={"work_s": 0.0, "seed": "run-1", "fail_first": {"k": 1}}).status_code == 200
    failed = client.post("/work", json={"job_id": 1, "key": "k", "owner": "w", "token": 1, "payload": None})
    assert failed.status_code == 422
    assert json.loads(client.post("/work", json={"key": "k"}).data) == {"finished": True}


def test_a_mission_refused_after_its_first_inserts_writes_nothing(api: Api) -> None:
    """A mission whose second step's key a plain job already holds is refused (409 MISSION_CONFLICT) after its first
    step was inserted: the whole transaction rolls back, on SQLite too (pysqlite opens no transaction before the
    enqueue's SAVEPOINT, so without kernel.sqlite.real_transactions that first insert committed at its RELEASE)."""
    assert api.post("/v1/jobs", {"type": "report", "key": "m:b"}).status_code == 200
    before = api.rows()
    mission = {"id": "m", "steps": [{"name": "a", "type": "survey"}, {"name": "b", "type": "report"}],
               "edges": [["b", "a", "hard"]]}
    _problem(api.post("/v1/missions", mission), 409, "MISSION_CONFLICT")
    assert api.rows() == before


# ------------------------------------------------------------------ the document's numbers, at their edges (issue 54)
# Mutation testing (2026-12-07) changed each of these numbers in the app by one and every test above stayed green.
# The figures come from the document (its schemas, or the sentence of its description that states them), so the app
# is judged against its contract, not against its own constants.


def _documented(sentence: str) -> None:
    assert sentence in " ".join(document()["info"]["description"].split()), f"the document no longer says {sentence!r}"


def test_a_body_of_256_kib_is_read_and_one_byte_more_is_refused(api: Api) -> None:
    _documented("Bodies are JSON objects of at most 256 KiB (413 PAYLOAD_TOO_LARGE)")
    limit = 256 * 1024

    def padded(key: str, size: int) -> bytes:  # valid JSON of exactly ``size`` bytes (whitespace after the object)
        body = json.dumps({"type": "survey", "key": key}).encode()
        return body + b" " * (size - len(body))

    at = api.client.post("/v1/jobs", data=padded("k-at", limit), content_type="application/json",
                         headers=api.auth())
    assert at.status_code == 200, at.get_data(as_text=True)[:300]
    before = api.rows()
    _problem(api.client.post("/v1/jobs", data=padded("k-over", limit + 1), content_type="application/json",
                             headers=api.auth()), 413, "PAYLOAD_TOO_LARGE")
    assert api.rows() == before


def test_a_payload_of_16000_characters_is_taken_and_one_more_is_refused(api: Api) -> None:
    _documented("a payload is more than 16,000 characters as JSON")
    limit = 16_000
    at = api.post("/v1/jobs", {"type": "survey", "key": "k-at", "payload": "x" * (limit - 2)})  # "..." as JSON
    assert at.status_code == 200, at.json
    before = api.rows()
    _problem(api.post("/v1/jobs", {"type": "survey", "key": "k-over", "payload": "x" * (limit - 1)}), 413,
             "PAYLOAD_TOO_LARGE")
    step = {"name": "a", "type": "survey", "payload": "x" * (limit - 1)}
    _problem(api.post("/v1/missions", {"id": "m-over", "steps": [step]}), 413, "PAYLOAD_TOO_LARGE")
    assert api.rows() == before


def test_the_largest_documented_job_id_names_its_job(api: Api) -> None:
    """Every id the document's JobId allows reaches the database; only a larger one is refused before it."""
    largest = document()["components"]["schemas"]["JobId"]["maximum"]
    job = api.post("/v1/jobs", {"type": "survey", "key": "k-largest"}).json["job_id"]
    with api.engine.begin() as conn:  # the job renumbered to the largest id (its log row follows it)
        conn.execute(update(Job.__table__).where(Job.id == job).values(id=largest))
        conn.execute(update(JobLog.__table__).where(JobLog.job_id == job).values(job_id=largest))
    got = api.client.get(f"/v1/jobs/{largest}", headers=api.auth())
    assert got.status_code == 200 and got.json == {"id": largest, "status": "pending", "retry": 0}, got.json
    _problem(api.client.get(f"/v1/jobs/{largest + 1}", headers=api.auth()), 404, "JOB_NOT_FOUND")


def test_a_job_or_a_step_that_names_no_timeout_takes_the_documented_default(api: Api) -> None:
    default = document()["components"]["schemas"]["TimeoutS"]["default"]
    job = api.post("/v1/jobs", {"type": "survey", "key": "k-default"}).json["job_id"]
    steps = api.post("/v1/missions", {"id": "m-default", "steps": [{"name": "a", "type": "survey"}]}).json["jobs"]
    with api.engine.connect() as conn:
        stored = dict(conn.execute(select(Job.id, Job.timeout_s).where(Job.id.in_([job, steps["a"]]))).all())
    assert stored == {job: default, steps["a"]: default}


def test_an_operators_name_is_cut_to_the_log_actor_column(api: Api) -> None:
    """The actor of an operator's change uses the whole job_log.actor column and no more (PostgreSQL refuses a longer
    value; SQLite would keep it)."""
    width = JobLog.__table__.c.actor.type.length
    name = "o" * 128  # the longest user id a token may carry
    job = api.post("/v1/jobs", {"type": "survey", "key": "k-long-operator"}).json["job_id"]
    assert api.post(f"/v1/jobs/{job}/cancel", role=OPERATOR, user=name).status_code == 200
    last = api.state().logs_by_job[job][-1]
    assert last["to_status"] == "cancelled" and last["actor"] == f"operator:{name}"[:width]
    assert len(last["actor"]) == width


def test_a_database_that_cannot_be_reached_is_a_503_to_retry_and_the_retry_succeeds(tmp_path: Path) -> None:
    """The document's 503 DATABASE_UNAVAILABLE: the link is down, nothing is written, and the same request succeeds
    once the database is back (the engine's broken connections are dropped)."""
    where = tmp_path / "not-yet"
    url = f"sqlite:///{where / 'jobs.db'}"
    client = create_app(url, "fixed", SECRET).test_client()
    headers = {"Authorization": f"Bearer {issue_token(SECRET, 'alice', ENQUEUER)}"}
    down = client.post("/v1/jobs", json={"type": "survey", "key": "k-retry"}, headers=headers)
    _problem(down, 503, "DATABASE_UNAVAILABLE")
    _problem(client.get("/v1/jobs/1", headers=headers), 503, "DATABASE_UNAVAILABLE")
    where.mkdir()
    engine = create_engine(url)
    with engine.begin() as conn:
        install(conn)
    again = client.post("/v1/jobs", json={"type": "survey", "key": "k-retry"}, headers=headers)
    assert again.status_code == 200, again.json
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Job.__table__)).scalar_one() == 1
    engine.dispose()


def test_a_token_issued_without_a_lifetime_lasts_as_long_as_the_kernels() -> None:
    """One default lifetime for every system's tokens (kernel.tokens); the job API's roles change nothing of it."""
    def claims(token: str) -> dict[str, Any]:
        return jwt.decode(token, SECRET, algorithms=[tokens.ALGORITHM],
                          options={"verify_exp": False, "verify_iat": False})

    now = 1_800_000_000.0
    ours = claims(issue_token(SECRET, "alice", READER, now=now))
    kernels = claims(tokens.issue_token(SECRET, "alice", READER, ROLES, now=now))
    assert (ours["exp"], ours["iat"]) == (kernels["exp"], kernels["iat"])


def test_a_pooled_connection_closed_under_the_api_is_replaced_before_a_request_uses_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As after a PostgreSQL restart: the pool holds a connection the server closed; it is tested and replaced when a
    request takes it (the engine's pre-ping), so the request is answered, not failed."""
    engines: list[Engine] = []

    def recorded(*args: Any, **kwargs: Any) -> Engine:  # the API's own engine, kept to reach its pool
        engines.append(create_engine(*args, **kwargs))
        return engines[-1]

    monkeypatch.setattr(app_module, "create_engine", recorded)
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    with create_engine(url).begin() as conn:
        install(conn)
    client = create_app(url, "fixed", SECRET).test_client()
    headers = {"Authorization": f"Bearer {issue_token(SECRET, 'alice', ENQUEUER)}"}
    # The connection this request returns to the pool is closed once it is back there (as a server restart does).
    event.listen(engines[0], "checkin", lambda dbapi_connection, record: dbapi_connection.close(), once=True)
    job = client.post("/v1/jobs", json={"type": "survey", "key": "k-pooled"}, headers=headers).json["job_id"]
    got = client.get(f"/v1/jobs/{job}", headers=headers)
    assert got.status_code == 200, got.json
    engines[0].dispose()


def test_the_published_document_is_regenerated_where_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m reference.jobs.http.openapi PATH`` (kernel.openapi.Document.main; its survivors of the mutation table
    at b678302 moved there with it): the served document, written to PATH, its folders made, again over itself; any
    other arguments are a usage error."""
    out = tmp_path / "docs" / "openapi" / "jobs-api.json"
    for _ in range(2):
        assert jobs_openapi.DOC.main([str(out)]) == 0 and out.read_text(encoding="utf-8") == document_json()
    for wrong in ([], [str(out), "again"]):
        assert jobs_openapi.DOC.main(wrong) == 2
        assert jobs_openapi.DOC.regenerate in capsys.readouterr().err
