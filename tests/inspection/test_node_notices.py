"""The real node's lease notices (systems.inspection.node.Notices, seed 001 §4.1) on a real Redis: a publish reaches a
subscribed worker, which wakes at once; with Redis unreachable a publish says it was lost and a wait lasts its whole
time (the poll), never an error. One Redis for the module (about 0.2 s)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stack.redis import LocalRedis, redis_available
from systems.inspection.node import Notices

pytestmark = pytest.mark.skipif(not redis_available(),
                                reason="redis-server is not installed: apt-get install -y redis-server")


@pytest.fixture(scope="module")
def redis_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = LocalRedis(Path(tmp_path_factory.mktemp("redis"))).start()
    try:
        yield server.address
    finally:
        server.stop()


def test_a_notice_wakes_the_waiting_worker(redis_address: str) -> None:
    worker, leader = Notices(redis_address), Notices(redis_address)
    assert worker.wait(0.01) == ()  # subscribed from its first wait on
    assert leader.publish((3, 1)) == (1, "")
    began = time.monotonic()
    assert worker.wait(5.0) == (1, 3)
    assert time.monotonic() - began < 2.0  # woken by the notice, not at the end of its wait


def test_without_redis_a_notice_is_lost_and_the_wait_is_the_poll() -> None:
    gone = Notices("127.0.0.1:1")  # nothing listens there
    reached, lost = gone.publish((0,))
    assert reached == 0 and lost
    began = time.monotonic()
    assert gone.wait(0.3) == ()
    assert time.monotonic() - began >= 0.29
    assert Notices(None).publish((0,)) == (0, "no Redis")
