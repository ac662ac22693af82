"""The platform simulator against its OpenAPI document (simulator/openapi.yaml, served at GET /openapi.json,
published as docs/openapi/platform-simulator.json).

The document describes exactly the app's routes, the docs copy is the served document, and Schemathesis
sends every operation property-based requests (valid and invalid) in process: no answer is a server error,
and every status, content type and body is one the document gives for that operation.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.config import SchemathesisConfig
from schemathesis.errors import FailureGroup

from reference.copilot.platform import FLIGHT_COMPLETED, FLIGHT_EXECUTING, CreateFlight
from simulator import openapi
from simulator.app import Simulator, create_app, simulator_of
from simulator.model import PlatformFaults, PlatformModel

ROOT = Path(__file__).resolve().parents[2]
IGNORED_METHODS = {"HEAD", "OPTIONS"}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


def fresh_model() -> PlatformModel:
    """Three devices and one flight at model time 0: the simulator's clock (the wall clock) is long past its
    end, so the first pump delivers its whole history (telemetry, alerts, completed) to the event buffer."""
    model = PlatformModel(random.Random(7))
    model.add_fleet(3)
    model.create_flight(0.0, CreateFlight("req-1", "DRONE-0001", "task-1", [[30.0, 120.0], [30.01, 120.02]], 80.0))
    return model


def restore(sim: Simulator) -> None:
    """A clean, known state for each generated request: FLT-000001 ended COMPLETED with its events in the
    buffer, FLT-000002 flying, default faults, no webhooks (nothing is ever sent: the app runs no threads)."""
    with sim.lock:
        sim.model = fresh_model()
        sim.events.clear()
        sim.webhooks.clear()
        sim.webhook_headers.clear()
    sim.pump_once()
    reply = sim.call(lambda m, now: m.create_flight(
        now, CreateFlight("req-2", "DRONE-0002", "task-2", [[30.0, 120.0], [30.02, 120.01]], 60.0, ["photo"])))
    assert reply.ok and reply.value is not None and reply.value.external_id == "FLT-000002"


# One app for the module, built without its pump and webhook threads; restore() runs before every request.
APP = create_app(fresh_model(), time_scale=1.0, seed=7, start_threads=False)
SIM = simulator_of(APP)
restore(SIM)
# Explicit, so that a schemathesis.toml elsewhere cannot change what runs here. No stateful runs: restore()
# gives every request its own clean state.
CONFIG = {"phases": {"stateful": {"enabled": False}}}
# From the document itself, not from_wsgi("/openapi.json"): loaded from a route, Schemathesis leaves that route
# out, and GET /openapi.json is an operation too (test_served_document_is_the_yaml: it serves this document).
SCHEMA = schemathesis.openapi.from_dict(openapi.document(), config=SchemathesisConfig.from_dict(CONFIG))
SCHEMA.app = APP
HUGE = 10**400  # a JSON integer no double holds


def test_restore_gives_the_documented_state() -> None:
    restore(SIM)
    client = APP.test_client()
    assert client.get("/api/v1/flight-tasks/FLT-000001").get_json()["status"] == FLIGHT_COMPLETED
    assert client.get("/api/v1/flight-tasks/FLT-000002").get_json()["status"] == FLIGHT_EXECUTING
    kinds = {e["kind"] for e in client.get("/api/v1/events?limit=10000").get_json()["items"]}
    assert {"telemetry", "completed"} <= kinds


def test_document_is_valid_openapi_3_1() -> None:
    doc = openapi.document()
    assert doc["openapi"] == "3.1.0" and doc["info"]["description"].strip()
    SCHEMA.validate()  # the OpenAPI 3.1 meta-schema


def test_served_document_is_the_yaml() -> None:
    resp = APP.test_client().get("/openapi.json")
    assert resp.status_code == 200 and resp.mimetype == "application/json"
    assert resp.get_json() == openapi.document()
    assert resp.get_data(as_text=True) == openapi.document_json()


def test_docs_copy_is_current() -> None:
    path = ROOT / openapi.DOCS_PATH
    current = path.read_text(encoding="utf-8") if path.exists() else None
    assert current == openapi.document_json(), (
        f"{openapi.DOCS_PATH} differs from simulator/openapi.yaml: regenerate it with `{openapi.REGENERATE}`"
    )


def test_document_covers_every_route() -> None:
    routes = set()
    for rule in APP.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
        routes |= {(method, path) for method in rule.methods or () if method not in IGNORED_METHODS}
    documented = {
        (method.upper(), path)
        for path, item in openapi.document()["paths"].items()
        for method in item
        if method in {"get", "put", "post", "delete", "patch"}
    }
    assert routes == documented, (
        f"routes not documented: {sorted(routes - documented)}; documented, no route: {sorted(documented - routes)}"
    )


@SCHEMA.parametrize()
@settings(
    max_examples=25,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
def test_api_conforms(case: schemathesis.Case) -> None:
    restore(SIM)
    case.call_and_validate(checks=CHECKS)


FLIGHT = {"device_id": "DRONE-0003", "reference": "task-9", "waypoints": [[30.0, 120.0]], "altitude_m": 50}


@pytest.mark.parametrize(
    ("method", "path", "parts", "status"),
    [
        # Each answered 500 before its fix (the generated requests above do not reach these values).
        ("GET", "/api/v1/events", {"query": {"after": 10**30}}, 200),  # islice past sys.maxsize
        ("POST", "/api/v1/flight-tasks", {"body": {**FLIGHT, "waypoints": [[HUGE, 0]]}}, 400),
        ("POST", "/api/v1/flight-tasks", {"body": {**FLIGHT, "altitude_m": HUGE}}, 400),
        ("POST", "/control/devices", {"body": {"device_id": "D-9", "battery": HUGE}}, 400),
        ("PUT", "/control/faults", {"body": {"error_5xx_rate": HUGE}}, 400),
        ("PUT", "/control/faults", {"body": {"reorder_window_s": HUGE}}, 400),
        # JSON integers written with a fraction are integers (they were refused with a 400).
        ("PUT", "/control/faults", {"body": {"drop_response": 3.0}}, 200),
        ("POST", "/control/reset", {"body": {"seed": 9.0}}, 200),
        # Ids that the URL resolves away (documented: routing's own 404 and 405).
        ("GET", "/api/v1/flight-tasks/{external_id}", {"path_parameters": {"external_id": "."}}, 404),
        ("POST", "/api/v1/flight-tasks/{external_id}/commands",
         {"path_parameters": {"external_id": "."}, "body": {"command": "cancel"}}, 405),
        ("GET", "/api/v1/devices/{device_id}", {"path_parameters": {"device_id": ".."}}, 404),
    ],
)
def test_edge_cases(method: str, path: str, parts: dict[str, Any], status: int) -> None:
    restore(SIM)
    case = SCHEMA[path][method].Case(media_type="application/json" if "body" in parts else None, **parts)
    assert case.call_and_validate(checks=CHECKS).status_code == status


@pytest.mark.parametrize(
    ("faults", "method", "path", "parts", "status"),
    [
        ({"error_429_rate": 1}, "GET", "/api/v1/devices/{device_id}", {"path_parameters": {"device_id": "DRONE-0001"}},
         429),
        ({"error_5xx_rate": 1}, "GET", "/api/v1/flight-tasks/{external_id}",
         {"path_parameters": {"external_id": "FLT-000001"}}, 503),
        ({"query_supported": False}, "GET", "/api/v1/flight-tasks", {"query": {"client_request_id": "req-1"}}, 501),
        ({"reject_devices": ["DRONE-0003"]}, "POST", "/api/v1/flight-tasks", {"body": FLIGHT}, 409),
        ({}, "POST", "/api/v1/flight-tasks", {"body": {**FLIGHT, "client_request_id": "req-1"}}, 200),  # a replay
        ({"accept_then_timeout": 1, "response_timeout_delay_s": 0}, "POST", "/api/v1/flight-tasks", {"body": FLIGHT},
         201),
        ({"refuse_cancel_prob": 1}, "POST", "/api/v1/flight-tasks/{external_id}/commands",
         {"path_parameters": {"external_id": "FLT-000002"}, "body": {"command": "cancel"}}, 409),
    ],
)
def test_fault_answers(faults: dict[str, Any], method: str, path: str, parts: dict[str, Any], status: int) -> None:
    """Answers that only faults produce (restore() clears faults before each generated request) are documented
    too. 501 and 503 are the platform's answers by design here, so not_a_server_error is left out."""
    restore(SIM)
    SIM.model.faults = PlatformFaults.from_json(faults)
    case = SCHEMA[path][method].Case(media_type="application/json" if "body" in parts else None, **parts)
    response = case.call_and_validate(checks=[check for check in CHECKS if check is not not_a_server_error])
    assert response.status_code == status


