"""stack/centrifugo_sequences.py against the real server: the disconnect sequences a parity test replays on a
Centrifugo model, and what the real server answers to each (the expected answers are the facts docs/native-stack.md
lists). One memory-engine node and one Redis-engine node (for the flush) for the module."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from stack.centrifugo import DEFAULT_VERSION, INSTALL_COMMAND, Namespace
from stack.centrifugo_sequences import (
    Resubscription,
    SequenceError,
    SequenceResult,
    Step,
    parse_steps,
    run_sequence,
    sequence_nodes,
)
from stack.gobin import go_available, go_binary_path
from stack.redis import redis_available

pytestmark = [
    pytest.mark.stack,
    pytest.mark.skipif(not go_available() and not go_binary_path(DEFAULT_VERSION, "centrifugo").exists(),
                       reason=f"centrifugo {DEFAULT_VERSION} is not built and 'go' is missing: {INSTALL_COMMAND}"),
    pytest.mark.skipif(not redis_available(), reason="redis-server is not installed: apt-get install redis-server"),
]

SECRET = secrets.token_hex(32)
HISTORY_SIZE = 4
STREAMS = Namespace("stream", history_size=HISTORY_SIZE, history_ttl_s=300)


@pytest.fixture(scope="module")
def nodes() -> Iterator[dict[str, Any]]:
    with sequence_nodes(SECRET, STREAMS) as started:
        yield started


def channel() -> str:
    return f"stream:{secrets.token_hex(4)}"


@pytest.mark.parametrize("server_side", [True, False], ids=["server-side", "token"])
def test_a_gap_within_the_history_is_recovered(nodes: dict[str, Any], server_side: bool) -> None:
    result = run_sequence(nodes["memory"], f"publish 2, disconnect, publish {HISTORY_SIZE}, reconnect, publish 1",
                          channel=channel(), secret=SECRET, server_side=server_side)
    assert result.delivered == result.published == tuple(range(1, 2 + HISTORY_SIZE + 2))
    assert result.resubscriptions == (
        Resubscription(recovered=True, was_recovering=True, epoch_changed=False,
                       delivered=tuple(range(3, 3 + HISTORY_SIZE + 1))),)


def test_a_gap_beyond_the_history_is_not_recovered_and_not_delivered(nodes: dict[str, Any]) -> None:
    result = run_sequence(nodes["memory"], f"publish 1, disconnect, publish {HISTORY_SIZE + 1}, reconnect, publish 1",
                          channel=channel(), secret=SECRET)
    top = 1 + HISTORY_SIZE + 1
    assert result.delivered == (1, top + 1)
    assert result.resubscriptions == (Resubscription(False, True, False, (top + 1,)),)


def test_two_gaps_in_a_row(nodes: dict[str, Any]) -> None:
    result = run_sequence(nodes["memory"], f"disconnect, publish 1, reconnect, disconnect, publish {HISTORY_SIZE + 2},"
                          " reconnect", channel=channel(), secret=SECRET)
    assert [(r.recovered, r.delivered) for r in result.resubscriptions] == [(True, (1,)), (False, ())]


def test_a_redis_flush_is_revealed_by_the_next_publication_which_is_not_delivered(nodes: dict[str, Any]) -> None:
    result = run_sequence(nodes["on_redis"], "publish 2, flush, publish 1, publish 1", channel=channel(),
                          secret=SECRET, flush=nodes["redis"].flushall)
    assert result.published == (1, 2, 1, 2)  # a new epoch starts at 1
    assert result.delivered == (1, 2, 2)  # the publication that revealed the flush never arrives
    assert result.resubscriptions == (Resubscription(False, True, True, (2,)),)


def test_a_restart_of_the_memory_engine_starts_a_new_epoch(nodes: dict[str, Any]) -> None:
    """Last of the memory node's tests: a restart empties every history."""
    result = run_sequence(nodes["memory"], "publish 3, restart, publish 1", channel=channel(), secret=SECRET)
    assert result.published == (1, 2, 3, 1)
    assert result.delivered == (1, 2, 3, 1)
    assert result.resubscriptions == (Resubscription(False, True, True, (1,)),)


@pytest.mark.parametrize("text", ["", "publish", "publish 0", "publish -1", "wait", "wait 0", "jump", "reconnect",
                                  "disconnect, disconnect", "disconnect, restart", "publish 1,, publish 1"])
def test_a_sequence_that_is_not_one_is_refused_before_anything_runs(text: str) -> None:
    with pytest.raises(SequenceError):
        parse_steps(text)


def test_steps_parse() -> None:
    assert parse_steps("publish 12, disconnect , reconnect,restart, flush, wait 3") == (
        Step("publish", 12), Step("disconnect"), Step("reconnect"), Step("restart"), Step("flush"), Step("wait", 3))


def test_a_flush_needs_a_flush_callable(nodes: dict[str, Any]) -> None:
    with pytest.raises(SequenceError):
        run_sequence(nodes["memory"], "flush", channel=channel(), secret=SECRET)
    assert isinstance(run_sequence(nodes["memory"], "publish 1", channel=channel(), secret=SECRET), SequenceResult)
