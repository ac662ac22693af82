"""The status sync's Centrifugo model and the client's merge rules, on their own: what the simulation's scenarios
rely on (recovery only across a contiguous gap in the same epoch, history bounded by size and TTL, a new epoch on
restart, tokens and the subscription limit on the server; the client's separate version gates, buffering between
subscribe and snapshot, notices shown once, the LRU of detail subscriptions)."""

from __future__ import annotations

import random
from typing import Any

import pytest
import simpy

from reference.statussync.bugs import BUGS
from reference.statussync.client import MAX_DETAIL_SUBSCRIPTIONS, ClientStore, DetailSubscriptions, init_order
from reference.statussync.relay import PublishFailed
from systems.statussync.centrifugo import CentrifugoModel, Publication, SubscribeRefused

USER = "task_user:t1/u1"
DETAIL = "task_detail:t1/task-1"


def model(size: int = 3, ttl: float = 100.0) -> tuple[simpy.Environment, CentrifugoModel, list[Publication]]:
    env = simpy.Environment()
    return env, CentrifugoModel(env, random.Random(1), history_size=size, history_ttl_s=ttl), []


def test_recovery_only_across_a_contiguous_gap_in_the_same_epoch() -> None:
    env, m, got = model(size=3)
    conn = m.connect("c", "t1/u1", (USER,), got.append)
    first = m.subscribe(conn, USER, None, None)
    for i in range(2):
        m.publish(USER, {"n": i})
    env.run(until=1.0)
    assert [p.data["n"] for p in got] == [0, 1]
    m.disconnect("c")
    m.publish(USER, {"n": 2})
    conn = m.connect("c", "t1/u1", (USER,), got.append)
    back = m.subscribe(conn, USER, None, (first.epoch, 2))
    assert back.recovered and [p.data["n"] for p in back.publications] == [2]
    for i in range(3, 8):  # more than the history holds
        m.publish(USER, {"n": i})
    assert not m.subscribe(conn, USER, None, (first.epoch, 3)).recovered  # 4 fell out of the history
    m.restart()
    conn = m.connect("c", "t1/u1", (USER,), got.append)
    again = m.subscribe(conn, USER, None, (first.epoch, 8))
    assert not again.recovered and again.epoch != first.epoch


def test_history_expires_by_ttl() -> None:
    env, m, got = model(size=10, ttl=5.0)
    conn = m.connect("c", "t1/u1", (USER,), got.append)
    sub = m.subscribe(conn, USER, None, None)
    m.publish(USER, {"n": 0})
    env.run(until=10.0)
    assert not m.subscribe(conn, USER, None, (sub.epoch, 0)).recovered


def test_the_ttl_runs_from_the_streams_last_publication() -> None:
    """Centrifugo v6: a busy channel keeps its whole history (up to its size), however old the first publication."""
    env, m, got = model(size=10, ttl=5.0)
    conn = m.connect("c", "t1/u1", (USER,), got.append)
    sub = m.subscribe(conn, USER, None, None)
    for at in (1.0, 4.0, 7.0):
        env.run(until=at)
        m.publish(USER, {"at": at})
    env.run(until=11.0)  # the first publication is 10 s old, the last 4 s
    kept = m.subscribe(conn, USER, None, (sub.epoch, 0))
    assert kept.recovered and [p.offset for p in kept.publications] == [1, 2, 3]
    env.run(until=12.5)  # 5.5 s after the last publication: all of it is gone, the position stays
    gone = m.subscribe(conn, USER, None, (sub.epoch, 0))
    assert not gone.recovered and gone.epoch == sub.epoch and gone.offset == 3


def test_detail_channels_need_a_matching_unexpired_token_and_respect_the_limit() -> None:
    env, m, got = model()
    conn = m.connect("c", "t1/u1", (USER,), got.append)
    with pytest.raises(SubscribeRefused, match="permission"):
        m.subscribe(conn, DETAIL, None, None)
    with pytest.raises(SubscribeRefused, match="permission"):
        m.subscribe(conn, DETAIL, {"sub": "t1/u2", "channel": DETAIL, "exp": 10}, None)
    with pytest.raises(SubscribeRefused, match="expired"):
        m.subscribe(conn, DETAIL, {"sub": "t1/u1", "channel": DETAIL, "exp": 0}, None)
    for i in range(MAX_DETAIL_SUBSCRIPTIONS):
        channel = f"task_detail:t1/task-{i}"
        m.subscribe(conn, channel, {"sub": "t1/u1", "channel": channel, "exp": 10}, None)
    with pytest.raises(SubscribeRefused, match="limit"):
        m.subscribe(conn, DETAIL + "x", {"sub": "t1/u1", "channel": DETAIL + "x", "exp": 10}, None)


