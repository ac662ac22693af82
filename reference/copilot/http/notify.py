"""In-process fan-out of task changes to SSE streams (the Notifier port of kernel/ports.py).

The stream only speeds clients up (docs/systems/copilot.md, seed 003): every subscriber has a bounded queue, and a
publisher never blocks and never raises. Where a stream may have missed a change it is told so (``RESYNC``, the SSE
``event: resync``) and the client resyncs from the persisted state (``GET /v1/tasks``, the task snapshot or
``GET /v1/tasks/<id>/events?after_version=N``): when its queue overflows (the queue is then replaced by the one hint)
and when the Redis relay that feeds the hub comes back after losing Redis (every change published meanwhile is gone:
Redis pub/sub keeps nothing for a subscriber that is not there).

Two kinds of subscription share the hub and its queue rule: ``Subscription`` for a thread that blocks
(the API's gthread streams) and ``AsyncSubscription`` for an asyncio task (the stream tier,
reference/copilot/http/stream_asgi.py). ``redis_relay`` feeds a hub from the Redis channel every process publishes
to; the stream tier runs it from start-up, the API from its first stream (``RelayOnDemand``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Final

from reference.copilot import bugs, coverage
from reference.copilot.errors import DomainError, ServiceUnavailable

log = logging.getLogger("sortie.api.notify")

# Streams one user may hold open at one server process (SORTIE_STREAMS_PER_USER): a client needs one per tab or
# device; beyond it a stream is refused 429 TOO_MANY_STREAMS, so one user's streams cannot take a server's
# capacity (the API's gthread threads) from everyone else.
STREAMS_PER_USER = 4


@dataclass(frozen=True)
class TaskChange:
    task_id: str
    user_id: str
    status: str
    version: int


class _Closed:
    def __repr__(self) -> str:
        return "CLOSED"


CLOSED: Final = _Closed()  # what Subscription.get returns once the subscription or the hub is closed


class _Resync:
    def __repr__(self) -> str:
        return "RESYNC"


RESYNC: Final = _Resync()  # what Subscription.get returns where the stream may have missed changes: resync
Item = TaskChange | _Resync

QUEUE_OVERFLOWED = coverage.target(
    "stream-queue-overflowed", "a stream's queue overflowed: what it held was replaced by one resync hint")
FANNED_TO_SEVERAL = coverage.target(
    "stream-fan-out-to-several", "a change reached two or more open streams of its user (another tab, another "
    "console: each must hear it)")
TOLD_TO_RESYNC = coverage.target(
    "stream-told-to-resync", "the hub's feed came back after losing Redis and told the open streams to resync (the "
    "changes published meanwhile are gone)")


class Subscription:
    """One stream's queue of the changes of one user's tasks."""

    def __init__(self, hub: NotificationHub, user_id: str, maxsize: int) -> None:
        self.user_id = user_id
        self.dropped = 0  # changes lost to overflow: the client resyncs by version
        self._hub = hub
        self._items: deque[Item] = deque(maxlen=maxsize)
        self._cond = threading.Condition()
        self._closed = False

    def _push(self, change: Item) -> None:
        """The queue rule of every subscription: bounded; on overflow what it holds is replaced by one RESYNC (the
        client rereads the persisted state, so the changes it would have heard add nothing), and a RESYNC already
        waiting makes another one redundant."""
        if self._closed:
            return
        if change is RESYNC and RESYNC in self._items:
            return
        if len(self._items) == self._items.maxlen:
            coverage.reached(QUEUE_OVERFLOWED)
            self.dropped += sum(1 for item in self._items if item is not RESYNC)
            self._items.clear()
            change = RESYNC
        self._items.append(change)

    def put(self, change: Item) -> None:
        with self._cond:
            self._push(change)
            self._cond.notify()

    def get(self, timeout: float | None) -> Item | _Closed | None:
        """The next change (or RESYNC), None when ``timeout`` passes without one, CLOSED once closed."""
        with self._cond:
            if not self._items and not self._closed:
                self._cond.wait(timeout)
            if self._items:
                return self._items.popleft()
            return CLOSED if self._closed else None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Idempotent; wakes a reader blocked in get()."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._hub._remove(self)


class AsyncSubscription(Subscription):
    """One stream's queue for an asyncio task: created on the event loop, read with ``await next()``.

    ``put`` may run on any thread (the Redis relay is a thread): off the loop's thread it hands the change to
    the loop with ``call_soon_threadsafe``, so the queue and its event are only touched on the loop."""

    def __init__(self, hub: NotificationHub, user_id: str, maxsize: int) -> None:
        super().__init__(hub, user_id, maxsize)
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._ready = asyncio.Event()

    def put(self, change: Item) -> None:
        if threading.get_ident() != self._thread:
            try:
                self._loop.call_soon_threadsafe(self.put, change)
            except RuntimeError:  # the loop is closed: the stream is gone
                pass
            return
        self._push(change)
        self._ready.set()

    async def next(self, timeout: float) -> Item | _Closed | None:
        """The next change (or RESYNC), None when ``timeout`` passes without one, CLOSED once closed."""
        if not self._items and not self._closed:
            self._ready.clear()
            try:
                async with asyncio.timeout(timeout):
                    await self._ready.wait()
            except TimeoutError:
                pass
        if self._items:
            return self._items.popleft()
        return CLOSED if self._closed else None

    def close(self) -> None:
        """Idempotent; wakes the task awaiting next() (call it on the loop's thread)."""
        if self._closed:
            return
        self._closed = True
        self._ready.set()
        self._hub._remove(self)


class NotificationHub:
    """Implements ``Notifier``: ``task_changed`` fans a change out to the subscriptions of its user.

    ``subscription`` is the kind of queue each stream gets (``AsyncSubscription`` on an event loop).
    ``max_subscribers`` bounds the streams of the process (beyond it 503, retry later), ``max_per_user`` those of one
    user (beyond it 429 TOO_MANY_STREAMS)."""

    def __init__(self, queue_size: int = 256, max_subscribers: int = 10_000,
                 subscription: type[Subscription] = Subscription, max_per_user: int = STREAMS_PER_USER) -> None:
        if queue_size < 1 or max_per_user < 1:
            raise ValueError("queue_size and max_per_user must be at least 1")
        self.queue_size = queue_size
        self.subscription = subscription
        self.max_subscribers = max_subscribers
        self.max_per_user = max_per_user
        self._lock = threading.Lock()
        self._subs: dict[str, set[Subscription]] = {}
        self._count = 0
        self._closed = False

    def subscribe(self, user_id: str) -> Subscription:
        sub = self.subscription(self, user_id, self.queue_size)
        with self._lock:
            if self._closed:
                sub._closed = True
                return sub
            group = self._subs.setdefault(user_id, set())
            if len(group) >= self.max_per_user and not bugs.active(bugs.STREAM_NEWEST_ONLY):
                raise DomainError("TOO_MANY_STREAMS", f"at most {self.max_per_user} open streams per user; close one",
                                  status=429, limit=self.max_per_user)
            if self._count >= self.max_subscribers:
                raise ServiceUnavailable("SERVICE_UNAVAILABLE", "too many open streams; retry later")
            if bugs.active(bugs.STREAM_NEWEST_ONLY):  # the older streams stay open, unfed
                self._count -= len(group)
                group.clear()
            group.add(sub)
            self._count += 1
        return sub

    def task_changed(self, task_id: str, user_id: str, status: str, version: int) -> None:
        try:
            change = TaskChange(str(task_id), str(user_id), str(status), int(version))
            with self._lock:
                targets = list(self._subs.get(change.user_id, ()))
            if len(targets) > 1:
                coverage.reached(FANNED_TO_SEVERAL)
            for sub in targets:
                sub.put(change)
        except Exception:  # runs after a commit: a notification failure changes nothing
            log.exception("task change notification failed")

    def resync_all(self) -> None:
        """Tell every open stream to resync: the changes published while the hub's feed was lost are gone."""
        if bugs.active(bugs.STREAM_NO_RESYNC):
            return
        with self._lock:
            targets = [s for group in self._subs.values() for s in group]
        if targets:
            coverage.reached(TOLD_TO_RESYNC)
        for sub in targets:
            sub.put(RESYNC)

    def subscriber_count(self, user_id: str | None = None) -> int:
        with self._lock:
            return self._count if user_id is None else len(self._subs.get(user_id, ()))

    def close(self) -> None:
        """Ends every stream (server shutdown); later subscriptions start closed."""
        with self._lock:
            self._closed = True
            subs = [s for group in self._subs.values() for s in group]
        for sub in subs:
            sub.close()

    def _remove(self, sub: Subscription) -> None:
        with self._lock:
            group = self._subs.get(sub.user_id)
            if group is not None and sub in group:
                group.discard(sub)
                self._count -= 1
                if not group:
                    del self._subs[sub.user_id]


def redis_relay(url: str, hub: NotificationHub, ready: threading.Event | None = None,
                stop: threading.Event | None = None) -> None:
    """Feed ``hub`` from the Redis channel every process publishes its commits to (RedisNotifier), for ever
    (until ``stop``). Run it on a thread. ``ready`` is set once the first subscription is confirmed: from then
    on no published change is missed while the link holds. The subscriber reconnects after Redis restarts, and
    then tells every open stream to resync: what was published while it was away is gone."""
    from reference.copilot.adapters.cache_redis import RedisNotifier

    stop = stop or threading.Event()
    lost = False
    while not stop.is_set():
        try:
            with RedisNotifier(url).subscribe() as changes:
                if ready is not None:
                    ready.set()
                if lost:
                    hub.resync_all()
                    lost = False
                while not stop.is_set():
                    change = changes.get(timeout_s=1.0)
                    if change is not None:
                        hub.task_changed(change["task_id"], change["user_id"], change["status"],
                                         int(change["version"]))
        except Exception:
            log.warning("redis relay lost; retrying", exc_info=True)
            lost = True
        stop.wait(1.0)


class RelayOnDemand:
    """Starts ``redis_relay`` for ``hub`` when the first stream opens at this process, and has that stream wait
    (at most ``wait_s``) until the relay is subscribed, so it misses nothing published afterwards.

    Why not from start-up: the relay decodes every change any process commits (several per task) into the hub,
    and an API whose streams are served by the stream tier never has a subscriber. Started at boot, it cost every
    API worker that work for nothing, counted in the API's CPU per confirm. A stream opened while a first one
    is still waiting (or while Redis is unreachable) opens at once and may miss changes until the relay is
    subscribed: streams only speed clients up, and clients resync by version."""

    def __init__(self, url: str, hub: NotificationHub, wait_s: float = 2.0) -> None:
        self.url, self.hub, self.wait_s = url, hub, wait_s
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def __call__(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=redis_relay, args=(self.url, self.hub, self.ready, self._stop),
                                            name="redis-relay", daemon=True)
            self._thread.start()
        self.ready.wait(self.wait_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stops the relay (it notices within a second) and waits for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
