"""RocketMQ 5 for real: a NameServer + Broker/gRPC Proxy (stack.rocketmq.LocalRocketMQ, jars from Maven
Central) driven through the Broker port's adapter (reference.copilot.adapters.broker_rocketmq.RocketMQBroker).

Checked: a round trip of a Message; tag filtering per consumer group; redelivery of an unacked message
after its invisible time with delivery_attempt 2 (and a stale receipt's ack refused); a message never
acked past retryMaxTimes lands in %DLQ%<group>; every RPC goes through the given endpoint, so cutting
that link fails a publish and restoring it lets publishes through again at once; publishing to a hung
or stopped broker raises BrokerUnavailable within a bounded time.

Needs ``java`` and ``mvn`` (the first run downloads about 90 MB of jars into the cache, ~30 s) and the
``rocketmq-python-client`` package. One broker for the module, started in about 10 s.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reference.copilot.effects import BrokerUnavailable, Delivery, Message
from reference.copilot.services.consumer import DISPATCHER, HANDLERS, REPORT_WORKER
from reference.copilot.tasks import TASK_CANCEL_REQUESTED, TASK_COMPLETED, TASK_CREATED, TASK_STATUS_CHANGED

pytestmark = [
    pytest.mark.stack,
    # rocketmq-python-client 5.1.2 calls the deprecated Logger.warn
    pytest.mark.filterwarnings("ignore:The 'warn' method is deprecated:DeprecationWarning"),
]

GROUPS = {group: set(handlers) for group, handlers in HANDLERS.items()}
INVISIBLE_S = 1.0
REDELIVERY_BOUND_S = 20.0  # invisible time + the broker's revive scan (observed ~3 s)


def _require_tools() -> None:
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed: cannot run RocketMQ from Maven Central jars")
    pytest.importorskip("rocketmq", reason="rocketmq-python-client is not installed")


@pytest.fixture(scope="module")
def mq() -> Iterator[object]:
    _require_tools()
    from stack.rocketmq import LocalRocketMQ

    run_dir = Path(tempfile.mkdtemp(prefix="sortie-rmq-test-"))
    broker = LocalRocketMQ(run_dir, stop_timeout_s=3)
    try:
        broker.start()
        print(f"\nRocketMQ started in {broker.start_seconds:.1f}s {broker.timings}")
        for group in GROUPS:
            broker.create_group(group, retry_max_times=16)
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def new_broker(mq: object) -> Iterator[Callable[..., object]]:
    """``new_broker(groups=GROUPS, endpoint=None)``: a RocketMQBroker on a fresh topic, closed afterwards."""
    from reference.copilot.adapters.broker_rocketmq import RocketMQBroker

    made: list[RocketMQBroker] = []

    def make(groups: dict[str, set[str]] | None = None, endpoint: str | None = None,
             topic: str | None = None, **kwargs: object) -> RocketMQBroker:
        if topic is None:
            topic = f"t-{uuid.uuid4().hex[:10]}"
            mq.create_topic(topic)  # type: ignore[attr-defined]
        b = RocketMQBroker(endpoint or mq.endpoint, topic, groups or GROUPS, **kwargs)  # type: ignore[attr-defined]
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()


def _message(event_type: str, payload: dict[str, object] | None = None) -> Message:
    return Message(event_id=str(uuid.uuid4()), event_type=event_type, task_id=str(uuid.uuid4()), task_version=3,
                   payload=payload or {"note": "ünïcode ✓", "n": 1})


def _collect(broker: object, group: str, until: Callable[[list[Delivery]], bool], timeout_s: float,
             invisible_s: float = INVISIBLE_S, ack: bool = True) -> list[Delivery]:
    """Receive for ``group`` until ``until(all deliveries so far)`` or the deadline (acking if asked)."""
    got: list[Delivery] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = broker.receive(group, 16, invisible_s)  # type: ignore[attr-defined]
        for d in batch:
            if ack:
                broker.ack(group, d)  # type: ignore[attr-defined]
        got.extend(batch)
        if until(got):
            return got
    return got


# --- tests -------------------------------------------------------------------------------------


def test_publish_receive_ack_round_trip(new_broker: Callable[..., object]) -> None:
    broker = new_broker()
    sent = _message(TASK_CREATED, {"route": [1, 2, 3], "text": "ünïcode ✓"})
    began = time.monotonic()
    broker.publish(sent)  # type: ignore[attr-defined]
    got = _collect(broker, DISPATCHER, lambda ds: bool(ds), timeout_s=15)
    assert [d.message for d in got] == [sent]
    assert got[0].delivery_attempt == 1
    assert time.monotonic() - began < 10


def test_tag_filtering_per_group(new_broker: Callable[..., object]) -> None:
    broker = new_broker()
    created, completed, changed, cancel = (_message(t) for t in (TASK_CREATED, TASK_COMPLETED,
                                                                 TASK_STATUS_CHANGED, TASK_CANCEL_REQUESTED))
    for m in (created, completed, changed, cancel):
        broker.publish(m)  # type: ignore[attr-defined]
    reports = _collect(broker, REPORT_WORKER, lambda ds: len(ds) >= 1, timeout_s=15)
    reports += _collect(broker, REPORT_WORKER, lambda ds: False, timeout_s=2)  # nothing else comes
    assert [d.message for d in reports] == [completed]
    dispatched = _collect(broker, DISPATCHER, lambda ds: len(ds) >= 2, timeout_s=15)
    dispatched += _collect(broker, DISPATCHER, lambda ds: False, timeout_s=2)
    assert sorted(d.message.event_id for d in dispatched) == sorted([created.event_id, cancel.event_id])


def test_unacked_message_is_redelivered_with_attempt_2(new_broker: Callable[..., object]) -> None:
    from reference.copilot.adapters.broker_rocketmq import AckFailed

    broker = new_broker()
    keep, drop = _message(TASK_CREATED), _message(TASK_CREATED)
    broker.publish(keep)  # type: ignore[attr-defined]
    broker.publish(drop)  # type: ignore[attr-defined]
    first = _collect(broker, DISPATCHER, lambda ds: len(ds) >= 2, timeout_s=15, ack=False)
    assert sorted(d.message.event_id for d in first) == sorted([keep.event_id, drop.event_id])
    assert {d.delivery_attempt for d in first} == {1}
    received_at = time.monotonic()
    stale = next(d for d in first if d.message == drop)
    broker.ack(DISPATCHER, next(d for d in first if d.message == keep))  # type: ignore[attr-defined]

    again = _collect(broker, DISPATCHER, lambda ds: bool(ds), timeout_s=REDELIVERY_BOUND_S, ack=False)
    latency = time.monotonic() - received_at
    print(f"\nredelivered after {latency:.1f}s (invisible {INVISIBLE_S}s)")
    assert [d.message for d in again] == [drop], "the acked message must not come back, the other must"
    assert again[0].delivery_attempt == 2
    assert latency >= INVISIBLE_S
    with pytest.raises(AckFailed):  # the first delivery's receipt went stale with the redelivery
        broker.ack(DISPATCHER, stale)  # type: ignore[attr-defined]
    broker.ack(DISPATCHER, again[0])  # type: ignore[attr-defined]
    assert _collect(broker, DISPATCHER, lambda ds: False, timeout_s=INVISIBLE_S + 4) == []


def test_message_never_acked_past_retry_max_times_goes_to_dlq(mq: object,
                                                              new_broker: Callable[..., object]) -> None:
    from reference.copilot.adapters.broker_rocketmq import dead_letter_reader_group

    group = f"dlq-probe-{uuid.uuid4().hex[:6]}"
    mq.create_group(group, retry_max_times=1)  # type: ignore[attr-defined]  # 2 deliveries, then the DLQ
    mq.create_group(dead_letter_reader_group(group), retry_max_times=1000)  # type: ignore[attr-defined]
    broker = new_broker(groups={group: {TASK_CREATED}})
    assert broker.dead_letters(group) == []  # type: ignore[attr-defined]  # no DLQ topic yet
    doomed = _message(TASK_CREATED)
    broker.publish(doomed)  # type: ignore[attr-defined]
    attempts = _collect(broker, group, lambda ds: len(ds) >= 2, timeout_s=2 * REDELIVERY_BOUND_S, ack=False)
    assert [(d.message, d.delivery_attempt) for d in attempts] == [(doomed, 1), (doomed, 2)]
    # The proxy moves it to %DLQ%<group> when the group polls after the last invisible time.
    assert _collect(broker, group, lambda ds: False, timeout_s=INVISIBLE_S + 6, ack=False) == []
    dead: list[Delivery] = []
    deadline = time.monotonic() + 15
    while not dead and time.monotonic() < deadline:
        dead = broker.dead_letters(group)  # type: ignore[attr-defined]
    assert [d.message for d in dead] == [doomed]
    assert broker.dead_letters(group) == []  # type: ignore[attr-defined]  # read once: consumed


class _Forwarder:
    """A TCP forwarder on loopback that can cut its link (close everything) and restore it."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.port = 0
        self.enable()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def enable(self) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(16)
        self.port = s.getsockname()[1]
        self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def disable(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, set()
        for c in [listener, *conns]:
            if c is not None:
                with contextlib.suppress(OSError):
                    c.shutdown(socket.SHUT_RDWR)
                c.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=2)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    server.close()
                    return
                self._conns.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def test_every_rpc_goes_through_the_endpoint_and_recovers_when_the_link_returns(
        mq: object, new_broker: Callable[..., object]) -> None:
    host, port = mq.endpoint.split(":")  # type: ignore[attr-defined]
    link = _Forwarder((host, int(port)))
    try:
        broker = new_broker(endpoint=link.address, request_timeout_s=2)
        first = _message(TASK_CREATED)
        broker.publish(first)  # type: ignore[attr-defined]
        assert [d.message for d in _collect(broker, DISPATCHER, bool, timeout_s=15)] == [first]

        link.disable()  # the proxy itself stays up: only a pinned client notices
        began = time.monotonic()
        with pytest.raises(BrokerUnavailable):
            broker.publish(_message(TASK_CREATED))  # type: ignore[attr-defined]
        print(f"\nlink cut: BrokerUnavailable after {time.monotonic() - began:.2f}s")
        assert time.monotonic() - began < broker.publish_timeout_s + 2  # type: ignore[attr-defined]

        link.enable()
        after = _message(TASK_CREATED)
        deadline, last = time.monotonic() + 10, None
        while time.monotonic() < deadline:
            try:
                broker.publish(after)  # type: ignore[attr-defined]
                break
            except BrokerUnavailable as exc:
                last = exc
        else:
            pytest.fail(f"publishing did not recover within 10 s of the link returning: {last}")
        print(f"link restored: publishing again after {time.monotonic() - deadline + 10:.2f}s")
        assert after in [d.message for d in _collect(broker, DISPATCHER, bool, timeout_s=15)]
    finally:
        link.disable()


