"""The native stack's parts, for real: Toxiproxy in front of Redis, versitygw through S3ObjectStore,
Redis through RedisCache / RedisNotifier, including the faults each adapter must survive.

Needs ``go`` (Toxiproxy and versitygw are built from the Go module proxy into the cache on first use,
about 3-4 minutes cold on 2 cores, instant afterwards) and Debian's ``redis-server`` (installed with
apt-get when missing and running as root). Skipped only when those cannot be had.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from reference.copilot.adapters.cache_redis import DEFAULT_CHANNEL, RedisCache, RedisNotifier
from reference.copilot.adapters.objectstore_s3 import S3ObjectStore
from reference.copilot.effects import ObjectStoreError
from reference.copilot.http.notify import RESYNC, NotificationHub, RelayOnDemand, TaskChange
from stack import s3 as s3_mod
from stack import toxiproxy as tp_mod
from stack.common import all_threads_stopped
from stack.gobin import go_available, go_binary_path
from stack.redis import LocalRedis, redis_available
from stack.s3 import LocalS3
from stack.toxiproxy import LocalToxiproxy, ToxiproxyClient, ToxiproxyError

pytestmark = pytest.mark.stack

ACCESS_KEY = "sortie-test"
SECRET_KEY = "s3cret-" + secrets.token_hex(8)


def _require_go_binary(version: str, name: str) -> None:
    if not go_available() and not go_binary_path(version, name).exists():
        pytest.skip(f"'go' is not on PATH and {name} {version} is not in the cache: cannot build it")


def _require_redis() -> None:
    if not redis_available():
        pytest.skip("redis-server is not installed and cannot be (needs root and apt-get)")


@contextlib.contextmanager
def _run_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _gone(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _raw_redis(host: str, port: int) -> redis.Redis:
    """A plain client with no retries, so a fault surfaces as an exception."""
    return redis.Redis(host=host, port=port, socket_timeout=3.0, socket_connect_timeout=3.0,
                       retry=Retry(NoBackoff(), 0))


def _timed_ping(r: redis.Redis) -> float:
    began = time.monotonic()
    assert r.ping()
    return time.monotonic() - began


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_server() -> Iterator[LocalRedis]:
    _require_redis()
    with _run_dir("sortie-redis-test-") as run_dir, LocalRedis(run_dir) as server:
        yield server
    assert _gone(server.pid)


@pytest.fixture(scope="module")
def toxiproxy() -> Iterator[LocalToxiproxy]:
    _require_go_binary(tp_mod.DEFAULT_VERSION, "toxiproxy-server")
    with _run_dir("sortie-toxiproxy-test-") as run_dir, LocalToxiproxy(run_dir) as server:
        yield server
    assert _gone(server.pid)


@pytest.fixture(scope="module")
def s3_server() -> Iterator[LocalS3]:
    _require_go_binary(s3_mod.VERSIONS[0], "versitygw")
    with _run_dir("sortie-s3-test-") as run_dir, LocalS3(run_dir, ACCESS_KEY, SECRET_KEY) as server:
        yield server
    assert _gone(server.pid)


# --- installs ------------------------------------------------------------------------------------


def test_installs_are_cached(toxiproxy: LocalToxiproxy, s3_server: LocalS3) -> None:
    began = time.monotonic()
    binaries = tp_mod.install()
    versitygw = s3_mod.install()
    assert time.monotonic() - began < 2.0, "a second install must come from the cache"
    for path in (binaries.server, binaries.cli, versitygw):
        assert path.is_file() and os.access(path, os.X_OK), path
    assert binaries.server.name == "toxiproxy-server" and binaries.cli.name == "toxiproxy-cli"
    assert str(binaries) == str(binaries.server)


# --- Toxiproxy in front of Redis -----------------------------------------------------------------


def test_toxiproxy_moves_a_link_to_another_upstream(toxiproxy: LocalToxiproxy, redis_server: LocalRedis) -> None:
    """set_upstream (a balancer moving a link off a lost node): same listen address, the old connection closed,
    new ones reach the new upstream (here Toxiproxy's own API)."""
    import requests

    client = ToxiproxyClient(toxiproxy.api_url)
    name = "moved-" + secrets.token_hex(3)
    host, port = client.create_proxy(name, redis_server.address)
    try:
        r = _raw_redis(host, port)
        assert r.ping()
        api = toxiproxy.api_url.split("//", 1)[1]
        client.set_upstream(name, api)
        assert client.proxy(name)["upstream"] == api and client.proxy(name)["listen"] == f"{host}:{port}"
        with pytest.raises(redis.RedisError):
            r.ping()
        assert requests.get(f"http://{host}:{port}/version", timeout=5).status_code == 200
    finally:
        client.delete_proxy(name)


def test_toxiproxy_link_passes_cuts_delays_and_resets(toxiproxy: LocalToxiproxy,
                                                      redis_server: LocalRedis) -> None:
    client = ToxiproxyClient(toxiproxy.api_url)
    name = "redis-" + secrets.token_hex(3)
    host, port = client.create_proxy(name, redis_server.address)
    assert host == "127.0.0.1" and port not in (0, redis_server.port)
    assert client.proxies()[name]["listen"] == f"{host}:{port}"
    r = _raw_redis(host, port)
    try:
        # Traffic passes.
        r.set("through-proxy", "yes")
        assert r.get("through-proxy") == b"yes"

        # Disabled: the listener is closed, the client's connection dies.
        client.set_enabled(name, False)
        assert client.proxy(name)["enabled"] is False
        with pytest.raises(redis.RedisError):
            r.ping()
        client.set_enabled(name, True)
        assert r.ping()  # same port again

        # A 300 ms latency toxic: confirmed by read-back, listed, and it delays a PING.
        baseline = min(_timed_ping(r) for _ in range(3))
        toxic = client.add_toxic(name, "slow", "latency", "downstream", {"latency": 300})
        assert toxic["attributes"]["latency"] == 300 and toxic["toxicity"] == 1
        assert [t["name"] for t in client.toxics(name)] == ["slow"]
        delayed = _timed_ping(r)
        assert baseline < 0.25 <= delayed, (baseline, delayed)

        # reset() removes every toxic.
        client.reset()
        assert client.toxics(name) == []
        assert _timed_ping(r) < 0.25

        # remove_toxic, and failures carry the server's answer.
        client.add_toxic(name, "cut-later", "timeout", "upstream", {"timeout": 0})
        client.remove_toxic(name, "cut-later")
        assert client.toxics(name) == []
        with pytest.raises(ToxiproxyError) as bad_type:
            client.add_toxic(name, "x", "no-such-toxic", "downstream", {})
        assert bad_type.value.status == 400 and "invalid toxic type" in str(bad_type.value)
        with pytest.raises(ToxiproxyError) as misspelt:
            client.add_toxic(name, "typo", "latency", "downstream", {"latenc": 300})
        assert "latenc" in str(misspelt.value)
        assert client.toxics(name) == [], "a toxic that failed its read-back is removed"
        with pytest.raises(ToxiproxyError) as missing:
            client.remove_toxic(name, "never-added")
        assert missing.value.status == 404 and "not found" in (missing.value.body or "")
        with pytest.raises(ToxiproxyError) as duplicate:
            client.create_proxy(name, redis_server.address)
        assert duplicate.value.status == 409
    finally:
        r.close()
        client.delete_proxy(name)
        client.close()
    with pytest.raises(ToxiproxyError):
        ToxiproxyClient("http://127.0.0.1:1", timeout_s=1.0).version()


# --- S3 ------------------------------------------------------------------------------------------


def test_s3_object_store_round_trip(s3_server: LocalS3) -> None:
    assert s3_server.endpoint.startswith("127.0.0.1:")
    store = S3ObjectStore(s3_server.endpoint, ACCESS_KEY, SECRET_KEY, "reports", timeout_s=3.0)
    store.ensure_bucket()
    store.ensure_bucket()  # idempotent
    body = b'{"task": "t-1", "ok": true}'
    store.put("reports/t-1.json", body, "application/json")
    store.put("reports/t-2.json", b"{}", "application/json")
    store.put("other/x.bin", secrets.token_bytes(70_000), "application/octet-stream")
    assert store.get("reports/t-1.json") == body
    assert store.get("reports/missing.json") is None
    assert store.list("reports/") == ["reports/t-1.json", "reports/t-2.json"]
    assert len(store.list()) == 3
    store.delete("reports/t-2.json")
    assert store.get("reports/t-2.json") is None
    assert store.list("reports/") == ["reports/t-1.json"]
    assert (s3_server.data_dir / "reports" / "reports" / "t-1.json").read_bytes() == body  # posix backend


def test_s3_wrong_secret_is_refused(s3_server: LocalS3) -> None:
    good = S3ObjectStore(s3_server.endpoint, ACCESS_KEY, SECRET_KEY, "auth-check", timeout_s=3.0)
    good.ensure_bucket()
    bad = S3ObjectStore(s3_server.endpoint, ACCESS_KEY, "not-the-secret", "auth-check", timeout_s=3.0)
    with pytest.raises(ObjectStoreError, match="SignatureDoesNotMatch"):
        bad.put("x.json", b"{}", "application/json")
    with pytest.raises(ObjectStoreError):
        bad.get("x.json")  # unreachable is not "missing"
    assert good.get("x.json") is None


def test_s3_put_to_a_stopped_or_hung_server_fails_in_bounded_time(s3_server: LocalS3) -> None:
    with _run_dir("sortie-s3-stop-test-") as run_dir:
        server = LocalS3(run_dir, ACCESS_KEY, SECRET_KEY).start()
        try:
            store = S3ObjectStore(server.endpoint, ACCESS_KEY, SECRET_KEY, "fault-check", timeout_s=1.0)
            store.ensure_bucket()
            store.put("before.txt", b"1", "text/plain")

            # Hung (SIGSTOP): the kernel still accepts connections, the read times out.
            pid = server.pid
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
            try:
                deadline = time.monotonic() + 10.0
                while not all_threads_stopped(pid):  # stopped for real, not only signalled (a condition, polled)
                    assert time.monotonic() < deadline, f"versitygw {pid} not stopped 10 s after SIGSTOP"
                    time.sleep(0.01)
                began = time.monotonic()
                with pytest.raises(ObjectStoreError, match="(?i)timed? ?out"):
                    store.put("hung.txt", b"2", "text/plain")
                assert time.monotonic() - began < 5.0
            finally:
                os.kill(pid, signal.SIGCONT)

            # Stopped: connection refused, at once.
            server.stop()
            assert _gone(pid)
            began = time.monotonic()
            with pytest.raises(ObjectStoreError):
                store.put("after.txt", b"3", "text/plain")
            with pytest.raises(ObjectStoreError):
                store.get("before.txt")
            assert time.monotonic() - began < 5.0

            # Restarted on the same port with its data.
            server.start()
            assert store.get("before.txt") == b"1"
        finally:
            server.stop()


# --- Redis ---------------------------------------------------------------------------------------


def test_redis_cache_set_get_ttl(redis_server: LocalRedis) -> None:
    cache = RedisCache(redis_server.url)
    try:
        cache.set("dedup:k1", "task-1", ttl_s=30)
        assert cache.get("dedup:k1") == "task-1"
        assert cache.get("dedup:absent") is None
        with redis_server.client() as raw:
            assert 0 < raw.pttl("dedup:k1") <= 30_000
        cache.set("short", "v", ttl_s=0.3)
        assert cache.get("short") == "v"
        deadline = time.monotonic() + 5.0
        while cache.get("short") is not None:
            assert time.monotonic() < deadline, "the TTL never expired"
            time.sleep(0.05)
        redis_server.flushall()
        assert cache.get("dedup:k1") is None
        assert cache.errors == 0
    finally:
        cache.close()


def test_redis_notifier_publish_reaches_subscriber(redis_server: LocalRedis) -> None:
    notifier = RedisNotifier(redis_server.url)
    with notifier.subscribe() as sub:
        notifier.task_changed("t-1", "u-1", "QUEUED", 2)
        notifier.task_changed("t-1", "u-1", "VALIDATING", 3)
        assert sub.get(timeout_s=5.0) == {"task_id": "t-1", "user_id": "u-1", "status": "QUEUED", "version": 2}
        assert next(iter(sub)) == {"task_id": "t-1", "user_id": "u-1", "status": "VALIDATING", "version": 3}
        assert sub.get(timeout_s=0.2) is None
    notifier.close()


def test_the_apis_relay_reads_the_change_channel_only_from_its_first_stream(redis_server: LocalRedis) -> None:
    """An API whose streams the stream tier serves opens none, so its workers never decode the channel."""
    hub, notifier = NotificationHub(), RedisNotifier(redis_server.url)
    relay = RelayOnDemand(redis_server.url, hub)
    try:
        with redis_server.client(decode_responses=True) as raw:
            assert raw.pubsub_numsub(DEFAULT_CHANNEL) == [(DEFAULT_CHANNEL, 0)]
            relay()  # what the API's stream route does before it subscribes
            assert relay.started and relay.ready.is_set()
            sub = hub.subscribe("u-1")
            notifier.task_changed("t-1", "u-1", "QUEUED", 2)  # as another process commits
            assert sub.get(5.0) == TaskChange("t-1", "u-1", "QUEUED", 2)
            relay()  # a second stream starts no second relay
            assert raw.pubsub_numsub(DEFAULT_CHANNEL) == [(DEFAULT_CHANNEL, 1)]
            relay.close()
            deadline = time.monotonic() + 5.0
            while raw.pubsub_numsub(DEFAULT_CHANNEL) != [(DEFAULT_CHANNEL, 0)]:
                assert time.monotonic() < deadline, "the relay kept its subscription after close"
                time.sleep(0.05)
    finally:
        relay.close()
        notifier.close()


def test_the_relay_back_after_losing_redis_tells_every_open_stream_to_resync(redis_server: LocalRedis) -> None:
    """Redis pub/sub keeps nothing for a subscriber that is not there: when the relay's subscription is cut (here
    Redis drops it, as a restart or a full output buffer does), the relay subscribes again and tells the streams
    that stayed open that they may have missed changes."""
    hub, notifier = NotificationHub(), RedisNotifier(redis_server.url)
    relay = RelayOnDemand(redis_server.url, hub)
    try:
        relay()
        sub = hub.subscribe("u-1")
        with redis_server.client(decode_responses=True) as raw:
            assert raw.client_kill_filter(_type="pubsub") == 1  # the relay's subscription, cut
        assert sub.get(10.0) is RESYNC
        notifier.task_changed("t-1", "u-1", "QUEUED", 2)  # subscribed again: changes flow as before
        assert sub.get(10.0) == TaskChange("t-1", "u-1", "QUEUED", 2)
    finally:
        relay.close()
        notifier.close()


def test_losing_redis_changes_nothing_for_cache_and_notifier() -> None:
    _require_redis()
    with _run_dir("sortie-redis-loss-test-") as run_dir:
        server = LocalRedis(run_dir).start()
        try:
            cache = RedisCache(server.url, cooldown_s=0.0)
            notifier = RedisNotifier(server.url, cooldown_s=0.0)
            cache.set("k", "v", ttl_s=60)
            sub = notifier.subscribe()
            pid, port = server.pid, server.port
            server.stop()
            assert _gone(pid)

            began = time.monotonic()
            for i in range(5):
                assert cache.get("k") is None  # a miss, not an exception
                cache.set("k2", "v2", ttl_s=60)
                notifier.task_changed(f"t-{i}", "u", "QUEUED", i)
            assert time.monotonic() - began < 5.0
            assert cache.errors >= 5 and notifier.errors >= 5
            with pytest.raises(redis.RedisError):
                sub.get(timeout_s=2.0)  # the stream tells its reader that it ended
            sub.close()

            server.start()  # same port: the adapters recover by themselves
            assert server.port == port
            cache.set("k3", "v3", ttl_s=60)
            assert cache.get("k3") == "v3"
            with notifier.subscribe() as sub2:
                notifier.task_changed("t-9", "u", "EXECUTING", 9)
                assert sub2.get(timeout_s=5.0) == {"task_id": "t-9", "user_id": "u", "status": "EXECUTING",
                                                   "version": 9}
            cache.close()
            notifier.close()
        finally:
            server.stop()
