"""The stream tier in simulation (B7, B16; I38): the reference's own fan-out (reference.copilot.http.notify's
NotificationHub and its bounded queues), wire format and authentication (reference.copilot.http.sse), fed from every
commit through a model of the Redis hop, and stream clients that hold a stream open, reconnect after a drop and resync
by version as the stack's do (systems.copilot.stream_belief: one ``Belief`` and one ``resync`` for both shells).

What is the simulation's own: ``SimSubscription`` (the hub's queue, read by a simulated process: what
AsyncSubscription is for an event loop), ``RedisHop`` (the publish to Redis and the tier's relay), the cut of
the clients' link (the ``stream-disconnect`` fault) and the clients that stop reading (``stream-stall``)."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Generator
from typing import Any

import simpy

from harness.history import INFO
from reference.copilot import api
from reference.copilot.http import sse
from reference.copilot.http.auth import issue_token
from reference.copilot.http.notify import CLOSED, Item, NotificationHub, Subscription
from scenarios.sim.cache import SimCache
from scenarios.sim.world import Killed, SimWorld
from systems.copilot.stream_belief import (
    FINAL_RECONNECT_S,
    LIST_LIMIT,
    RECONNECT_FIRST_S,
    RECONNECT_MAX_S,
    STREAM_DROP,
    STREAM_FINAL,
    STREAM_OPEN,
    Answer,
    Belief,
    Snapshot,
    resync,
)
from systems.copilot.users import operator_principal

TOKEN_SECRET = "sortie-simulated-stream-tier-hmac-key"  # in-process tokens: any 32+ byte secret (HS256)
RELAY_RETRY_S = 1.0  # the tier's Redis relay tries again this long after losing Redis (redis_relay's wait)
Follow = Generator[Any, Any, None] | None  # what a stream's reader runs after hearing a frame (a resync), if anything


class SimSubscription(Subscription):
    """A stream's queue (the hub's rule: bounded, the oldest change goes on overflow) read by a simulated process:
    ``put`` and ``close`` also call ``wake``, which the reader sets while it waits. Hashed by the order they were
    made in (``_made``: one count per tier, see StreamTier), so the hub's sets of them fan out in the same order every
    run (a run is a function of its seed)."""

    _made: itertools.count[int] = itertools.count()

    def __init__(self, hub: NotificationHub, user_id: str, maxsize: int) -> None:
        super().__init__(hub, user_id, maxsize)
        self.wake: Callable[[], None] = lambda: None
        self._serial = next(self._made)

    def __hash__(self) -> int:
        return self._serial

    def put(self, change: Item) -> None:
        super().put(change)
        self.wake()

    def close(self) -> None:
        super().close()
        self.wake()

    def hold_to(self, depth: int) -> None:
        """Hold the queue to ``depth`` changes from now on (stream-stall), by the hub's own rule: what no longer fits
        overflows into one resync hint."""
        waiting, self._items = list(self._items), deque(maxlen=depth)
        for item in waiting:
            self._push(item)


class RedisHop:
    """The ``Notifier`` of every simulated process: the change is published to Redis (RedisNotifier) and the tier's
    relay puts it into the hub at once. While Redis is down (the ``redis-loss`` fault) the publish fails and the
    notifier drops it, as on the stack: a stream misses it and nothing else changes. The relay loses its
    subscription with Redis, tries again every RELAY_RETRY_S, and once subscribed again tells the hub's streams to
    resync (redis_relay): ``relay`` is that loop, as a simulated process."""

    def __init__(self, hub: NotificationHub, cache: SimCache, env: simpy.Environment) -> None:
        self.hub, self.cache, self.env = hub, cache, env
        self.lost = 0
        cache.on_down.append(self._redis_down)

    def _redis_down(self, down: bool) -> None:
        if down:
            self.env.process(self.relay())

    def task_changed(self, task_id: str, user_id: str, status: str, version: int) -> None:
        if self.cache.down:
            self.lost += 1
            return
        self.hub.task_changed(task_id, user_id, status, version)

    def relay(self) -> Generator[Any, Any, None]:
        """The relay from Redis's loss to its return: subscribed again once it finds Redis up."""
        while self.cache.down:
            yield self.env.timeout(RELAY_RETRY_S)
        self.hub.resync_all()


