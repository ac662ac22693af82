"""Ports the shells implement besides the platform (reference/copilot/platform.py) and effects."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from reference.copilot.effects import Delivery, Message


class Clock(Protocol):
    def now(self) -> datetime: ...


class Broker(Protocol):
    def publish(self, message: Message) -> None: ...  # raises BrokerUnavailable

    def receive(self, group: str, max_messages: int, invisible_s: float) -> list[Delivery]: ...

    def ack(self, group: str, delivery: Delivery) -> None: ...


class ObjectStore(Protocol):
    def put(self, key: str, data: bytes, content_type: str) -> None: ...  # raises ObjectStoreError

    def get(self, key: str) -> bytes | None: ...


class Cache(Protocol):
    """Request dedup and short caches only: losing it changes no outcome (DESIGN.md §4)."""

    def get(self, key: str) -> str | None: ...

    def set(self, key: str, value: str, ttl_s: float) -> None: ...


class Notifier(Protocol):
    """Fan-out of task changes to SSE streams: an accelerator, never a source of truth."""

    def task_changed(self, task_id: str, user_id: str, status: str, version: int) -> None: ...


class OutboxListener(Protocol):
    """Notifications of committed PENDING outbox rows (services.outbox): an accelerator, the publisher polls too."""

    def wait(self, timeout_s: float, poll_s: float, sleep: Callable[[float], None]) -> bool: ...  # True: notified

    def close(self) -> None: ...
