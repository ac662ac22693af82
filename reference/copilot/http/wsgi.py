"""The API as a WSGI app for gunicorn: `gunicorn 'reference.copilot.http.wsgi:app'`, configured by SORTIE_* env.

With SORTIE_REDIS_URL set, every process (API workers and background workers alike) publishes task
changes to Redis, and this process's SSE hub is fed from the Redis channel from the first stream opened
here (notify.RelayOnDemand), so a stream sees changes made anywhere. Without Redis the hub only sees this
process's own commits (streams are an accelerator; clients resync by version)."""

from __future__ import annotations

import logging

from flask import Flask

from kernel.logs import LOG_FORMAT
from reference.copilot.http.app import create_app
from reference.copilot.http.notify import NotificationHub, RelayOnDemand
from reference.copilot.settings import Settings, build_runtime

log = logging.getLogger("sortie.api")


def build_app() -> Flask:
    settings = Settings.from_env()
    # The platform client serves one use case: a supervisor's review asks the platform first (services.review).
    runtime = build_runtime(settings, role="api", platform=bool(settings.platform_url))
    hub = NotificationHub(max_subscribers=settings.api_max_streams, max_per_user=settings.streams_per_user)
    cache = relay = None
    if settings.redis_url:
        from reference.copilot.adapters.cache_redis import RedisCache

        cache = RedisCache(settings.redis_url)
        relay = RelayOnDemand(settings.redis_url, hub)
    app = create_app(runtime, token_secret=settings.token_secret, webhook_token=settings.webhook_token, hub=hub,
                     cache=cache, server_timing=settings.server_timing, before_stream=relay)
    if settings.redis_url:
        from reference.copilot.adapters.cache_redis import RedisNotifier

        runtime.notifier = RedisNotifier(settings.redis_url)  # the hub hears our own commits through Redis too
    return app


# Records as the harness reads them (kernel.logs.defects_in_log): a defect a request met shows in I27 on the stack.
logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
app = build_app()
