"""The Copilot API against its OpenAPI document (reference/copilot/http/openapi.yaml, served at GET /openapi.json and
published as docs/openapi/copilot-api.json): every route is described, the docs copy is the served one, and
Schemathesis sends property-based requests (valid and invalid) from the document to the in-process app with the
credentials each operation needs: no 500, and every answer has a documented status, content type, headers and
body. The refusals Schemathesis does not reach (no or a wrong credential, the wrong role, a body of the wrong
type, size or depth, the database down) are sent explicitly and checked against the document the same way.

(Named test_copilot_openapi.py, not test_openapi.py: tests/simulator/test_openapi.py has that basename, and two
test modules of one basename in directories without __init__.py do not collect together.)"""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import schemathesis
from api_support import APPROVER, OWNER, SECRET, WEBHOOK_TOKEN, Api, assert_problem, build_api, database_down
from hypothesis import HealthCheck, settings
from schemathesis import checks
from sqlalchemy import func, select
from werkzeug.test import TestResponse

from reference.copilot.http.app import MAX_JSON_DEPTH
from reference.copilot.http.auth import issue_token
from reference.copilot.http.openapi import DOCS_PATH, REGENERATE, document, document_json
from reference.copilot.models import DeadLetter, DroneTask, PlatformEventRow, TaskEventOutbox, TaskReport

ROOT = Path(__file__).resolve().parents[2]
DOC = document()
SUPERVISOR = "supervisor-1"
METHODS = ("get", "put", "post", "patch", "delete")
OPERATIONS = sorted((method.upper(), path) for path, item in DOC["paths"].items()
                    for method in item if method in METHODS)
STREAM = ("GET", "/v1/stream")
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    checks.negative_data_rejection,  # a request the document calls invalid is refused
    checks.ignored_auth,  # a success, sent again without and with a wrong credential, is refused
]
# The document's example ids: the seeded world maps them (and a third of the generated UUIDs) to real rows.
EXAMPLE_DRAFT = DOC["components"]["parameters"]["DraftId"]["example"]
EXAMPLE_TASK = DOC["components"]["parameters"]["TaskId"]["example"]
EXAMPLE_ITEM = DOC["paths"]["/v1/ops/dead/{kind}/{item_id}/redrive"]["parameters"][1]["example"]

FULL = schemathesis.openapi.from_dict(
    DOC,
    # Credentials are the test's to set (a fresh token of the role each operation needs), not generated.
    config=schemathesis.Config.from_dict({"generation": {"with-security-parameters": False}}),
)
# The SSE stream never ends, so Schemathesis would wait on its body forever: it is left out of the property run
# (it stays in the document; test_refusals_and_the_stream_answer_as_documented checks its 200 and 401).
SCHEMA = FULL.exclude(path=STREAM[1], method=STREAM[0])


# ------------------------------------------------------------------------------------------------ the document


def _flask_path(rule: str) -> str:
    return rule.replace("<", "{").replace(">", "}")


def test_every_route_is_an_operation_of_the_document() -> None:
    api = build_api()
    try:
        routes = {(method, _flask_path(rule.rule)) for rule in api.app.url_map.iter_rules()
                  if rule.endpoint != "static" for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}}
    finally:
        api.hub.close()
        api.engine.dispose()
    operations = set(OPERATIONS)
    assert routes == operations, {"routes not described": routes - operations,
                                  "described, not routed": operations - routes}


def test_the_document_is_valid_openapi_3_1() -> None:
    assert DOC["openapi"] == "3.1.0"
    FULL.validate()  # against the OpenAPI 3.1 schema (raises jsonschema_rs.ValidationError with the path)


def test_the_app_serves_the_document_without_authentication(api: Api) -> None:
    resp = api.client.get("/openapi.json")
    assert resp.status_code == 200 and resp.mimetype == "application/json"
    assert resp.get_json() == DOC
    assert resp.get_data(as_text=True) == document_json()
    _conforms(resp, "GET", "/openapi.json")


def test_the_docs_copy_is_the_served_document(api: Api) -> None:
    published = ROOT / DOCS_PATH
    assert published.exists(), f"{DOCS_PATH} is missing: run `{REGENERATE}`"
    text = published.read_text(encoding="utf-8")
    assert json.loads(text) == api.client.get("/openapi.json").get_json(), (
        f"{DOCS_PATH} differs from the served document: run `{REGENERATE}`")
    assert text == document_json(), f"{DOCS_PATH} is not the generated rendering: run `{REGENERATE}`"


