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

    def transact(self, fn: Callable[[Tx], T]) -> T:
        with self.sessions() as session, session.begin():
            tx = Tx(session, self.clock(), self.new_id)
            result = fn(tx)
        if self.notifier is not None:
            for task_id, user_id, status, version in tx.changes:
                self.notifier.task_changed(str(task_id), user_id, status, version)
        return result

    def perform(self, effect: Any) -> Any:
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
