"""Server-Timing: with ``server_timing`` on, every answer (problems too) carries the handler's wall time and its
thread's CPU time, which a load run's client parses (reference.copilot.http.server_timing.parse) and reports per
endpoint (loadtests.analysis); off by default."""

from __future__ import annotations

import pytest
from api_support import OWNER, SECRET, WEBHOOK_TOKEN, build_api

from loadtests.analysis import endpoints_from_requests
from reference.copilot.http.app import create_app
from reference.copilot.http.auth import issue_token
from reference.copilot.http.server_timing import parse as server_timing


def _client(on: bool):  # type: ignore[no-untyped-def]
    base = build_api()
    app = create_app(base.runtime, token_secret=SECRET, webhook_token=WEBHOOK_TOKEN, server_timing=on)
    return app.test_client()


def test_every_answer_carries_the_handlers_wall_and_cpu_time_when_on() -> None:
    client = _client(True)
    ok = client.get("/health")
    refused = client.get("/v1/tasks/x")  # no token: a problem, timed too
    token = issue_token(SECRET, OWNER, ttl_s=60)
    missing = client.get("/v1/tasks/00000000-0000-0000-0000-000000000000",
                         headers={"Authorization": f"Bearer {token}"})
    for resp in (ok, refused, missing):
        timing = server_timing(resp.headers.get("Server-Timing"))
        assert set(timing) == {"app", "cpu"}, resp.headers
        assert timing["cpu"] >= 0 and timing["app"] > 0
    assert (ok.status_code, refused.status_code, missing.status_code) == (200, 401, 404)


def test_no_timing_leaves_the_api_by_default() -> None:
    assert "Server-Timing" not in _client(False).get("/health").headers


@pytest.mark.parametrize(("header", "parsed"), [
    ("app;dur=3.25, cpu;dur=1.5", {"app": 3.25, "cpu": 1.5}),
    ('cache;desc="hit", db;dur="2"', {"db": 2.0}),
    ("app;dur=abc, cpu;dur=-1, x;dur=inf, ;dur=4", {}),
    (None, {}),
])
def test_the_header_is_parsed_leniently(header: str | None, parsed: dict[str, float]) -> None:
    assert server_timing(header) == parsed


def test_a_load_runs_endpoint_figures_include_the_apis_own_time_when_the_client_logged_it() -> None:
    timed = [{"name": "POST /c", "t": 10.0 + i, "ms": 20.0 + i, "failed": False, "server_ms": 5.0 + i,
              "cpu_ms": 2.0} for i in range(10)]
    untimed = [{"name": "GET /r", "t": 10.0, "ms": 3.0, "failed": False}]
    figures = endpoints_from_requests(timed + untimed, (0.0, 100.0))
    c = figures["POST /c"]
    assert (c["server_cpu_n"], c["server_cpu_mean_ms"], c["server_cpu_p50_ms"]) == (10, 2.0, 2.0)
    assert c["server_p50_ms"] < c["p50_ms"] and c["server_n"] == 10
    assert not any(k.startswith("server") for k in figures["GET /r"])
