"""The Copilot's effects: the shared ones (kernel.effects) and its platform calls. Workers are generators that
yield these and receive results (or have an exception thrown in); crashes, timeouts and duplicates land between
effects, exactly where they can land in production (docs/architecture.md, "Sans-IO effects")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernel.effects import (
    Ack,
    AwaitOutbox,
    BrokerUnavailable,
    Delivery,
    Jitter,
    Message,
    ObjectStoreError,
    Publish,
    PutObject,
    Receive,
    Sleep,
    T,
    Transact,
    Tx,
    Work,
    crash_name,
    opens_unit,
    run_sync,
)

__all__ = ["Ack", "AwaitOutbox", "BrokerUnavailable", "CallPlatform", "Delivery", "Effect", "Jitter", "Message",
           "ObjectStoreError", "Publish", "PutObject", "Receive", "Sleep", "T", "Transact", "Tx", "Work", "crash_name",
           "opens_unit", "run_sync"]


@dataclass(frozen=True)
class CallPlatform:
    """Call a PlatformClient method; the shell applies timeouts and raises PlatformError subclasses."""

    method: str
    args: tuple[Any, ...] = ()
    task_id: str | None = None  # for the history and for fault triggers
    try_no: int = 0  # which try of one retried call (0: the first): the history checks the retry policy

    @property
    def crash_name(self) -> str:
        return self.method  # crash points name a platform call by its method (create_flight)



Effect = Transact[Any] | CallPlatform | Publish | Receive | Ack | Sleep | AwaitOutbox | Jitter | PutObject
