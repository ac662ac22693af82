"""The status API (reference.statussync.http.app) in process on SQLite: a task's life through HTTP (creation, events,
a retry answered again, reuse and stale reports refused with the first answer kept), a forged token writing nothing,
tenancy (another user's task is not there), the Centrifugo tokens, the bad-input catalogue (each a structured 4xx,
nothing written), and the OpenAPI document (every route described, the published copy current)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import jwt
import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine, create_engine, exc, func, select

from kernel.http_api import ApiContext
from kernel.http_problems import Problem
from kernel.tokens import TokenVerifier
from reference.statussync.http.app import REFUSED_UNPROCESSABLE, TASK_ID_PATTERN, create_app
from reference.statussync.http.auth import ADMIN_ROLE, COORDINATOR_ROLE, ROLES, USER, issue_token
from reference.statussync.http.openapi import DOCS_PATH, document, document_json, request_bodies
from reference.statussync.models import StatusBase, TaskCorrection
from reference.statussync.registry import STEPS, TENANT, install
from scenarios.fuzz import documented_refusals

SECRET = "statussync-api-test-secret-0123456789"
HMAC_KEY = "centrifugo-hmac-key-for-the-api-tests-0123456789"
ROOT = Path(__file__).resolve().parents[2]
EVENTS = "/internal/v1/task-events"


class Api:
    def __init__(self, client: FlaskClient, engine: Engine) -> None:
        self.client, self.engine = client, engine

    def user(self, user: str = "u1", tenant: str = TENANT) -> dict[str, str]:
        return {"Authorization": f"Bearer {issue_token(SECRET, f'{tenant}/{user}', USER)}"}

    def create(self, task_id: str = "task-1", owner: str = "u1") -> dict[str, Any]:
        body = {"taskId": task_id, "tenantId": TENANT, "ownerId": owner, "title": "report",
                "steps": [{"stepId": s[0], "operationCode": s[1]} for s in STEPS]}
        headers = {"Authorization": f"Bearer {issue_token(SECRET, 'task-coordinator', COORDINATOR_ROLE)}"}
        resp = self.client.post("/internal/v1/tasks", json=body, headers=headers)
        assert resp.status_code == 200, resp.get_json()
        return dict(resp.get_json())

    def report(self, ctx: dict[str, Any], seq: int, event_type: str = "STEP_STARTED", business: str = "PREPARING",
               token: str | None = None, **extra: Any) -> Any:
        event = {"eventId": f"{ctx['producerId']}:{ctx['taskId']}:{ctx['stepId']}:{seq}", "taskId": ctx["taskId"],
                 "taskAttempt": 1, "stepId": ctx["stepId"], "stepAttempt": ctx["stepAttempt"],
                 "operationCode": ctx["operationCode"], "producerId": ctx["producerId"], "sourceSeq": seq,
                 "eventType": event_type, "businessStatus": business, **extra}
        return self.client.post(EVENTS, json=event,
                                headers={"Authorization": f"Bearer {token or ctx['executionToken']}"})

    def rows(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            return {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                    for t in StatusBase.metadata.sorted_tables}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """One database for the module (its schema takes longer than the tests): each test has its own tasks."""
    url = f"sqlite:///{tmp_path_factory.mktemp('statussync') / 'statussync.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        install(conn)
    yield Api(create_app(url, SECRET, HMAC_KEY).test_client(), engine)
    engine.dispose()


def _problem(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.get_data(as_text=True)
    assert resp.mimetype == "application/problem+json"
    body = resp.get_json()
    assert body["code"] == code and body["status"] == status
    return dict(body)


def test_a_task_lives_through_http_and_a_retry_gets_its_first_answer(api: Api) -> None:
    created = api.create()
    prepare = created["steps"][0]
    assert created["taskVersion"] == "1" and prepare["stepId"] == STEPS[0][0]
    first = api.report(prepare, 1)
    assert first.status_code == 200 and first.get_json()["taskVersion"] == "2"
    again = api.report(prepare, 1)
    assert again.status_code == 200
    assert again.get_json()["duplicate"] is True and again.get_json()["taskVersion"] == "2"
    _problem(api.report(prepare, 1, business="PREPARED"), 409, "EVENT_ID_CONFLICT")  # the same id, other content
    assert api.report(prepare, 2, "STEP_COMPLETED", "PREPARED").get_json()["taskVersion"] == "3"
    late = {**_event(prepare, 2), "eventId": "late-report"}
    auth = {"Authorization": f"Bearer {prepare['executionToken']}"}
    body = _problem(api.client.post(EVENTS, json=late, headers=auth), 409, "STALE_SEQUENCE")
    assert body["stale"] is True and body["taskVersion"] == "3"
    assert api.client.post(EVENTS, json=late, headers=auth).get_json()["code"] == "STALE_SEQUENCE"  # kept
    _problem(api.client.post(EVENTS, json={**_event(prepare, 3), "eventId": "after-end"}, headers=auth), 409,
             "STEP_TERMINAL")
    snapshot = api.client.get("/api/tasks/task-1", headers=api.user()).get_json()
    assert snapshot["summary"]["task"]["version"] == "3" and snapshot["detail"]["version"] == "3"
    timeline = api.client.get("/api/tasks/task-1/events?afterTaskVersion=1&limit=10", headers=api.user()).get_json()
    assert [e["taskVersion"] for e in timeline["events"]] == ["2", "3"]
    assert [e["eventType"] for e in timeline["events"]] == ["STEP_STARTED", "STEP_COMPLETED"]
    newer = api.client.post("/api/tasks/status:batchGet", headers=api.user(),
                            json={"taskIds": ["task-1"], "knownVersions": {"task-1": "2"}}).get_json()
    assert [t["task"]["version"] for t in newer["tasks"]] == ["3"]
    known = api.client.post("/api/tasks/status:batchGet", headers=api.user(),
                            json={"taskIds": ["task-1"], "knownVersions": {"task-1": "3"}}).get_json()
    assert known["tasks"] == []
    assert [t["task"]["id"] for t in api.client.get("/api/tasks", headers=api.user()).get_json()["tasks"]] \
        == ["task-1"]


def _event(ctx: dict[str, Any], seq: int) -> dict[str, Any]:
    return {"eventId": f"e-{seq}", "taskId": ctx["taskId"], "taskAttempt": 1, "stepId": ctx["stepId"],
            "stepAttempt": ctx["stepAttempt"], "operationCode": ctx["operationCode"],
            "producerId": ctx["producerId"], "sourceSeq": seq, "eventType": "STEP_PROGRESS",
            "businessStatus": "PREPARING"}


def test_a_forged_token_writes_nothing_and_cannot_claim_an_event_id(api: Api) -> None:
    prepare = api.create("task-forged")["steps"][0]
    before = api.rows()
    forged = prepare["executionToken"].rpartition(".")[0] + "." + "0" * 64
    _problem(api.report(prepare, 1, token=forged), 401, "TOKEN_REFUSED")
    _problem(api.report(prepare, 1, token="not-a-token"), 401, "TOKEN_REFUSED")
    assert api.rows() == before
    assert api.report(prepare, 1).status_code == 200  # the real producer's event, same id, still accepted


def test_another_steps_token_is_refused_and_the_refusal_is_answered_again(api: Api) -> None:
    steps = api.create("task-mismatch")["steps"]
    before = api.rows()["task_event_log"]
    wrong = api.report(steps[0], 1, token=steps[1]["executionToken"])
    _problem(wrong, 403, "TOKEN_MISMATCH")
    _problem(api.report(steps[0], 1, token=steps[1]["executionToken"]), 403, "TOKEN_MISMATCH")
    assert api.rows()["task_event_log"] == before  # nothing applied


def test_a_heartbeat_moves_no_version_and_takes_its_own_token(api: Api) -> None:
    steps = api.create("task-heartbeat")["steps"]
    api.report(steps[0], 1)
    before = api.rows()
    beat = api.report(steps[0], 2, "STEP_HEARTBEAT")
    assert beat.status_code == 200 and beat.get_json()["heartbeat"] is True
    assert api.rows() == before
    _problem(api.report(steps[0], 2, "STEP_HEARTBEAT", token=steps[1]["executionToken"]), 403, "TOKEN_MISMATCH")
    _problem(api.report(steps[1], 1, "STEP_HEARTBEAT"), 409, "NOT_RUNNING")
    # A task-level heartbeat is schema-valid (stepId may be null) and refused with a code the document lists
    coordinator = {**steps[0], "stepId": None, "stepAttempt": None}
    _problem(api.report(coordinator, 3, "STEP_HEARTBEAT"), 422, "HEARTBEAT_WITHOUT_STEP")


def test_every_refusal_of_a_schema_valid_request_is_documented(api: Api) -> None:
    """`sortie fuzz`'s positive_data_acceptance: a schema-valid request refused with 400 or 422 carries a code its
    answer lists (x-schema-valid-refusals), or the document is wrong."""
    listed = documented_refusals(document())
    assert {"UNKNOWN_OPERATION", "DUPLICATE_STEP"} <= listed[("POST /internal/v1/tasks", 422)]
    assert {"IDEMPOTENCY_KEY_MISMATCH"} <= listed[("POST /internal/v1/task-events", 400)]
    assert set(REFUSED_UNPROCESSABLE) | {"HEARTBEAT_WITHOUT_STEP"} <= listed[("POST /internal/v1/task-events", 422)]


def test_another_users_task_is_not_there(api: Api) -> None:
    api.create("task-1", owner="u1")  # idempotent: the first test's task if it ran
    other = api.user("u2")
    _problem(api.client.get("/api/tasks/task-1", headers=other), 404, "TASK_NOT_FOUND")
    _problem(api.client.get("/api/tasks/task-1/events", headers=other), 404, "TASK_NOT_FOUND")
    _problem(api.client.post("/api/realtime/subscription-token", json={"taskId": "task-1"}, headers=other),
             404, "TASK_NOT_FOUND")
    _problem(api.client.get("/api/tasks/task-1", headers=api.user("u1", tenant="t2")), 404, "TASK_NOT_FOUND")
    batch = api.client.post("/api/tasks/status:batchGet", json={"taskIds": ["task-1"]}, headers=other)
    assert batch.status_code == 200 and batch.get_json()["tasks"] == []
    assert api.client.get("/api/tasks", headers=other).get_json()["tasks"] == []


def test_the_centrifugo_tokens_name_the_channels_the_server_built(api: Api) -> None:
    api.create("task-1")  # idempotent
    session = api.client.get("/api/realtime/session", headers=api.user()).get_json()
    claims = jwt.decode(session["token"], HMAC_KEY, algorithms=["HS256"])
    assert claims["sub"] == "t1/u1" and claims["channels"] == ["task_user:t1/u1"]
    sub = api.client.post("/api/realtime/subscription-token", json={"taskId": "task-1"}, headers=api.user())
    claims = jwt.decode(sub.get_json()["token"], HMAC_KEY, algorithms=["HS256"])
    assert claims["sub"] == "t1/u1" and claims["channel"] == "task_detail:t1/task-1"


def _coordinator() -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(SECRET, 'task-coordinator', COORDINATOR_ROLE)}"}


def _admin(tenant: str = TENANT) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(SECRET, f'{tenant}/ops-alice', ADMIN_ROLE)}"}


CORRECTIONS = "/internal/v1/tasks/task-1/corrections"
CORRECTION = {"correctionId": "fix-1", "businessStatus": "COMPLETED", "reason": "checked by hand"}
BAD_REQUESTS: list[tuple[str, str, str, Any, str, int, str]] = [
    # (name, method, path, body (bytes: raw), who, status, code)
    ("no token", "GET", "/api/tasks", None, "nobody", 401, "UNAUTHENTICATED"),
    ("coordinator reads", "GET", "/api/tasks", None, "coordinator", 403, "FORBIDDEN"),
    ("user creates", "POST", "/internal/v1/tasks", {}, "user", 403, "FORBIDDEN"),
    ("subject without tenant", "GET", "/api/tasks", None, "bare", 403, "FORBIDDEN"),
    ("bad json", "POST", "/internal/v1/tasks", b"{", "coordinator", 400, "MALFORMED_JSON"),
    ("missing steps", "POST", "/internal/v1/tasks", {"taskId": "t", "tenantId": "t1", "ownerId": "u1",
                                                     "title": "x"}, "coordinator", 400, "INVALID_REQUEST"),
    ("unknown operation", "POST", "/internal/v1/tasks",
     {"taskId": "t", "tenantId": "t1", "ownerId": "u1", "title": "x",
      "steps": [{"stepId": "s", "operationCode": "NOPE"}]}, "coordinator", 422, "UNKNOWN_OPERATION"),
    ("long task id", "POST", "/api/realtime/subscription-token", {"taskId": "x" * 37}, "user", 400,
     "INVALID_REQUEST"),
    ("bad version", "POST", "/api/tasks/status:batchGet", {"taskIds": ["a"], "knownVersions": {"a": "-1"}}, "user",
     400, "INVALID_REQUEST"),
    ("bad afterTaskVersion", "GET", "/api/tasks/task-1/events?afterTaskVersion=x", None, "user", 400,
     "INVALID_REQUEST"),
    ("event without token", "POST", EVENTS, {"eventId": "e"}, "nobody", 401, "UNAUTHENTICATED"),
    # Found by `sortie fuzz`: each answered what the document does not say (limit=0 was clamped to 1, digits of
    # other scripts read as numbers, a GET of the batch check answered as the snapshot of a task "status:batchGet").
    ("limit 0", "GET", "/api/tasks/task-1/events?limit=0", None, "user", 400, "INVALID_REQUEST"),
    ("Arabic-Indic digits", "GET", "/api/tasks/task-1/events?afterTaskVersion=\u0661", None, "user", 400,
     "INVALID_REQUEST"),
    ("Arabic-Indic version", "POST", "/api/tasks/status:batchGet",
     {"taskIds": ["a"], "knownVersions": {"a": "\u0661"}}, "user", 400, "INVALID_REQUEST"),
    ("batch check by GET", "GET", "/api/tasks/status:batchGet", None, "user", 405, "METHOD_NOT_ALLOWED"),
    ("duplicate step ids", "POST", "/internal/v1/tasks",  # found by `sortie fuzz`: a 500 (the steps' key)
     {"taskId": "t-dup", "tenantId": "t1", "ownerId": "u1", "title": "x",
      "steps": [{"stepId": "s", "operationCode": "FILE.PREPARE"}, {"stepId": "s", "operationCode": "DOCUMENT.PARSE"}]},
     "coordinator", 422, "DUPLICATE_STEP"),
    ("task id with a colon", "POST", "/internal/v1/tasks",
     {"taskId": "status:batchGet", "tenantId": "t1", "ownerId": "u1", "title": "x",
      "steps": [{"stepId": "s", "operationCode": "FILE.PREPARE"}]}, "coordinator", 400, "INVALID_REQUEST"),
    ("wrong method", "DELETE", "/api/tasks", None, "user", 405, "METHOD_NOT_ALLOWED"),
    ("no route", "GET", "/api/nothing", None, "user", 404, "NOT_FOUND"),
    ("user corrects", "POST", CORRECTIONS, CORRECTION, "user", 403, "FORBIDDEN"),
    ("correction without reason", "POST", CORRECTIONS, {**CORRECTION, "reason": " "}, "admin", 400,
     "INVALID_REQUEST"),
    ("correction to a running status", "POST", CORRECTIONS, {**CORRECTION, "businessStatus": "PARSING"}, "admin", 422,
     "CORRECTION_NOT_TERMINAL"),
    ("correction of another tenant's task", "POST", CORRECTIONS, CORRECTION, "admin-t2", 404, "TASK_NOT_FOUND"),
]


@pytest.mark.parametrize(("name", "method", "path", "body", "who", "status", "code"), BAD_REQUESTS,
                         ids=[r[0] for r in BAD_REQUESTS])
def test_bad_input_is_a_structured_refusal_and_writes_nothing(api: Api, name: str, method: str, path: str, body: Any,
                                                              who: str, status: int, code: str) -> None:
    api.create("task-1")  # idempotent
    headers = {"user": api.user(), "coordinator": _coordinator(), "nobody": {}, "admin": _admin(),
               "admin-t2": _admin("t2"),
               "bare": {"Authorization": f"Bearer {issue_token(SECRET, 'u1', USER)}"}}[who]
    before = api.rows()
    if isinstance(body, bytes):
        resp = api.client.open(path, method=method, data=body, headers=headers, content_type="application/json")
    else:
        resp = api.client.open(path, method=method, json=body, headers=headers)
    _problem(resp, status, code)
    assert api.rows() == before


def test_event_body_and_key_checks(api: Api) -> None:
    prepare = api.create("task-bodies")["steps"][0]
    auth = {"Authorization": f"Bearer {prepare['executionToken']}"}
    before = api.rows()
    _problem(api.client.post(EVENTS, json={**_event(prepare, 1), "sourceSeq": "1"}, headers=auth), 400,
             "INVALID_REQUEST")
    _problem(api.client.post(EVENTS, json={**_event(prepare, 1), "eventType": "NOPE"}, headers=auth), 400,
             "INVALID_REQUEST")
    _problem(api.client.post(EVENTS, json=_event(prepare, 1), headers={**auth, "Idempotency-Key": "other"}), 400,
             "IDEMPOTENCY_KEY_MISMATCH")
    _problem(api.client.post(EVENTS, data="x", headers=auth, content_type="text/plain"), 415,
             "UNSUPPORTED_MEDIA_TYPE")
    assert api.rows() == before


def test_an_admin_corrects_a_result_named_in_the_audit_by_their_token(api: Api) -> None:
    api.create("task-fix")
    url = "/internal/v1/tasks/task-fix/corrections"
    body = {"correctionId": "fix-http", "businessStatus": "REJECTED", "reason": "the file was a duplicate"}
    first = api.client.post(url, json=body, headers=_admin())
    assert first.status_code == 200 and first.get_json()["lifecycleStatus"] == "FAILED"
    again = api.client.post(url, json=body, headers=_admin())
    assert again.status_code == 200 and again.get_json()["duplicate"] is True
    _problem(api.client.post(url, json={**body, "reason": "other"}, headers=_admin()), 409, "EVENT_ID_CONFLICT")
    _problem(api.client.post(url, json={**body, "correctionId": "fix-same"}, headers=_admin()), 409,
             "NOTHING_TO_CORRECT")
    with api.engine.connect() as conn:
        audit = conn.execute(select(TaskCorrection.__table__).where(TaskCorrection.task_id == "task-fix")).one()
    assert (audit.operator, audit.reason) == ("ops-alice", "the file was a duplicate")
    snapshot = api.client.get("/api/tasks/task-fix", headers=api.user()).get_json()
    assert snapshot["summary"]["task"]["businessStatus"] == "REJECTED"


def test_every_route_is_in_the_document_and_the_published_copy_is_current(api: Api) -> None:
    app_paths = {re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
                 for rule in api.client.application.url_map.iter_rules() if rule.endpoint != "static"}
    assert app_paths == set(document()["paths"])
    task_id = document()["components"]["schemas"]["TaskId"]  # the routes' converter takes exactly the document's ids
    chars = TASK_ID_PATTERN[:TASK_ID_PATTERN.index("{")]
    assert (task_id["pattern"], TASK_ID_PATTERN[len(chars):]) == (f"^{chars}+$",
                                                                  f"{{{task_id['minLength']},{task_id['maxLength']}}}")
    served = api.client.get("/openapi.json")
    assert served.status_code == 200 and json.loads(served.get_data()) == document()
    assert (ROOT / DOCS_PATH).read_text(encoding="utf-8") == document_json(), \
        f"stale published document: run python -m reference.statussync.http.openapi {DOCS_PATH}"


def test_the_status_page_is_served_with_its_script_and_the_installed_js_client(api: Api, tmp_path: Path) -> None:
    page = api.client.get("/app/")
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert all(src in page.get_data(as_text=True) for src in ('src="/app/centrifuge.js"', 'src="/app/tasks.js"'))
    script = api.client.get("/app/tasks.js")
    assert script.status_code == 200 and script.mimetype == "text/javascript"
    _problem(api.client.get("/app/centrifuge.js"), 404, "JS_CLIENT_NOT_INSTALLED")  # none given to this app
    bundle = tmp_path / "centrifuge.js"
    bundle.write_text("var Centrifuge = function () {};", encoding="utf-8")
    served = create_app(f"sqlite:///{tmp_path / 'unused.db'}", SECRET, HMAC_KEY, js_client=bundle).test_client()
    resp = served.get("/app/centrifuge.js")
    assert resp.status_code == 200 and resp.get_data(as_text=True) == bundle.read_text(encoding="utf-8")


class _Deadlock(Exception):
    """What the MySQL driver raises for InnoDB's deadlock victim (its errno first)."""