def test_publish_to_a_hung_or_stopped_broker_raises_broker_unavailable(
        mq: object, new_broker: Callable[..., object]) -> None:
    """Runs last: it stops the module's broker."""
    broker = new_broker(request_timeout_s=2)
    broker.publish(_message(TASK_CREATED))  # type: ignore[attr-defined]  # connected and routed
    bound = broker.publish_timeout_s + 2  # type: ignore[attr-defined]

    proxy_pid = mq.pids()[-1]  # type: ignore[attr-defined]
    os.kill(proxy_pid, signal.SIGSTOP)  # hung: connections stay open, nothing answers
    try:
        began = time.monotonic()
        with pytest.raises(BrokerUnavailable):
            broker.publish(_message(TASK_CREATED))  # type: ignore[attr-defined]
        print(f"\nhung broker: BrokerUnavailable after {time.monotonic() - began:.2f}s")
        assert time.monotonic() - began < bound
    finally:
        os.kill(proxy_pid, signal.SIGCONT)

    mq.stop()  # type: ignore[attr-defined]  # stopped: connections refused
    assert not mq.pids()  # type: ignore[attr-defined]
    for _ in range(2):  # also after the client was rebuilt
        began = time.monotonic()
        with pytest.raises(BrokerUnavailable):
            broker.publish(_message(TASK_CREATED))  # type: ignore[attr-defined]
        print(f"stopped broker: BrokerUnavailable after {time.monotonic() - began:.2f}s")
        assert time.monotonic() - began < bound
    with pytest.raises(BrokerUnavailable):
        broker.receive(DISPATCHER, 1, INVISIBLE_S)  # type: ignore[attr-defined]


