"""`sortie fuzz` on the example system's tiny API (tests/example_system/api.py): clean it passes; with a planted 500
it exits 1 with a curl that reproduces the 500; with a planted half-written increment the invariant on the database
fails it; a system without an API document is refused. Each run is bounded by examples, not time (a few seconds),
and the planted defects sit on the bounds of the schema (an increment of 10, of 1), which the coverage phase sends."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import requests

from scenarios.fuzz import documented_refusals, serving, streaming_operations, with_examples
from tests.example_system.api import CounterTarget

ROOT = Path(__file__).resolve().parents[2]
SORTIE = str(Path(sys.executable).parent / "sortie")
EXAMPLES = "20"  # a run bounded by work, not by time: every phase runs to its end (about a second a role)


def fuzz(system: str, out: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    done = subprocess.run([SORTIE, "fuzz", "--system", system, "--in-process", "--max-examples", EXAMPLES, "--out",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = json.loads((out / "fuzz.json").read_text()) if (out / "fuzz.json").exists() else {}
    return done, report


def test_a_clean_api_passes(tmp_path: Path) -> None:
    done, report = fuzz("tests.example_system", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not report["failed"] and not report["findings"]
    assert [p["role"] for p in report["passes"]] == ["writer", "reader"] and all(p["cases"] for p in report["passes"])
    assert {p["stop_reason"] for p in report["passes"]} == {"completed"}  # bounded by examples, not by the clock
    [n2] = report["verdicts"]
    assert n2["status"] == "held" and n2["checked"] > 0  # increments were made and judged
    assert (tmp_path / "fuzz.md").read_text().startswith("# sortie fuzz: tests.example_system (in-process")


def _replay(curl: str, base_url: str) -> requests.Response:
    """The request a report's curl command sends, to ``base_url`` instead of the fuzzed server's."""
    words = shlex.split(curl)
    method, headers, body, url = "GET", {}, None, words[-1]
    for flag, value in zip(words[1:-1:2], words[2:-1:2], strict=True):
        if flag == "-X":
            method = value
        elif flag == "-H":
            name, _, header = value.partition(": ")
            headers[name] = header
        elif flag == "-d":
            body = value
    path = url.split("/", 3)[3]
    return requests.request(method, f"{base_url}/{path}", headers=headers, data=body, timeout=10)


def test_a_planted_server_error_fails_with_a_curl_that_reproduces_it(tmp_path: Path) -> None:
    done, report = fuzz("tests.example_system.planted", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [f for f in report["findings"] if f["check"] == "not_a_server_error"]
    assert errors and errors[0]["status"] == 500 and errors[0]["role"] == "writer", report["findings"]
    [curl] = errors[0]["curl"]
    assert curl.startswith("curl ") and "/counter/increments" in curl
    assert curl in (tmp_path / "fuzz.md").read_text()
    target = CounterTarget("server-error")
    with serving(target.app) as base_url:
        assert _replay(curl, base_url).status_code == 500
    clean = CounterTarget(None)
    with serving(clean.app) as base_url:
        assert _replay(curl, base_url).status_code == 200


def test_a_half_written_increment_violates_the_invariant(tmp_path: Path) -> None:
    done, report = fuzz("tests.example_system.half_written", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert not report["findings"]  # every answer was as documented: only the database shows it
    [n2] = report["verdicts"]
    assert n2["status"] == "violated" and "increments sum to" in n2["violations"][0]["message"]
    assert "N2 violated" in done.stdout


def test_a_system_without_an_api_document_is_refused(tmp_path: Path) -> None:
    done, report = fuzz("tests.example_system.no_api", tmp_path)
    assert done.returncode == 2 and "supplies no OpenAPI document" in done.stdout + done.stderr
    assert not report


def test_streams_that_never_end_are_left_out() -> None:
    sse = {"responses": {"200": {"content": {"text/event-stream": {}}}, "401": {"content": {"application/json": {}}}}}
    json_op = {"responses": {"200": {"content": {"application/json": {}}}}}
    both = {"responses": {"200": {"$ref": "#/components/responses/Either"}}}
    doc = {"paths": {"/stream": {"get": sse, "parameters": []}, "/items": {"get": json_op, "post": both}},
           "components": {"responses": {"Either": {"content": {"text/event-stream": {}, "application/json": {}}}}}}
    assert streaming_operations(doc) == [("GET", "/stream")]


def test_a_schema_valid_request_refused_as_documented_is_no_failure(tmp_path: Path) -> None:
    """The example's API refuses an increment of 5 (RESERVED, its 422's x-schema-valid-refusals; 5 is the body's
    example, the first request the writer's pass sends): the clean run passes; the refusals are counted, not
    reported."""
    _, report = fuzz("tests.example_system", tmp_path)
    assert not report["findings"] and report["passes"][0]["refused_as_documented"] > 0


def test_documented_refusals_name_the_operation_and_status() -> None:
    doc = {"paths": {"/a": {"post": {"responses": {"422": {"$ref": "#/components/responses/R"}, "200": {}}}}},
           "components": {"responses": {"R": {"x-schema-valid-refusals": ["FULL"]}}}}
    assert documented_refusals(doc) == {("POST /a", 422): frozenset({"FULL"})}


def test_seeded_ids_replace_the_examples_of_path_parameters() -> None:
    ref = {"name": "item_id", "in": "path", "example": "made-up"}
    doc = {"paths": {"/items/{item_id}": {"parameters": [{"$ref": "#/components/parameters/ItemId"}],
                                          "get": {"parameters": [{"name": "q", "in": "query", "example": "x"}]}}},
           "components": {"parameters": {"ItemId": ref}}}
    seeded = with_examples(doc, {"item_id": ["real-1", "real-2"], "q": ["not a path parameter"]})
    assert seeded["components"]["parameters"]["ItemId"]["examples"] == {"seeded-0": {"value": "real-1"},
                                                                       "seeded-1": {"value": "real-2"}}
    assert "example" not in seeded["components"]["parameters"]["ItemId"]
    assert seeded["paths"]["/items/{item_id}"]["get"]["parameters"][0] == {"name": "q", "in": "query", "example": "x"}
    assert doc["components"]["parameters"]["ItemId"] == ref == {"name": "item_id", "in": "path", "example": "made-up"}


def test_a_seeding_post_answers_json_in_process_and_over_http_and_refuses_anything_but_2xx() -> None:
    import pytest
    from flask import Flask, jsonify, request

    from scenarios.fuzz import bearer, seeding_post

    app = Flask("seeding")

    @app.post("/ok")
    def ok() -> Any:
        return jsonify({"auth": request.headers.get("Authorization")}), 201

    @app.post("/no")
    def no() -> Any:
        return "<html>down</html>", 503

    with serving(app) as base_url:
        for post in (seeding_post(app), seeding_post(base_url=base_url)):
            assert post("/ok", {}, bearer("t0k")) == {"auth": "Bearer t0k"}
            with pytest.raises(RuntimeError, match="seeding the fuzz world: 503 <html>down"):
                post("/no", {}, {})
