"""Two Centrifugo v6 nodes on one Redis engine (stack/centrifugo.py, stack/redis.py): what the seed's production
topology (two nodes, shared Redis) does that the memory engine does not. A publication through either node reaches
clients of both; a node restart keeps the history (the gap is recovered); a Redis flush loses it, and the next
publication starts a new epoch that live clients are told about as "insufficient state".

One Redis and two nodes for the module (about 2 s). Skipped only when a binary is missing.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from centrifuge import Client
from test_centrifugo import (
    ClientEvents,
    Events,
    SubscriptionEvents,
    publications,
    stop_without_blocking_the_clients,
    unique,
)

from stack.centrifugo import (
    DEFAULT_VERSION,
    INSTALL_COMMAND,
    CentrifugoConfig,
    LocalCentrifugo,
    Namespace,
    connection_token,
    subscription_token,
)
from stack.gobin import go_available, go_binary_path
from stack.redis import LocalRedis, redis_available

pytestmark = [
    pytest.mark.stack,
    pytest.mark.skipif(not go_available() and not go_binary_path(DEFAULT_VERSION, "centrifugo").exists(),
                       reason=f"centrifugo {DEFAULT_VERSION} is not built and 'go' is missing: {INSTALL_COMMAND}"),
    pytest.mark.skipif(not redis_available(), reason="redis-server is not installed: apt-get install redis-server"),
]

SECRET = secrets.token_hex(32)
SUMMARY = Namespace("task_user", history_size=10, history_ttl_s=300)
DETAIL = Namespace("task_detail", history_size=10, history_ttl_s=300)


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-centrifugo-redis-test-"))
    started: list[Any] = []
    try:
        redis = LocalRedis(run_dir / "redis").start()
        started.append(redis)
        config = CentrifugoConfig(SECRET, secrets.token_hex(16), (SUMMARY, DETAIL), engine="redis",
                                  redis_url=redis.url, redis_prefix=unique("sortie"))
        nodes = []
        for name in ("a", "b"):
            node = LocalCentrifugo(run_dir / name, config).start()
            started.append(node)
            nodes.append(node)
        yield {"redis": redis, "a": nodes[0], "b": nodes[1]}
    finally:
        for service in reversed(started):
            service.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


async def connect(node: LocalCentrifugo, user: str, summary: str) -> tuple[Client, Events]:
    events = Events()
    client = Client(node.websocket_url, events=ClientEvents(events), proxy=None, max_reconnect_delay=0.5,
                    token=connection_token(SECRET, user, expires_at=time.time() + 300, channels=[summary]))
    await client.connect()
    await events.until(lambda: events.of("subscribed", summary), "the summary subscription")
    return client, events


def test_a_publication_through_one_node_reaches_a_client_of_the_other(cluster: dict[str, Any]) -> None:
    user = unique("t1/u")
    summary = f"task_user:{user}"

    async def scenario() -> None:
        client, events = await connect(cluster["a"], user, summary)
        try:
            landed = cluster["b"].api.publish(summary, {"version": "1"})
            await events.until(lambda: publications(events, summary), "the publication")
            assert publications(events, summary) == [(landed.offset, {"version": "1"})]
            assert cluster["a"].api.history(summary)[1] == landed  # one stream, whichever node is asked
        finally:
            await client.disconnect()

    asyncio.run(scenario())


def test_a_node_restart_keeps_the_epoch_and_the_gap_is_recovered(cluster: dict[str, Any]) -> None:
    user = unique("t1/u")
    summary = f"task_user:{user}"

    async def scenario() -> None:
        client, events = await connect(cluster["a"], user, summary)
        try:
            first = cluster["b"].api.publish(summary, {"version": "1"})
            await events.until(lambda: publications(events, summary), "the first publication")
            await stop_without_blocking_the_clients(cluster["a"])
            missed = [cluster["b"].api.publish(summary, {"version": str(v)}).offset for v in (2, 3)]
            cluster["a"].start()  # same port: the SDK reconnects by itself
            again = await events.until(lambda: events.of("subscribed", summary)[1:], "the resubscription")
            _, _, recovered, was_recovering, position = again[0]
            assert (recovered, was_recovering, position.epoch) == (True, True, first.epoch)
            await events.until(lambda: len(publications(events, summary)) == 3, "the missed publications")
            assert [o for o, _ in publications(events, summary)] == [first.offset, *missed]
        finally:
            await client.disconnect()

    asyncio.run(scenario())


def test_a_redis_flush_starts_a_new_epoch_that_live_clients_are_told_about(cluster: dict[str, Any]) -> None:
    """After FLUSHALL nothing happens until the next publication; it lands at offset 1 of a new epoch, the node
    tells its live subscribers "insufficient state" (a connection with server-side subscriptions is closed with
    3010 and reconnects), they resubscribe with recovered false, and that publication is NOT delivered: only a
    snapshot can tell the client what it holds."""
    user = unique("t1/u")
    summary, detail = f"task_user:{user}", unique("task_detail:t1/")

    async def scenario() -> None:
        client, events = await connect(cluster["a"], user, summary)
        try:
            sub = client.new_subscription(detail, events=SubscriptionEvents(events, detail),
                                          token=subscription_token(SECRET, user, detail, expires_at=time.time() + 300))
            await sub.subscribe()
            await events.until(lambda: events.of("subscribed", detail), "the detail subscription")
            before = cluster["b"].api.publish(summary, {"version": "1"})
            cluster["b"].api.publish(detail, {"version": "1"})
            await events.until(lambda: publications(events, summary) and publications(events, detail), "both")
            cluster["redis"].flushall()
            after = cluster["b"].api.publish(summary, {"version": "2"})
            assert (after.offset, after.epoch != before.epoch) == (1, True)
            await events.until(lambda: events.of("subscribed", summary)[1:], "the resubscription")
            assert (3010, "insufficient state") in [e[2:] for e in events.of("connecting")]
            _, _, recovered, was_recovering, position = events.of("subscribed", summary)[1]
            assert (recovered, was_recovering, position.offset, position.epoch) == (False, True, 1, after.epoch)
            # The detail channel was flushed too: its resubscription (the same reconnect) finds a new epoch.
            await events.until(lambda: events.of("subscribed", detail)[1:], "the detail resubscription")
            assert events.of("subscribed", detail)[1][2:4] == (False, True)
            assert publications(events, summary) == [(before.offset, {"version": "1"})]  # version 2 never came
        finally:
            await client.disconnect()

    asyncio.run(scenario())
