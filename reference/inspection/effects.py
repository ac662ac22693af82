"""The inspection pipeline's own effects (beside kernel.effects' Transact and Sleep): AMQP-shaped actions of a worker
(consume, fetch up to its prefetch, ack, nack, cancel) and of an IS probe node (a mandatory publish with a confirm),
the IS node's local outbox (a SQLite WAL file on its disk: it survives the process), and the clock. A shell performs
them: the simulation against its RabbitMQ model (systems/inspection/broker.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

PUBLISH_ACK, PUBLISH_NACK, PUBLISH_RETURNED = "ack", "nack", "returned"
HIGH, NORMAL = "high", "normal"
PRIORITIES = (HIGH, NORMAL)


class ChannelClosed(Exception):
    """The broker closed the channel (an unknown delivery tag, consumer_timeout, the connection lost): its unacked
    deliveries went back to their queues."""


def routing_key(slot: int, priority: str) -> str:
    """§5.1: exchange inspection.status (direct), routing key slot.{slotId}.{priority}."""
    return f"slot.{slot}.{priority}"


def queue_name(slot: int, priority: str) -> str:
    """§5.1: queue inspection.status.s{slotId}.{priority} (three digits, as the seed's s073)."""
    return f"inspection.status.s{slot:03d}.{priority}"


@dataclass(frozen=True)
class Delivery:
    """One delivery of a message to a worker's channel: its tag on that channel and its delivery count."""

    slot: int
    priority: str
    tag: int
    channel: int
    message: dict[str, Any]
    delivery_count: int
    delivered_at: datetime

    @property
    def message_id(self) -> str:
        return str(self.message["message_id"])


@dataclass(frozen=True)
class Now:
    """The clock: a datetime (UTC)."""

    crash_name: ClassVar[str] = "now"


@dataclass(frozen=True)
class Consume:
    """basic.consume on the slot's two queues (a channel per slot, §5.3)."""

    slot: int
    crash_name: ClassVar[str] = "amqp.consume"


@dataclass(frozen=True)
class Fetch:
    """What the broker has pushed to the worker's consumers, up to each one's free prefetch: ((slot, priority,
    limit), ...) -> [Delivery]."""

    wants: tuple[tuple[int, str, int], ...]
    crash_name: ClassVar[str] = "amqp.fetch"


@dataclass(frozen=True)
class AckDeliveries:
    deliveries: tuple[Delivery, ...]
    crash_name: ClassVar[str] = "amqp.ack"


@dataclass(frozen=True)
class NackDeliveries:
    """basic.nack with requeue: the messages go back to their queues, their delivery counts up."""

    deliveries: tuple[Delivery, ...]
    why: str
    crash_name: ClassVar[str] = "amqp.nack"


@dataclass(frozen=True)
class Cancel:
    """basic.cancel of the slot's consumers (what they hold unacked stays so until acked, nacked or closed)."""

    slot: int
    crash_name: ClassVar[str] = "amqp.cancel"


@dataclass(frozen=True)
class PublishConfirmed:
    """A mandatory publish to inspection.status with publisher confirms: its outcome, PUBLISH_ACK, PUBLISH_NACK or
    PUBLISH_RETURNED (basic.return, which RabbitMQ sends before the confirm); BrokerUnavailable when no answer."""

    routing_key: str
    message: dict[str, Any]
    crash_name: ClassVar[str] = "amqp.publish"


@dataclass(frozen=True)
class OutboxAppend:
    """INSERT the rows into the node's outbox and commit (fsync'd: a kill after it keeps them)."""

    rows: tuple[dict[str, Any], ...]
    crash_name: ClassVar[str] = "outbox.append"


@dataclass(frozen=True)
class OutboxPending:
    """The unconfirmed rows created at least ``older_than_s`` ago, in seq order."""

    older_than_s: float
    crash_name: ClassVar[str] = "outbox.pending"


@dataclass(frozen=True)
class OutboxConfirm:
    seqs: tuple[int, ...]
    crash_name: ClassVar[str] = "outbox.confirm"


@dataclass(frozen=True)
class OutboxLastSeqs:
    """device -> the greatest seq the outbox ever held for it (kept past the cleaner: a counter row per device)."""

    crash_name: ClassVar[str] = "outbox.last-seqs"


@dataclass(frozen=True)
class SlotMaps:
    """The device -> slot maps the web tier publishes (§3.4, §4.4 A step 6: an IS node pulls slot_map_version):
    a tuple of reference.inspection.reshard.SlotMap, or None when the web tier cannot answer (keep the last)."""

    crash_name: ClassVar[str] = "slotmap.pull"


@dataclass(frozen=True)
class NotifyLeases:
    """§4.1 step 2: the leader, after a committed tick that changed leases, publishes ``slot_lease_updated`` with
    their slot ids on Redis pub/sub: at most once, to whoever listens then (INV-14: a hint, never the truth)."""

    slots: tuple[int, ...]
    crash_name: ClassVar[str] = "notify.leases"


@dataclass(frozen=True)
class AwaitLeaseNotice:
    """§4.1 step 3: a worker waits up to ``seconds`` for a ``slot_lease_updated`` notice; the slots notified since it
    last asked (empty: none came, or they were lost). Its lease read follows either way: the database decides."""

    seconds: float
    crash_name: ClassVar[str] = "notice.await"

