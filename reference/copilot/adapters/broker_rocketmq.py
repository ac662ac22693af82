"""The Broker port over RocketMQ 5 through its gRPC proxy, with the official Python client
(``rocketmq-python-client``, import name ``rocketmq``).

- One topic carries every task event; the event type is the message tag and the event id its key.
  The body is the JSON of ``Message.as_json()``.
- Each consumer group is a ``SimpleConsumer`` subscribed to the topic with a tag filter of the event
  types that group handles (``"TaskCreated||TaskCancelRequested"``), so the broker never hands a group
  an event it does not consume. ``receive`` long-polls, makes the messages invisible for
  ``invisible_s`` and returns them as :class:`Delivery` with the broker's delivery attempt (1, 2, ...);
  an unacked message comes back after its invisible time. ``ack`` raises when the broker refuses (for
  example a receipt that went stale because the invisible time ran out and the message was redelivered).
- Clients start lazily on first use and are closed by :meth:`close`. After a failed call a client is
  discarded and rebuilt on the next call, so a fresh gRPC channel connects at once when the broker is
  back (a failed channel would otherwise wait out gRPC's reconnect backoff, up to two minutes).
- Every RPC goes to the configured ``endpoint`` (``pin_endpoint``). A local-mode proxy answers route
  queries with its own ``brokerIP1:grpcServerPort``; without pinning, clients would bypass anything
  between them and the proxy (a Toxiproxy link, a load balancer) after the first route query.

Constraints of the Python client (5.1.x): invisible and long-polling durations are whole seconds
(``invisible_s`` is rounded up), and the proxy rejects an invisible time below its
``minInvisibleTimeMillsForRecv`` (10 s by default; the project's LocalRocketMQ sets 1 s). A proxy with
the default ``grpcClientConsumerMinLongPollingTimeoutMillis`` (5 s) needs ``request_timeout_s +
long_poll_s`` above 5 s; LocalRocketMQ lowers that minimum to 1 s.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Self

from reference.copilot.effects import BrokerUnavailable, Delivery, Message

log = logging.getLogger(__name__)

# How long a receive waits for a message before it answers "nothing" (the SimpleConsumer's await duration);
# the simulation's broker long-polls for as long.
LONG_POLL_S = 1.0

DLQ_READER_SUFFIX = "-dlq-reader"
MAX_BATCH = 32  # the proxy's cap on messages per receive


class AckFailed(BrokerUnavailable):
    """The broker did not accept an ack: the message will be delivered again."""


def dead_letter_topic(group: str) -> str:
    return f"%DLQ%{group}"


def dead_letter_reader_group(group: str) -> str:
    """The consumer group :meth:`RocketMQBroker.dead_letters` reads ``%DLQ%<group>`` with. It must exist
    with a ``retryMaxTimes`` above the dead messages' reconsume count (their group's retryMaxTimes + 2):
    the proxy forwards a message that was already consumed more often than the reading group allows to
    that group's own dead-letter queue instead of delivering it."""
    return f"{group}{DLQ_READER_SUFFIX}"


UNDECODABLE = "UNDECODABLE"


def foreign_message(m: Any) -> Message:
    """A Message standing for a broker message whose body is not one of ours: its event id is derived
    from the broker's message id (stable across reads), the body kept base64-encoded in the payload."""
    import base64
    import uuid

    return Message(event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"rocketmq:{m.message_id}")),
                   event_type=UNDECODABLE, task_id="", task_version=0,
                   payload={"message_id": str(m.message_id), "tag": m.tag, "keys": list(m.keys or []),
                            "body_b64": base64.b64encode(bytes(m.body or b"")).decode()})


def _seconds(value: float) -> int:
    """The client sends durations as whole protobuf seconds."""
    return max(1, math.ceil(value))


def _pin(client: Any) -> Any:
    """Send every RPC of ``client`` to its configured access point, whatever the route answers."""
    rpc = client.rpc_client
    access_point = client.client_configuration.rpc_endpoints
    original = rpc.retrieve_or_create_channel
    rpc.retrieve_or_create_channel = lambda _endpoints: original(access_point)
    return client


