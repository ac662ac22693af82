"""The stream tier's limits on the real server, started as the native stack starts it (``python -m
reference.copilot.http.stream_asgi``: uvicorn with the tier's protocol), without Redis (issue 55 point 3): a per-user
stream cap (429 TOO_MANY_STREAMS), a bound on the request's headers (431) and on how long they may take to arrive
(408), all problem+json; a stream ends when its token expires. Waits are on conditions with deadlines; nothing
asserts a wall-clock time."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from api_support import NEIGHBOUR, OWNER, SECRET
from served_api import RawStream, raw_request, stream_tier

from reference.copilot.http.auth import issue_token
from reference.copilot.http.stream_asgi import MAX_HEADER_BYTES

STREAMS_PER_USER = 3


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with stream_tier(tmp_path_factory.mktemp("stream-tier"), streams_per_user=STREAMS_PER_USER) as url:
        yield url


def _problem(raw: RawStream) -> dict[str, object]:
    raw.closed_by_server()
    head, _, body = raw.buf.partition(b"\r\n\r\n")
    assert b"application/problem+json" in head.lower(), head
    return dict(json.loads(body))


def test_a_user_holds_at_most_the_cap_of_streams(tier: str) -> None:
    held = [RawStream(tier, issue_token(SECRET, OWNER)) for _ in range(STREAMS_PER_USER)]
    try:
        for s in held:
            assert s.status() == 200 and b"stream open" in s.read_until(b"stream open")
        refused = RawStream(tier, issue_token(SECRET, OWNER))
        assert refused.status() == 429
        body = _problem(refused)
        assert body["code"] == "TOO_MANY_STREAMS" and body["limit"] == STREAMS_PER_USER
        other = RawStream(tier, issue_token(SECRET, NEIGHBOUR))  # another user is not held back
        assert other.status() == 200
        other.close()
    finally:
        for s in held:
            s.close()


@pytest.mark.parametrize("size", [MAX_HEADER_BYTES + 1024, 8 * 1024 * 1024], ids=["just-over", "8-MB"])
def test_headers_beyond_the_limit_open_no_stream(tier: str, size: int) -> None:
    """Answered 431 problem+json; or, when the server closed while an 8 MB request was still arriving, reset (the
    kernel may then drop the answer): never a stream."""
    raw = RawStream(tier, issue_token(SECRET, OWNER), extra_headers=b"X-Filler: " + b"a" * size + b"\r\n")
    try:
        raw.closed_by_server()
        assert b"stream open" not in raw.buf
        if not (raw.reset and not raw.buf):
            assert raw.status() == 431
            assert _problem(raw)["code"] == "HEADERS_TOO_LARGE"
        else:
            assert size > 2 * MAX_HEADER_BYTES, "only a request far over the limit may be cut off"
    finally:
        raw.close()


def test_headers_that_stop_arriving_are_a_408_problem(tier: str) -> None:
    status, headers, body = raw_request(tier, b"GET /v1/stream HTTP/1.1\r\nHost: x\r\nAuthoriz", deadline_s=60)
    assert status == 408 and headers["content-type"] == "application/problem+json"
    assert json.loads(body)["code"] == "REQUEST_TIMEOUT"


def test_a_stream_ends_when_its_token_expires(tier: str) -> None:
    raw = RawStream(tier, issue_token(SECRET, NEIGHBOUR, ttl_s=2))
    try:
        assert raw.status() == 200
        assert raw.closed_by_server(deadline_s=30), f"the stream outlived its token: {raw.buf[-200:]!r}"
        assert b'event: expired\ndata: {"code":"TOKEN_EXPIRED"}\n\n' in raw.buf
    finally:
        raw.close()
