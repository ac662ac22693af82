"""Parity of the status sync's Centrifugo model with a real Centrifugo v6: the same disconnect sequences
(stack/centrifugo_sequences.py's step strings) run against the model in virtual time
(systems/statussync/centrifugo_parity.py) and against a real node, and every answer must be equal: the offsets
published and delivered, and for the first subscription and each resubscription recovered, was_recovering, whether
the epoch changed and what it delivered. One memory-engine node and one Redis-engine node (for the flush) for the
module. The history's TTL rows wait seconds of real time (the expiry is the server's clock): nightly."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from stack.centrifugo import DEFAULT_VERSION, INSTALL_COMMAND, Namespace
from stack.centrifugo_sequences import run_sequence, sequence_nodes
from stack.gobin import go_available, go_binary_path
from stack.redis import redis_available
from systems.statussync.centrifugo_parity import run_model_sequence

pytestmark = [
    pytest.mark.stack,
    pytest.mark.skipif(not go_available() and not go_binary_path(DEFAULT_VERSION, "centrifugo").exists(),
                       reason=f"centrifugo {DEFAULT_VERSION} is not built and 'go' is missing: {INSTALL_COMMAND}"),
    pytest.mark.skipif(not redis_available(), reason="redis-server is not installed: apt-get install redis-server"),
]

SECRET = secrets.token_hex(32)
HISTORY_SIZE = 4
HISTORY_TTL_S = 300.0
STREAMS = Namespace("stream", history_size=HISTORY_SIZE, history_ttl_s=int(HISTORY_TTL_S))
BEYOND = HISTORY_SIZE + 1
# The TTL runs from a stream's last publication: a wait of TTL_S - 2 keeps it, TTL_S + 3 clears it (the server checks
# expiry once a second, on whole seconds), and two waits that add up past TTL_S with a publication between keep all.
TTL_S = 6
SHORT_LIVED = Namespace("ttl", history_size=HISTORY_SIZE, history_ttl_s=TTL_S)


# (id, steps, node, server-side subscription)
SEQUENCES = [
    pytest.param("publish 2", "memory", True, id="fresh-subscription"),
    pytest.param(f"publish 2, disconnect, publish {HISTORY_SIZE}, reconnect, publish 1", "memory", True,
                 id="gap-within-history"),
    pytest.param(f"publish 2, disconnect, publish {HISTORY_SIZE}, reconnect, publish 1", "memory", False,
                 id="gap-within-history-token"),
    pytest.param("publish 2, disconnect, reconnect, publish 1", "memory", True, id="reconnect-without-gap"),
    pytest.param("disconnect, reconnect, publish 1", "memory", True, id="reconnect-on-empty-channel"),
    pytest.param(f"publish 1, disconnect, publish {BEYOND}, reconnect, publish 1", "memory", True,
                 id="backlog-beyond-history"),
    pytest.param(f"disconnect, publish 1, reconnect, disconnect, publish {BEYOND + 1}, reconnect", "memory", True,
                 id="two-gaps"),
    pytest.param("publish 3, restart, publish 1", "memory", True, id="memory-restart"),
    pytest.param("publish 2, flush, publish 1, publish 1", "on_redis", True, id="redis-flush"),
    pytest.param("publish 2, disconnect, flush, reconnect, publish 1", "on_redis", True, id="redis-flush-while-away"),
]


# (id, steps): on the memory node, in the namespace whose history lives TTL_S seconds
TTL_SEQUENCES = [
    pytest.param(f"publish 1, disconnect, publish 1, wait {TTL_S - 2}, publish 1, wait {TTL_S - 3}, reconnect, "
                 "publish 1", id="ttl-runs-from-the-last-publication"),
    pytest.param(f"publish 1, disconnect, publish 1, wait {TTL_S + 3}, reconnect, publish 1",
                 id="ttl-clears-an-idle-stream"),
]


@pytest.fixture(scope="module")
def nodes() -> Iterator[dict[str, Any]]:
    with sequence_nodes(SECRET, STREAMS, SHORT_LIVED) as started:
        yield started


@pytest.mark.parametrize(("steps", "node", "server_side"), SEQUENCES)
def test_the_model_answers_as_the_real_server(nodes: dict[str, Any], steps: str, node: str,
                                              server_side: bool) -> None:
    real = run_sequence(nodes[node], steps, channel=f"stream:{secrets.token_hex(4)}", secret=SECRET,
                        server_side=server_side, flush=nodes["redis"].flushall)
    model = run_model_sequence(steps, history_size=HISTORY_SIZE, history_ttl_s=HISTORY_TTL_S,
                               server_side=server_side)
    assert model == real


@pytest.mark.nightly
@pytest.mark.parametrize("steps", TTL_SEQUENCES)
def test_the_models_history_ttl_is_the_real_servers(nodes: dict[str, Any], steps: str) -> None:
    real = run_sequence(nodes["memory"], steps, channel=f"ttl:{secrets.token_hex(4)}", secret=SECRET)
    model = run_model_sequence(steps, history_size=HISTORY_SIZE, history_ttl_s=TTL_S)
    assert model == real
