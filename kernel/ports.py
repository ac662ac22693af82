"""Ports the kernel's runtime (kernel.runtime) drives for every system: the broker, the object store, the fan-out of
committed changes and the outbox's notifications. A system adds its own (the Copilot's platform client and cache)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from kernel.effects import Delivery, Message


class Broker(Protocol):
    def publish(self, message: Message) -> None: ...  # raises BrokerUnavailable

    def receive(self, group: str, max_messages: int, invisible_s: float) -> list[Delivery]: ...

    def ack(self, group: str, delivery: Delivery) -> None: ...


class ObjectStore(Protocol):
    def put(self, key: str, data: bytes, content_type: str) -> None: ...  # raises ObjectStoreError

    def get(self, key: str) -> bytes | None: ...


class Notifier(Protocol):
    """Fan-out of task changes to SSE streams: an accelerator, never a source of truth."""

    def task_changed(self, task_id: str, user_id: str, status: str, version: int) -> None: ...


class OutboxListener(Protocol):
    """Notifications of committed PENDING outbox rows: an accelerator, the publisher polls too."""

    def wait(self, timeout_s: float, poll_s: float, sleep: Callable[[float], None]) -> bool: ...  # True: notified

    def close(self) -> None: ...
