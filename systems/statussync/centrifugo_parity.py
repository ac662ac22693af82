"""The Centrifugo model (systems/statussync/centrifugo.py) driven by stack/centrifugo_sequences.py's step strings, in
virtual time: the model half of the parity test against a real Centrifugo (tests/statussync/test_centrifugo_parity.py).

One client on one channel, as the real side's: a server-side subscription is the connection user's own summary
channel, a token subscription a detail channel with a token that never expires. The client does what the real SDK
does: it keeps the position of the last publication (or of the subscription's top when nothing was recovered),
resubscribes from it after a reconnect or a restart (was_recovering), and resubscribes at once when the server drops
its subscription (a flush revealed by a publication). Its answer has the real side's shape (SequenceResult)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import simpy

from stack.centrifugo_sequences import Resubscription, SequenceResult, Step, parse_steps
from systems.statussync.centrifugo import CentrifugoModel, Connection, Publication

CLIENT = "parity-client"
USER = "t1/parity"


@dataclass(frozen=True)
class _Subscribed:
    recovered: bool
    was_recovering: bool
    epoch: str
    delivered_before: int


@dataclass
class _ModelClient:
    model: CentrifugoModel
    server_side: bool
    delivered: list[int] = field(default_factory=list)
    subscribed: list[_Subscribed] = field(default_factory=list)
    position: tuple[str, int] | None = None
    conn: Connection | None = None

    @property
    def channel(self) -> str:
        return f"task_user:{USER}" if self.server_side else f"task_detail:{USER}/task-1"

    def deliver(self, pub: Publication) -> None:
        self.delivered.append(pub.offset)
        self.position = (pub.epoch, pub.offset)

    def connect(self) -> None:
        """Connect (again) and subscribe."""
        channels = (self.channel,) if self.server_side else ()
        self.conn = self.model.connect(CLIENT, USER, channels, self.deliver, lambda channel: self.subscribe())
        self.subscribe()

    def subscribe(self) -> None:
        """Subscribe from the last position, if any: the SDK asks recovery whenever it has one."""
        assert self.conn is not None
        token = None if self.server_side else {"sub": USER, "channel": self.channel, "exp": math.inf}
        sub = self.model.subscribe(self.conn, self.channel, token, self.position)
        self.subscribed.append(_Subscribed(sub.recovered, self.position is not None, sub.epoch, len(self.delivered)))
        for pub in sub.publications:  # only a recovery delivers any
            self.deliver(pub)
        self.position = (sub.epoch, sub.offset)  # the stream's top: where the next resubscription recovers from

    def observed(self, index: int) -> Resubscription:
        sub = self.subscribed[index]
        previous = self.subscribed[index - 1] if index else sub
        end = self.subscribed[index + 1].delivered_before if index + 1 < len(self.subscribed) else None
        return Resubscription(sub.recovered, sub.was_recovering, sub.epoch != previous.epoch,
                              tuple(self.delivered[sub.delivered_before:end]))


def run_model_sequence(steps: tuple[Step, ...] | str, *, history_size: int, history_ttl_s: float,
                       server_side: bool = True) -> SequenceResult:
    """Run ``steps`` on a fresh model whose channels keep ``history_size`` publications for ``history_ttl_s``."""
    parsed = parse_steps(steps) if isinstance(steps, str) else steps
    env = simpy.Environment()
    model = CentrifugoModel(env, random.Random(0), history_size=history_size, history_ttl_s=history_ttl_s)
    client = _ModelClient(model, server_side)
    client.connect()
    published: list[int] = []
    for step in parsed:
        if step.kind == "publish":
            for _ in range(step.count):
                published.append(model.publish(client.channel, {"n": len(published) + 1}))
                env.run()  # every delivery (and a resubscription after a revealed flush) lands: virtual time
        elif step.kind == "disconnect":
            model.disconnect(CLIENT)
        elif step.kind == "reconnect":
            client.connect()
        elif step.kind == "wait":
            env.run(until=env.now + step.count)
        elif step.kind == "restart":
            model.restart()
            client.connect()  # the SDK reconnects by itself
        else:
            model.flush()
    first = client.observed(0)
    resubscriptions = tuple(client.observed(i) for i in range(1, len(client.subscribed)))
    return SequenceResult(tuple(client.delivered), resubscriptions, tuple(published), first)