# ------------------------------------------------------------------------------------------------ a seeded world


@dataclass
class World:
    """A seeded fleet with a row of each kind an operation can find."""

    api: Api
    draft: str  # READY at version 1, operator-001's
    approved: str  # approved at version 1: confirmable
    task: str  # CREATED
    review: str  # MANUAL_REVIEW, never dispatched (so a resolution does not ask the platform)
    dead: dict[str, str]  # kind -> the id of an item waiting for a re-drive


def _seed(api: Api) -> World:
    draft = api.create_draft()["id"]
    approved = api.ready_draft()["id"]
    task = api.task()["task_id"]
    review = api.task()["task_id"]
    now = datetime.now(UTC)

    def rows(tx: Any) -> dict[str, str]:
        outbox = {str(o.task_id): o for o in tx.session.scalars(select(TaskEventOutbox))}
        dead_event, letter_event = outbox[task], outbox[review]
        dead_event.status, dead_event.attempts, dead_event.dead_at = "DEAD", 240, now
        dead_event.last_error = "broker unavailable"
        in_review = tx.session.get(DroneTask, uuid.UUID(review))
        in_review.status, in_review.version = "MANUAL_REVIEW", in_review.version + 1
        tx.session.add(TaskReport(task_id=uuid.UUID(task), status="DEAD", object_key=f"reports/{task}.json",
                                  attempts=20, last_error="store unavailable", next_attempt_at=now, created_at=now,
                                  dead_at=now, redrive_count=0))
        letter = DeadLetter(consumer="report-worker", event_id=letter_event.id, task_id=uuid.UUID(review),
                            event_type="TaskCreated", payload={}, error_code="HANDLER_FAILED",
                            error_message="failed on every delivery", attempts=5, history=[], created_at=now,
                            redrive_count=0)
        tx.session.add(letter)
        tx.session.flush()
        return {"outbox": str(dead_event.id), "report": task, "dead-letter": str(letter.id)}

    return World(api, draft, approved, task, review, api.runtime.transact(rows))


@pytest.fixture
def world() -> Iterator[World]:
    """One app per test (per operation for Schemathesis: its examples share it), so what an operation's run finds
    does not depend on which operations ran before it in the same worker."""
    api = build_api()
    yield _seed(api)
    api.hub.close()
    api.engine.dispose()


def _credentials(path: str, role: str | None = None) -> dict[str, str]:
    """The headers an operation needs: the webhook token, or a fresh token of the role the route wants."""
    if path == "/v1/platform/events":
        return {"X-Webhook-Token": WEBHOOK_TOKEN}
    if not path.startswith("/v1/"):
        return {}
    if role is None:
        role = ("approver" if path.endswith("/approvals")
                else "supervisor" if path.endswith("/review") or path.startswith("/v1/ops/") else "operator")
    user = {"approver": APPROVER, "supervisor": SUPERVISOR, "operator": OWNER}[role]
    return {"Authorization": f"Bearer {issue_token(SECRET, user, role)}"}


def _is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def _picked(value: Any, example: str) -> bool:
    """The document's example, and a third of the other values (by a stable hash), name a real row."""
    return value == example or zlib.crc32(str(value).encode()) % 3 == 0


def _real_ids(path: str, params: dict[str, Any], world: World) -> None:
    if "draft_id" in params and _is_uuid(params["draft_id"]) and _picked(params["draft_id"], EXAMPLE_DRAFT):
        params["draft_id"] = world.approved if path.endswith("/confirm") else world.draft
    if "task_id" in params and _is_uuid(params["task_id"]) and _picked(params["task_id"], EXAMPLE_TASK):
        params["task_id"] = world.review if path.endswith("/review") else world.task
    if params.get("kind") in world.dead and _picked(params.get("item_id"), EXAMPLE_ITEM):
        params["item_id"] = world.dead[params["kind"]]


# ------------------------------------------------------------------------------------------------ Schemathesis


@SCHEMA.parametrize()
@settings(max_examples=40, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.filter_too_much])
def test_the_api_answers_as_documented(case: schemathesis.Case, world: World) -> None:
    # In process (WSGI), against this operation's world: the request and the checks' probes (which use the schema's
    # transport) alike.
    case.operation.app = case.operation.schema.app = world.api.app
    if case.path_parameters:
        _real_ids(case.path, case.path_parameters, world)
    # Explicit headers (not the case's): ignored_auth then knows them for credentials and probes without them.
    case.call_and_validate(headers=_credentials(case.path), checks=CHECKS)


