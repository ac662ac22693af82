"""The stream tier: ``GET /v1/stream`` as an ASGI app (Starlette under uvicorn), one asyncio task per open
stream instead of one gunicorn thread, so idle streams cost the API neither threads nor confirm latency.

It is fed the way the API's own hub is: ``redis_relay`` (reference/copilot/http/notify.py) reads the Redis channel
every process publishes its commits to, on one thread, into a ``NotificationHub`` of ``AsyncSubscription``s.
The wire format, the authentication and the refusals are the API's (reference/copilot/http/sse.py): a client cannot
tell the two servers apart. The stream is only an accelerator (docs/systems/copilot.md): a client that misses changes
resyncs from the task snapshot by version, at the API.

**Routing: clients get the stream's URL, the API proxies nothing.** The native stack starts this tier as its
own component on its own port and writes its address into the endpoints file (``stack.json``:
``stream_url``, and the ``stream`` Toxiproxy link for clients whose link a scenario cuts). Routing by path on
the API's address would need a reverse proxy in front of both servers: one more hop (and one more process on
a 2-core machine) on every confirm, the latency this tier exists to protect, for no gain in the harness, where
every client reads the endpoints file anyway. A deployment puts both behind its load balancer's path rules
(``/v1/stream`` here, the rest at the API); the API keeps its own ``/v1/stream`` for a stack started without
the tier (``--no-stream-tier``), for the embedded shell and for its tests.

Run: ``python -m reference.copilot.http.stream_asgi --host 127.0.0.1 --port P`` with SORTIE_TOKEN_SECRET and
SORTIE_REDIS_URL in the environment. The process raises its own open-file limit to the hard limit (one
descriptor per stream).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import resource
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from http import HTTPStatus
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from kernel.logs import LOG_FORMAT
from reference.copilot.api import Reply
from reference.copilot.api import problem as api_problem
from reference.copilot.errors import DomainError
from reference.copilot.http import sse
from reference.copilot.http.notify import CLOSED, STREAMS_PER_USER, AsyncSubscription, NotificationHub, redis_relay

log = logging.getLogger("sortie.stream")

PROBLEM_MIMETYPE = "application/problem+json"
MAX_STREAMS = 20_000  # beyond this a new stream is refused with 503 SERVICE_UNAVAILABLE (clients retry)
MAX_HEADER_BYTES = 16 * 1024  # a request's line and headers together; beyond it 431 (a stream's need ~1 KB)
HEADER_TIMEOUT_S = 10.0  # a connection's first request line and headers must arrive within this; else 408


def _response(reply: Reply) -> Response:
    media = PROBLEM_MIMETYPE if reply.status >= 400 else "application/json"
    return Response(json.dumps(reply.body, default=str), status_code=reply.status, media_type=media,
                    headers=dict(reply.headers))


class _Stream(StreamingResponse):
    """Closes its subscription however the response ends: finished, cancelled by a disconnect, or never
    started (a client gone before the first byte)."""

    def __init__(self, sub: AsyncSubscription, content: AsyncIterator[bytes]) -> None:
        super().__init__(content, media_type=sse.MEDIA_TYPE, headers=sse.HEADERS)
        self.sub = sub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.sub.close()


def headers_too_large() -> Reply:
    return api_problem(431, "HEADERS_TOO_LARGE", f"the request's headers exceed {MAX_HEADER_BYTES} bytes")


class HeaderLimit:
    """Refuses a request whose headers together exceed MAX_HEADER_BYTES (431). The protocol bounds what it buffers of
    an incomplete request (LimitedH11Protocol); a request that arrived whole in one read is measured here."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and sum(len(k) + len(v) + 4 for k, v in scope["headers"]) > MAX_HEADER_BYTES:
            await _response(headers_too_large())(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(*, token_secret: str, hub: NotificationHub | None = None, heartbeat_s: float = sse.HEARTBEAT_S,
               feed: Callable[[NotificationHub, threading.Event, threading.Event], None] | None = None,
               streams_per_user: int = STREAMS_PER_USER) -> Starlette:
    """The tier over ``hub`` (a hub of AsyncSubscriptions; a new one by default).

    ``feed(hub, ready, stop)`` runs on a thread from start-up to shutdown and puts changes into the hub
    (``redis_relay`` in the stack; tests call ``hub.task_changed`` themselves and pass none). ``/health``
    answers 503 until it set ``ready``: a stream opened after that misses nothing published later."""
    if not token_secret:
        raise ValueError("token_secret must be non-empty")
    hub = hub if hub is not None else NotificationHub(max_subscribers=MAX_STREAMS, subscription=AsyncSubscription,
                                                      max_per_user=streams_per_user)
    if hub.subscription is not AsyncSubscription:
        raise ValueError("the stream tier's hub must make AsyncSubscriptions")
    ready, stop = threading.Event(), threading.Event()
    if feed is None:
        ready.set()

    async def stream(request: Request) -> Response:
        try:
            me, expires_at = sse.authenticate_until(token_secret, request.headers.get("authorization"))
            sub = hub.subscribe(me.user_id)  # now, not on the first read: no change is missed in between
        except DomainError as exc:
            return _response(sse.refusal(exc))
        assert isinstance(sub, AsyncSubscription)

        async def events() -> AsyncIterator[bytes]:
            yield sse.OPEN
            while True:
                wait = sse.next_wait(heartbeat_s, expires_at, time.time())
                if wait is None:
                    yield sse.EXPIRED
                    return
                item = await sub.next(wait)
                if item is CLOSED:
                    return
                yield sse.HEARTBEAT if item is None else sse.event(item)  # type: ignore[arg-type]

        return _Stream(sub, events())

    async def health(request: Request) -> Response:
        body = {"status": "ok" if ready.is_set() else "starting", "streams": hub.subscriber_count(),
                "relay": "subscribed" if ready.is_set() else "connecting"}
        return Response(json.dumps(body), status_code=200 if ready.is_set() else 503, media_type="application/json")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        headers = dict(exc.headers or {})
        return _response(api_problem(exc.status_code, sse.http_code(exc.status_code, "error"), str(exc.detail),
                                     headers=headers))

    async def internal_error(request: Request, exc: Exception) -> Response:
        from reference.copilot.api import problem_of

        return _response(problem_of(exc))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        thread = None
        if feed is not None:
            thread = threading.Thread(target=feed, args=(hub, ready, stop), name="redis-relay", daemon=True)
            thread.start()
        try:
            yield
        finally:
            stop.set()
            hub.close()

    app = Starlette(routes=[Route("/v1/stream", stream, methods=["GET"]), Route("/health", health, methods=["GET"])],
                    exception_handlers={HTTPException: http_error, Exception: internal_error},
                    middleware=[Middleware(HeaderLimit)], lifespan=lifespan)
    app.state.hub = hub
    return app


def raise_open_files_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit (one descriptor per open stream); returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            log.warning("could not raise the open-file limit from %d", soft)
    return soft


def build_app() -> Starlette:
    """The tier configured by the environment (SORTIE_TOKEN_SECRET, SORTIE_REDIS_URL, SORTIE_STREAMS_PER_USER)."""
    from reference.copilot.settings import Settings

    settings = Settings.from_env(database=False)
    secret, url = settings.token_secret, settings.redis_url
    if not secret:
        raise SystemExit("SORTIE_TOKEN_SECRET is required")

    def feed(hub: NotificationHub, ready: threading.Event, stop: threading.Event) -> None:
        redis_relay(url, hub, ready, stop)

    return create_app(token_secret=secret, feed=feed if url else None, streams_per_user=settings.streams_per_user)


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the tier's request limits, answered in problem+json like everything else.

    httptools (uvicorn's default when installed) reads a request's headers without a size limit: an 8 MB header
    opened a stream. h11 bounds them (``h11_max_incomplete_event_size``: MAX_HEADER_BYTES here), and a
    connection must deliver its first request's headers within HEADER_TIMEOUT_S (uvicorn has no such timeout: a
    client that trickles a header for ever held its connection and buffer)."""

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._header_deadline: asyncio.TimerHandle | None = self.loop.call_later(HEADER_TIMEOUT_S,
                                                                                 self._headers_too_slow)

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and self._header_deadline is not None:  # a request's headers arrived
            self._header_deadline.cancel()
            self._header_deadline = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None
        super().connection_lost(exc)

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if self.cycle is None and not self.transport.is_closing():
            late = f"no request headers within {HEADER_TIMEOUT_S:g} s"
            self._write_problem(api_problem(408, "REQUEST_TIMEOUT", late))

    def send_400_response(self, msg: str) -> None:
        """uvicorn calls this inside its ``except h11.RemoteProtocolError``: the error says whether the headers were
        too large (431) or malformed (400)."""
        error = sys.exc_info()[1]
        status = getattr(error, "error_status_hint", 400)
        self._write_problem(headers_too_large() if status == 431 else api_problem(400, "BAD_REQUEST",
                                                                                  "the request is malformed"))

    def _write_problem(self, reply: Reply) -> None:
        body, status = json.dumps(reply.body).encode(), reply.status
        head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {PROBLEM_MIMETYPE}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
        self.transport.write(head.encode("latin-1") + body)
        self.transport.close()


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m reference.copilot.http.stream_asgi",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--backlog", type=int, default=4096)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    log.info("open-file limit %d", raise_open_files_limit())
    config: dict[str, Any] = {"host": args.host, "port": args.port, "backlog": args.backlog, "access_log": False,
                              "log_level": "warning", "timeout_graceful_shutdown": 1, "lifespan": "on",
                              "http": LimitedH11Protocol, "h11_max_incomplete_event_size": MAX_HEADER_BYTES}
    uvicorn.run(build_app(), **config)


if __name__ == "__main__":
    main()
