"""Disconnect sequences against a real Centrifugo, observed as one WebSocket client sees them: the real side of a
parity test with a Centrifugo model (the model replays the same steps; both answers are compared).

A sequence is a list of steps, written ``"publish 2, disconnect, publish 7, reconnect, restart, publish 1"``:

- ``publish N``: N publications through the server API (each one's offset awaited at the client while connected);
- ``disconnect`` / ``reconnect``: the client leaves and comes back (its SDK resubscribes, asking for recovery);
- ``restart``: the node restarts on the same port (memory engine: a new epoch); the client reconnects by itself;
- ``flush``: the engine's storage is emptied (the caller's ``flush``, e.g. Redis ``FLUSHALL``); nothing happens
  until the next publication reveals it;
- ``wait N``: N seconds pass (the one step that is a pause: what it shows is the history's TTL, which only time
  moves; choose N a few seconds away from the TTL, whose expiry the server checks once a second).

The client subscribes to one channel, on the server side (the connection token's ``channels`` claim) or with a
subscription token. :class:`SequenceResult` holds every offset delivered, in order, and for each resubscription
whether it ``recovered``, whether it ``was_recovering``, whether the epoch changed and the offsets delivered after it.
Every wait is on a condition with a deadline, never a pause: after a publish while connected the client must receive
that offset; after a resubscription that recovered, every offset up to the stream's top; one that did not recover
delivers nothing of the gap, so nothing is awaited.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stack.centrifugo import CentrifugoConfig, LocalCentrifugo, Namespace, connection_token, subscription_token
from stack.redis import LocalRedis

WAIT_S = 20.0
STEP_KINDS = ("publish", "disconnect", "reconnect", "restart", "flush", "wait")
_STEP = re.compile(r"^(publish|wait)\s+([1-9][0-9]{0,3})$|^(disconnect|reconnect|restart|flush)$")


class SequenceError(ValueError):
    """A sequence that is not one (an unknown step, a reconnect while connected, ...): refused before anything runs."""


@dataclass(frozen=True)
class Step:
    kind: str
    count: int = 1


def parse_steps(text: str) -> tuple[Step, ...]:
    """``"publish 2, disconnect, reconnect"`` -> steps; a step out of place (a reconnect while connected, a
    disconnect while away) is refused, so the model and the server are never asked something meaningless."""
    steps: list[Step] = []
    connected = True
    for raw in (part.strip() for part in text.split(",")):
        match = _STEP.match(raw)
        if match is None:
            raise SequenceError(f"not a step: {raw!r} (one of: publish N, wait N, {', '.join(STEP_KINDS[1:-1])})")
        step = Step(match.group(1), int(match.group(2))) if match.group(1) else Step(match.group(3))
        if step.kind == "disconnect" and not connected or step.kind == "reconnect" and connected:
            raise SequenceError(f"{step.kind} while {'away' if not connected else 'connected'}: {text!r}")
        if step.kind == "restart" and not connected:
            raise SequenceError(f"restart while away (reconnect first): {text!r}")
        connected = {"disconnect": False, "reconnect": True}.get(step.kind, connected)
        steps.append(step)
    if not steps:
        raise SequenceError("an empty sequence")
    return tuple(steps)


@dataclass(frozen=True)
class Resubscription:
    recovered: bool
    was_recovering: bool
    epoch_changed: bool
    delivered: tuple[int, ...]  # offsets delivered after this resubscription, before the next step


@dataclass(frozen=True)
class SequenceResult:
    delivered: tuple[int, ...]  # every offset the client received, in order
    resubscriptions: tuple[Resubscription, ...]
    published: tuple[int, ...]  # the offsets the server API answered, in order
    first: Resubscription | None = None  # the first (fresh) subscription: what it reported, what it delivered


@dataclass(frozen=True)
class _Subscribed:
    recovered: bool
    was_recovering: bool
    epoch: str
    top: int  # the stream's offset at that moment
    delivered_before: int  # how many offsets the client had received then


@dataclass
class _Observer:
    channel: str
    delivered: list[int] = field(default_factory=list)
    subscribed: list[_Subscribed] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def on_subscribed(self, ctx: Any) -> None:
        position = ctx.stream_position
        self.subscribed.append(_Subscribed(ctx.recovered, ctx.was_recovering, position.epoch if position else "",
                                           position.offset if position else 0, len(self.delivered)))
        self.changed.set()

    def on_publication(self, ctx: Any) -> None:
        self.delivered.append(ctx.pub.offset)
        self.changed.set()

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not condition():
            self.changed.clear()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"never saw {what}: delivered {self.delivered}, subscribed {self.subscribed}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), deadline - time.monotonic())

    async def until_delivered(self, offset: int, delivered_before: int, subscriptions_before: int) -> None:
        """One more delivery (offsets repeat across epochs: count, do not look for the number), or a resubscription
        (a flush revealed by this publication, which is not delivered)."""
        await self.until(lambda: len(self.delivered) > delivered_before or len(self.subscribed) > subscriptions_before,
                         f"offset {offset}")

    async def until_resubscribed(self, subscriptions_before: int) -> None:
        await self.until(lambda: len(self.subscribed) > subscriptions_before, "the resubscription")

    async def settle(self, subscriptions_before: int) -> None:
        """After a resubscription that recovered, every offset up to the stream's top it reported."""
        for sub in self.subscribed[subscriptions_before:]:
            if sub.recovered and sub.top:
                await self.until(functools.partial(self._reached, sub.top), f"the recovered publications to {sub.top}")

    def _reached(self, top: int) -> bool:
        return bool(self.delivered) and self.delivered[-1] >= top

    def first(self) -> Resubscription | None:
        return self._observed(0) if self.subscribed else None

    def resubscriptions(self) -> tuple[Resubscription, ...]:
        return tuple(self._observed(index) for index in range(1, len(self.subscribed)))

    def _observed(self, index: int) -> Resubscription:
        sub = self.subscribed[index]
        previous = self.subscribed[index - 1] if index else sub
        end = self.subscribed[index + 1].delivered_before if index + 1 < len(self.subscribed) else None
        return Resubscription(sub.recovered, sub.was_recovering, sub.epoch != previous.epoch,
                              tuple(self.delivered[sub.delivered_before:end]))


