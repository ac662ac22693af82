"""An in-process broker with RocketMQ SimpleConsumer semantics: per-group queues, tag subscriptions,
invisible time after receive, redelivery with an attempt count, receipts that go stale on redelivery,
a broker-side dead-letter queue, outage windows and injected duplicate deliveries."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from kernel.effects import BrokerUnavailable, Delivery, Message


@dataclass
class _Entry:
    message: Message
    visible_at: float
    attempts: int = 0
    receipt: int = 0


@dataclass
class _Group:
    tags: frozenset[str]
    entries: dict[int, _Entry] = field(default_factory=dict)
    heap: list[tuple[float, int]] = field(default_factory=list)  # (visible_at, entry id); stale items skipped
    dlq: list[_Entry] = field(default_factory=list)  # attempts: deliveries to a dead-letter reader


class SimBroker:
    def __init__(self, rng: random.Random, subscriptions: dict[str, frozenset[str]], max_attempts: int = 16) -> None:
        self.rng = rng
        self.groups = {g: _Group(tags) for g, tags in sorted(subscriptions.items())}
        self.max_attempts = max_attempts
        self.down = False
        self.duplicate_prob = 0.0
        self.duplicate_spread_s = 0.0  # a duplicate becomes visible up to this much later (another consumer)
        self._ids = 0
        self._receipts = 0
        self.published = 0
        self.delivered = 0
        self.on_publish: Callable[[], None] | None = None  # wakes long-polling receivers (the shell's)

    def publish(self, message: Message, now: float) -> None:
        if self.down:
            raise BrokerUnavailable("broker unavailable")
        self.published += 1
        copies = 2 if self.duplicate_prob and self.rng.random() < self.duplicate_prob else 1
        for group in self.groups.values():
            if message.event_type in group.tags:
                for copy in range(copies):
                    self._ids += 1
                    at = now + (self.rng.uniform(0.0, self.duplicate_spread_s) if copy and self.duplicate_spread_s
                                else 0.0)
                    group.entries[self._ids] = _Entry(message, at)
                    heapq.heappush(group.heap, (at, self._ids))
        if self.on_publish is not None:
            self.on_publish()

    def receive(self, group_name: str, max_messages: int, invisible_s: float, now: float) -> list[Delivery]:
        if self.down:
            raise BrokerUnavailable("broker unavailable")
        group = self.groups[group_name]
        out: list[Delivery] = []
        while group.heap and len(out) < max_messages and group.heap[0][0] <= now:
            visible_at, eid = heapq.heappop(group.heap)
            entry = group.entries.get(eid)
            if entry is None or entry.visible_at != visible_at:
                continue  # acked, or re-queued with another visibility
            if entry.attempts >= self.max_attempts:
                group.dlq.append(_Entry(entry.message, now))
                del group.entries[eid]
                continue
            entry.attempts += 1
            self._receipts += 1
            entry.receipt = self._receipts
            entry.visible_at = now + invisible_s
            heapq.heappush(group.heap, (entry.visible_at, eid))
            out.append(Delivery(entry.message, entry.attempts, (eid, entry.receipt)))
        self.delivered += len(out)
        return out

    def ack(self, group_name: str, delivery: Delivery) -> None:
        if self.down:
            raise BrokerUnavailable("broker unavailable")
        eid, receipt = delivery.receipt
        entry = self.groups[group_name].entries.get(eid)
        if entry is not None and entry.receipt == receipt:
            del self.groups[group_name].entries[eid]
        # A stale receipt (the message was redelivered meanwhile) acks nothing, as in RocketMQ.

    def dead_letters(self, group_name: str, max_messages: int = 256, *,
                     on_batch: Callable[[list[Delivery]], None] | None = None) -> list[Delivery]:
        """Read and consume the group's dead-letter queue (what ``receive`` moved there after ``max_attempts``
        deliveries without an ack), as a reader of RocketMQ's ``%DLQ%<group>`` does: ``on_batch`` sees the batch
        before it leaves the queue (if it raises, the batch stays, to be read again)."""
        if self.down:
            raise BrokerUnavailable("broker unavailable")
        group = self.groups[group_name]
        offered = group.dlq[:max_messages]
        for entry in offered:  # a delivery of the DLQ topic to its reader: counted afresh from 1, as RocketMQ does
            entry.attempts += 1
        batch = [Delivery(entry.message, entry.attempts, None) for entry in offered]
        if batch and on_batch is not None:
            on_batch(batch)
        del group.dlq[:len(batch)]
        return batch

    def next_visible(self, group_name: str) -> float | None:
        """When the group's next message becomes visible (None: nothing waits), dropping stale heap items."""
        group = self.groups[group_name]
        while group.heap:
            visible_at, eid = group.heap[0]
            entry = group.entries.get(eid)
            if entry is not None and entry.visible_at == visible_at:
                return visible_at
            heapq.heappop(group.heap)
        return None

    def depth(self) -> int:
        return sum(len(g.entries) for g in self.groups.values())
