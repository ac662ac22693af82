"""The real Centrifugo v6 server (stack/centrifugo.py) with real WebSocket clients (centrifuge-python): delivery,
recovery across a gap, what is not recovered, epochs, tokens and the subscription limit. These are the facts the
simulation's Centrifugo model must reproduce (docs/native-stack.md lists them).

One server for the module (memory engine; under a second to start); each test uses channels of its own. Skipped only
when the binary is not built and cannot be (`sortie stack install` builds it; CI runs that).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from centrifuge import (
    Client,
    ClientEventHandler,
    ClientState,
    SubscriptionEventHandler,
    SubscriptionState,
)

from stack.centrifugo import (
    DEFAULT_VERSION,
    INSTALL_COMMAND,
    CentrifugoAPI,
    CentrifugoAPIError,
    CentrifugoConfig,
    LocalCentrifugo,
    Namespace,
    connection_token,
    subscription_token,
)
from stack.gobin import go_available, go_binary_path

pytestmark = [
    pytest.mark.stack,
    pytest.mark.skipif(not go_available() and not go_binary_path(DEFAULT_VERSION, "centrifugo").exists(),
                       reason=f"centrifugo {DEFAULT_VERSION} is not built and 'go' is missing: {INSTALL_COMMAND}"),
]

SECRET = secrets.token_hex(32)
API_KEY = secrets.token_hex(16)
HISTORY_SIZE = 5
DETAIL_LIMIT = 3  # detail subscriptions per connection beside the summary channel (the seed's product uses 20)
SUMMARY = Namespace("task_user", history_size=HISTORY_SIZE, history_ttl_s=300)
DETAIL = Namespace("task_detail", history_size=HISTORY_SIZE, history_ttl_s=300)
SHORT_LIVED = Namespace("short", history_size=HISTORY_SIZE, history_ttl_s=1)
EXPIRED_CLOSE_DELAY_S = 0.5  # v6's default is 25 s: how long a connection outlives its token
WAIT_S = 15.0  # a deadline on a condition, never a pause


@pytest.fixture(scope="module")
def server() -> Iterator[LocalCentrifugo]:
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-centrifugo-test-"))
    config = CentrifugoConfig(SECRET, API_KEY, (SUMMARY, DETAIL, SHORT_LIVED), channel_limit=1 + DETAIL_LIMIT,
                              expired_close_delay_s=EXPIRED_CLOSE_DELAY_S)
    srv = LocalCentrifugo(run_dir, config)
    try:
        yield srv.start()
    finally:
        srv.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def unique(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(4)}"


def later(seconds: float = 300) -> float:
    return time.time() + seconds


# --- a client that records what it is told ----------------------------------------------------------------


@dataclass
class Events:
    """Everything a client and its subscriptions were told, in order; waiters wake on each new event."""

    log: list[tuple[Any, ...]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, *event: Any) -> None:
        self.log.append(event)
        self.changed.set()

    def of(self, kind: str, channel: str | None = None) -> list[tuple[Any, ...]]:
        return [e for e in self.log if e[0] == kind and (channel is None or e[1] == channel)]

    async def until(self, condition: Callable[[], Any], what: str) -> Any:
        deadline = time.monotonic() + WAIT_S
        while not (result := condition()):
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"never saw {what}; events: {self.log}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)
        return result


class ClientEvents(ClientEventHandler):
    def __init__(self, events: Events) -> None:
        self.events = events

    async def on_connected(self, ctx: Any) -> None:
        self.events.add("connected", None)

    async def on_connecting(self, ctx: Any) -> None:
        self.events.add("connecting", None, ctx.code, ctx.reason)

    async def on_disconnected(self, ctx: Any) -> None:
        self.events.add("disconnected", None, ctx.code, ctx.reason)

    async def on_subscribed(self, ctx: Any) -> None:  # a server-side subscription (the token's channels claim)
        self.events.add("subscribed", ctx.channel, ctx.recovered, ctx.was_recovering, ctx.stream_position)

    async def on_publication(self, ctx: Any) -> None:
        self.events.add("publication", ctx.channel, ctx.pub.offset, ctx.pub.data)


class SubscriptionEvents(SubscriptionEventHandler):
    def __init__(self, events: Events, channel: str) -> None:
        self.events = events
        self.channel = channel

    async def on_subscribed(self, ctx: Any) -> None:
        self.events.add("subscribed", self.channel, ctx.recovered, ctx.was_recovering, ctx.stream_position)

    async def on_unsubscribed(self, ctx: Any) -> None:
        self.events.add("unsubscribed", self.channel, ctx.code, ctx.reason)

    async def on_error(self, ctx: Any) -> None:
        self.events.add("error", self.channel, ctx.code, str(ctx.error))

    async def on_publication(self, ctx: Any) -> None:
        self.events.add("publication", self.channel, ctx.pub.offset, ctx.pub.data)


@contextlib.asynccontextmanager
async def connected(server: LocalCentrifugo, user: str, *, channels: tuple[str, ...] = (),
                    token: str | None = None, wait: bool = True) -> AsyncIterator[tuple[Client, Events]]:
    events = Events()
    client = Client(server.websocket_url, events=ClientEvents(events), proxy=None,
                    token=token or connection_token(SECRET, user, expires_at=later(), channels=channels))
    try:
        await client.connect()
        if wait:
            await events.until(lambda: len(events.of("subscribed")) >= len(channels) and events.of("connected"),
                               "connected and subscribed")
        yield client, events
    finally:
        await client.disconnect()


async def subscribe(client: Client, events: Events, channel: str, token: str | None) -> Any:
    sub = client.new_subscription(channel, events=SubscriptionEvents(events, channel), token=token or "")
    await sub.subscribe()
    return sub


def publications(events: Events, channel: str) -> list[tuple[int, Any]]:
    return [(e[2], e[3]) for e in events.of("publication", channel)]


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


async def stop_without_blocking_the_clients(server: LocalCentrifugo) -> None:
    """Stop on a worker thread: a stopping node closes its WebSockets and waits for the clients' answers, which an
    event loop blocked in stop() cannot give (the stop then takes seconds). Never start a server there: it dies with
    the thread that started it (ServerProcess's parent-death signal)."""
    await asyncio.to_thread(server.stop)


# --- delivery and recovery ---------------------------------------------------------------------------------


def test_a_token_bearing_client_receives_what_the_server_api_publishes(server: LocalCentrifugo) -> None:
    user = unique("t1/u")
    summary, detail = f"task_user:{user}", unique("task_detail:t1/")

    async def scenario() -> None:
        async with connected(server, user, channels=(summary,)) as (client, events):
            await subscribe(client, events, detail, subscription_token(SECRET, user, detail, expires_at=later()))
            await events.until(lambda: events.of("subscribed", detail), "the detail subscription")
            at_summary = server.api.publish(summary, {"version": "1"})
            at_detail = server.api.publish(detail, {"version": "1", "steps": []})
            await events.until(lambda: publications(events, summary) and publications(events, detail), "both")
            assert publications(events, summary) == [(at_summary.offset, {"version": "1"})]
            assert publications(events, detail) == [(at_detail.offset, {"version": "1", "steps": []})]

    run(scenario)


def test_a_gap_within_the_history_is_recovered_contiguously(server: LocalCentrifugo) -> None:
    user = unique("t1/u")
    summary = f"task_user:{user}"

    async def scenario() -> None:
        async with connected(server, user, channels=(summary,)) as (client, events):
            first = server.api.publish(summary, {"version": "1"})
            await events.until(lambda: publications(events, summary), "the first publication")
            await client.disconnect()
            missed = [server.api.publish(summary, {"version": str(v)}).offset for v in range(2, 2 + HISTORY_SIZE)]
            await client.connect()
            resubscribed = await events.until(lambda: events.of("subscribed", summary)[1:], "the resubscription")
            _, _, recovered, was_recovering, position = resubscribed[0]
            assert (recovered, was_recovering) == (True, True)
            await events.until(lambda: len(publications(events, summary)) == 1 + len(missed), "the missed ones")
            offsets = [offset for offset, _ in publications(events, summary)]
            assert offsets == list(range(first.offset, first.offset + 1 + len(missed)))  # contiguous, none twice
            assert position.epoch == first.epoch

    run(scenario)


def test_a_backlog_beyond_the_history_size_is_not_recovered_and_nothing_of_it_is_delivered(
        server: LocalCentrifugo) -> None:
    user = unique("t1/u")
    summary = f"task_user:{user}"

    async def scenario() -> None:
        async with connected(server, user, channels=(summary,)) as (client, events):
            server.api.publish(summary, {"version": "1"})
            await events.until(lambda: publications(events, summary), "the first publication")
            await client.disconnect()
            last = None
            for v in range(2, 3 + HISTORY_SIZE):  # one more than the history keeps
                last = server.api.publish(summary, {"version": str(v)})
            await client.connect()
            resubscribed = await events.until(lambda: events.of("subscribed", summary)[1:], "the resubscription")
            _, _, recovered, was_recovering, position = resubscribed[0]
            assert (recovered, was_recovering) == (False, True)
            assert last is not None and (position.offset, position.epoch) == (last.offset, last.epoch)
            # A marker published after the resubscription arrives: nothing of the gap came before it.
            marker = server.api.publish(summary, {"version": "marker"})
            await events.until(lambda: publications(events, summary)[-1][0] == marker.offset, "the marker")
            assert [offset for offset, _ in publications(events, summary)] == [1, marker.offset]

    run(scenario)


def test_history_expires_after_its_ttl(server: LocalCentrifugo) -> None:
    channel = unique("short:")
    server.api.publish(channel, {"n": 1})
    assert len(server.api.history(channel)[0]) == 1
    deadline = time.monotonic() + WAIT_S
    while server.api.history(channel)[0]:
        assert time.monotonic() < deadline, "the history outlived its TTL"
        time.sleep(0.1)  # polling a condition with a deadline
    _, position = server.api.history(channel)
    assert position.offset == 1  # the stream's position survives its publications (history_meta_ttl)


def test_an_idempotency_key_publishes_once(server: LocalCentrifugo) -> None:
    """A relay that crashed between publishing and marking its row publishes again: with the same key the server
    answers the first result and the channel gets one publication."""
    channel = unique("task_detail:t1/")
    key = unique("outbox-")
    first = server.api.publish(channel, {"version": "7"}, idempotency_key=key)
    again = server.api.publish(channel, {"version": "7"}, idempotency_key=key)
    assert again == first
    assert [p["offset"] for p in server.api.history(channel)[0]] == [first.offset]


# --- authentication and authorisation --------------------------------------------------------------------


@pytest.mark.parametrize("token_kind", ["expired", "foreign"])
def test_an_expired_or_foreign_connection_token_is_refused(server: LocalCentrifugo, token_kind: str) -> None:
    secret = SECRET if token_kind == "expired" else secrets.token_hex(32)
    token = connection_token(secret, "t1/u1", expires_at=later(-60 if token_kind == "expired" else 300))
    # The server's answer: 109 "token expired" (the SDK, with no way to refresh, then gives up: code 1
    # "unauthorized"), or a disconnect 3500 "invalid token" for a signature it does not trust.
    expected = (1, "unauthorized") if token_kind == "expired" else (3500, "invalid token")

    async def scenario() -> None:
        async with connected(server, "t1/u1", token=token, wait=False) as (client, events):
            gone = await events.until(lambda: events.of("disconnected"), "the refusal")
            assert gone[0][2:] == expected
            assert not events.of("connected") and client.state == ClientState.DISCONNECTED

    run(scenario)


def test_a_connection_outliving_its_token_is_closed_and_not_let_back_in(server: LocalCentrifugo) -> None:
    """At exp + expired_close_delay the server closes the connection with 3005 "connection expired" (a reconnect
    code); the SDK reconnects with the same token, gets 109, and with no get_token stops: code 1 "unauthorized"."""
    user = unique("t1/u")
    token = connection_token(SECRET, user, expires_at=time.time() + 2)

    async def scenario() -> None:
        async with connected(server, user, token=token) as (client, events):
            gone = await events.until(lambda: events.of("disconnected"), "the expiry")
            assert [e[2:] for e in events.of("connecting")][1:] == [(3005, "connection expired")]
            assert gone[0][2:] == (1, "unauthorized") and client.state == ClientState.DISCONNECTED

    run(scenario)


@pytest.mark.parametrize("case", ["no token", "foreign key", "expired"])
def test_a_subscription_the_token_does_not_allow_is_refused(server: LocalCentrifugo, case: str) -> None:
    user, channel = "t1/u1", unique("task_detail:t1/")
    token = {"no token": None,
             "foreign key": subscription_token(secrets.token_hex(32), user, channel, expires_at=later()),
             "expired": subscription_token(SECRET, user, channel, expires_at=later(-60))}[case]
    # 103 "permission denied"; an expired token is 109, which the SDK turns into "unauthorized" (code 1).
    expected = (1, "unauthorized") if case == "expired" else (103, "permission denied")

    async def scenario() -> None:
        async with connected(server, user) as (client, events):
            sub = await subscribe(client, events, channel, token)
            refused = await events.until(lambda: events.of("unsubscribed", channel), "the refusal")
            assert refused[0][2:] == expected
            assert sub.state == SubscriptionState.UNSUBSCRIBED and client.state == ClientState.CONNECTED
            server.api.publish(channel, {"secret": True})
            assert not publications(events, channel)

    run(scenario)


@pytest.mark.parametrize("case", ["another channel", "another user"])
def test_a_subscription_token_for_another_channel_or_user_closes_the_connection(server: LocalCentrifugo,
                                                                                case: str) -> None:
    """Unlike a bad signature, a valid token whose channel or sub does not match is treated as a forged one: the
    server disconnects the whole connection (3500 "invalid token"; its log says "token channel mismatch" or
    "token user mismatch")."""
    user, channel = "t1/u1", unique("task_detail:t1/")
    token = (subscription_token(SECRET, user, unique("task_detail:t1/"), expires_at=later())
             if case == "another channel" else subscription_token(SECRET, "t2/u9", channel, expires_at=later()))

    async def scenario() -> None:
        async with connected(server, user) as (client, events):
            await subscribe(client, events, channel, token)
            gone = await events.until(lambda: events.of("disconnected"), "the disconnect")
            assert gone[0][2:] == (3500, "invalid token")
            assert not events.of("subscribed", channel)

    run(scenario)


def test_the_channel_limit_refuses_one_subscription_more(server: LocalCentrifugo) -> None:
    user = unique("t1/u")
    summary = f"task_user:{user}"
    details = [unique("task_detail:t1/") for _ in range(DETAIL_LIMIT + 1)]

    async def scenario() -> None:
        async with connected(server, user, channels=(summary,)) as (client, events):
            for channel in details:
                await subscribe(client, events, channel, subscription_token(SECRET, user, channel, expires_at=later()))
            await events.until(lambda: all(events.of("subscribed", c) or events.of("unsubscribed", c)
                                           for c in details), "every answer")
            assert all(events.of("subscribed", c) for c in details[:DETAIL_LIMIT])
            assert events.of("unsubscribed", details[-1])[0][2:] == (106, "limit exceeded")

    run(scenario)


def test_the_server_api_refuses_a_wrong_key_and_an_unknown_namespace(server: LocalCentrifugo) -> None:
    wrong = CentrifugoAPI(server.http_url, "not-the-key")
    try:
        with pytest.raises(CentrifugoAPIError) as refused:
            wrong.publish("task_user:t1/u1", {})
        assert refused.value.status == 401
    finally:
        wrong.close()
    with pytest.raises(CentrifugoAPIError) as unknown:
        server.api.publish("nowhere:x", {})
    assert (unknown.value.status, unknown.value.code) == (200, 102)  # the error is in the body, not the status


def test_bad_configuration_is_refused_before_the_server_starts() -> None:
    with pytest.raises(ValueError):
        CentrifugoConfig("too-short", API_KEY)
    with pytest.raises(ValueError):
        Namespace("task_user", history_size=0, history_ttl_s=300)  # recovery without a history
    with pytest.raises(ValueError):
        CentrifugoConfig(SECRET, API_KEY, (SUMMARY, SUMMARY))
    with pytest.raises(ValueError):
        Namespace("s", history_size=1, history_ttl_s=1)  # v6 wants 2 characters or more


# --- a restart: last, it empties every history ----------------------------------------------------------------


def test_a_restart_of_the_memory_engine_starts_a_new_epoch(server: LocalCentrifugo) -> None:
    user = unique("t1/u")
    summary = f"task_user:{user}"

    async def scenario() -> None:
        async with connected(server, user, channels=(summary,)) as (client, events):
            before = server.api.publish(summary, {"version": "1"})
            await events.until(lambda: publications(events, summary), "the first publication")
            await stop_without_blocking_the_clients(server)
            server.start()  # same port: the SDK reconnects by itself
            resubscribed = await events.until(lambda: events.of("subscribed", summary)[1:], "the resubscription")
            _, _, recovered, was_recovering, position = resubscribed[0]
            assert (recovered, was_recovering) == (False, True)
            assert position.epoch != before.epoch and position.offset == 0
            assert events.of("disconnected") == [] and client.state == ClientState.CONNECTED
            after = server.api.publish(summary, {"version": "2"})
            assert (after.offset, after.epoch) == (1, position.epoch)

    run(scenario)
