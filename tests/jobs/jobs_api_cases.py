"""The job API's bad-input catalogue (issue 55, point 6): each request as raw bytes, with the status and code it must
be answered with. The in-process tests (tests/jobs/test_jobs_api.py) and the real server's
(tests/postgres/test_jobs_api_pg.py: gunicorn on PostgreSQL, as systems/jobs/stack.py runs it) both send every one."""

from __future__ import annotations

from typing import NamedTuple


class Case(NamedTuple):
    name: str
    method: str
    path: str
    body: bytes | None  # sent as application/json
    status: int
    code: str


def _job(type_: str = '"survey"', key: str = '"k-bad"', extra: str = "") -> bytes:
    return f'{{"type": {type_}, "key": {key}{extra}}}'.encode()


DEEP = 100_000
CASES = [
    Case("type over 64 characters", "POST", "/v1/jobs", _job(f'"{"t" * 65}"'), 400, "INVALID_REQUEST"),
    Case("key over 200 characters", "POST", "/v1/jobs", _job(key=f'"{"k" * 201}"'), 400, "INVALID_REQUEST"),
    Case("NUL in the key", "POST", "/v1/jobs", _job(key='"a\\u0000b"'), 400, "MALFORMED_JSON"),
    Case("NUL in the type", "POST", "/v1/jobs", _job('"sur\\u0000vey"'), 400, "MALFORMED_JSON"),
    Case("lone surrogate in the key", "POST", "/v1/jobs", _job(key='"a\\ud800"'), 400, "MALFORMED_JSON"),
    Case("lone surrogate in the type", "POST", "/v1/jobs", _job('"\\udfff"'), 400, "MALFORMED_JSON"),
    Case(f"payload nested {DEEP:,} deep", "POST", "/v1/jobs",
         _job(extra=', "payload": ' + "[" * DEEP + "]" * DEEP), 400, "MALFORMED_JSON"),
    Case("payload NaN", "POST", "/v1/jobs", _job(extra=', "payload": NaN'), 400, "MALFORMED_JSON"),
    Case("payload Infinity", "POST", "/v1/jobs", _job(extra=', "payload": {"x": -Infinity}'), 400, "MALFORMED_JSON"),
    Case("a number too large for a double", "POST", "/v1/jobs", _job(extra=', "payload": 1e999'), 400,
         "MALFORMED_JSON"),
    Case("duplicate key", "POST", "/v1/jobs", b'{"type": "survey", "key": "k1", "key": "k2"}', 400, "MALFORMED_JSON"),
    Case("duplicate key in the payload", "POST", "/v1/jobs", _job(extra=', "payload": {"a": 1, "a": 2}'), 400,
         "MALFORMED_JSON"),
    Case("timeout 0", "POST", "/v1/jobs", _job(extra=', "timeout_s": 0'), 400, "INVALID_REQUEST"),
    Case("an unknown field", "POST", "/v1/jobs", _job(extra=', "priority": 1'), 400, "INVALID_REQUEST"),
    Case("a list body", "POST", "/v1/jobs", b"[1, 2]", 400, "INVALID_REQUEST"),
    Case("not JSON", "POST", "/v1/jobs", b"{type: survey", 400, "MALFORMED_JSON"),
    Case("mission id over 64 characters", "POST", "/v1/missions",
         f'{{"id": "{"m" * 65}", "steps": [{{"name": "a", "type": "survey"}}]}}'.encode(), 400, "INVALID_REQUEST"),
    Case("mission step type over 64", "POST", "/v1/missions",
         f'{{"id": "m-bad", "steps": [{{"name": "a", "type": "{"t" * 65}"}}]}}'.encode(), 400, "INVALID_REQUEST"),
    Case("mission step name with NUL", "POST", "/v1/missions",
         b'{"id": "m-bad", "steps": [{"name": "a\\u0000", "type": "survey"}]}', 400, "MALFORMED_JSON"),
    Case("mission edge of two", "POST", "/v1/missions",
         b'{"id": "m-bad", "steps": [{"name": "a", "type": "survey"}], "edges": [["a", "b"]]}', 400,
         "INVALID_REQUEST"),
    Case("GET /v1/jobs/2**63", "GET", f"/v1/jobs/{2**63}", None, 404, "JOB_NOT_FOUND"),
    Case("GET /v1/jobs/10**30", "GET", f"/v1/jobs/{10**30}", None, 404, "JOB_NOT_FOUND"),
    Case("GET /v1/jobs/abc", "GET", "/v1/jobs/abc", None, 404, "JOB_NOT_FOUND"),
    Case("GET /v1/jobs/-1", "GET", "/v1/jobs/-1", None, 404, "JOB_NOT_FOUND"),
    Case("GET /v1/jobs/0", "GET", "/v1/jobs/0", None, 404, "JOB_NOT_FOUND"),
    Case("cancel of 2**63", "POST", f"/v1/jobs/{2**63}/cancel", None, 404, "JOB_NOT_FOUND"),
    Case("an unknown route", "GET", "/v1/nothing-here", None, 404, "NOT_FOUND"),
    Case("an unknown route under a job", "GET", "/v1/jobs/1/children", None, 404, "NOT_FOUND"),
    Case("DELETE a job", "DELETE", "/v1/jobs/1", None, 405, "METHOD_NOT_ALLOWED"),
    Case("GET the enqueue route", "PUT", "/v1/jobs", None, 405, "METHOD_NOT_ALLOWED"),
    Case("GET a mission route", "GET", "/v1/missions", None, 405, "METHOD_NOT_ALLOWED"),
]