# ------------------------------------------------------------------------------------------------ explicit requests


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        *_, section, name = node["$ref"].split("/")
        node = DOC["components"][section][name]
    return node


def _conforms(resp: TestResponse, method: str, path: str) -> None:
    """The response is one the document gives for the operation: status, content type, headers and body."""
    responses = DOC["paths"][path][method.lower()]["responses"]
    assert str(resp.status_code) in responses, (method, path, resp.status_code, resp.get_data(as_text=True))
    documented = _resolve(responses[str(resp.status_code)])
    assert resp.mimetype in documented.get("content", {}), (method, path, resp.status_code, resp.mimetype)
    for name, header in documented.get("headers", {}).items():
        if _resolve(header).get("required"):
            assert name in resp.headers, (method, path, resp.status_code, name)
    if resp.mimetype != "text/event-stream":
        FULL[path][method].validate_response(resp)


def _example_request(world: World, method: str, path: str, role: str | None = None) -> dict[str, Any]:
    """The request the document's examples make, with real ids: path, headers and (when the operation has one) a
    JSON body."""
    operation = DOC["paths"][path][method.lower()]
    declared = [_resolve(p) for p in DOC["paths"][path].get("parameters", []) + operation.get("parameters", [])]
    params = {p["name"]: p["example"] for p in declared if p["in"] == "path"}
    _real_ids(path, params, world)
    headers = _credentials(path, role)
    for p in declared:
        if p["in"] == "header":  # the Idempotency-Key: a fresh one per request
            headers[p["name"]] = f"{p['example']}-{uuid.uuid4().hex[:8]}"
    request: dict[str, Any] = {"path": path.format(**{k: quote(str(v), safe="") for k, v in params.items()}),
                               "method": method, "headers": headers}
    if "requestBody" in operation:
        request["json"] = operation["requestBody"]["content"]["application/json"]["example"]
    return request


BODIES = [(m, p) for m, p in OPERATIONS if "requestBody" in DOC["paths"][p][m.lower()]]
ROLES = {"/v1/drafts/{draft_id}/approvals": "approver", "/v1/tasks/{task_id}/review": "supervisor",
         "/v1/ops/dead": "supervisor", "/v1/ops/dead/{kind}/{item_id}/redrive": "supervisor"}


def test_refusals_and_the_stream_answer_as_documented(world: World) -> None:
    client = world.api.client
    for method, path in OPERATIONS:
        security = DOC["paths"][path][method.lower()].get("security", DOC["security"])
        if not security:
            continue
        request = _example_request(world, method, path)
        for name in ("Authorization", "X-Webhook-Token"):
            request["headers"].pop(name, None)
        resp = client.open(**request)  # no credential
        assert_problem(resp, 401, "UNAUTHENTICATED")
        _conforms(resp, method, path)
        wrong = {"X-Webhook-Token": "not-the-token"} if path == "/v1/platform/events" else {
            "Authorization": "Bearer not.a.token"}
        resp = client.open(**{**request, "headers": {**request["headers"], **wrong}})
        assert_problem(resp, 401, "INVALID_TOKEN")
        _conforms(resp, method, path)
    for path, role in ROLES.items():  # the wrong role is refused before the body is read
        method = "GET" if path == "/v1/ops/dead" else "POST"
        request = _example_request(world, method, path, role="operator")
        request.pop("json", None)
        resp = client.open(**request, data=b"{", content_type="application/json")
        assert_problem(resp, 403, "FORBIDDEN_ROLE", required_role=role)
        _conforms(resp, method, path)
    deep = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)
    for method, path in BODIES:  # bodies that are no JSON document the API takes
        request = _example_request(world, method, path)
        del request["json"]
        limit = 1024 * 1024 if path == "/v1/platform/events" else 256 * 1024
        for data, content_type, status, code in [
            (b"", "application/json", 400, "MALFORMED_JSON"),
            (b'{"a": 1, "a": 2}', "application/json", 400, "MALFORMED_JSON"),
            (deep, "application/json", 400, "MALFORMED_JSON"),
            (b"{}", "text/plain", 415, "UNSUPPORTED_MEDIA_TYPE"),
            (b" " * (limit + 1), "application/json", 413, "PAYLOAD_TOO_LARGE"),
        ]:
            with world.api.unchanged():
                resp = client.open(**request, data=data, content_type=content_type)
            assert_problem(resp, status, code)
            _conforms(resp, method, path)
    resp = client.get("/v1/stream", headers=_credentials("/v1/stream"), buffered=False)
    try:
        assert resp.status_code == 200 and next(iter(resp.response)).startswith(b"retry: 3000\n")
        _conforms(resp, *STREAM)
    finally:
        resp.close()


