"""A real client of the status sync on the native stack: centrifuge-python over a real WebSocket (through its own
Toxiproxy link, so a fault can cut one client), with the reference's merge rules (reference.statussync.client: the
summary and detail version gates, subscribe-then-snapshot with publications buffered meanwhile, notices shown once,
the LRU of detail subscriptions). What it applies and shows goes to the history as the simulation's client model
records it (``view``, ``notice``, ``deliver``, ``recover``, ``detail-token``), so the same checkers (S8, S9, S12, S15)
judge it; ``final()`` is the client model's own summary of its belief.

The client connects with the connection token ``GET /api/realtime/session`` gives (its summary channel subscribed on
the server side), loads its task list after the subscription (and again whenever a resubscription did not recover),
and opens the detail channel of its first ``details`` tasks with a token from ``POST /api/realtime/subscription-
token``, at most 20 at once: past them the least recently opened is unsubscribed first (§6.5; ``unsubscribe``), so
the server's limit of 1 + 20 a connection is never reached. ``open_detail`` asks for any task's detail (another
user's: the API refuses it, recorded as a ``detail-token`` not granted). With ``batch_get_s`` above 0 it asks
``POST /api/tasks/status:batchGet`` every ``batch_get_s`` to twice that (jittered, §13.2) about what
``ClientStore.batch_known`` names, loads the detail of each open one that came back newer, and applies both through
the version gates (``view`` ... ``via: batchGet``): the fallback when publications are lost (a DEAD outbox row)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Callable
from typing import Any

import requests

from reference.statussync.client import ClientStore, DetailSubscriptions, init_order
from reference.statussync.service import detail_channel, user_channel

REQUEST_TIMEOUT_S = 10.0
Record = Callable[[str, str, dict[str, Any]], None]  # (process, f, value): an INFO op in the runner's history


class NativeClient:
    def __init__(self, name: str, tenant: str, user: str, api_url: str, ws_url: str, bearer: str, details: int,
                 record: Record, batch_get_s: float = 0.0, rng: random.Random | None = None) -> None:
        self.name, self.tenant, self.user, self.details_wanted = name, tenant, user, details
        self.batch_get_s, self._rng = batch_get_s, rng or random.Random(name)
        self.api_url, self.ws_url, self.bearer, self._record = api_url, ws_url, bearer, record
        self.store = ClientStore()
        self.details = DetailSubscriptions()
        self.channel = user_channel(tenant, user)
        self.client: Any = None
        self.started = False
        self.subscribed_once: set[str] = set()
        self._lock = threading.Lock()  # the store is read by the runner's thread (final, lags)
        self._opening: set[str] = set()
        self._opened: set[str] = set()  # every detail it chose to open (at most ``details``; evicted ones count)
        self.peak_subscriptions = 0  # the most it held at once, its summary channel included
        self._tasks: set[asyncio.Task[Any]] = set()
        self.join_at = 0.0  # when the runner connects it (wall time)
        self.frozen: dict[str, Any] | None = None  # its belief when the run ended (before the stack stops)

    # ------------------------------------------------------------------ the runner's questions

    def final(self) -> dict[str, Any]:
        if self.frozen is not None:
            return self.frozen
        with self._lock:
            online = self.client is not None and str(getattr(self.client.state, "value", self.client.state)) \
                == "connected"
            return {"client": self.name, "user": self.user, "online": online, "state": self.store.state,
                    "summary": dict(self.store.summary_version), "detail": dict(self.store.detail_version),
                    "open_details": list(self.details.open), "summary_views": dict(self.store.summary),
                    "detail_views": dict(self.store.detail)}

    def lags(self, versions: dict[str, int], owners: dict[str, str]) -> bool:
        """Whether it still shows an older version than the database of one of its tasks or open details."""
        with self._lock:
            mine = [t for t, owner in owners.items() if owner == self.user]
            return any(self.store.summary_version.get(t) != versions[t] for t in mine) or any(
                self.store.detail_version.get(t) != versions.get(t) for t in self.details.open if t in mine)

    # ------------------------------------------------------------------ HTTP

    def _get(self, path: str) -> Any:
        resp = requests.get(f"{self.api_url}{path}", headers={"Authorization": f"Bearer {self.bearer}"},
                            timeout=REQUEST_TIMEOUT_S)
        resp.raise_for_status()
        return resp.json()

    def _post(self, path: str, body: dict[str, Any]) -> requests.Response:
        return requests.post(f"{self.api_url}{path}", json=body, headers={"Authorization": f"Bearer {self.bearer}"},
                             timeout=REQUEST_TIMEOUT_S)

    def _op(self, f: str, value: dict[str, Any]) -> None:
        self._record(self.name, f, {"client": self.name, **value})

    # ------------------------------------------------------------------ the page

    async def connect(self) -> None:
        from centrifuge import Client, ClientEventHandler

        outer = self

        class Events(ClientEventHandler):  # the summary channel is a server-side subscription: it reports here
            async def on_subscribed(self, ctx: Any) -> None:
                if ctx.channel == outer.channel:
                    await outer._subscribed("summary", ctx.channel, ctx.recovered, None)

            async def on_publication(self, ctx: Any) -> None:
                outer._publication(ctx.channel, ctx.pub.data)

        async def token() -> str:
            return str((await asyncio.to_thread(self._get, "/api/realtime/session"))["token"])

        self.client = Client(self.ws_url, events=Events(), get_token=token, proxy=None, min_reconnect_delay=0.2,
                             max_reconnect_delay=2.0)
        if self._snapshot_first():  # the defect snapshot-then-subscribe: the task list before the connection
            await self._snapshot("summary", None)
        await self.client.connect()
        self.started = True
        if self.batch_get_s > 0:
            self._spawn(self._batch_loop())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _batch_loop(self) -> None:
        """§13.2: the first check one period after connecting, then every period to twice that (the simulated
        client's own rhythm, client_model)."""
        delay = self.batch_get_s
        while self.frozen is None:
            await asyncio.sleep(delay)
            await self._batch_get()
            delay = self.batch_get_s * self._rng.uniform(1.0, 2.0)

    async def _batch_get(self) -> None:
        with self._lock:
            known = self.store.batch_known(self.details.open)
            opened = set(self.details.open)
        if not known:
            return
        body = {"taskIds": sorted(known), "knownVersions": {t: str(v) for t, v in known.items()}}
        try:
            resp = await asyncio.to_thread(self._post, "/api/tasks/status:batchGet", body)
            resp.raise_for_status()
            newer = list(resp.json()["tasks"])
            details = [(await asyncio.to_thread(self._get, f"/api/tasks/{s['task']['id']}"))["detail"]
                       for s in newer if s["task"]["id"] in opened]
        except Exception:  # the API away: the next period asks again
            return
        with self._lock:
            applied = [(kind, self.store.receive(kind, message)[0], message)
                       for kind, message in [*(("summary", s) for s in newer), *(("detail", d) for d in details)]]
        for kind, version, message in applied:
            if version is not None:
                task = message["task"]["id"] if kind == "summary" else message["taskId"]
                self._op("view", {"gate": kind, "task": task, "version": version, "via": "batchGet"})

    async def disconnect(self) -> None:
        self.frozen = self.final()
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.disconnect()

    @staticmethod
    def _snapshot_first() -> bool:
        """§8.3's order is subscribe, then the snapshot; the reference's ``init_order`` says it (its defect
        ``snapshot-then-subscribe`` reverses it, as in the simulated client)."""
        return init_order()[0] == "snapshot"

    async def _subscribed(self, gate: str, channel: str, recovered: bool, task_id: str | None) -> None:
        first = channel not in self.subscribed_once
        self.subscribed_once.add(channel)
        if first and self._snapshot_first():  # loaded before the subscription
            return
        if not first:
            self._op("recover", {"channel": channel, "recovered": bool(recovered)})
            with self._lock:
                reload = self.store.resubscribed(bool(recovered))
            if not reload:
                return
        await self._snapshot(gate, task_id)

    async def _snapshot(self, gate: str, task_id: str | None) -> None:
        """§8.3: the subscription is up; load the snapshot, with what arrives meanwhile buffered and replayed."""
        with self._lock:
            self.store.begin_snapshot()
        try:
            if gate == "summary":
                body = await asyncio.to_thread(self._get, "/api/tasks")
                items = [("summary", t) for t in body["tasks"]]
            else:
                body = await asyncio.to_thread(self._get, f"/api/tasks/{task_id}")
                items = [("detail", body["detail"])]
        except Exception:  # the API away: what was buffered is applied; the next resubscription loads again
            items = []
        with self._lock:
            applied = self.store.end_snapshot(items)
        for kind, task, version in applied:
            self._op("view", {"gate": kind, "task": task, "version": version, "via": "snapshot"})
        for kind, message in items:
            if kind == "summary":
                self._maybe_open(str(message["task"]["id"]))

    def _publication(self, channel: str, data: Any) -> None:
        self._op("deliver", {"channel": channel})
        if not isinstance(data, dict) or data.get("kind") not in ("task.summary", "task.detail"):
            return
        kind = "summary" if data["kind"] == "task.summary" else "detail"
        with self._lock:
            version, notice = self.store.receive(kind, data)
        task = str(data["task"]["id"] if kind == "summary" else data["taskId"])
        if version is not None:
            self._op("view", {"gate": kind, "task": task, "version": version, "via": "publication"})
        if notice is not None:
            self._op("notice", {"id": notice["id"], "type": notice["type"], "task": task})
        if kind == "summary":
            self._maybe_open(task)

    def _maybe_open(self, task_id: str) -> None:
        # Each of its first ``details`` tasks once: one that the LRU closed is not opened again
        if len(self._opened) >= self.details_wanted or task_id in self._opened:
            return
        self._opened.add(task_id)
        self._opening.add(task_id)
        self._spawn(self._open_detail(task_id))

    async def open_detail(self, task_id: str) -> None:
        """Ask for ``task_id``'s detail whoever owns it (the page's URL can name any task id)."""
        await self._open_detail(task_id)

    async def _close_detail(self, task_id: str) -> None:
        """The LRU closed ``task_id``'s detail: unsubscribed on the server before the next one is subscribed."""
        sub = self.client.get_subscription(detail_channel(self.tenant, task_id))
        if sub is not None:
            await sub.unsubscribe()
            self.client.remove_subscription(sub)
        self._op("unsubscribe", {"channel": detail_channel(self.tenant, task_id)})

    async def _open_detail(self, task_id: str) -> None:
        from centrifuge import SubscriptionEventHandler

        outer = self

        class Events(SubscriptionEventHandler):
            async def on_subscribed(self, ctx: Any) -> None:
                await outer._subscribed("detail", detail_channel(outer.tenant, task_id), ctx.recovered, task_id)

            async def on_publication(self, ctx: Any) -> None:
                outer._publication(detail_channel(outer.tenant, task_id), ctx.pub.data)

        try:
            resp = await asyncio.to_thread(self._post, "/api/realtime/subscription-token", {"taskId": task_id})
            if resp.status_code != 200:
                self._op("detail-token", {"task": task_id, "granted": False, "code": resp.json().get("code")})
                return
            self._op("detail-token", {"task": task_id, "granted": True})

            async def token(_ctx: Any = None) -> str:
                again = await asyncio.to_thread(self._post, "/api/realtime/subscription-token", {"taskId": task_id})
                return str(again.json()["token"])

            with self._lock:
                evicted = self.details.want(task_id)
            for old in evicted:
                await self._close_detail(old)
            sub = self.client.new_subscription(detail_channel(self.tenant, task_id), events=Events(),
                                               token=resp.json()["token"], get_token=token)
            self.peak_subscriptions = max(self.peak_subscriptions, 1 + len(self.client.subscriptions()))
            if self._snapshot_first():
                await self._snapshot("detail", task_id)
            await sub.subscribe()
        finally:
            self._opening.discard(task_id)
