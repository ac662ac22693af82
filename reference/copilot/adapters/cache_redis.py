"""Cache and Notifier over Redis: accelerators whose loss changes no outcome (docs/systems/copilot.md, I10).

:class:`RedisCache` and :class:`RedisNotifier` swallow every Redis error: a failed ``get`` is a miss, a
failed ``set`` or ``task_changed`` does nothing, and the error is logged (once per outage, not once per
call). After a failure the adapter skips Redis for ``cooldown_s`` so that a dead or slow Redis adds no
latency to every request; the first call after the cool-down tries again, so recovery is automatic.
Calls use short socket timeouts and redis-py's own retries are disabled (redis-py ≥ 6 retries three
times with backoff by default).

:meth:`RedisNotifier.subscribe` is the one place that raises: an SSE relay must learn that its stream
ended so it can reconnect and let clients resync from the task snapshot by version (seed 003).
Messages are JSON ``{"task_id", "user_id", "status", "version"}`` on ``sortie:task-changes``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, Self

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

log = logging.getLogger("sortie.redis")

DEFAULT_CHANNEL = "sortie:task-changes"


def _client(url: str, timeout_s: float, **kwargs: Any) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                retry=Retry(NoBackoff(), 0), decode_responses=True, **kwargs)


class _Guarded:
    """Runs Redis calls so that failures become a default value, with a cool-down after a failure."""

    def __init__(self, url: str, timeout_s: float, cooldown_s: float, what: str) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.cooldown_s = cooldown_s
        self._what = what
        self._redis = _client(url, timeout_s)
        self._lock = threading.Lock()
        self._down_until = 0.0
        self._down = False
        self.errors = 0  # failed calls, for tests and metrics

    def _call(self, op: str, fn: Any, default: Any) -> Any:
        if self._down and time.monotonic() < self._down_until:
            return default
        try:
            result = fn(self._redis)
        except Exception as exc:
            with self._lock:
                self.errors += 1
                first = not self._down
                self._down = True
                self._down_until = time.monotonic() + self.cooldown_s
            if first:
                log.warning("%s: redis %s failed at %s (%s: %s); carrying on without it",
                            self._what, op, self.url, type(exc).__name__, exc)
            else:
                log.debug("%s: redis %s failed again: %s", self._what, op, exc)
            return default
        if self._down:
            with self._lock:
                self._down = False
            log.info("%s: redis at %s answers again", self._what, self.url)
        return result

    def close(self) -> None:
        self._redis.close()


class RedisCache(_Guarded):
    """``Cache``: request dedup and short caches; every Redis error is a miss or a no-op."""

    def __init__(self, url: str, *, prefix: str = "", timeout_s: float = 0.5, cooldown_s: float = 1.0) -> None:
        super().__init__(url, timeout_s, cooldown_s, "cache")
        self.prefix = prefix

    def get(self, key: str) -> str | None:
        value = self._call("GET", lambda r: r.get(self.prefix + key), None)
        return None if value is None else str(value)

    def set(self, key: str, value: str, ttl_s: float) -> None:
        ttl_ms = max(1, round(ttl_s * 1000))
        self._call("SET", lambda r: r.set(self.prefix + key, value, px=ttl_ms), None)


class Subscription:
    """An open subscription to the change channel: iterate for changes, or poll with :meth:`get`.

    Subscribed before :meth:`RedisNotifier.subscribe` returns, so a change published afterwards is
    delivered. Redis errors are raised (the stream ended); malformed messages are logged and skipped.
    """

    def __init__(self, client: redis.Redis, channel: str) -> None:
        self.channel = channel
        self._client = client
        self._pubsub = client.pubsub()
        try:
            self._pubsub.subscribe(channel)
            # Wait for the server's confirmation: from then on nothing published can be missed.
            deadline = time.monotonic() + 5.0
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise redis.TimeoutError(f"no subscribe confirmation for {channel!r} within 5 s")
                msg = self._pubsub.get_message(ignore_subscribe_messages=False, timeout=remaining)
                if msg is not None and msg.get("type") == "subscribe":
                    break
        except BaseException:
            self.close()
            raise

    def get(self, timeout_s: float = 1.0) -> dict[str, Any] | None:
        """The next change, or None if none arrived within ``timeout_s`` (for SSE keep-alives)."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            msg = self._pubsub.get_message(ignore_subscribe_messages=True, timeout=max(0.0, remaining))
            if msg is not None and msg.get("type") == "message":
                change = _decode(msg.get("data"))
                if change is not None:
                    return change
            if time.monotonic() >= deadline:
                return None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            change = self.get(timeout_s=5.0)
            if change is not None:
                yield change

    def close(self) -> None:
        try:
            self._pubsub.close()
        finally:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _decode(data: Any) -> dict[str, Any] | None:
    try:
        change = json.loads(data)
        if not isinstance(change, dict) or not {"task_id", "user_id", "status", "version"} <= change.keys():
            raise ValueError("missing fields")
        change["version"] = int(change["version"])
        return change
    except (TypeError, ValueError) as exc:
        log.warning("ignoring malformed task change %r: %s", data, exc)
        return None


class RedisNotifier(_Guarded):
    """``Notifier``: PUBLISH each task change as JSON; errors are logged and dropped."""

    def __init__(self, url: str, channel: str = DEFAULT_CHANNEL, *, timeout_s: float = 0.5,
                 cooldown_s: float = 1.0) -> None:
        super().__init__(url, timeout_s, cooldown_s, "notifier")
        self.channel = channel

    def task_changed(self, task_id: str, user_id: str, status: str, version: int) -> None:
        payload = json.dumps({"task_id": str(task_id), "user_id": str(user_id), "status": str(status),
                              "version": int(version)}, separators=(",", ":"))
        self._call("PUBLISH", lambda r: r.publish(self.channel, payload), None)

    def subscribe(self) -> Subscription:
        """Subscribe now and return an iterator of change dicts; raises Redis errors (stream lost).

        The subscription connection has no read timeout (it waits for messages) but a health check
        every 10 s, so a silently dead link is noticed.
        """
        client = redis.Redis.from_url(self.url, socket_connect_timeout=max(self.timeout_s, 2.0),
                                      socket_timeout=None, socket_keepalive=True, health_check_interval=10,
                                      retry=Retry(NoBackoff(), 0), decode_responses=True)
        return Subscription(client, self.channel)