def test_the_database_down_answers_as_documented(world: World) -> None:
    """Every operation that reads the database answers 503 with Retry-After, as documented."""
    for method, path in OPERATIONS:
        if (method, path) in (STREAM, ("GET", "/openapi.json")):
            continue  # neither reads the database
        request = _example_request(world, method, path)
        with database_down(world.api.engine):
            resp = world.api.client.open(**request)
        body = assert_problem(resp, 503, "SERVICE_UNAVAILABLE")
        assert resp.headers["Retry-After"] == "1", (method, path)
        _conforms(resp, method, path)
        if path == "/health":
            assert body["database"] == "unavailable"


# ------------------------------------------------------------------------------------------------ regressions


def _events(api: Api) -> int:
    with api.runtime.sessions() as s:
        return s.scalar(select(func.count()).select_from(PlatformEventRow)) or 0


@pytest.mark.parametrize("kind", [[], {}, ["telemetry"], {"kind": "alert"}, 1, None])
def test_an_event_kind_of_another_type_is_a_422(api: Api, kind: Any) -> None:
    """Found by Schemathesis: an event whose "kind" was a list or an object was a 500 (TypeError: unhashable type,
    from the membership test in reference.copilot.api.platform_events), not the 422 the other bad fields get."""
    event = {"external_id": "0", "seq": 0, "kind": kind, "at": 0.0}
    resp = api.client.post("/v1/platform/events", json=[event], headers={"X-Webhook-Token": WEBHOOK_TOKEN})
    assert_problem(resp, 422, "INVALID_PARAMETERS", field="[0].kind", index=0)
    _conforms(resp, "POST", "/v1/platform/events")
    assert _events(api) == 0


def _nested_event(api: Api, depth: int) -> TestResponse:
    nested = "[" * depth + "]" * depth
    body = '[{"external_id": "FLT-1", "seq": 0, "kind": "telemetry", "at": 0, "payload": {"p": ' + nested + "}}]"
    return api.client.post("/v1/platform/events", data=body, content_type="application/json",
                           headers={"X-Webhook-Token": WEBHOOK_TOKEN})


def test_a_payload_nested_deeper_than_its_insert_can_serialise_is_a_400(api: Api) -> None:
    """An event payload nested some 950-990 levels deep (where exactly depends on the stack) parsed, json.loads
    recursing on the request's shallower stack, but failed to serialise at its insert (json.dumps recursing under
    SQLAlchemy: RecursionError): a 500 for the platform's webhook. Bodies may now nest MAX_JSON_DEPTH levels
    (the list, the event and the payload object are 3 of them); deeper is a 400 MALFORMED_JSON, nothing written."""
    resp = _nested_event(api, MAX_JSON_DEPTH - 3)
    assert resp.status_code == 200 and resp.get_json()["accepted"] == 1 and _events(api) == 1
    _conforms(resp, "POST", "/v1/platform/events")
    for depth in [MAX_JSON_DEPTH - 2, *range(600, 1101, 4)]:  # the 500's window, wherever the stack puts it
        resp = _nested_event(api, depth)
        assert_problem(resp, 400, "MALFORMED_JSON")
        _conforms(resp, "POST", "/v1/platform/events")
    assert _events(api) == 1


@pytest.mark.parametrize("item_id", ["\u00b2", "\u0661", "\u2460"])
def test_a_dead_letter_id_of_other_digits_is_not_found(api: Api, item_id: str) -> None:
    """'²' (and '①') pass str.isdigit() but not int(): a re-drive of dead letter '²' was a 500, not a 404
    (fixed in reference/copilot/services/ops.py: ASCII digits only)."""
    resp = api.client.post(f"/v1/ops/dead/dead-letter/{quote(item_id)}/redrive", json={"reason": "retry"},
                           headers=_credentials("/v1/ops/dead"))
    assert_problem(resp, 404, "DEAD_LETTER_NOT_FOUND")
    _conforms(resp, "POST", "/v1/ops/dead/{kind}/{item_id}/redrive")
