"""A RabbitMQ model as simple as the pipeline's rules need (seed 001 §5), following what RabbitMQ 3.10's quorum
queues were seen to do (docs/native-stack.md, "What the broker does"): a direct exchange binding
``slot.{slot}.{priority}`` to queues ``inspection.status.s{slot}.{priority}`` with a single active consumer; a
channel per (connection, slot), delivery tags from 1 on each; deliveries held unacked until acked, nacked with
requeue (behind the messages waiting, the delivery count up) or their channel closed (back to the front, in
delivery order); ``basic.cancel`` keeping the unacked deliveries on the channel; ``consumer_timeout`` closing a
channel whose oldest unacked delivery is older than it; an unknown delivery tag closing its channel
(PRECONDITION_FAILED); an outage closing every connection; overflow ``reject-publish`` as the soft limit it is (a
publish is nacked once the ready count went over ``x-max-length``, until it is down to 80% of it) or, with bug
``drop-head-overflow``, ``drop-head`` (what ``reject-publish-dlx`` is on a quorum queue: the oldest message dropped,
the publish confirmed); a mandatory publish with no bound queue returned (basic.return, then its confirm). Messages
live in the queues across an outage (quorum queues are durable)."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kernel.effects import BrokerUnavailable
from reference.inspection.bugs import BUGS
from reference.inspection.effects import (
    PRIORITIES,
    PUBLISH_ACK,
    PUBLISH_NACK,
    PUBLISH_RETURNED,
    ChannelClosed,
    Delivery,
    queue_name,
    routing_key,
)


@dataclass
class Queue:
    name: str
    slot: int
    priority: str
    ready: deque[tuple[dict[str, Any], int]] = field(default_factory=deque)  # (message, deliveries so far)
    consumers: list[int] = field(default_factory=list)  # channel ids; the first is the single active consumer
    over: bool = False  # reject-publish: went over x-max-length, refusing until down to 80% of it
    returned: int = 0  # how many of ready's first messages are returns: served first, in the order they came back

    def take(self) -> tuple[dict[str, Any], int]:
        self.returned = max(0, self.returned - 1)
        return self.ready.popleft()


@dataclass
class Channel:
    id: int
    connection: str
    slot: int
    open: bool = True
    next_tag: int = 1
    unacked: dict[int, tuple[str, dict[str, Any], int, datetime]] = field(default_factory=dict)


class BrokerModel:
    def __init__(self, total_slots: int, consumer_timeout_s: float = 1800.0) -> None:
        self.queues = {queue_name(s, p): Queue(queue_name(s, p), s, p) for s in range(total_slots)
                       for p in PRIORITIES}
        self.bindings = {routing_key(s, p): queue_name(s, p) for s in range(total_slots) for p in PRIORITIES}
        self.max_length: int | None = None
        self.consumer_timeout_s = consumer_timeout_s
        self.down = False
        self.channels: dict[int, Channel] = {}
        self._ids = itertools.count(1)
        self.dropped: list[str] = []  # message ids dropped from a full queue's head
        self.dead_letter_exchange = True  # the seed's queues name one (inspection.dlx)
        self.dead_letters: list[tuple[dict[str, Any], str]] = []  # (message, x-death reason) in order
        self.delivery_limit: int | None = None  # x-delivery-limit: the seed declares none
        self.closed_by_timeout = 0
        self.on_close: Callable[[str, str], None] = lambda connection, why: None  # a channel closed under a consumer

    def declare(self, total_slots: int) -> None:
        """The queues and bindings of slots up to ``total_slots`` (a reshard's new slots), before any map routes to
        them; the existing ones as they are."""
        for s in range(total_slots):
            for p in PRIORITIES:
                if queue_name(s, p) not in self.queues:
                    self.queues[queue_name(s, p)] = Queue(queue_name(s, p), s, p)
                    self.bindings[routing_key(s, p)] = queue_name(s, p)

    # ------------------------------------------------------------------ publishing

    def publish(self, key: str, message: dict[str, Any]) -> str:
        if self.down:
            raise BrokerUnavailable("broker unavailable")
        name = self.bindings.get(key)
        if name is None:
            return PUBLISH_RETURNED
        q = self.queues[name]
        if q.over and not BUGS.active("drop-head-overflow"):
            return PUBLISH_NACK
        q.ready.append((message, 0))
        self._evaluate_limit(q)
        return PUBLISH_ACK

    def _evaluate_limit(self, q: Queue) -> None:
        """x-max-length, evaluated as a quorum queue does after every change of its ready count (unacked messages do
        not count). reject-publish: over the limit, publishes are nacked until the ready count is down to 80% of it;
        the publish that crossed it got in. drop-head (bug drop-head-overflow, the seed's reject-publish-dlx on 3.10):
        the oldest messages go, dead-lettered (the seed's queues have a dead-letter exchange)."""
        if self.max_length is None:
            q.over = False
        elif BUGS.active("drop-head-overflow"):
            while len(q.ready) > self.max_length:
                dropped, _ = q.take()
                self.dropped.append(str(dropped["message_id"]))
                self._dead_letter(dropped, "maxlen")
        elif len(q.ready) > self.max_length:
            q.over = True
        elif q.over and len(q.ready) <= self.max_length * 4 // 5:
            q.over = False

    def _dead_letter(self, message: dict[str, Any], reason: str) -> None:
        if self.dead_letter_exchange:
            self.dead_letters.append((message, reason))

    def unbind(self, slot: int, on: bool) -> None:
        for p in PRIORITIES:
            if on:
                self.bindings.pop(routing_key(slot, p), None)
            else:
                self.bindings[routing_key(slot, p)] = queue_name(slot, p)

    # ------------------------------------------------------------------ consuming

    def _channel(self, connection: str, slot: int) -> Channel:
        for ch in self.channels.values():
            if ch.open and ch.connection == connection and ch.slot == slot:
                return ch
        ch = Channel(next(self._ids), connection, slot)
        self.channels[ch.id] = ch
        return ch

    def consume(self, connection: str, slot: int) -> None:
        if self.down:
            raise BrokerUnavailable("broker unavailable")
        ch = self._channel(connection, slot)
        for p in PRIORITIES:
            q = self.queues[queue_name(slot, p)]
            if ch.id not in q.consumers:
                q.consumers.append(ch.id)

    def cancel(self, connection: str, slot: int) -> None:
        if self.down:
            raise BrokerUnavailable("broker unavailable")
        for ch in self.channels.values():
            if ch.open and ch.connection == connection and ch.slot == slot:
                for p in PRIORITIES:
                    consumers = self.queues[queue_name(slot, p)].consumers
                    if ch.id in consumers:
                        consumers.remove(ch.id)

    def fetch(self, connection: str, wants: tuple[tuple[int, str, int], ...], now: datetime) -> list[Delivery]:
        """What the active consumers of ``connection`` are pushed, up to each one's free prefetch."""
        if self.down:
            raise BrokerUnavailable("broker unavailable")
        self.expire(now)
        out = []
        for slot, priority, limit in wants:
            q = self.queues[queue_name(slot, priority)]
            if not q.consumers or self.channels[q.consumers[0]].connection != connection:
                continue  # not consuming, or a standby consumer (single active consumer)
            ch = self.channels[q.consumers[0]]
            for _ in range(min(limit, len(q.ready))):
                message, count = q.take()
                tag, ch.next_tag = ch.next_tag, ch.next_tag + 1
                ch.unacked[tag] = (q.name, message, count + 1, now)
                out.append(Delivery(slot, priority, tag, ch.id, message, count + 1, now))
            self._evaluate_limit(q)
        return out

    def _settle(self, deliveries: Sequence[Delivery], requeue: bool) -> None:
        if self.down:
            raise BrokerUnavailable("broker unavailable")
        for d in deliveries:
            ch = self.channels.get(d.channel)
            if ch is None or not ch.open or d.tag not in ch.unacked:
                if ch is not None and ch.open:
                    self.close_channel(ch, "unknown delivery tag")  # PRECONDITION_FAILED
                raise ChannelClosed(f"channel {d.channel}: unknown delivery tag {d.tag}")
        for d in deliveries:
            name, message, count, _ = self.channels[d.channel].unacked.pop(d.tag)
            if requeue:  # behind the messages waiting; with a delivery limit, a return like a channel close's
                self._return(self.queues[name], message, count, at_head=self.delivery_limit is not None)

    def _return(self, q: Queue, message: dict[str, Any], count: int, *, at_head: bool) -> None:
        """A delivery back in its queue, or dead-lettered once delivered more than x-delivery-limit times."""
        if self.delivery_limit is not None and count > self.delivery_limit:
            self._dead_letter(message, "delivery_limit")
        elif at_head:  # behind the earlier returns, ahead of the waiting messages
            q.ready.insert(q.returned, (message, count))
            q.returned += 1
        else:
            q.ready.append((message, count))
        self._evaluate_limit(q)

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        self._settle(deliveries, requeue=False)

    def nack(self, deliveries: Sequence[Delivery]) -> None:
        self._settle(deliveries, requeue=True)

    def close_channel(self, ch: Channel, why: str) -> None:
        """Its unacked deliveries go back to their queues' heads (in tag order, behind earlier returns), its
        consumers away."""
        ch.open = False
        self.on_close(ch.connection, why)
        for tag in sorted(ch.unacked):
            name, message, count, _ = ch.unacked.pop(tag)
            self._return(self.queues[name], message, count, at_head=True)
        for q in self.queues.values():
            if ch.id in q.consumers:
                q.consumers.remove(ch.id)

    def close_connection(self, connection: str, why: str) -> None:
        for ch in list(self.channels.values()):
            if ch.open and ch.connection == connection:
                self.close_channel(ch, why)

    def expire(self, now: datetime) -> None:
        """consumer_timeout: a channel holding a delivery unacked longer than it is closed."""
        limit = timedelta(seconds=self.consumer_timeout_s)
        for ch in list(self.channels.values()):
            if ch.open and any(now - at > limit for _, _, _, at in ch.unacked.values()):
                self.closed_by_timeout += 1
                self.close_channel(ch, "consumer_timeout")

    def set_down(self, on: bool) -> None:
        if on:
            for ch in list(self.channels.values()):
                if ch.open:
                    self.close_channel(ch, "broker outage")
        self.down = on

    def depth(self) -> int:
        """Messages ready or unacked."""
        return sum(len(q.ready) for q in self.queues.values()) + sum(
            len(ch.unacked) for ch in self.channels.values() if ch.open)

    def leftovers(self) -> list[str]:
        return sorted([str(m["message_id"]) for q in self.queues.values() for m, _ in q.ready] + [
            str(m["message_id"]) for ch in self.channels.values() if ch.open for _, m, _, _ in ch.unacked.values()])
