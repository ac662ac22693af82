"""In-process fan-out of task changes to SSE streams (the Notifier port of reference/ports.py).

The stream only speeds clients up (DESIGN.md §4, seed 003): every subscriber has a bounded queue that
drops its oldest change on overflow, and a client that missed changes resyncs from the task snapshot
or ``GET /v1/tasks/<id>/events?after_version=N``. A publisher never blocks and never raises.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Final

from reference.errors import ServiceUnavailable

log = logging.getLogger("sortie.api.notify")


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


class Subscription:
    """One stream's queue of the changes of one user's tasks."""

    def __init__(self, hub: NotificationHub, user_id: str, maxsize: int) -> None:
        self.user_id = user_id
        self.dropped = 0  # changes lost to overflow: the client resyncs by version
        self._hub = hub
        self._items: deque[TaskChange] = deque(maxlen=maxsize)
        self._cond = threading.Condition()
        self._closed = False

    def put(self, change: TaskChange) -> None:
        with self._cond:
            if self._closed:
                return
            if len(self._items) == self._items.maxlen:
                self.dropped += 1  # deque(maxlen) drops the oldest
            self._items.append(change)
            self._cond.notify()

    def get(self, timeout: float | None) -> TaskChange | _Closed | None:
        """The next change, None when ``timeout`` passes without one, CLOSED once closed."""
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


class NotificationHub:
    """Implements ``Notifier``: ``task_changed`` fans a change out to the subscriptions of its user."""

    def __init__(self, queue_size: int = 256, max_subscribers: int = 10_000) -> None:
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        self.queue_size = queue_size
        self.max_subscribers = max_subscribers
        self._lock = threading.Lock()
        self._subs: dict[str, set[Subscription]] = {}
        self._count = 0
        self._closed = False

    def subscribe(self, user_id: str) -> Subscription:
        sub = Subscription(self, user_id, self.queue_size)
        with self._lock:
            if self._closed:
                sub._closed = True
                return sub
            if self._count >= self.max_subscribers:
                raise ServiceUnavailable("SERVICE_UNAVAILABLE", "too many open streams; retry later")
            self._subs.setdefault(user_id, set()).add(sub)
            self._count += 1
        return sub

    def task_changed(self, task_id: str, user_id: str, status: str, version: int) -> None:
        try:
            change = TaskChange(str(task_id), str(user_id), str(status), int(version))
            with self._lock:
                targets = list(self._subs.get(change.user_id, ()))
            for sub in targets:
                sub.put(change)
        except Exception:  # runs after a commit: a notification failure changes nothing
            log.exception("task change notification failed")

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