class StreamTier:
    """``GET /v1/stream`` of the tier, in virtual time: a stream authenticates, subscribes at once (no change is
    missed in between) and is served the opening hint, then one frame per change."""

    def __init__(self, world: SimWorld) -> None:
        self.world = world
        kind = type("SimSubscription", (SimSubscription,), {"_made": itertools.count()})  # serials from 0 in each run
        self.hub = NotificationHub(subscription=kind)
        self.hop = RedisHop(self.hub, world.cache, world.env)
        world.notifier = self.hop
        self.cut = False  # the clients' link is cut: open streams drop, connects fail
        # The clients stop reading (stream-stall): the event that ends it, and the queues' depth meanwhile.
        self.stalled: simpy.Event | None = None
        self.stall_depth = self.hub.queue_size
        self._open: dict[SimSubscription, None] = {}  # the open streams, in the order they opened

    def connect(self, authorization: str) -> SimSubscription:
        """A stream's subscription; ConnectionError while the link is cut, a DomainError (the stream's refusal)."""
        if self.cut:
            raise ConnectionError("the clients' link is cut")
        me = sse.authenticate(TOKEN_SECRET, authorization)
        sub = self.hub.subscribe(me.user_id)
        assert isinstance(sub, SimSubscription)
        if self.stalled is not None:
            sub.hold_to(self.stall_depth)
        self._open[sub] = None
        return sub

    def set_cut(self, on: bool) -> None:
        self.cut = on
        if on:
            for sub in list(self._open):
                sub.close()
            self._open.clear()

    def set_stall(self, on: bool, depth: int) -> None:
        """The clients stop reading (a slow link): their queues at the tier fill, held to ``depth`` changes (the
        hub's 256 outlast the few dozen changes of a short run); when it ends they read what is left."""
        if on and self.stalled is None:
            self.stalled, self.stall_depth = self.world.env.event(), depth
        elif not on and self.stalled is not None:
            ended, self.stalled, self.stall_depth = self.stalled, None, self.hub.queue_size
            ended.succeed()
        else:
            return
        for sub in self._open:
            sub.hold_to(self.stall_depth)

    def serve(self, sub: SimSubscription, client: Callable[[bytes], Follow]) -> Generator[Any, Any, None]:
        """Send the stream to ``client`` until it is closed: what stream_asgi's ``events()`` yields. What the client
        does on hearing a frame (a resync) runs before the next frame is read, as a client that reads its stream on
        one thread does."""
        env = self.world.env
        client(sse.OPEN)
        try:
            while True:
                if self.stalled is not None and not sub.closed:
                    yield self.stalled
                item = sub.get(timeout=0)
                if item is CLOSED:
                    return
                if item is not None:
                    follow = client(sse.event(item))  # type: ignore[arg-type]  # CLOSED returned above
                    if follow is not None:
                        yield from follow
                    continue
                woken = env.event()
                sub.wake = _waker(woken)
                yield woken | env.timeout(sse.HEARTBEAT_S)
                if not woken.triggered:
                    follow = client(sse.HEARTBEAT)  # a client still stale after a failed resync tries again here
                    if follow is not None:
                        yield from follow
        finally:
            sub.close()
            self._open.pop(sub, None)


def _waker(event: simpy.Event) -> Callable[[], None]:
    """Wakes the reader waiting on ``event`` (once; later calls do nothing)."""

    def wake() -> None:
        if not event.triggered:
            event.succeed()

    return wake