def test_dead_letters_from_the_broker_dlq_are_recorded_and_redriven(mq: object,
                                                                    new_broker: Callable[..., object]) -> None:
    """A message whose consumer always fails without acking (its process dies on every delivery) reaches
    %DLQ%<group>; the drain records it in dead_letter with the failures the consumer wrote plus the
    broker's verdict, acks it only after the commit, and a re-drive publishes it to the original topic,
    where the group consumes it again."""
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import sessionmaker

    from reference.copilot.adapters.broker_rocketmq import dead_letter_reader_group, dead_letter_topic
    from reference.copilot.errors import Conflict
    from reference.copilot.models import Base, DeadLetter, EventFailure
    from reference.copilot.runtime import Runtime
    from reference.copilot.services.dlq import BROKER_DLQ, drain_broker_dead_letters, redrive_to_broker
    from stack.rocketmq import PERM_READ_WRITE

    if not mq.running:  # type: ignore[attr-defined]  # an earlier test of this module stops the broker
        mq.start()  # type: ignore[attr-defined]
    group = f"dlq-drain-{uuid.uuid4().hex[:6]}"
    admin = mq.admin_client()  # type: ignore[attr-defined]
    admin.create_group(group, 1)  # 2 deliveries, then the DLQ
    admin.create_topic(dead_letter_topic(group), 1, perm=PERM_READ_WRITE)  # as stack.rocketmq.provision does
    admin.create_group(dead_letter_reader_group(group), 1000)
    broker = new_broker(groups={group: {TASK_CREATED}})

    db_dir = Path(tempfile.mkdtemp(prefix="sortie-dlq-"))
    engine = create_engine(f"sqlite:///{db_dir / 'dlq.db'}")
    Base.metadata.create_all(engine)
    rt = Runtime(sessionmaker(engine, expire_on_commit=False))
    try:
        assert drain_broker_dead_letters(broker, rt.transact, group) == 0  # nothing died yet
        doomed = _message(TASK_CREATED)
        broker.publish(doomed)  # type: ignore[attr-defined]
        attempts = _collect(broker, group, lambda ds: len(ds) >= 2, timeout_s=2 * REDELIVERY_BOUND_S, ack=False)
        assert [(d.message, d.delivery_attempt) for d in attempts] == [(doomed, 1), (doomed, 2)]
        for d in attempts:  # what the consumer managed to write before dying, each time
            rt.transact(lambda tx, d=d: tx.session.add(EventFailure(
                consumer=group, event_id=uuid.UUID(d.message.event_id), delivery_attempt=d.delivery_attempt,
                error_code="WORKER_CRASHED", error_message="killed mid-handling", at=tx.now)))
        assert _collect(broker, group, lambda ds: False, timeout_s=INVISIBLE_S + 6, ack=False) == []

        written, deadline = 0, time.monotonic() + 20
        while not written and time.monotonic() < deadline:
            written = drain_broker_dead_letters(broker, rt.transact, group)
        assert written == 1
        assert drain_broker_dead_letters(broker, rt.transact, group) == 0  # acked after the commit
        with rt.sessions() as s:
            dl = s.scalars(select(DeadLetter).where(DeadLetter.consumer == group)).one()
            assert str(dl.event_id) == doomed.event_id and dl.event_type == TASK_CREATED
            assert [h["code"] for h in dl.history] == ["WORKER_CRASHED", "WORKER_CRASHED", BROKER_DLQ]
            assert [h["attempt"] for h in dl.history][:2] == [1, 2]
            assert dl.payload == doomed.as_json() and dl.redriven_at is None
            dl_id = dl.id

        assert redrive_to_broker(broker, rt.transact, dl_id, "operator-7") == doomed.event_id
        again = _collect(broker, group, lambda ds: bool(ds), timeout_s=15)  # consumed (and acked) this time
        assert [(d.message, d.delivery_attempt) for d in again] == [(doomed, 1)]
        with rt.sessions() as s:
            dl = s.get(DeadLetter, dl_id)
            assert dl is not None and dl.redriven_at is not None and dl.redrive_count == 1
        with pytest.raises(Conflict):
            redrive_to_broker(broker, rt.transact, dl_id, "operator-7")  # not dead again: refused
    finally:
        engine.dispose()
        shutil.rmtree(db_dir, ignore_errors=True)
