"""The client model: one online user's page, driving the reference's merge rules (reference.statussync.client) against
the Centrifugo model and the database (§6-§8, §13): connect with the user channel as a server-side subscription,
then the snapshot (publications in between buffered), detail channels opened with a subscription token from the
service (at most 20, LRU), reconnects after a cut or an engine restart with recovery from the last position (the
snapshot again when recovery fails), and status:batchGet when the workload asks for it.

Every view it applies is recorded in the history (``view``: client, gate, task, version), every notice it shows
(``notice``), every recovery (``recover``), every token and subscription asked (``detail-token``), so the checkers
judge monotonic views, notices shown once and what a client received."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import DBAPIError

from harness.history import INFO
from reference.statussync.client import LIVE, RECOVERING, ClientStore, DetailSubscriptions, init_order
from reference.statussync.registry import TENANT
from reference.statussync.service import (
    Refused,
    batch_get,
    detail_channel,
    subscription_token,
    user_channel,
    user_summaries,
    views,
)
from systems.statussync.centrifugo import Connection, Publication, SubscribeRefused

if TYPE_CHECKING:
    from systems.statussync.sim import SyncDeployment

TICK_S = 1.0
SNAPSHOT_S = 1.0  # a snapshot request's round trip under load (the read lands in its middle)
TOKEN_TTL_S = 60.0
CONNECT_S = 3.0  # the connection token, TLS and the WebSocket upgrade on a slow link: the user channel is not live yet
OPEN_CHANCE = 0.15  # per tick, the chance the user opens one more task's detail


class ClientModel:
    def __init__(self, dep: SyncDeployment, name: str, user: str, join_at: float, foreign: bool) -> None:
        self.dep, self.name, self.user, self.join_at, self.foreign = dep, name, user, join_at, foreign
        self.world = dep.world
        self.key = f"{TENANT}/{user}"
        self.channel = user_channel(TENANT, user)
        self.store = ClientStore()
        self.details = DetailSubscriptions()
        self.positions: dict[str, tuple[str, int]] = {}
        self.conn: Connection | None = None
        self.started = False
        self.tried_foreign = False
        self.next_batch = 0.0
        self.need_snapshot = False  # a snapshot failed (the database away): load it again next tick
        self.opened: set[str] = set()  # open_each: every task whose detail it opened (the LRU closed ones too)

    # ------------------------------------------------------------------ what the checkers read

    def settled(self) -> bool:
        return self.started and self.conn is not None and self.conn.online and self.store.state == LIVE

    def lags(self, versions: dict[str, int]) -> bool:
        """Some task of this user (or open detail) shows another version than ``versions`` (the database's)."""
        mine = self._tasks(mine=True)
        return any(self.store.summary_version.get(t) != versions.get(t) for t in mine if t in versions) or any(
            self.store.detail_version.get(t) != versions.get(t) for t in self.details.open if t in mine)

    def _tasks(self, mine: bool) -> list[str]:
        """The run's task ids of this user (``mine``) or of the others."""
        spec = self.dep.spec
        return [t for i, t in enumerate(spec.task_ids()) if (spec.owner_of(i) == self.user) == mine]

    def final(self) -> dict[str, Any]:
        online = self.conn is not None and self.conn.online and self.name not in self.world.cut_clients
        return {"client": self.name, "user": self.user, "online": online, "state": self.store.state,
                "summary": dict(self.store.summary_version), "detail": dict(self.store.detail_version),
                "open_details": list(self.details.open), "summary_views": dict(self.store.summary),
                "detail_views": dict(self.store.detail)}

    def _op(self, f: str, value: dict[str, Any]) -> None:
        self.world.history.add(self.world.env.now, self.name, INFO, f, {"client": self.name, **value})

    # ------------------------------------------------------------------ the page

    def run(self) -> Generator[Any, Any, None]:
        env = self.world.env
        yield env.timeout(self.join_at)
        yield from self._init()
        self.started = True
        self.next_batch = env.now + self.dep.spec.batch_get_s
        while True:
            yield env.timeout(TICK_S * self.dep.rng.uniform(0.8, 1.2))
            if self.name in self.world.cut_clients:
                continue
            if self.conn is None or not self.conn.online:
                yield from self._reconnect()
                continue
            if self.need_snapshot:
                yield from self._snapshot()
                continue
            yield from self._browse()

    def _init(self) -> Generator[Any, Any, None]:
        for step in init_order():
            if step == "subscribe":
                yield self.world.env.timeout(CONNECT_S)
                self.conn = self.world.centrifugo.connect(self.name, self.key, (self.channel,), self._deliver)
                sub = self.world.centrifugo.subscribe(self.conn, self.channel, None, None)
                self.positions[self.channel] = (sub.epoch, sub.offset)
            else:
                yield from self._snapshot()

    def _browse(self) -> Generator[Any, Any, None]:
        spec, rng, env = self.dep.spec, self.dep.rng, self.world.env
        known = sorted(self.store.summary)
        if spec.open_each:
            unopened = [t for t in known if t not in self.opened]
            if unopened and len(self.opened) < spec.details:
                self.opened.add(unopened[0])
                yield from self._open_detail(unopened[0])
        elif known and len(self.details.open) < spec.details and rng.random() < OPEN_CHANCE:
            yield from self._open_detail(rng.choice(known))
        if self.foreign and not self.tried_foreign:
            others = self._tasks(mine=False)
            if others and env.now > spec.window_s:
                self.tried_foreign = True
                yield from self._open_detail(rng.choice(others))
        if spec.batch_get_s > 0 and env.now >= self.next_batch:
            self.next_batch = env.now + spec.batch_get_s * rng.uniform(1.0, 2.0)  # 30-60 s scaled: jittered
            yield from self._batch_get()

    def _deliver(self, pub: Publication) -> None:
        kind = "summary" if pub.channel.startswith("task_user:") else "detail"
        self.positions[pub.channel] = (pub.epoch, pub.offset)
        version, notice = self.store.receive(kind, pub.data)
        task = pub.data["task"]["id"] if kind == "summary" else pub.data["taskId"]
        if version is not None:
            self._op("view", {"gate": kind, "task": task, "version": version, "via": "publication"})
        if notice is not None:
            self._op("notice", {"id": notice["id"], "type": notice["type"], "task": task})

    def _read(self, fn: Any) -> Any:
        with self.world.sessions() as s:
            return fn(s.connection())

    def _snapshot(self) -> Generator[Any, Any, None]:
        self.store.begin_snapshot()
        yield self.world.env.timeout(SNAPSHOT_S / 2)
        open_details = list(self.details.open)

        def read(conn: Any) -> list[tuple[str, dict[str, Any]]]:
            items: list[tuple[str, dict[str, Any]]] = [("summary", s) for s in user_summaries(conn, TENANT,
                                                                                                 self.user)]
            for task_id in open_details:
                pair = views(conn, task_id)
                if pair is not None:
                    items.append(("detail", pair[1]))
            return items

        try:
            items = self._read(read)
        except DBAPIError:
            items, self.need_snapshot = [], True
        else:
            self.need_snapshot = False
        yield self.world.env.timeout(SNAPSHOT_S / 2)
        for kind, task, version in self.store.end_snapshot(items):
            self._op("view", {"gate": kind, "task": task, "version": version, "via": "snapshot"})

    def _token(self, task_id: str) -> dict[str, Any] | None:
        now = self.world.env.now
        try:
            token = self._read(lambda c: subscription_token(c, TENANT, self.user, task_id, now, TOKEN_TTL_S))
        except Refused as refused:
            self._op("detail-token", {"task": task_id, "granted": False, "code": refused.code})
            return None
        except DBAPIError:
            return None
        self._op("detail-token", {"task": task_id, "granted": True})
        return dict(token)

    def _open_detail(self, task_id: str) -> Generator[Any, Any, None]:
        assert self.conn is not None
        token = self._token(task_id)
        if token is None:
            return
        for evicted in self.details.want(task_id):
            self.world.centrifugo.unsubscribe(self.conn, detail_channel(TENANT, evicted))
            self._op("unsubscribe", {"channel": detail_channel(TENANT, evicted)})
        for step in init_order():
            if step == "subscribe" and not self._subscribe_detail(task_id, token):
                return
            if step == "snapshot":
                yield from self._detail_snapshot(task_id)

    def _subscribe_detail(self, task_id: str, token: dict[str, Any]) -> bool:
        assert self.conn is not None
        channel = detail_channel(TENANT, task_id)
        try:
            sub = self.world.centrifugo.subscribe(self.conn, channel, token, None)
        except SubscribeRefused as refused:
            self.details.open.pop(task_id, None)
            self._op("subscribe-refused", {"channel": channel, "code": refused.code})
            return False
        self.positions[channel] = (sub.epoch, sub.offset)
        return True

    def _detail_snapshot(self, task_id: str) -> Generator[Any, Any, None]:
        self.store.begin_snapshot()
        yield self.world.env.timeout(SNAPSHOT_S / 2)
        try:
            pair = self._read(lambda c: views(c, task_id))
        except DBAPIError:
            pair, self.need_snapshot = None, True
        yield self.world.env.timeout(SNAPSHOT_S / 2)
        for kind, task, version in self.store.end_snapshot([("detail", pair[1])] if pair else []):
            self._op("view", {"gate": kind, "task": task, "version": version, "via": "snapshot"})

    def _reconnect(self) -> Generator[Any, Any, None]:
        """Connect again and resubscribe each channel from its last position; the snapshot when one could not
        recover (§8.4)."""
        self.store.state = RECOVERING
        centrifugo = self.world.centrifugo
        self.conn = centrifugo.connect(self.name, self.key, (self.channel,), self._deliver)
        recovered = True
        for channel in [self.channel, *(detail_channel(TENANT, t) for t in self.details.open)]:
            token = None if channel == self.channel else self._token(channel.rsplit("/", 1)[1])
            try:
                sub = centrifugo.subscribe(self.conn, channel, token, self.positions.get(channel))
            except SubscribeRefused as refused:
                self._op("subscribe-refused", {"channel": channel, "code": refused.code})
                recovered = False
                continue
            if sub.recovered:
                for pub in sub.publications:
                    self._deliver(pub)
            else:
                recovered = False
                self.positions[channel] = (sub.epoch, sub.offset)
        self._op("recover", {"recovered": recovered})
        if self.store.resubscribed(recovered):
            yield from self._snapshot()
        else:
            yield self.world.env.timeout(0.0)

    def _batch_get(self) -> Generator[Any, Any, None]:
        """§13.2: the known unfinished tasks' versions; newer summaries (and their open details) are applied."""
        known = self.store.batch_known(self.details.open)
        if not known:
            return
        yield self.world.env.timeout(SNAPSHOT_S / 2)
        try:
            newer = self._read(lambda c: batch_get(c, TENANT, self.user, known))
            details = {}
            for summary in newer:
                task_id = summary["task"]["id"]
                if task_id in self.details.open:
                    pair = self._read(lambda c, t=task_id: views(c, t))
                    if pair is not None:
                        details[task_id] = pair[1]
        except DBAPIError:
            return
        yield self.world.env.timeout(SNAPSHOT_S / 2)
        for summary in newer:
            version, _ = self.store.receive("summary", summary)
            if version is not None:
                self._op("view", {"gate": "summary", "task": summary["task"]["id"], "version": version,
                                  "via": "batchGet"})
        for task_id, detail in details.items():
            version, _ = self.store.receive("detail", detail)
            if version is not None:
                self._op("view", {"gate": "detail", "task": task_id, "version": version, "via": "batchGet"})