def test_publish_errors_say_whether_they_are_retryable() -> None:
    _, m, _ = model()
    m.error_status = 503
    with pytest.raises(PublishFailed) as failed:
        m.publish(USER, {})
    assert failed.value.retryable
    m.error_status = 400
    with pytest.raises(PublishFailed) as failed:
        m.publish(USER, {})
    assert not failed.value.retryable


def summary(task: str, version: int, notice: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"task": {"id": task, "version": str(version)}}
    if notice:
        message["notice"] = {"id": notice, "type": "TASK_FAILED"}
    return message


def detail(task: str, version: int) -> dict[str, Any]:
    return {"taskId": task, "version": str(version)}


def test_each_gate_takes_only_higher_versions_and_notices_show_once() -> None:
    store = ClientStore()
    assert store.receive("summary", summary("a", 2, "a:2")) == (2, {"id": "a:2", "type": "TASK_FAILED"})
    assert store.receive("summary", summary("a", 2, "a:2")) == (None, None)  # a duplicate: nothing, no notice
    assert store.receive("summary", summary("a", 1)) == (None, None)  # older
    assert store.receive("detail", detail("a", 2))[0] == 2  # its own gate: the summary's v2 does not block it


def test_the_shared_gate_bug_drops_the_detail() -> None:
    with BUGS.injected("one-version-gate"):
        store = ClientStore()
        store.receive("summary", summary("a", 2))
        assert store.receive("detail", detail("a", 2))[0] is None


def test_publications_during_the_snapshot_are_replayed_after_it_by_version() -> None:
    assert init_order() == ("subscribe", "snapshot")
    store = ClientStore()
    store.begin_snapshot()
    assert store.receive("summary", summary("a", 5)) == (None, None)  # buffered
    applied = store.end_snapshot([("summary", summary("a", 4))])
    assert applied == [("summary", "a", 4), ("summary", "a", 5)] and store.summary_version["a"] == 5
    assert store.resubscribed(False) and store.state == "STALE"


def test_batch_get_asks_about_unfinished_tasks_and_open_details_behind_their_summary() -> None:
    store = ClientStore()
    for task, status in (("run", "RUNNING"), ("done", "SUCCEEDED"), ("open", "SUCCEEDED"), ("closed", "FAILED")):
        store.receive("summary", {"task": {"id": task, "version": "5", "lifecycleStatus": status}})
    store.receive("detail", {"taskId": "open", "version": "3", "lifecycleStatus": "RUNNING"})  # behind: asked at 3
    store.receive("detail", {"taskId": "closed", "version": "5", "lifecycleStatus": "FAILED"})  # ended: not asked
    assert store.batch_known(["open", "closed"]) == {"run": 5, "open": 3}


def test_detail_subscriptions_are_an_lru_of_twenty() -> None:
    subs = DetailSubscriptions()
    for i in range(MAX_DETAIL_SUBSCRIPTIONS):
        assert subs.want(f"t{i}") == []
    subs.want("t0")  # used again: now the most recent
    assert subs.want("t20") == ["t1"]


def test_a_flush_is_noticed_at_the_next_publication_which_starts_a_new_epoch_at_1_and_is_not_delivered() -> None:
    env, m, got = model()
    lost: list[str] = []
    conn = m.connect("c", "t1/u1", (USER,), got.append, lost.append)
    first = m.subscribe(conn, USER, None, None)
    assert not first.recovered  # a fresh subscription recovers nothing
    m.publish(USER, {"n": 1})
    m.flush()
    env.run(until=1.0)
    assert USER in conn.subscriptions and not lost  # nobody notices the flush yet
    assert m.publish(USER, {"n": 2}) == 1  # a new epoch, from 1
    env.run(until=2.0)
    assert [p.data["n"] for p in got] == [1] and lost == [USER] and USER not in conn.subscriptions
    again = m.subscribe(conn, USER, None, (first.epoch, 1))
    assert not again.recovered and again.epoch != first.epoch and again.offset == 1


def test_a_restart_starts_every_stream_again_at_offset_1() -> None:
    _, m, _ = model()
    for _ in range(3):
        m.publish(USER, {})
    m.restart()
    assert m.publish(USER, {}) == 1 and m.published == 4
