"""Ports the Copilot's shells implement besides the platform (reference/copilot/platform.py), the effects and the
kernel's own ports (kernel.ports: broker, object store, notifier, outbox listener)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class Cache(Protocol):
    """Request dedup and short caches only: losing it changes no outcome (docs/systems/copilot.md)."""

    def get(self, key: str) -> str | None: ...

    def set(self, key: str, value: str, ttl_s: float) -> None: ...
