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
import contextlib
import json
import logging
import resource
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from kernel.logs import LOG_FORMAT
from reference.copilot.api import Reply
from reference.copilot.api import problem as api_problem
from reference.copilot.errors import DomainError
from reference.copilot.http import sse
from reference.copilot.http.notify import CLOSED, AsyncSubscription, NotificationHub, redis_relay

log = logging.getLogger("sortie.stream")

PROBLEM_MIMETYPE = "application/problem+json"
MAX_STREAMS = 20_000  # beyond this a new stream is refused with 503 SERVICE_UNAVAILABLE (clients retry)


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


def create_app(*, token_secret: str, hub: NotificationHub | None = None, heartbeat_s: float = sse.HEARTBEAT_S,
               feed: Callable[[NotificationHub, threading.Event, threading.Event], None] | None = None) -> Starlette:
    """The tier over ``hub`` (a hub of AsyncSubscriptions; a new one by default).

    ``feed(hub, ready, stop)`` runs on a thread from start-up to shutdown and puts changes into the hub
    (``redis_relay`` in the stack; tests call ``hub.task_changed`` themselves and pass none). ``/health``
    answers 503 until it set ``ready``: a stream opened after that misses nothing published later."""
    if not token_secret:
        raise ValueError("token_secret must be non-empty")
    hub = hub if hub is not None else NotificationHub(max_subscribers=MAX_STREAMS, subscription=AsyncSubscription)
    if hub.subscription is not AsyncSubscription:
        raise ValueError("the stream tier's hub must make AsyncSubscriptions")
    ready, stop = threading.Event(), threading.Event()
    if feed is None:
        ready.set()

    async def stream(request: Request) -> Response:
        try:
            me = sse.authenticate(token_secret, request.headers.get("authorization"))
            sub = hub.subscribe(me.user_id)  # now, not on the first read: no change is missed in between
        except DomainError as exc:
            return _response(sse.refusal(exc))
        assert isinstance(sub, AsyncSubscription)

        async def events() -> AsyncIterator[bytes]:
            yield sse.OPEN
            while True:
                item = await sub.next(heartbeat_s)
                if item is CLOSED:
                    return
                yield sse.HEARTBEAT if item is None else sse.frame(item)  # type: ignore[arg-type]

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
                    lifespan=lifespan)
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
    """The tier configured by the environment (SORTIE_TOKEN_SECRET, SORTIE_REDIS_URL)."""
    import os

    secret, url = os.environ.get("SORTIE_TOKEN_SECRET", ""), os.environ.get("SORTIE_REDIS_URL", "")
    if not secret:
        raise SystemExit("SORTIE_TOKEN_SECRET is required")

    def feed(hub: NotificationHub, ready: threading.Event, stop: threading.Event) -> None:
        redis_relay(url, hub, ready, stop)

    return create_app(token_secret=secret, feed=feed if url else None)


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
                              "log_level": "warning", "timeout_graceful_shutdown": 1, "lifespan": "on"}
    uvicorn.run(build_app(), **config)


if __name__ == "__main__":
    main()
