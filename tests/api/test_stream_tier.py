"""The async stream tier (reference/copilot/http/stream_asgi.py) in-process, through Starlette's TestClient, with the
hub
fed by the test instead of Redis: refusals (problem+json, stable codes), the wire format it shares with the API
(reference/copilot/http/sse.py), heartbeats, delivery of a published change to its user's streams only, and the
subscription's end when the client goes away. No wall-clock assertions: reads and waits have deadlines."""

from __future__ import annotations

import json
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from api_support import NEIGHBOUR, OWNER, SECRET

from reference.copilot.http import sse
from reference.copilot.http.auth import issue_token
from reference.copilot.http.notify import AsyncSubscription, NotificationHub, TaskChange
from reference.copilot.http.stream_asgi import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette's TestClient announces its move from httpx to httpx2
    from starlette.testclient import TestClient


def _auth(user: str = OWNER, secret: str = SECRET) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(secret, user)}"}


def _wait(what: str, cond: Any, deadline_s: float = 5.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {deadline_s} s: {what}")
        time.sleep(0.01)  # polling a condition with a deadline, not sleeping for synchronisation


class Reader:
    """The byte chunks of an open stream, read on a thread so a test waits with a deadline, never for ever."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.buf = b""
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._pump, args=(chunks,), daemon=True)
        self._thread.start()

    def _pump(self, chunks: Iterator[bytes]) -> None:
        try:
            for chunk in chunks:
                with self._cond:
                    self.buf += chunk
                    self._cond.notify_all()
        except Exception:  # the stream was closed under the reader
            pass

    def until(self, marker: bytes, deadline_s: float = 5.0) -> bytes:
        """Everything up to and including the first ``marker``, consumed from the buffer."""
        end = time.monotonic() + deadline_s
        with self._cond:
            while marker not in self.buf:
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {marker!r} within {deadline_s} s; got {self.buf!r}")
                self._cond.wait(left)
            head, _, self.buf = self.buf.partition(marker)
            return head + marker


@pytest.fixture
def tier() -> Iterator[tuple[TestClient, NotificationHub]]:
    hub = NotificationHub(subscription=AsyncSubscription)
    app = create_app(token_secret=SECRET, hub=hub, heartbeat_s=0.2)
    with TestClient(app) as client:
        yield client, hub


def assert_problem(resp: Any, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    body = resp.json()
    assert body["code"] == code and body["status"] == status, body
    assert body["type"] == "https://sortie.dev/problems/" + code.lower().replace("_", "-")
    assert body["title"] and isinstance(body["detail"], str) and "Traceback" not in body["detail"]
    return dict(body)


def test_a_stream_needs_a_valid_token(tier: tuple[TestClient, NotificationHub]) -> None:
    client, hub = tier
    assert_problem(client.get("/v1/stream"), 401, "UNAUTHENTICATED")
    assert_problem(client.get("/v1/stream", headers={"Authorization": "Basic abc"}), 401, "UNAUTHENTICATED")
    assert_problem(client.get("/v1/stream", headers={"Authorization": "Bearer not-a-jwt"}), 401, "INVALID_TOKEN")
    assert_problem(client.get("/v1/stream", headers=_auth(secret="another-secret-0123456789abcdefghijklmnop")),
                   401, "INVALID_TOKEN")
    expired = issue_token(SECRET, OWNER, ttl_s=-60)
    assert_problem(client.get("/v1/stream", headers={"Authorization": f"Bearer {expired}"}), 401, "INVALID_TOKEN")
    assert hub.subscriber_count() == 0


def test_routing_refusals_are_problems_too(tier: tuple[TestClient, NotificationHub]) -> None:
    client, _ = tier
    body = assert_problem(client.post("/v1/stream", headers=_auth()), 405, "METHOD_NOT_ALLOWED")
    assert body["status"] == 405
    assert "GET" in client.post("/v1/stream", headers=_auth()).headers["allow"]
    assert_problem(client.get("/v1/tasks", headers=_auth()), 404, "NOT_FOUND")


def test_too_many_streams_is_a_503_the_client_retries() -> None:
    hub = NotificationHub(max_subscribers=1, subscription=AsyncSubscription)
    with TestClient(create_app(token_secret=SECRET, hub=hub, heartbeat_s=0.2)) as client, \
            client.stream("GET", "/v1/stream", headers=_auth()) as first:
        assert first.status_code == 200
        assert_problem(client.get("/v1/stream", headers=_auth(NEIGHBOUR)), 503, "SERVICE_UNAVAILABLE")


def test_framing_heartbeat_and_delivery_of_a_change(tier: tuple[TestClient, NotificationHub]) -> None:
    client, hub = tier
    with client.stream("GET", "/v1/stream", headers=_auth()) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["cache-control"] == "no-cache" and resp.headers["x-accel-buffering"] == "no"
        reader = Reader(resp.iter_bytes())
        assert reader.until(b"\n\n") == b"retry: 3000\n: stream open\n\n" == sse.OPEN
        assert hub.subscriber_count(OWNER) == 1  # subscribed before the first byte: nothing published is missed
        assert reader.until(b"\n\n") == b": heartbeat\n\n"  # nothing happened within heartbeat_s
        # Published from another thread (as the Redis relay does): another user's change is not this stream's.
        hub.task_changed("t-other", NEIGHBOUR, "QUEUED", 1)
        hub.task_changed("t-1", OWNER, "EXECUTING", 4)
        event = reader.until(b"\n\n", deadline_s=5.0)
        while event == sse.HEARTBEAT:
            event = reader.until(b"\n\n", deadline_s=5.0)
        assert event == sse.frame(TaskChange("t-1", OWNER, "EXECUTING", 4))
        lines = event.decode().splitlines()
        assert lines[0] == "id: t-1:4" and lines[1] == "event: task"
        assert json.loads(lines[2].removeprefix("data: ")) == {"task_id": "t-1", "status": "EXECUTING", "version": 4}
    _wait("the subscription ends with the client", lambda: hub.subscriber_count() == 0)


def test_every_stream_of_the_user_gets_the_change_and_ends_when_the_hub_closes() -> None:
    hub = NotificationHub(subscription=AsyncSubscription)
    app = create_app(token_secret=SECRET, hub=hub, heartbeat_s=5.0)
    with TestClient(app) as client, client.stream("GET", "/v1/stream", headers=_auth()) as a, \
            client.stream("GET", "/v1/stream", headers=_auth()) as b:
        readers = [Reader(a.iter_bytes()), Reader(b.iter_bytes())]
        for r in readers:
            r.until(sse.OPEN)
        _wait("both streams subscribed", lambda: hub.subscriber_count(OWNER) == 2)
        hub.task_changed("t-2", OWNER, "COMPLETED", 6)
        for r in readers:
            assert r.until(b"\n\n") == sse.frame(TaskChange("t-2", OWNER, "COMPLETED", 6))
        hub.close()  # server shutdown: each stream ends (the body finishes), no subscription is left
        _wait("both subscriptions closed", lambda: hub.subscriber_count() == 0)


def test_health_waits_for_the_feed() -> None:
    started, release = threading.Event(), threading.Event()

    def feed(hub: NotificationHub, ready: threading.Event, stop: threading.Event) -> None:
        started.set()
        release.wait(10)
        ready.set()
        stop.wait(10)

    with TestClient(create_app(token_secret=SECRET, feed=feed)) as client:
        assert started.wait(5)
        resp = client.get("/health")
        assert resp.status_code == 503 and resp.json()["status"] == "starting"
        release.set()
        _wait("the feed is ready", lambda: client.get("/health").status_code == 200)
        assert client.get("/health").json() == {"status": "ok", "streams": 0, "relay": "subscribed"}


def test_a_hub_of_thread_subscriptions_is_refused() -> None:
    with pytest.raises(ValueError, match="AsyncSubscription"):
        create_app(token_secret=SECRET, hub=NotificationHub())