class SimStreamClient:
    """One operator's stream: open, hear, and after a drop reconnect (backing off) and resync by version; ``close``
    stops it and states what it believes (``stream-final``)."""

    def __init__(self, n: int, user: str, tier: StreamTier, ports: api.Ports) -> None:
        self.process, self.user, self.tier, self.ports = f"stream-{n}", user, tier, ports
        self.world = tier.world
        self.authorization = f"Bearer {issue_token(TOKEN_SECRET, user, ttl_s=86400)}"
        self.belief = Belief()
        self.stopped = False
        self._sub: SimSubscription | None = None
        self._serving = False  # open, and resynced after its last drop
        self._serving_again: list[simpy.Event] = []  # close() waits on these for a dropped stream

    def _record(self, type_: str, f: str, value: dict[str, Any]) -> None:
        self.world.history.add(self.world.env.now, self.process, type_, f, value)

    def _hear(self, data: bytes) -> Follow:
        for line in data.decode().splitlines():
            self.belief.hear(line)
        return self.resync("resync") if self.belief.stale else None

    def run(self) -> Generator[Any, Any, None]:
        env = self.world.env
        dropped, backoff = False, RECONNECT_FIRST_S
        while not self.stopped:
            try:
                self._sub = self.tier.connect(self.authorization)
            except ConnectionError:
                if not dropped:
                    self._record(INFO, STREAM_DROP, {"user_id": self.user, "error": "ConnectionError"})
                dropped = True
            else:
                self._record(INFO, STREAM_OPEN, {"user_id": self.user, "after_drop": dropped})
                if dropped:
                    yield from self.resync("resync")
                dropped, backoff = False, RECONNECT_FIRST_S
                self._set_serving(True)
                yield from self.tier.serve(self._sub, self._hear)
                self._set_serving(False)
                if self.stopped:
                    return
                self._record(INFO, STREAM_DROP, {"user_id": self.user, "error": "ConnectionError"})
                dropped = True
            yield env.timeout(backoff)
            backoff = min(backoff * 2, RECONNECT_MAX_S)

    def resync(self, f: str) -> Generator[Any, Any, None]:
        """``resync`` at the API's use cases (reference.copilot.api ListTasks, ReadTask), as simulated requests."""
        steps = resync(self.belief, self.process, self.user, f)
        answer: Answer | None = None
        while True:
            try:
                ask = steps.send(answer)  # type: ignore[arg-type]  # None starts the generator
            except StopIteration as done:
                for type_, name, value in done.value:
                    self._record(type_, name, value)
                return
            me = operator_principal(self.user)
            cmd = (api.ReadTask(me, ask.task_id) if isinstance(ask, Snapshot)
                   else api.ListTasks(me, str(LIST_LIMIT)))
            answer = yield from self._request(cmd)

    def _request(self, cmd: api.Command) -> Generator[Any, Any, Answer]:
        out: dict[str, Any] = {}

        def done(value: Any, error: BaseException | None) -> None:
            out["value"], out["error"] = value, error

        yield self.world.drive(self.process, api.handle(cmd, self.ports), on_done=done)
        if isinstance(out.get("error"), Killed):
            return 0, {"error": "CONNECTION_RESET"}
        reply: api.Reply = out["value"]
        return reply.status, reply.body

    def _set_serving(self, on: bool) -> None:
        self._serving = on
        while on and self._serving_again:
            self._serving_again.pop().succeed()

    def close(self) -> simpy.Process:
        """Stop listening, then state what the stream believes: the process that does it. A dropped stream first
        gets up to FINAL_RECONNECT_S to reconnect and resync, as its client would after the run."""
        if self._serving:
            self._stop()
            return self.world.env.process(self.resync(STREAM_FINAL))
        return self.world.env.process(self._close_once_serving())

    def _close_once_serving(self) -> Generator[Any, Any, None]:
        env = self.world.env
        serving = env.event()
        self._serving_again.append(serving)
        yield serving | env.timeout(FINAL_RECONNECT_S)
        self._stop()
        yield from self.resync(STREAM_FINAL)

    def _stop(self) -> None:
        self.stopped = True
        if self._sub is not None:
            self._sub.close()
