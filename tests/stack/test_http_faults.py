"""The HTTP fault proxy (stack.http_faults) in process, in front of a real upstream HTTP server on a thread:
requests are forwarded as sent, a fault answers its status on its prefix only and until cleared, a bad control
request is refused with a problem and changes nothing, an unreachable upstream is a 502."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from werkzeug.serving import make_server
from werkzeug.test import Client
from werkzeug.wrappers import Request, Response

from stack.common import LOOPBACK, free_port
from stack.http_faults import CONTROL, FaultProxyApp


@Request.application
def echo(request: Request) -> Response:
    body = {"method": request.method, "path": request.path, "query": request.query_string.decode(),
            "body": request.get_data(as_text=True), "key": request.headers.get("X-API-Key")}
    return Response(json.dumps(body), 201 if request.path == "/created" else 200, content_type="application/json")


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    server = make_server(LOOPBACK, free_port(), echo, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://{LOOPBACK}:{server.server_port}"
    server.shutdown()
    thread.join(5)


def test_requests_are_forwarded_as_sent(upstream: str) -> None:
    client = Client(FaultProxyApp(upstream))
    resp = client.post("/api/publish?x=1", data='{"channel": "c"}', headers={"X-API-Key": "k"})
    assert resp.status_code == 200
    assert resp.get_json() == {"method": "POST", "path": "/api/publish", "query": "x=1", "body": '{"channel": "c"}',
                               "key": "k"}
    assert client.get("/created").status_code == 201  # the upstream's status, whatever it is


def test_a_fault_answers_its_status_on_its_prefix_until_cleared(upstream: str) -> None:
    client = Client(FaultProxyApp(upstream))
    assert client.put(CONTROL, json={"status": 503, "prefix": "/api/"}).status_code == 200
    faulted = client.post("/api/publish", data="{}")
    assert faulted.status_code == 503 and faulted.get_json()["code"] == "INJECTED_FAULT"
    assert client.get("/connection/websocket").status_code == 200  # outside the prefix: forwarded
    assert client.get(CONTROL).get_json() == {"fault": {"status": 503, "prefix": "/api/"}, "answered": 1}
    assert client.put(CONTROL, json={"status": 429}).status_code == 200  # prefix "/" by default
    assert client.get("/anything").status_code == 429
    assert client.delete(CONTROL).status_code == 200
    assert client.post("/api/publish", data="{}").status_code == 200


@pytest.mark.parametrize("body", [{"status": 200}, {"status": "503"}, {"status": True},
                                  {"status": 503, "prefix": "api"}, {"status": 503, "prefix": CONTROL},
                                  {"status": 503, "other": 1}, [503]])
def test_a_bad_control_request_is_refused_and_changes_nothing(upstream: str, body: object) -> None:
    app = FaultProxyApp(upstream)
    client = Client(app)
    client.put(CONTROL, json={"status": 503})
    resp = client.put(CONTROL, json=body)
    assert resp.status_code == 400 and resp.mimetype == "application/problem+json"
    assert resp.get_json()["code"] == "BAD_FAULT"
    assert app.fault is not None and app.fault.status == 503
    assert client.put(CONTROL, data="not json").status_code == 400


def test_an_unreachable_upstream_is_a_bad_gateway() -> None:
    resp = Client(FaultProxyApp(f"http://{LOOPBACK}:{free_port()}")).get("/api/info")
    assert resp.status_code == 502 and resp.get_json()["code"] == "UPSTREAM_UNREACHABLE"
