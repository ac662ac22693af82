"""The request-dedup and snapshot cache (Redis on the stack) in virtual time. Losing it must change no outcome
(docs/architecture.md): the ``redis-loss`` fault flushes it and keeps it down for its window (every get a miss, every
set dropped), as the stack's RedisCache behaves while Redis is stopped."""

from __future__ import annotations

from collections.abc import Callable

PRUNE_AT = 4096  # entries; expired ones are dropped when the cache grows past this


class SimCache:
    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.items: dict[str, tuple[str, float]] = {}  # key -> (value, expires at)
        self._down = False
        self.stats = {"hits": 0, "misses": 0}
        # Called with True when the cache goes down and False when it comes back: what else lives on the same
        # Redis (a pub/sub subscriber) loses its connection with it.
        self.on_down: list[Callable[[bool], None]] = []

    @property
    def down(self) -> bool:
        return self._down

    @down.setter
    def down(self, value: bool) -> None:
        if value != self._down:
            self._down = value
            for listener in self.on_down:
                listener(value)

    def get(self, key: str) -> str | None:
        item = None if self.down else self.items.get(key)
        if item is None or item[1] <= self.now():
            self.stats["misses"] += 1
            return None
        self.stats["hits"] += 1
        return item[0]

    def set(self, key: str, value: str, ttl_s: float) -> None:
        if self.down:
            return
        now = self.now()
        if len(self.items) >= PRUNE_AT:
            self.items = {k: v for k, v in self.items.items() if v[1] > now}
        self.items[key] = (value, now + ttl_s)

    def flush(self) -> None:
        self.items.clear()
