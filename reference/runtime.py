"""The real shell's effect performer: runs the core's generators synchronously against real adapters
(SQLAlchemy sessions, a PlatformClient, a Broker, an ObjectStore) and a wall clock."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from reference.effects import (
    Ack,
    CallPlatform,
    Jitter,
    PutObject,
    Publish,
    Receive,
    Sleep,
    Transact,
    Tx,
    run_sync,
)
from reference.platform import PlatformClient
from reference.ports import Broker, Notifier, ObjectStore

T = TypeVar("T")


class Failpoints:
    """Crash points for fault injection on the real stack, like etcd's gofail. The harness writes
    ``{"<role>": {"<effect>": count}}`` to a JSON file; a process of that role SIGKILLs itself right after
    performing that effect (``publish``, ``ack``, ``create_flight``, or a Transact name such as
    ``confirm.create``), ``count`` times in total across the role's processes and restarts (one marker
    byte per crash, appended under an exclusive lock)."""

    def __init__(self, path: str, role: str) -> None:
        self.path, self.role = path, role
        self._mtime = -1.0
        self._points: dict[str, int] = {}

    @staticmethod
    def name_of(effect: Any) -> str:
        if isinstance(effect, CallPlatform):
            return effect.method
        if isinstance(effect, Transact):
            return effect.name
        return type(effect).__name__.lower()

    def _load(self) -> dict[str, int]:
        import json
        import os

        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            return {}
        if mtime != self._mtime:
            self._mtime = mtime
            try:
                self._points = {k: int(v) for k, v in json.loads(open(self.path).read()).get(self.role, {}).items()}
            except (OSError, ValueError):
                self._points = {}
        return self._points

    def after(self, effect: Any) -> None:
        points = self._load()
        if not points:
            return
        name = self.name_of(effect)
        if points.get(name, 0) <= 0:
            return
        import fcntl
        import os
        import signal

        with open(f"{self.path}.{self.role}.{name}.fired", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.seek(0)
            if len(fh.read()) >= points[name]:
                return
            fh.write("x")
            fh.flush()
            os.fsync(fh.fileno())
        os.kill(os.getpid(), signal.SIGKILL)


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Runtime:
    """Adapters are optional: the API needs only the database; workers need their own adapters."""

    sessions: sessionmaker[Session]
    clock: Callable[[], datetime] = utc_now
    new_id: Callable[[], uuid.UUID] = uuid.uuid4
    platform: PlatformClient | None = None
    broker: Broker | None = None
    store: ObjectStore | None = None
    notifier: Notifier | None = None
    rng: random.Random = field(default_factory=random.Random)
    sleep: Callable[[float], None] = time.sleep
    failpoints: Failpoints | None = None

    def transact(self, fn: Callable[[Tx], T]) -> T:
        with self.sessions() as session, session.begin():
            tx = Tx(session, self.clock(), self.new_id)
            result = fn(tx)
        if self.notifier is not None:
            for task_id, user_id, status, version in tx.changes:
                self.notifier.task_changed(str(task_id), user_id, status, version)
        return result

    def perform(self, effect: Any) -> Any:
        result = self._perform(effect)
        if self.failpoints:
            self.failpoints.after(effect)
        return result

    def _perform(self, effect: Any) -> Any:
        if isinstance(effect, Transact):
            return self.transact(effect.fn)
        if isinstance(effect, CallPlatform):
            assert self.platform is not None, "no platform client configured"
            return getattr(self.platform, effect.method)(*effect.args)
        if isinstance(effect, Publish):
            assert self.broker is not None, "no broker configured"
            return self.broker.publish(effect.message)
        if isinstance(effect, Receive):
            assert self.broker is not None, "no broker configured"
            return self.broker.receive(effect.group, effect.max_messages, effect.invisible_s)
        if isinstance(effect, Ack):
            assert self.broker is not None, "no broker configured"
            return self.broker.ack(effect.group, effect.delivery)
        if isinstance(effect, Sleep):
            self.sleep(effect.seconds)
            return None
        if isinstance(effect, Jitter):
            return self.rng.random() * effect.upper
        if isinstance(effect, PutObject):
            assert self.store is not None, "no object store configured"
            return self.store.put(effect.key, effect.data, effect.content_type)
        raise TypeError(f"unknown effect {effect!r}")

    def run(self, work: Generator[Any, Any, T]) -> T:
        return run_sync(work, self.perform)
