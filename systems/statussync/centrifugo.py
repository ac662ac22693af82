"""A model of Centrifugo v6 as the status sync uses it (§6, §7, §8.4, §11.5): per channel a stream of publications
with increasing offsets and an epoch, its history bounded by size and cleared history_ttl after the stream's last
publication; a new epoch (an empty history, offsets
from 1 again) when the engine restarts (connections dropped) or Redis is flushed (noticed at the stream's next use: a
publication that reveals it is not delivered, its subscribers are unsubscribed and resubscribe); a resubscription
recovers only when its position is in the same epoch and every publication after it is still in the history (a
contiguous gap), else it answers recovered=false, as does a fresh subscription; connection channels are server-side
subscriptions; a detail channel needs a subscription token whose sub is the connection's user, whose channel is that
channel and which has not expired; a connection holds at most ``max_subscriptions``. The real server's answers to
these are pinned against the model by tests/statussync/test_centrifugo_parity.py.

Deliveries to one connection keep each channel's order; across channels they may interleave (``spread_s``)."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import simpy

from reference.statussync.client import MAX_DETAIL_SUBSCRIPTIONS
from reference.statussync.relay import PublishFailed


@dataclass(frozen=True)
class Publication:
    channel: str
    offset: int
    epoch: str
    data: dict[str, Any]
    at: float


@dataclass
class Stream:
    epoch: str
    offset: int = 0
    history: deque[Publication] = field(default_factory=deque)
    lost: bool = False  # Redis was flushed: the next use starts a new epoch
    expires_at: float = float("inf")  # history_ttl after the last publication: the whole history goes then


@dataclass
class Connection:
    name: str
    user: str  # "tenant/user", the connection token's sub
    deliver: Callable[[Publication], None]
    online: bool = True
    unsubscribed: Callable[[str], None] | None = None  # the server dropped a subscription (3010): the SDK resubscribes
    subscriptions: set[str] = field(default_factory=set)
    last_at: dict[str, float] = field(default_factory=dict)  # channel -> when its last delivery lands


@dataclass(frozen=True)
class Subscribed:
    recovered: bool
    epoch: str
    offset: int  # the stream's top at subscribe time
    publications: tuple[Publication, ...]  # what recovery delivers, in order


class SubscribeRefused(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code} {reason}")
        self.code, self.reason = code, reason


class CentrifugoModel:
    def __init__(self, env: simpy.Environment, rng: random.Random, *, history_size: int, history_ttl_s: float,
                 latency_s: float = 0.01, record: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.env, self.rng = env, rng
        self.history_size, self.history_ttl_s, self.latency_s = history_size, history_ttl_s, latency_s
        self.streams: dict[str, Stream] = {}
        self.connections: dict[str, Connection] = {}
        self.epochs = 0
        self.published = 0  # publications made, across epochs (offsets start again in each)
        self.error_status: int | None = None  # a fault: every publish answers this status
        self.spread_s = 0.0  # a fault: deliveries of different channels take up to this much longer
        self.max_subscriptions = 1 + MAX_DETAIL_SUBSCRIPTIONS
        self.peak_subscriptions: dict[str, int] = {}
        self.record = record or (lambda kind, value: None)

    def _new_epoch(self) -> str:
        self.epochs += 1
        return f"e{self.epochs}"

    def _stream(self, channel: str) -> Stream:
        stream = self.streams.get(channel)
        if stream is None:
            stream = self.streams[channel] = Stream(self._new_epoch())
        if stream.lost:
            self._renew(stream)
        self._trim(stream)
        return stream

    def _renew(self, stream: Stream) -> None:
        stream.epoch, stream.offset, stream.lost = self._new_epoch(), 0, False
        stream.history.clear()

    def _trim(self, stream: Stream) -> None:
        """The size bounds the history at each publication; the TTL runs from the stream's LAST publication and then
        clears all of it (Centrifugo v6's memory engine: a busy channel keeps its history however old its first
        publication is; the epoch and the offset stay)."""
        if self.env.now >= stream.expires_at:
            stream.history.clear()
        while len(stream.history) > self.history_size:
            stream.history.popleft()

    # ------------------------------------------------------------------ the server API (the relays)

    def publish(self, channel: str, data: dict[str, Any]) -> int:
        if self.error_status is not None:
            raise PublishFailed(self.error_status, "injected")
        revealed = channel in self.streams and self.streams[channel].lost
        stream = self._stream(channel)
        stream.offset += 1
        self.published += 1
        pub = Publication(channel, stream.offset, stream.epoch, data, self.env.now)
        stream.history.append(pub)
        stream.expires_at = self.env.now + self.history_ttl_s
        self._trim(stream)
        for conn in self.connections.values():
            if not conn.online or channel not in conn.subscriptions:
                continue
            if revealed:  # the subscriber's position is in a lost stream: not delivered, unsubscribed (3010)
                self._unsubscribe(conn, channel)
            else:
                self._schedule(conn, pub)
        return stream.offset

    def _unsubscribe(self, conn: Connection, channel: str) -> None:
        conn.subscriptions.discard(channel)
        unsubscribed = conn.unsubscribed
        if unsubscribed is None:
            return

        def land() -> Any:
            yield self.env.timeout(self.latency_s)
            if conn.online:
                unsubscribed(channel)

        self.env.process(land())

    def _schedule(self, conn: Connection, pub: Publication) -> None:
        extra = self.rng.uniform(0.0, self.spread_s) if self.spread_s else 0.0
        at = max(self.env.now + self.latency_s + extra, conn.last_at.get(pub.channel, 0.0))
        conn.last_at[pub.channel] = at  # one channel's publications arrive in order

        def land() -> Any:
            yield self.env.timeout(at - self.env.now)
            if conn.online and pub.channel in conn.subscriptions:
                self.record("deliver", {"client": conn.name, "channel": pub.channel, "offset": pub.offset})
                conn.deliver(pub)

        self.env.process(land())

    # ------------------------------------------------------------------ clients

    def connect(self, name: str, user: str, channels: tuple[str, ...], deliver: Callable[[Publication], None],
                unsubscribed: Callable[[str], None] | None = None) -> Connection:
        """A connection whose token names ``channels`` (server-side subscriptions, §7.1)."""
        conn = self.connections.get(name)
        if conn is None:
            conn = self.connections[name] = Connection(name, user, deliver)
        conn.online, conn.deliver, conn.unsubscribed = True, deliver, unsubscribed
        conn.subscriptions = set(channels)
        conn.last_at.clear()
        self._count(conn)
        return conn

    def disconnect(self, name: str) -> None:
        conn = self.connections.get(name)
        if conn is not None:
            conn.online = False
            conn.subscriptions.clear()

    def subscribe(self, conn: Connection, channel: str, token: dict[str, Any] | None,
                  since: tuple[str, int] | None) -> Subscribed:
        """A client-side subscription: a token is needed except for the connection's own channels; ``since`` the
        position to recover from (None: a fresh subscription, nothing recovered)."""
        if not conn.online:
            raise SubscribeRefused(3501, "disconnected")
        own = channel.startswith("task_user:") and channel == f"task_user:{conn.user}"
        if not own:
            if token is None or token.get("channel") != channel or token.get("sub") != conn.user:
                raise SubscribeRefused(103, "permission denied")
            if float(token.get("exp", 0)) <= self.env.now:
                raise SubscribeRefused(109, "token expired")
        if channel not in conn.subscriptions and len(conn.subscriptions) >= self.max_subscriptions:
            raise SubscribeRefused(106, "limit exceeded")
        stream = self._stream(channel)
        conn.subscriptions.add(channel)
        self._count(conn)
        if since is None:  # a fresh subscription recovers nothing, and says so (recovered=false)
            return Subscribed(False, stream.epoch, stream.offset, ())
        epoch, offset = since
        if epoch != stream.epoch:
            return Subscribed(False, stream.epoch, stream.offset, ())
        missed = tuple(p for p in stream.history if p.offset > offset)
        contiguous = offset == stream.offset or (bool(missed) and missed[0].offset == offset + 1)
        return Subscribed(contiguous, stream.epoch, stream.offset, missed if contiguous else ())

    def unsubscribe(self, conn: Connection, channel: str) -> None:
        conn.subscriptions.discard(channel)

    def _count(self, conn: Connection) -> None:
        self.peak_subscriptions[conn.name] = max(self.peak_subscriptions.get(conn.name, 0), len(conn.subscriptions))

    # ------------------------------------------------------------------ faults

    def restart(self) -> None:
        """The memory engine restarts: every stream a new epoch from offset 0 and no history; connections drop."""
        for stream in self.streams.values():
            self._renew(stream)
        for conn in self.connections.values():
            conn.online = False
            conn.subscriptions.clear()

    def flush(self) -> None:
        """Redis is flushed: every stream's storage is gone, which nobody notices until the stream is next used."""
        for stream in self.streams.values():
            stream.lost = True
