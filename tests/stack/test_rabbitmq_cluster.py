"""Quorum queues on a three-node RabbitMQ cluster (``stack.rabbitmq.LocalRabbitMQCluster``, Debian's 3.10): what a
member's loss does to confirmed messages and to publishers. Nightly (``whole_stack`` + ``nightly``, the markers
scripts/nightly.sh selects on): three nodes take 30-40 s to form on two busy cores, beyond the test command's
budget. One cluster for the module; each test leaves every node running.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from stack.rabbitmq import INSTALL_COMMAND, LocalRabbitMQ, LocalRabbitMQCluster, rabbitmq_available

pytestmark = [pytest.mark.stack, pytest.mark.whole_stack, pytest.mark.nightly]

DEADLINE_S = 60.0
PERSISTENT = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRabbitMQCluster]:
    if not rabbitmq_available():
        pytest.skip(f"RabbitMQ is not installed: {INSTALL_COMMAND} (or bash scripts/system-deps.sh as root)")
    run_dir = Path(tempfile.mkdtemp(prefix="sortie-rabbitmq-cluster-"))
    nodes = LocalRabbitMQCluster(run_dir, 3, vhost="inspection", user="inspection")
    try:
        yield nodes.start()
    finally:
        nodes.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def leader_and_members(node: LocalRabbitMQ, queue: str) -> tuple[str, set[str]]:
    rows = json.loads(node.ctl("rabbitmqctl", "-q", "list_queues", "-p", node.vhost, "name", "leader", "members",
                               "--formatter", "json"))
    row = next(r for r in rows if r["name"] == queue)
    return row["leader"], set(row["members"])


def declare_and_fill(node: LocalRabbitMQ, queue: str, bodies: list[bytes]) -> None:
    with node.connect() as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
        channel.confirm_delivery()
        for body in bodies:
            channel.basic_publish("", queue, body, PERSISTENT)  # returns once confirmed


def consume_all(node: LocalRabbitMQ, queue: str, count: int) -> list[bytes]:
    with node.connect() as connection:
        channel = connection.channel()
        bodies = []
        for method, _props, body in channel.consume(queue, inactivity_timeout=DEADLINE_S):
            assert method is not None, f"only {bodies} of {count} within {DEADLINE_S:.0f}s"
            channel.basic_ack(method.delivery_tag)
            bodies.append(body)
            if len(bodies) == count:
                break
        channel.cancel()
        return bodies


def test_the_nodes_form_one_cluster_and_a_quorum_queue_has_a_member_on_each(cluster: LocalRabbitMQCluster) -> None:
    names = {node.node_name for node in cluster.nodes}
    assert all(cluster.running_nodes(via=node) == names for node in cluster.nodes)
    declare_and_fill(cluster.nodes[1], "inspection.status.s001.high", [b"1"])
    leader, members = leader_and_members(cluster.nodes[0], "inspection.status.s001.high")
    assert members == names and leader in names
    assert consume_all(cluster.nodes[2], "inspection.status.s001.high", 1) == [b"1"]


def test_confirmed_messages_survive_the_loss_of_the_leader(cluster: LocalRabbitMQCluster) -> None:
    queue = "inspection.status.s002.high"
    declare_and_fill(cluster.nodes[0], queue, [b"1", b"2", b"3"])
    leader_name, _members = leader_and_members(cluster.nodes[0], queue)
    leader = next(node for node in cluster.nodes if node.node_name == leader_name)
    other = next(node for node in cluster.nodes if node is not leader)
    leader.stop()
    try:
        declare_and_fill(other, queue, [b"4"])  # two of three: still confirmed
        assert consume_all(other, queue, 4) == [b"1", b"2", b"3", b"4"]
        new_leader, _ = leader_and_members(other, queue)
        assert new_leader != leader_name
    finally:
        leader.start()
    assert cluster.running_nodes() == {node.node_name for node in cluster.nodes}


def test_a_minority_confirms_nothing_until_a_majority_is_back(cluster: LocalRabbitMQCluster) -> None:
    """With two of three members down the publish is neither acked nor nacked: the publisher waits; once a second
    member is back the message is committed and the ack arrives."""
    queue = "inspection.status.s003.high"
    declare_and_fill(cluster.nodes[0], queue, [])
    survivor, down = cluster.nodes[0], cluster.nodes[1:]
    for node in down:
        node.stop()
    outcome: list[str] = []
    connection = survivor.connect()
    channel = connection.channel()
    channel.confirm_delivery()

    def publish() -> None:  # this thread owns the connection until it returns
        try:
            channel.basic_publish("", queue, b"waiting", PERSISTENT)
            outcome.append("ack")
        except pika.exceptions.NackError:
            outcome.append("nack")

    publisher = threading.Thread(target=publish, daemon=True)
    try:
        publisher.start()
        publisher.join(timeout=5.0)  # a bounded look: without a majority nothing may come back
        assert publisher.is_alive() and outcome == []
        down[0].start()  # from the main thread: a started node dies with the thread that started it
        publisher.join(timeout=DEADLINE_S)
        assert outcome == ["ack"]
    finally:
        for node in down:
            node.start()
        publisher.join(timeout=DEADLINE_S)
        if connection.is_open:
            connection.close()
    assert consume_all(survivor, queue, 1) == [b"waiting"]
