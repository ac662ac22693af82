"""The stream tier in simulation (systems/copilot/sim_streams.py): the reference's hub fans each committed change out
to every open stream of its user, the Redis hop loses what is published while Redis is down, a cut drops the streams
and the clients reconnect and resync; with the registered bug stream-newest-only an older stream hears nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reference.copilot import api, bugs
from reference.copilot.http import sse
from systems.copilot.sim import CopilotWorld
from systems.copilot.sim_streams import RELAY_RETRY_S, SimStreamClient
from systems.copilot.stream_belief import FINAL_RECONNECT_S, RECONNECT_MAX_S

USER = "operator-001"
TASK = "00000000-0000-4000-8000-000000000001"


@pytest.fixture
def world() -> Iterator[CopilotWorld]:
    w = CopilotWorld(1)
    yield w
    w.close()


def open_streams(world: CopilotWorld, n: int) -> list[SimStreamClient]:
    clients = [SimStreamClient(i, USER, world.streams, api.Ports(cache=world.cache)) for i in range(n)]
    for c in clients:
        world.env.process(c.run())
        world.env.run(until=world.env.now + 1.0)  # one after the other: the older stream opened first
    return clients


def test_every_open_stream_of_the_user_hears_each_change(world: CopilotWorld) -> None:
    clients = open_streams(world, 2)
    world.streams.hop.task_changed(TASK, USER, "QUEUED", 2)
    world.streams.hop.task_changed(TASK, "operator-002", "QUEUED", 3)  # another user's: not theirs to hear
    world.env.run(until=world.env.now + 1.0)
    assert [c.belief.known for c in clients] == [{TASK: (2, "QUEUED")}] * 2


def test_with_the_bug_the_older_stream_hears_nothing(world: CopilotWorld) -> None:
    with bugs.injected(bugs.STREAM_NEWEST_ONLY):
        older, newer = open_streams(world, 2)
        world.streams.hop.task_changed(TASK, USER, "QUEUED", 2)
        world.env.run(until=world.env.now + 1.0)
    assert (older.belief.known, newer.belief.known) == ({}, {TASK: (2, "QUEUED")})


def test_a_change_published_while_redis_is_down_is_lost_to_the_streams(world: CopilotWorld) -> None:
    (client,) = open_streams(world, 1)
    world.cache.down = True
    world.streams.hop.task_changed(TASK, USER, "QUEUED", 2)
    world.env.run(until=world.env.now + 1.0)
    assert (client.belief.known, world.streams.hop.lost) == ({}, 1)


def test_a_cut_drops_the_stream_and_the_client_reconnects_and_resyncs(world: CopilotWorld) -> None:
    (client,) = open_streams(world, 1)
    world.streams.set_cut(True)
    world.env.run(until=world.env.now + 10.0)
    world.streams.set_cut(False)
    world.env.run(until=world.env.now + 10.0)
    fs = [(op.f, op.value.get("after_drop")) for op in world.history.ops if op.process == client.process]
    assert fs == [("stream-open", False), ("stream-drop", None), ("stream-open", True), ("resync-done", None)]


@pytest.mark.parametrize("healed", [True, False])
def test_a_dropped_stream_gets_to_reconnect_and_resync_before_it_states_its_belief(world: CopilotWorld,
                                                                                  healed: bool) -> None:
    """A run can end just after the clients' link came back, inside a client's backoff (explore seed 1 run 1739: 0.9 s
    after, the next try 4 s away): closing it then judged a belief it had had no chance to resync (I38). It reconnects
    and resyncs first; one whose link stays cut states its belief after FINAL_RECONNECT_S."""
    (client,) = open_streams(world, 1)
    world.streams.set_cut(True)
    world.env.run(until=world.env.now + 20.0)  # the backoff at its longest
    world.streams.set_cut(not healed)
    closed_at = world.env.now
    world.env.run(until=client.close())
    fs = [op.f for op in world.history.ops if op.process == client.process]
    final = next(op for op in world.history.ops if op.f == "stream-final-done")
    if healed:
        assert fs == ["stream-open", "stream-drop", "stream-open", "resync-done", "stream-final-done"]
        assert final.time - closed_at <= RECONNECT_MAX_S + 1.0
    else:
        assert fs == ["stream-open", "stream-drop", "stream-final-done"]
        assert final.time - closed_at == pytest.approx(FINAL_RECONNECT_S)


@pytest.mark.parametrize("bug", [None, bugs.STREAM_NO_RESYNC])
def test_once_redis_is_back_an_open_stream_is_told_to_resync(world: CopilotWorld, bug: str | None) -> None:
    """The relay lost its subscription with Redis: what was published meanwhile is gone, so once it subscribes again
    (within RELAY_RETRY_S) every open stream hears ``event: resync`` and its client rereads the persisted state
    without reconnecting. With stream-no-resync nothing tells it, and it never resyncs."""
    with bugs.injected(bug):
        (client,) = open_streams(world, 1)
        world.cache.down = True
        world.streams.hop.task_changed(TASK, USER, "QUEUED", 2)  # lost
        world.env.run(until=world.env.now + 5.0)
        back = world.env.now
        world.cache.down = False
        world.env.run(until=world.env.now + 5.0)
    ops = [(op.f, op.time - back) for op in world.history.ops if op.process == client.process]
    if bug:
        assert [f for f, _ in ops] == ["stream-open"]
    else:
        assert [f for f, _ in ops] == ["stream-open", "resync-done"] and 0 <= ops[1][1] <= RELAY_RETRY_S


def test_a_stalled_stream_hears_nothing_until_the_stall_ends_and_an_overflow_becomes_one_resync(
        world: CopilotWorld) -> None:
    """stream-stall: the clients stop reading and their queues are held to ``depth``; more changes than that
    overflow into one resync hint (the hub's rule), which the client hears once the stall ends, and rereads."""
    few, many = open_streams(world, 2)
    world.streams.set_stall(True, 2)
    world.streams.hop.task_changed(TASK, USER, "QUEUED", 2)
    world.streams.hop.task_changed(TASK, USER, "DISPATCHING", 3)  # two fit
    world.env.run(until=world.env.now + 5.0)
    assert few.belief.known == many.belief.known == {}  # nothing read while stalled
    subs = list(world.streams._open)
    assert [s.dropped for s in subs] == [0, 0]
    world.streams.hop.task_changed(TASK, USER, "EXECUTING", 4)  # the third overflows both queues
    assert [s.dropped for s in subs] == [2, 2]
    world.streams.set_stall(False, 2)
    world.env.run(until=world.env.now + 5.0)
    fs = [op.f for op in world.history.ops if op.process == few.process]
    assert fs == ["stream-open", "resync-done"]  # heard the hint (no change), reread the persisted state
    assert not few.belief.stale


def test_a_resync_that_got_no_answer_is_tried_again_at_the_next_heartbeat(world: CopilotWorld) -> None:
    """A resync while the database is down is answered 503 (retry): the client may still have missed changes, so it
    stays stale and resyncs again at the stream's next frame (a heartbeat at the latest), not never."""
    (client,) = open_streams(world, 1)
    world.db_down = True
    world.streams.hub.resync_all()
    world.env.run(until=world.env.now + 1.0)
    assert client.belief.stale
    world.db_down = False
    world.env.run(until=world.env.now + sse.HEARTBEAT_S + 1.0)
    fs = [(op.f, op.type) for op in world.history.ops if op.process == client.process]
    assert fs == [("stream-open", "info"), ("resync-list", "fail"), ("resync-done", "ok"), ("resync-done", "ok")]
    assert not client.belief.stale