def test_a_deadlocked_transaction_is_run_again_not_answered_503(api: Api) -> None:
    """Found by the 1x load on MariaDB: two task creations at once deadlocked (1213) and one was answered 503
    DATABASE_UNAVAILABLE. InnoDB rolled the victim back whole, so the API runs it again; a link down stays a 503."""
    context = ApiContext(api.engine, TokenVerifier(SECRET, ROLES), request_bodies(), max_body_bytes=1024,
                         now=lambda: datetime(2026, 1, 1), log=logging.getLogger("test"))
    tries: list[int] = []

    def deadlocked_once(tx: Any) -> str:
        tries.append(1)
        if len(tries) == 1:
            raise exc.OperationalError("INSERT", {}, _Deadlock(1213, "Deadlock found when trying to get lock"))
        return "committed"

    assert context.in_tx(deadlocked_once) == "committed" and len(tries) == 2

    def link_down(tx: Any) -> str:
        raise exc.OperationalError("SELECT", {}, _Deadlock(2013, "Lost connection to server during query"))

    with pytest.raises(Problem) as refused:
        context.in_tx(link_down)
    assert (refused.value.status, refused.value.code) == (503, "DATABASE_UNAVAILABLE")


def test_a_token_of_another_task_cannot_claim_that_tasks_event_ids(api: Api) -> None:
    """A producer's eventIds are predictable (producer:task:step:seq). A holder of any valid execution token (another
    task's producer) sending another task's next event got TOKEN_MISMATCH, and that refusal was stored under the
    eventId: the real producer's report, same content, was then answered the stored refusal for ever. A report its
    token does not bind is refused and writes nothing."""
    mine = api.create("task-claimer")["steps"][0]
    theirs = api.create("task-claimed")["steps"][0]
    before = api.rows()
    _problem(api.report(theirs, 1, token=mine["executionToken"]), 403, "TOKEN_MISMATCH")
    assert api.rows() == before
    real = api.report(theirs, 1)
    assert real.status_code == 200 and real.get_json()["accepted"], real.get_json()
