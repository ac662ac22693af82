"""MariaDB and Centrifugo behind Toxiproxy, as a native stack wires them: a cut link fails what crosses it, a healed
link carries it again, and a WebSocket client cut off from Centrifugo recovers the publications it missed.

One Toxiproxy, one MariaDB and one Centrifugo for the module (a few seconds). Skipped only when a binary is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from centrifuge import Client, ClientEventHandler

from stack.centrifugo import (
    DEFAULT_VERSION,
    INSTALL_COMMAND,
    CentrifugoConfig,
    LocalCentrifugo,
    Namespace,
    connection_token,
)
from stack.gobin import go_available, go_binary_path
from stack.mariadb import INSTALL_COMMAND as MARIADB_INSTALL_COMMAND
from stack.mariadb import LocalMariaDB, mariadb_available
from stack.toxiproxy import DEFAULT_VERSION as TOXIPROXY_VERSION
from stack.toxiproxy import LocalToxiproxy

pytestmark = [
    pytest.mark.stack,
    pytest.mark.skipif(not mariadb_available(), reason=f"mariadbd is not installed: {MARIADB_INSTALL_COMMAND}"),
    pytest.mark.skipif(not go_available() and not (go_binary_path(DEFAULT_VERSION, "centrifugo").exists()
                                                   and go_binary_path(TOXIPROXY_VERSION, "toxiproxy-server").exists()),
                       reason=f"centrifugo or toxiproxy is not built and 'go' is missing: {INSTALL_COMMAND}"),
]

SECRET = secrets.token_hex(32)
SUMMARY = Namespace("task_user", history_size=10, history_ttl_s=300)
WAIT_S = 15.0


@pytest.fixture(scope="module")
def linked() -> Iterator[dict[str, Any]]:
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-links-test-"))
    started: list[Any] = []
    try:
        toxiproxy = LocalToxiproxy(run_dir / "toxiproxy").start()
        started.append(toxiproxy)
        database = LocalMariaDB(run_dir / "mariadb").start()
        started.append(database)
        centrifugo = LocalCentrifugo(run_dir / "centrifugo", CentrifugoConfig(SECRET, secrets.token_hex(16),
                                                                              (SUMMARY,))).start()
        started.append(centrifugo)
        _, db_port = toxiproxy.client.create_proxy("mariadb", database.address)
        _, ws_port = toxiproxy.client.create_proxy("centrifugo", centrifugo.address)
        yield {"toxiproxy": toxiproxy, "database": database, "centrifugo": centrifugo, "db_port": db_port,
               "ws_url": f"ws://127.0.0.1:{ws_port}/connection/websocket"}
    finally:
        for service in reversed(started):
            service.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def healed(linked: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield linked
    linked["toxiproxy"].client.reset()  # every link enabled again, whatever the test did


def test_a_cut_database_link_fails_the_query_and_a_healed_one_serves_a_new_connection(
        healed: dict[str, Any]) -> None:
    database, proxies = healed["database"], healed["toxiproxy"].client

    def connect() -> Any:
        return pymysql.connect(host="127.0.0.1", port=healed["db_port"], user="root", password="",
                               connect_timeout=3, read_timeout=3)

    with contextlib.closing(connect()) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@port")
        assert cur.fetchone() == (database.port,)  # through the link, to this server
        proxies.set_enabled("mariadb", False)
        with pytest.raises(pymysql.err.OperationalError):
            cur.execute("SELECT 1")
    with pytest.raises(pymysql.err.OperationalError):
        connect()  # nothing listens while the link is cut
    proxies.set_enabled("mariadb", True)
    with contextlib.closing(connect()) as conn, conn.cursor() as cur:
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)


class Recorder(ClientEventHandler):
    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.changed = asyncio.Event()

    def add(self, *event: Any) -> None:
        self.log.append(event)
        self.changed.set()

    async def on_connecting(self, ctx: Any) -> None:
        self.add("connecting", ctx.code, ctx.reason)

    async def on_subscribed(self, ctx: Any) -> None:
        self.add("subscribed", ctx.recovered, ctx.was_recovering)

    async def on_publication(self, ctx: Any) -> None:
        self.add("publication", ctx.pub.offset)

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [e for e in self.log if e[0] == kind]

    async def until(self, condition: Any, what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not condition():
            self.changed.clear()
            if time.monotonic() >= deadline:
                raise AssertionError(f"never saw {what}; events: {self.log}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), deadline - time.monotonic())


def test_a_client_cut_off_from_centrifugo_reconnects_when_healed_and_recovers_the_gap(
        healed: dict[str, Any]) -> None:
    centrifugo, proxies = healed["centrifugo"], healed["toxiproxy"].client
    user = f"t1/u{secrets.token_hex(3)}"
    channel = f"task_user:{user}"

    async def scenario() -> None:
        events = Recorder()
        client = Client(healed["ws_url"], events=events, proxy=None, max_reconnect_delay=0.5,
                        token=connection_token(SECRET, user, expires_at=time.time() + 300, channels=[channel]))
        try:
            await client.connect()
            await events.until(lambda: events.of("subscribed"), "the subscription")
            first = centrifugo.api.publish(channel, {"version": "1"}).offset
            await events.until(lambda: events.of("publication"), "the first publication")
            proxies.set_enabled("centrifugo", False)
            await events.until(lambda: len(events.of("connecting")) >= 2, "the client noticing the cut")
            missed = [centrifugo.api.publish(channel, {"version": str(v)}).offset for v in (2, 3, 4)]
            proxies.set_enabled("centrifugo", True)
            await events.until(lambda: len(events.of("subscribed")) == 2, "the resubscription")
            assert events.of("subscribed")[1][1:] == (True, True)
            await events.until(lambda: len(events.of("publication")) == 4, "the missed publications")
            assert [e[1] for e in events.of("publication")] == [first, *missed]
        finally:
            await client.disconnect()

    asyncio.run(scenario())