def _shutdown_in_background(client: Any) -> None:
    """A client's shutdown tells the broker it leaves and waits up to the request timeout per endpoint:
    do not make the caller wait for that when the broker is unreachable anyway."""
    def run() -> None:
        try:
            client.shutdown()
        except Exception:  # best effort
            log.debug("shutdown of a discarded RocketMQ client failed", exc_info=True)
    threading.Thread(target=run, name="rocketmq-client-shutdown", daemon=True).start()


class RocketMQBroker:
    """Broker (kernel.ports) over RocketMQ 5's gRPC proxy. Thread-safe; one instance per process."""

    def __init__(
        self,
        endpoint: str,
        topic: str,
        groups: Mapping[str, Iterable[str]],
        request_timeout_s: float = 3.0,
        *,
        publish_timeout_s: float | None = None,
        long_poll_s: float = LONG_POLL_S,
        pin_endpoint: bool = True,
    ) -> None:
        import rocketmq  # noqa: F401 - fail here, not on first use, when the client is not installed

        self.endpoint = endpoint
        self.topic = topic
        self.groups: dict[str, frozenset[str]] = {g: frozenset(types) for g, types in groups.items()}
        for group, types in self.groups.items():
            if not types:
                raise ValueError(f"consumer group {group!r} subscribes to no event type")
        self.request_timeout_s = request_timeout_s
        # A publish returns or raises within this. The client itself tries up to 3 times, each attempt
        # bounded by request_timeout_s; when the caller gives up first, the send may still land later
        # (a duplicate once the outbox row is published again: consumers dedupe on event_id).
        self.publish_timeout_s = publish_timeout_s if publish_timeout_s is not None else request_timeout_s + 1.0
        self.long_poll_s = long_poll_s
        self.pin_endpoint = pin_endpoint
        self._lock = threading.Lock()  # guards the fields below, never held while a client starts
        self._start_locks: dict[str, threading.Lock] = {}  # one per client slot: a slow start blocks only it
        self._producer: Any = None
        self._publisher: ThreadPoolExecutor | None = None
        self._consumers: dict[str, Any] = {}
        self._closed = False

    # --- clients -----------------------------------------------------------------------------

    def _configuration(self) -> Any:
        from rocketmq import ClientConfiguration, Credentials

        return ClientConfiguration(self.endpoint, Credentials(), request_timeout=_seconds(self.request_timeout_s))

    def _started(self, client: Any) -> Any:
        if self.pin_endpoint:
            _pin(client)
        try:
            client.startup()
        except Exception:
            _shutdown_in_background(client)
            raise
        return client

    def _start_lock(self, slot: str) -> threading.Lock:
        with self._lock:
            return self._start_locks.setdefault(slot, threading.Lock())

    def _get_producer(self) -> Any:
        from rocketmq import Producer

        with self._start_lock("producer"):
            with self._lock:
                if self._closed:
                    raise BrokerUnavailable("the broker client is closed")
                if self._producer is not None:
                    return self._producer
            producer = self._started(Producer(self._configuration(), (self.topic,)))
            with self._lock:
                if self._closed:
                    _shutdown_in_background(producer)
                    raise BrokerUnavailable("the broker client is closed")
                self._producer = producer
            return producer

    def _discard_producer(self, producer: Any) -> None:
        with self._lock:
            if self._producer is producer:
                self._producer = None
        _shutdown_in_background(producer)

    def _get_consumer(self, group: str) -> Any:
        from rocketmq import FilterExpression, SimpleConsumer

        types = self.groups.get(group)
        if types is None:
            raise KeyError(f"unknown consumer group {group!r} (known: {sorted(self.groups)})")
        with self._start_lock(f"consumer:{group}"):
            with self._lock:
                if self._closed:
                    raise BrokerUnavailable("the broker client is closed")
                consumer = self._consumers.get(group)
                if consumer is not None:
                    return consumer
            expression = FilterExpression("||".join(sorted(types)))
            consumer = self._started(SimpleConsumer(self._configuration(), group, {self.topic: expression},
                                                    await_duration=_seconds(self.long_poll_s)))
            with self._lock:
                if self._closed:
                    _shutdown_in_background(consumer)
                    raise BrokerUnavailable("the broker client is closed")
                self._consumers[group] = consumer
            return consumer

    def _discard_consumer(self, group: str, consumer: Any) -> None:
        with self._lock:
            if self._consumers.get(group) is consumer:
                del self._consumers[group]
        _shutdown_in_background(consumer)

    # --- the Broker port ---------------------------------------------------------------------

    def publish(self, message: Message) -> None:
        from rocketmq import Message as RocketMessage

        out = RocketMessage()
        out.topic = self.topic
        out.body = json.dumps(message.as_json(), separators=(",", ":"), sort_keys=True).encode()
        out.tag = message.event_type
        out.keys = message.event_id
        what = f"publish of {message.event_type} {message.event_id} to {self.topic} via {self.endpoint}"
        with self._lock:
            if self._closed:
                raise BrokerUnavailable(f"{what}: the broker client is closed")
            if self._publisher is None:
                self._publisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rocketmq-publish")
            publisher = self._publisher
        try:
            publisher.submit(self._send, out).result(timeout=self.publish_timeout_s)
        except FutureTimeout as exc:
            raise BrokerUnavailable(f"{what}: no answer within {self.publish_timeout_s:.1f}s") from exc
        except BrokerUnavailable:
            raise
        except Exception as exc:  # any failure leaves the outbox row pending
            raise BrokerUnavailable(f"{what} failed: {exc!r}") from exc

    def _send(self, out: Any) -> None:
        """On the publisher thread: the client's synchronous send, whose retries run on this thread.
        (Its send_async retries on the client's shared event-loop thread and, if the route cache is
        empty then, e.g. after a shutdown, blocks that thread on a route query forever: every client in
        the process hangs. So no send_async here, and a producer is only discarded after its send
        returned.)"""
        producer = self._get_producer()
        try:
            producer.send(out)
        except Exception:
            self._discard_producer(producer)
            raise

    def receive(self, group: str, max_messages: int, invisible_s: float) -> list[Delivery]:
        consumer = None
        try:
            consumer = self._get_consumer(group)
            received = self._receive(consumer, max(1, min(max_messages, MAX_BATCH)), _seconds(invisible_s))
        except (BrokerUnavailable, KeyError):
            raise
        except Exception as exc:  # transport or broker error
            if consumer is not None:
                self._discard_consumer(group, consumer)
            raise BrokerUnavailable(f"receive for {group} via {self.endpoint} failed: {exc!r}") from exc
        return self._deliveries(group, received)

    def _receive(self, consumer: Any, max_messages: int, invisible_s: int) -> list[Any]:
        # Right after a consumer starts, the proxy may not have its settings yet and answers the first
        # receive with an internal error: poll again for a moment before calling it a failure.
        from rocketmq.v5.exception import InternalErrorException

        deadline = time.monotonic() + self.request_timeout_s
        delay = 0.05
        while True:
            try:
                return list(consumer.receive(max_messages, invisible_s))
            except InternalErrorException:
                if time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)  # a polling interval under a deadline
            delay = min(delay * 2, 0.5)

    def _deliveries(self, group: str, received: list[Any]) -> list[Delivery]:
        out: list[Delivery] = []
        for m in received:
            try:
                message = Message.from_json(json.loads(m.body))
            except (ValueError, KeyError, TypeError) as exc:
                # Not one of ours: leave it unacked, so the broker retries it and finally moves it to
                # the group's dead-letter queue where it can be inspected.
                log.error("undecodable message %s on %s for %s (left for the broker's DLQ): %r",
                          m.message_id, self.topic, group, exc)
                continue
            out.append(Delivery(message, int(m.delivery_attempt or 1), m))
        return out

    def ack(self, group: str, delivery: Delivery) -> None:
        with self._lock:
            consumer = self._consumers.get(group)
        try:
            if consumer is None:
                consumer = self._get_consumer(group)
            consumer.ack(delivery.receipt)
        except Exception as exc:  # stale receipt, broker gone, ...
            raise AckFailed(f"ack of {delivery.message.event_type} {delivery.message.event_id} "
                            f"(attempt {delivery.delivery_attempt}) for {group} failed: {exc!r}") from exc

    # --- dead letters ------------------------------------------------------------------------

    def dead_letters(self, group: str, max_messages: int = 256, *, ack: bool = True,
                     on_batch: Callable[[list[Delivery]], None] | None = None) -> list[Delivery]:
        """The messages RocketMQ moved to ``%DLQ%<group>`` after ``retryMaxTimes + 1`` deliveries
        without an ack, read through :func:`dead_letter_reader_group` (which must exist). With ``ack``
        (the default) they are consumed: a second call does not return them again. ``on_batch`` is
        called with each batch *before* it is acked (record the batch in the database there: if it
        raises, nothing of the batch is acked and the broker offers it again after the invisible time).
        An absent DLQ topic (nothing ever died) gives an empty list. A body that is not one of our
        messages comes back as a :func:`foreign_message` (event type ``UNDECODABLE``), so it can be
        recorded and inspected rather than lost."""
        from rocketmq import FilterExpression, SimpleConsumer
        from rocketmq.v5.exception import NotFoundException

        if group not in self.groups:
            raise KeyError(f"unknown consumer group {group!r}")
        topic = dead_letter_topic(group)
        reader = SimpleConsumer(self._configuration(), dead_letter_reader_group(group),
                                {topic: FilterExpression("*")}, await_duration=_seconds(self.long_poll_s))
        out: list[Delivery] = []
        try:
            self._started(reader)
            while len(out) < max_messages:
                try:
                    batch = self._receive(reader, min(MAX_BATCH, max_messages - len(out)),
                                          _seconds(max(self.request_timeout_s, 5.0)))
                except NotFoundException:
                    break  # no DLQ topic: nothing died yet
                except Exception:
                    if out or not self._reachable(reader):
                        raise
                    break  # the broker answers, only the DLQ topic has no route: nothing died yet
                if not batch:
                    break
                deliveries = [self._dead_delivery(m) for m in batch]
                if on_batch is not None:
                    on_batch(deliveries)
                if ack:
                    for m in batch:
                        reader.ack(m)
                out.extend(deliveries)
        except Exception as exc:  # transport or broker error
            raise BrokerUnavailable(f"reading {topic} failed: {exc!r}") from exc
        finally:
            try:
                reader.shutdown()
            except Exception:  # best effort
                log.debug("dead-letter reader shutdown failed", exc_info=True)
        return out

    @staticmethod
    def _dead_delivery(m: Any) -> Delivery:
        try:
            message = Message.from_json(json.loads(m.body))
        except (ValueError, KeyError, TypeError):
            message = foreign_message(m)
        return Delivery(message, int(m.delivery_attempt or 1), m)

    def _reachable(self, client: Any) -> bool:
        """The proxy answers a route query for the main topic (tells "no such topic" from "no broker")."""
        try:
            client._retrieve_topic_route_data(self.topic)
        except Exception:
            return False
        return True

    # --- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Shut the producer and every consumer down. Idempotent; the instance is unusable afterwards."""
        with self._lock:
            self._closed = True
            clients = [c for c in [self._producer, *self._consumers.values()] if c is not None]
            self._producer, self._consumers = None, {}
            publisher, self._publisher = self._publisher, None
        if publisher is not None:
            publisher.shutdown(wait=False, cancel_futures=True)
        for client in clients:
            try:
                client.shutdown()
            except Exception:  # best effort
                log.debug("RocketMQ client shutdown failed", exc_info=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