def test_offline_device_is_a_documented_409() -> None:
    restore(SIM)
    SIM.model.set_device("DRONE-0003", online=False)
    case = SCHEMA["/api/v1/flight-tasks"]["POST"].Case(media_type="application/json", body=FLIGHT)
    response = case.call_and_validate(checks=CHECKS)
    assert response.status_code == 409 and response.json()["code"] == "DEVICE_OFFLINE"


def test_schemathesis_checks_the_bodies() -> None:
    """The conformance checks above have teeth: an answer off its document fails them."""
    doc = openapi.document()
    doc["components"]["schemas"]["Device"]["properties"]["battery"]["type"] = "string"
    schema = schemathesis.openapi.from_dict(doc, config=SchemathesisConfig.from_dict(CONFIG))
    schema.app = APP
    case = schema["/api/v1/devices/{device_id}"]["GET"].Case(path_parameters={"device_id": "DRONE-0001"})
    restore(SIM)
    with pytest.raises(FailureGroup, match="Response violates schema"):
        case.call_and_validate(checks=CHECKS)


def test_a_forgotten_device_answers_as_documented() -> None:
    """DELETE /control/devices/{id}: the platform forgets the device; its reads and creates answer as documented,
    a second delete is a 404, and a reset brings the simulator's own fleet back."""
    restore(SIM)
    device = {"path_parameters": {"device_id": "DRONE-0003"}}
    remove = SCHEMA["/control/devices/{device_id}"]["DELETE"]
    assert remove.Case(**device).call_and_validate(checks=CHECKS).json() == {"device_id": "DRONE-0003", "removed": True}
    read = SCHEMA["/api/v1/devices/{device_id}"]["GET"].Case(**device).call_and_validate(checks=CHECKS)
    assert read.status_code == 404 and read.json()["code"] == "DEVICE_NOT_FOUND"
    create = SCHEMA["/api/v1/flight-tasks"]["POST"].Case(media_type="application/json", body=FLIGHT)
    created = create.call_and_validate(checks=CHECKS)
    assert created.status_code == 422 and created.json()["code"] == "DEVICE_UNKNOWN"
    again = remove.Case(**device).call_and_validate(checks=CHECKS)
    assert again.status_code == 404 and again.json()["code"] == "DEVICE_NOT_FOUND"
    SIM.reset()
    assert SIM.model.has_device("DRONE-0003")