def _handlers(observer: _Observer) -> tuple[Any, Any]:
    from centrifuge import ClientEventHandler, SubscriptionEventHandler

    class ClientEvents(ClientEventHandler):  # server-side subscriptions report here
        async def on_subscribed(self, ctx: Any) -> None:
            if ctx.channel == observer.channel:
                observer.on_subscribed(ctx)

        async def on_publication(self, ctx: Any) -> None:
            if ctx.channel == observer.channel:
                observer.on_publication(ctx)

    class SubscriptionEvents(SubscriptionEventHandler):
        async def on_subscribed(self, ctx: Any) -> None:
            observer.on_subscribed(ctx)

        async def on_publication(self, ctx: Any) -> None:
            observer.on_publication(ctx)

    return ClientEvents(), SubscriptionEvents()


def run_sequence(server: LocalCentrifugo, steps: tuple[Step, ...] | str, *, channel: str, secret: str,
                 user: str | None = None, server_side: bool = True,
                 flush: Callable[[], None] | None = None) -> SequenceResult:
    """Run ``steps`` against ``server`` with one client on ``channel`` (in a namespace with history and
    ``force_recovery``). Call it from the thread that started ``server``: a restart starts it again, and a server
    dies with the thread that started it."""
    parsed = parse_steps(steps) if isinstance(steps, str) else steps
    if any(s.kind == "flush" for s in parsed) and flush is None:
        raise SequenceError("a flush step needs a flush callable (the engine's storage)")
    return asyncio.run(_observe(server, parsed, channel, secret, user or f"seq-{secrets.token_hex(4)}",
                                server_side, flush))


async def _observe(server: LocalCentrifugo, steps: tuple[Step, ...], channel: str, secret: str, user: str,
                   server_side: bool, flush: Callable[[], None] | None) -> SequenceResult:
    from centrifuge import Client

    observer = _Observer(channel)
    client_events, sub_events = _handlers(observer)
    expires = time.time() + 3600
    client = Client(server.websocket_url, events=client_events, proxy=None, max_reconnect_delay=0.5,
                    token=connection_token(secret, user, expires_at=expires, channels=[channel] if server_side else []))
    if not server_side:
        sub = client.new_subscription(channel, events=sub_events,
                                      token=subscription_token(secret, user, channel, expires_at=expires))
        await sub.subscribe()
    published: list[int] = []
    try:
        await client.connect()
        await observer.until(lambda: len(observer.subscribed) == 1, "the first subscription")
        connected = True
        for step in steps:
            before = len(observer.subscribed)
            if step.kind == "publish":
                for _ in range(step.count):
                    delivered, subscribed = len(observer.delivered), len(observer.subscribed)
                    published.append(server.api.publish(channel, {"n": len(published) + 1}).offset)
                    if connected:
                        await observer.until_delivered(published[-1], delivered, subscribed)
            elif step.kind in ("disconnect", "reconnect"):
                await (client.disconnect() if step.kind == "disconnect" else client.connect())
                connected = step.kind == "reconnect"
            elif step.kind == "wait":
                await asyncio.sleep(step.count)
            elif step.kind == "restart":
                await asyncio.to_thread(server.stop)  # the node waits for its clients' close: keep the loop free
                server.start()  # on this thread: a server dies with the thread that started it
            elif flush is not None:
                flush()
            if step.kind in ("reconnect", "restart"):
                await observer.until_resubscribed(before)
            await observer.settle(before)
    finally:
        await client.disconnect()
    return SequenceResult(tuple(observer.delivered), observer.resubscriptions(), tuple(published), observer.first())


@contextlib.contextmanager
def sequence_nodes(secret: str, *namespaces: Namespace) -> Iterator[dict[str, Any]]:
    """The servers a set of sequences runs on: ``memory`` (a memory-engine node), ``redis`` and ``on_redis`` (a
    Redis-engine node on it, whose ``flush`` is ``nodes["redis"].flushall``), all stopped and removed after."""
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-centrifugo-sequences-"))
    started: list[Any] = []
    try:
        memory = LocalCentrifugo(run_dir / "memory", CentrifugoConfig(secret, "key-" + secrets.token_hex(8),
                                                                      namespaces)).start()
        started.append(memory)
        redis = LocalRedis(run_dir / "redis").start()
        started.append(redis)
        on_redis = LocalCentrifugo(run_dir / "redis-node", CentrifugoConfig(
            secret, "key-" + secrets.token_hex(8), namespaces, engine="redis", redis_url=redis.url)).start()
        started.append(on_redis)
        yield {"memory": memory, "redis": redis, "on_redis": on_redis}
    finally:
        for service in reversed(started):
            service.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
