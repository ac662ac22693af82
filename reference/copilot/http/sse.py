"""The SSE wire format and the stream's authentication: one copy for both servers of ``GET /v1/stream``.

Two servers hold streams: the API itself (Flask under gunicorn gthread, one thread per open stream; used by
the tests, the embedded shell and a stack started without the stream tier) and the async stream tier
(reference/copilot/http/stream_asgi.py, one asyncio task per stream). Both frame changes, heartbeats and the opening
``retry:`` hint here, and both authenticate with :func:`authenticate` and answer its refusals with
:func:`refusal`, so a client cannot tell which one it talks to.
"""

from __future__ import annotations

import json

from reference.copilot.api import Principal, Reply, problem_of
from reference.copilot.errors import DomainError
from reference.copilot.http.auth import bearer_token, verify_token_expiry
from reference.copilot.http.notify import RESYNC, Item, TaskChange

HEARTBEAT_S = 15.0  # a comment line this often: proxies keep the connection, the server notices a gone client
RETRY_MS = 3000  # the client's reconnect delay (EventSource's ``retry:``)
MEDIA_TYPE = "text/event-stream"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # no proxy may buffer the stream

OPEN = f"retry: {RETRY_MS}\n: stream open\n\n".encode()
HEARTBEAT = b": heartbeat\n\n"
# The last event of a stream whose token expired: the client reconnects with a fresh token.
EXPIRED = b'event: expired\ndata: {"code":"TOKEN_EXPIRED"}\n\n'
# The stream may have missed changes (its queue overflowed, or its feed lost Redis): the client rereads the
# persisted state (GET /v1/tasks, then each task it knows) and goes on listening.
RESYNC_FRAME = b'event: resync\ndata: {"code":"MISSED_CHANGES"}\n\n'


# The stable codes of the servers' own refusals (routing, framing), before any use case runs.
HTTP_CODES = {
    400: "BAD_REQUEST",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    406: "NOT_ACCEPTABLE",
    408: "REQUEST_TIMEOUT",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    431: "REQUEST_HEADER_FIELDS_TOO_LARGE",
}


def http_code(status: int, name: str) -> str:
    """The problem code of a server's own refusal: the table's, else the status's name in upper snake case."""
    return HTTP_CODES.get(status) or name.upper().replace(" ", "_").replace("'", "")


def frame(change: TaskChange) -> bytes:
    """One change as an SSE event: ``id: <task>:<version>`` (resync point), ``event: task``, JSON data."""
    data = json.dumps(
        {"task_id": change.task_id, "status": change.status, "version": change.version}, separators=(",", ":")
    )
    return f"id: {change.task_id}:{change.version}\nevent: task\ndata: {data}\n\n".encode()


def event(item: Item) -> bytes:
    """What a stream sends for an item of its queue: the change's frame, or the resync hint."""
    return RESYNC_FRAME if item is RESYNC else frame(item)  # type: ignore[arg-type]


def authenticate(token_secret: str, authorization: str | None) -> Principal:
    """The stream's caller from its ``Authorization`` header; raises Unauthenticated (UNAUTHENTICATED,
    INVALID_TOKEN) like every other route of the API."""
    return authenticate_until(token_secret, authorization)[0]


def authenticate_until(token_secret: str, authorization: str | None) -> tuple[Principal, float]:
    """authenticate's caller, and when its token expires (epoch seconds): the stream ends there."""
    return verify_token_expiry(token_secret, bearer_token(authorization))


def next_wait(heartbeat_s: float, expires_at: float, now: float) -> float | None:
    """How long a stream waits for its next change before a heartbeat: at most until its token expires. None once
    it has expired: the stream sends EXPIRED and ends (a token's permission does not outlive it on a stream)."""
    left = expires_at - now
    return None if left <= 0 else max(0.0, min(heartbeat_s, left))


def refusal(error: DomainError) -> Reply:
    """What a refused stream answers (problem+json with a stable code), as the API's error mapping says."""
    return problem_of(error)
